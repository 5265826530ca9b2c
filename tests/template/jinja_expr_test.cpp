// Expressions: arithmetic and precedence, comparisons, boolean logic, membership, inline if, attribute
// and item access, slicing, tests (is ...), and methods of strings and dicts.
#include "template_test_util.h"

namespace minfer::test {
namespace {

TEST(JinjaExpr, Arithmetic) {
    expect_renders({
        {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 4 - 3 }}", "{}", "7 9 3"},
        {"{{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }}", "{}", "2.5 3 -4 2 -2"},
        {"{{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }}", "{}", "1024 64 0.5"},
        {"{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }}", "{}", "3.0 0.5 3.0 2"},
        {"{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1 / 3 }} {{ 0.0001 }} {{ -2.5e-5 }}", "{}",
         "0.30000000000000004 1e+16 1000000000000000.0 0.3333333333333333 0.0001 -2.5e-05"},
        {"{{ 'ab' + 'cd' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} {{ 2 * [0] }}", "{}",
         "abcd [1, 2, 3] ababab [0, 0]"},
        {"{{ 'a' ~ 1 ~ none ~ [2] }}", "{}", "a1None[2]"},
        {"{{ 'n=' ~ 1 + 2 if false else 'x' ~ 2 * 3 }}", "{}", "x6"},
        {"{{ -x }} {{ +x }} {{ --x }}", "{\"x\": 5}", "-5 5 5"},
        {"{{ -1 | abs }}", "{}", "1"},
    });
}

TEST(JinjaExpr, ComparisonsAndLogic) {
    expect_renders({
        {"{{ 1 == 1.0 }} {{ '1' == 1 }} {{ [1, 'a'] == [1, 'a'] }} {{ {'a': 1} == {'a': 1} }}", "{}",
         "True False True True"},
        {"{{ 1 != 2 }} {{ 2 < 3 }} {{ 3 <= 3 }} {{ 'b' > 'a' }} {{ 2.5 >= 3 }}", "{}",
         "True True True True False"},
        {"{{ none == none }} {{ x == y }} {{ none == 0 }}", "{}", "True True False"},
        {"{{ 1 and 'x' }} {{ 0 and 'x' }} {{ '' or 'y' }} {{ 'a' or 'y' }}", "{}", "x 0 y a"},
        {"{{ not 0 }} {{ not 'a' }} {{ not [] }} {{ not none }} {{ not x }}", "{}",
         "True False True True True"},
        {"{{ not 1 == 2 }} {{ not x is defined }}", "{}", "True True"},
        {"{{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'v' in {'k': "
         "'v'} }}",
         "{}", "True True True True False"},
        {"{{ 'a' in x }}", "{}", "False"},
        {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 in [true] }} {{ 0 < x < 10 }}", "{\"x\": 5}",
         "True False True True"},
        {"{{ 'yes' if 1 else 'no' }} {{ 'yes' if [] else 'no' }} [{{ 'yes' if false }}]", "{}", "yes no []"},
        {"{{ 'a' if false else 'b' if true else 'c' }}", "{}", "b"},
    });
}

TEST(JinjaExpr, AttributesAndItems) {
    const char* vars = R"({"m": {"role": "user", "content": "hi", "items": 3}, "l": [10, 20, 30]})";
    expect_renders({
        {"{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m['missing'] }}|", vars, "user hi ||"},
        {"{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ l.1 }}", vars, "10 30 |20"},
        {"{{ 'héllo'[1] }} {{ 'héllo'[-1] }} {{ 'abc'[9] }}|", vars, "é o |"},
        {"{{ m['items'] }}", vars, "3"},
        {"{{ m.role is defined }} {{ m.nope is defined }} {{ m.nope is undefined }}", vars,
         "True False True"},
    });
}

TEST(JinjaExpr, Slicing) {
    const char* vars = R"({"l": [1, 2, 3, 4, 5], "s": "héllo wörld"})";
    expect_renders({
        {"{{ l[1:3] }} {{ l[:2] }} {{ l[3:] }} {{ l[:] }}", vars, "[2, 3] [1, 2] [4, 5] [1, 2, 3, 4, 5]"},
        {"{{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-2] }} {{ l[4:1:-1] }}", vars,
         "[5, 4, 3, 2, 1] [1, 3, 5] [4, 5] [1, 2, 3] [5, 4, 3]"},
        {"{{ l[10:] }} {{ l[-10:2] }} {{ l[3:1] }}", vars, "[] [1, 2] []"},
        {"{{ s[::-1] }}|{{ s[1:4] }}|{{ s[-5:] }}", vars, "dlröw olléh|éll|wörld"},
        {"{{ (1, 2, 3)[1:] }}", vars, "(2, 3)"},
        {"{% for x in l[::-1] %}{{ x }}{% endfor %}", vars, "54321"},
    });
}

