// Hostile templates: deep nesting, runaway sizes and loops end in minfer::Error naming the construct,
// quickly and without overflowing the stack (a crash ends this test binary, which fails too).
#include <time.h>

#include <chrono>

#include "template_test_util.h"

namespace minfer::test {
namespace {

std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Rendering fails with every needle in the message, within a few seconds of this thread's CPU time (not
// wall time, which a loaded machine stretches).
void expect_fast_error(const std::string& tmpl, std::initializer_list<std::string> needles,
                       const std::string& vars = "{}") {
    const double t0 = thread_cpu_seconds();
    expect_error(tmpl, needles, vars);
    const double s = thread_cpu_seconds() - t0;
    EXPECT_LT(s, 10.0) << "took " << s << " s: " << tmpl.substr(0, 80);
}

TEST(JinjaLimits, DeepParenthesesAndLiterals) {
    expect_fast_error("{{ " + repeat("(", 10000) + "1" + repeat(")", 10000) + " }}",
                      {"line 1", "nested more than 256 levels deep"});
    expect_fast_error("{{ " + repeat("[", 5000) + repeat("]", 5000) + " | tojson }}",
                      {"nested more than 256 levels deep"});
    expect_fast_error("{{ " + repeat("{'a': ", 5000) + "1" + repeat("}", 5000) + " }}",
                      {"nested more than 256 levels deep"});
    expect_fast_error("{{ f" + repeat("(", 5000) + repeat(")", 5000) + " }}", {"nested more than 256"});
}

TEST(JinjaLimits, NestingWithinTheLimitStillRenders) {
    expect_renders({
        {"{{ ((((((((((1)))))))))) }}", "{}", "1"},
        {"{{ [[[[[[[[[[1]]]]]]]]]] | tojson }}", "{}", "[[[[[[[[[[1]]]]]]]]]]"},
        {"{{ not not not not true }}", "{}", "True"},
        {"{{ x[0][0][0] }}", R"({"x": [[[7]]]})", "7"},
    });
    EXPECT_EQ(render_vars("{{ " + repeat("(", 100) + "2" + repeat(")", 100) + " }}"), "2");
    EXPECT_EQ(render_vars("{{ 'a'" + repeat(" | upper", 200) + " }}"), "A");
}

TEST(JinjaLimits, DeepBlocks) {
    expect_fast_error(repeat("{% if true %}", 20000) + "x" + repeat("{% endif %}", 20000),
                      {"'{% if %}' block nested more than 256 levels deep"});
    expect_fast_error(repeat("{% for i in [1] %}", 20000) + "x" + repeat("{% endfor %}", 20000),
                      {"'{% for %}' block nested more than 256"});
    expect_fast_error(repeat("{% set x %}", 20000) + repeat("{% endset %}", 20000), {"nested more than"});
}

TEST(JinjaLimits, LongChains) {
    expect_fast_error("{{ " + repeat("not ", 100000) + "true }}", {"'not' nested more than 256"});
    expect_fast_error("{{ " + repeat("-", 100000) + "1 }}", {"unary '-' nested more than 256"});
    expect_fast_error("{{ x" + repeat("[0]", 100000) + " }}", {"subscript '[...]' nested more than 256"});
    expect_fast_error("{{ x" + repeat(".a", 100000) + " }}", {"attribute '.a' nested more than 256"});
    expect_fast_error("{{ 'a'" + repeat("|upper", 100000) + " }}", {"filter '|upper' nested more than 256"});
    expect_fast_error("{{ 1" + repeat(" + 1", 100000) + " }}", {"operator '+' nested more than 256"});
    expect_fast_error("{{ 'a'" + repeat(" ~ 'a'", 100000) + " }}", {"operator '~' nested more than 256"});
    expect_fast_error("{{ 1" + repeat(" or 1", 100000) + " }}", {"'or' nested more than 256"});
    expect_fast_error("{{ f" + repeat("()", 100000) + " }}", {"call nested more than 256"});
    expect_fast_error("{{ 1" + repeat(" if 1 else 1", 100000) + " }}", {"nested more than 256"});
}

TEST(JinjaLimits, RuntimeNestingOfValues) {
    expect_fast_error(
        "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
        "{{ ns.x | tojson }}",
        {"line 1", "lists and dicts nested more than 256 levels deep"});
    expect_fast_error(
        "{% set ns = namespace(x={}) %}{% for i in range(5000) %}{% set ns.x = {'k': ns.x} %}{% endfor %}"
        "{{ ns.x }}",
        {"nested more than 256 levels deep"});
    expect_fast_error("{{ x | tojson }}", {"nest lists and objects more than 256 levels deep"},
                      R"({"x": )" + repeat("[", 5000) + repeat("]", 5000) + "}");
}

TEST(JinjaLimits, NamespacesCannotHoldNamespaces) {
    expect_fast_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
                      {"cannot assign a namespace"});
    expect_fast_error("{% set a = namespace() %}{% set b = namespace() %}{% set b.x = [a] %}",
                      {"cannot assign a namespace"});
    expect_fast_error("{% set a = namespace() %}{% set b = namespace(x=a) %}",
                      {"cannot hold another namespace"});
    expect_renders({{"{% set ns = namespace(x=[1, {'a': 2}]) %}{% set ns.y = ns.x %}{{ ns.y | tojson }}",
                     "{}", R"([1, {"a": 2}])"}});
}

TEST(JinjaLimits, StringAndListSizes) {
    expect_fast_error("{{ 'x' * 10000000000 }}", {"'*' repetition (1 x 10000000000)", "16 MiB"});
    expect_fast_error("{{ 10000000000 * 'x' }}", {"'*' repetition", "16 MiB"});
    expect_fast_error("{{ ([1] * 100000) * 100000 }}", {"'*' repetition (100000 x 100000)", "1048576 items"});
    expect_fast_error(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
        "{{ ns.s | length }}",
        {"'~' concatenation", "16 MiB"});
    expect_fast_error(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        {"'+' concatenation", "16 MiB"});
    expect_fast_error(
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
        {"'+' concatenation", "1048576 items"});
    expect_fast_error("{% set s = 'x' * 10000000 %}{{ [s, s, s] | join(s) }}", {"join", "16 MiB"});
    expect_fast_error("{% set s = 'x' * 10000000 %}{{ s.join([s, s]) }}", {"join()", "16 MiB"});
    expect_fast_error("{% set s = 'x' * 10000000 %}{{ s | replace('x', 'yy') }}", {"replace", "16 MiB"});
    expect_fast_error("{{ 'a\nb' | indent(10000000000) }}", {"indent", "16 MiB"});
    expect_fast_error("{{ [1, [2]] | tojson(indent=100000000) }}", {"tojson", "16 MiB"});
    expect_fast_error("{% set s = 'x' * 10000000 %}{{ [s, s] }}", {"printing a list", "16 MiB"});
    expect_fast_error("{% set s = 'x' * 2000000 %}{{ s | list | length }}", {"iterating over a string"});
    expect_fast_error("{% set s = ' x' * 5000000 %}{{ s.split() | length }}", {"split()", "1048576 items"});
}

TEST(JinjaLimits, LoopsAndOutput) {
    expect_fast_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                      {"for loops ran more than 100000 iterations"});
    expect_fast_error("{% for i in range(100000) %}{% for j in range(100000) if j %}{% endfor %}{% endfor %}",
                      {"for loops ran more than 100000 iterations"});
    EXPECT_EQ(render_vars("{% for i in range(1000) %}{% for j in range(50) %}{% endfor %}{% endfor %}ok"),
              "ok");
    expect_fast_error("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
                      {"template output exceeds 64 MiB"});
    expect_fast_error(
        "{% macro m() %}{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}{% endmacro %}{{ m() }}",
        {"template output exceeds 64 MiB"});
}

