// Statements: if/elif/else, for loops (loop variables, else, filters, unpacking, break/continue),
// scoping of set, namespace(), block set, macros and generation blocks.
#include "template_test_util.h"

namespace minfer::test {
namespace {

TEST(JinjaStmt, IfElifElse) {
    const char* tmpl =
        "{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %}";
    expect_renders({
        {tmpl, "{\"x\": 1}", "one"},
        {tmpl, "{\"x\": 2}", "two"},
        {tmpl, "{\"x\": 3}", "three"},
        {tmpl, "{\"x\": 9}", "other"},
        {"{% if x %}set{% endif %}|{% if not x %}unset{% endif %}", "{}", "|unset"},
    });
}

TEST(JinjaStmt, LoopVariables) {
    expect_renders({
        {"{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
         "loop.revindex0 }}"
         "{{ loop.length }}{{ loop.first }}{{ loop.last }} {% endfor %}",
         "{}", "10323TrueFalse 21213FalseFalse 32103FalseTrue "},
        {"{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %}", "{}",
         "<1>2 1<2>3 2<3> "},
        {"{% for x in [1, 2, 3] %}{{ loop.cycle('odd', 'even') }} {% endfor %}", "{}", "odd even odd "},
        {"{% for r in [1, 2] %}{% for c in 'ab' %}{{ loop.index }}{{ c }}{% endfor %}{{ loop.index }};{% "
         "endfor %}",
         "{}", "1a2b1;1a2b2;"},
    });
}

TEST(JinjaStmt, LoopElseFilterUnpackingAndControl) {
    expect_renders({
        {"{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
        {"{% for x in missing %}x{% else %}none{% endfor %}", "{}", "none"},
        {"{% for x in [1] %}x{% else %}empty{% endfor %}", "{}", "x"},
        {"{% for i in [1, 2, 3, 4] if i is even %}{{ i }}/{{ loop.index }}/{{ loop.length }} {% endfor %}",
         "{}", "2/1/2 4/2/2 "},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}", "{}", "3 7 "},
        {"{% for k, v in {'x': 1, 'y': 2} | items %}{{ k }}{{ v }}{% endfor %}", "{}", "x1y2"},
        {"{% for c in 'hé!' %}[{{ c }}]{% endfor %}", "{}", "[h][é][!]"},
        {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif "
         "%}"
         "{{ i }}{% endfor %}",
         "{}", "0134"},
        {"{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}",
         "{}", "135321"},
    });
}

TEST(JinjaStmt, SetScopingAndNamespace) {
    expect_renders({
        {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }} {% endfor %}{{ x }}", "{}",
         "10 20 1"},
        {"{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}|", "{}", "|"},
        {"{% set ns = namespace(count=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.count = ns.count + "
         "i %}"
         "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}",
         "{}", "6 True"},
        {"{% set ns = namespace() %}{% set ns.items = [1] %}{{ ns.items }}", "{}", "[1]"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{}", "12"},
        {"{% set t %}inner {{ 1 + 1 }}{% endset %}[{{ t }}]", "{}", "[inner 2]"},
        {"{% if true %}{% set z = 5 %}{% endif %}{{ z }}", "{}", "5"},
        {"{% set messages = [1] %}{{ messages }}", "{}", "[1]"},
    });
}

TEST(JinjaStmt, Macros) {
    expect_renders({
        {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
         "{{ greet('Ann') }} {{ greet('Bo', '?') }} {{ greet(punct='.', name='Cy') }}",
         "{}", "Hi Ann! Hi Bo? Hi Cy."},
        {"{% set top = 'T' %}{% macro m() %}{{ top }}{{ inner | default('-') }}{% endmacro %}"
         "{% for inner in [1] %}{{ m() }}{% endfor %}",
         "{}", "T-"},
        {"{% macro render(x) %}{% if x is mapping %}{{ x.k }}{% else %}{{ x }}{% endif %}{% endmacro %}"
         "{{ render({'k': 'v'}) }}{{ render(3) }}",
         "{}", "v3"},
        {"{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}", "{}",
         "3210"},
    });
}

TEST(JinjaStmt, GlobalFunctions) {
    expect_renders({
        {"{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", "{}", "12"},
        {"{{ dict(a=1, b='x') }} {{ range(3) | list }}", "{}", "{'a': 1, 'b': 'x'} [0, 1, 2]"},
    });
    const std::string year = render_vars("{{ strftime_now('%Y') }}");
    ASSERT_EQ(year.size(), 4u);
    EXPECT_GE(std::stoi(year), 2024);
}

TEST(JinjaStmt, GenerationBlockRendersItsBody) {
    expect_renders({{"a{% generation %}b{% endgeneration %}c", "{}", "abc"}});
}

}  // namespace
}  // namespace minfer::test