TEST(JinjaExpr, Tests) {
    const char* vars = R"({"d": {"a": 1}, "n": null, "s": "x", "l": [1], "i": 3, "f": 1.5, "b": true})";
    expect_renders({
        {"{{ d is defined }} {{ zz is defined }} {{ zz is undefined }} {{ n is none }} {{ n is not none }}",
         vars, "True False True True False"},
        {"{{ s is string }} {{ i is string }} {{ d is mapping }} {{ l is mapping }}", vars,
         "True False True False"},
        {"{{ l is iterable }} {{ s is iterable }} {{ d is iterable }} {{ i is iterable }} {{ l is sequence "
         "}}",
         vars, "True True True False True"},
        {"{{ i is number }} {{ f is number }} {{ b is number }} {{ i is integer }} {{ b is integer }} {{ f "
         "is float }}",
         vars, "True True True True False True"},
        {"{{ b is boolean }} {{ b is true }} {{ b is false }} {{ i is boolean }}", vars,
         "True True False False"},
        {"{{ i is odd }} {{ i is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}", vars,
         "True False True False"},
        {"{{ i is eq 3 }} {{ i is equalto 4 }} {{ i is ne 4 }} {{ i is lt 4 }} {{ i is gt 4 }} {{ i is ge 3 "
         "}}",
         vars, "True False True True False True"},
        {"{{ 1 is in l }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }}", vars,
         "True True True False"},
        {"{{ range is callable }} {{ s is callable }}", vars, "True False"},
    });
}

TEST(JinjaExpr, StringMethods) {
    expect_renders({
        {"{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'hel')) }} {{ 'hello'.endswith('lo') }}",
         "{}", "True True True"},
        {"{{ 'hello'.startswith('ll', 2) }} {{ 'hello'.endswith('ell', 0, 4) }}", "{}", "True True"},
        {"{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  a b "
         "'.split(none, 1) }}",
         "{}", "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a', 'b ']"},
        {"{{ 'x</think>y</think>z'.split('</think>')[-1] }}", "{}", "z"},
        {"[{{ '  a  '.strip() }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ 'xxaxx'.strip('x') "
         "}}]",
         "{}", "[a] [a  ] [  a] [a]"},
        {"[{{ '\\n\\nt\\n'.lstrip('\\n') }}] [{{ '\\u3000a\\u00a0'.strip() }}]", "{}", "[t\n] [a]"},
        {"{{ 'aXbX'.replace('X', '-') }} {{ 'aXbX'.replace('X', '-', 1) }} {{ 'ab'.replace('', '.') }}", "{}",
         "a-b- a-bX .a.b."},
        {"{{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ 'hI tHere'.capitalize() }}", "{}", "HI hi Hi there"},
        {"{{ 'héllo'.find('l') }} {{ 'abc'.find('z') }} {{ 'a-b-c'.count('-') }} {{ ', '.join(['a', 'b']) }}",
         "{}", "2 -1 2 a, b"},
    });
}

TEST(JinjaExpr, DictMethods) {
    const char* vars = R"({"d": {"b": 1, "a": 2}})";
    expect_renders({
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", vars, "b=1;a=2;"},
        {"{{ d.keys() | list }} {{ d.values() | list }}", vars, "['b', 'a'] [1, 2]"},
        {"{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}", vars, "2 None dflt"},
        {"{% for k in d %}{{ k }}{% endfor %}", vars, "ba"},
    });
}

TEST(JinjaExpr, ListMethodsAndDictViews) {
    expect_renders({
        {"{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }} {{ (3, 4).index(4) }}", "{}", "2 1 1"},
        {"{{ {'a': 1}.keys() | length }} {{ 'a' in {'a': 1}.keys() }} [{{ {'a': 1}.keys()[0] }}]", "{}",
         "1 True []"},
        {"{% if {}.items() %}Y{% else %}N{% endif %} {{ {'a': 1}.items() | list }}", "{}", "N [('a', 1)]"},
    });
    expect_error("{{ {'a': 1}.keys() }}", {"dict view"});
    expect_error("{{ [1].index(2) }}", {"2 is not in list"});
}

TEST(JinjaExpr, GeneratorsFromFiltersBehaveLikeGenerators) {
    expect_renders({
        {"{% if [] | select %}Y{% else %}N{% endif %} {{ [1, 2, 3] | select('odd') | first }}", "{}", "Y 1"},
        {"{{ [1, 2, 3] | select('odd') | join(',') }} {{ 3 in [1, 2, 3] | select('odd') }}", "{}",
         "1,3 True"},
        {"[{{ ([1, 2] | map('string'))[0] }}] {{ [1, 2] | reverse | first }}", "{}", "[] 2"},
        {"{{ [1] | select is sequence }} {{ [1] | select is iterable }}", "{}", "False True"},
    });
    expect_error("{{ [1, 2] | select }}", {"printing a generator"});
    expect_error("{{ [1, 2] | select | length }}", {"has no len()"});
    expect_error("{{ [1, 2] | map('string') | tojson }}", {"not JSON serializable"});
}

TEST(JinjaExpr, KeyOrderOfInputObjectsIsKept) {
    nlohmann::ordered_json extra;
    extra["tool"] = {{"zeta", 1}, {"alpha", {{"y", true}, {"x", nullptr}}}};
    EXPECT_EQ(render_chat_template("{{ tool | tojson }}", nlohmann::ordered_json::array(), false, extra),
              "{\"zeta\": 1, \"alpha\": {\"y\": true, \"x\": null}}");
}

}  // namespace
}  // namespace minfer::test