TEST(JinjaLimits, RecursionThroughMacros) {
    expect_fast_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", {"nested too deeply"});
    const std::string deep = repeat("-", 200) + "f(n)";
    expect_fast_error("{% macro f(n) %}{{ " + deep + " }}{% endmacro %}{{ f(1) }}",
                      {"evaluation nested more than 1024 levels deep"});
}

// Work within every size limit is still bounded per rendering, by counted bytes, items and steps.
TEST(JinjaLimits, WorkPerRendering) {
    expect_fast_error(
        "{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}{% endfor %}",
        {"building a string exceeds the rendering's work budget", "line 1"});
    expect_fast_error(
        "{% set l = range(99999) | list %}{% for i in range(99999) %}{% if -1 in l %}{% endif %}"
        "{% endfor %}",
        {"'in' on a list exceeds the rendering's work budget"});
    expect_fast_error(
        "{% set s = 'ab' * 8000000 %}{% for i in range(100000) %}{{ s.count('c') }}{% endfor %}",
        {"count() exceeds the rendering's work budget"});
    expect_fast_error("{% set s = 'ab' * 8000000 %}{% for i in range(100000) %}{{ s == s ~ '' }}{% endfor %}",
                      {"exceeds the rendering's work budget"});
    expect_fast_error(
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
        {"evaluation took more than 2000000 steps"});
    EXPECT_EQ(render_vars("{% set s = 'x' * 1000000 %}{% for i in range(200) %}{% set t = s ~ 'y' %}"
                          "{% endfor %}{% for i in range(90000) %}{{ '' }}{% endfor %}ok"),
              "ok");
}

TEST(JinjaLimits, ArithmeticStaysFast) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(render_vars("{{ 1 ** 10000000000 }} {{ (-1) ** 10000000001 }} {{ 0 ** 10000000000 }}"),
              "1 -1 0");
    EXPECT_EQ(render_vars("{{ 2 ** 62 }} {{ 3 ** 5 }} {{ 7 ** 0 }}"), "4611686018427387904 243 1");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    expect_fast_error("{{ 2 ** 64 }}", {"integer overflow"});
}

}  // namespace
}  // namespace minfer::test
