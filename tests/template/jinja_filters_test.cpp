// Filters, including HF's tojson (json.dumps with ensure_ascii=False and its options).
#include "template_test_util.h"

namespace minfer::test {
namespace {

TEST(JinjaFilters, StringFilters) {
    expect_renders({
        {"[{{ '  a b \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}]", "{}", "[a b] [a]"},
        {"{{ 'Hello' | upper }} {{ 'Hello' | lower }} {{ 'hELLO wORLD' | capitalize }}", "{}",
         "HELLO hello Hello world"},
        {"{{ 'hello-world (foo)bar' | title }}", "{}", "Hello-World (Foo)bar"},
        {"{{ 'aXbX' | replace('X', '.') }} {{ 'aXbX' | replace('X', '.', 1) }}", "{}", "a.b. a.bX"},
        {"{{ 1 | string }} {{ none | string }} [{{ missing | string }}] {{ [1] | string }}", "{}",
         "1 None [] [1]"},
        {"{{ '<b>' | safe }}", "{}", "<b>"},
        {"{{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}", "{}", "cba [2, 1]"},
        {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb\\n' | indent(2, true, true) }}|", "{}",
         "a\n  b\n\n  c|  a\n  b\n  |"},
    });
}

TEST(JinjaFilters, SequenceFilters) {
    const char* vars =
        R"({"l": [3, 1, 2], "d": {"b": 1, "a": 2}, "people": [{"n": "x", "age": 3}, {"n": "y"}]})";
    expect_renders({
        {"{{ l | length }} {{ l | count }} {{ 'héllo' | length }} {{ d | length }} {{ missing | length }}",
         vars, "3 3 5 2 0"},
        {"{{ l | first }} {{ l | last }} {{ 'abc' | first }} {{ d | first }} [{{ [] | first }}]", vars,
         "3 2 a b []"},
        {"{{ l | join }} {{ l | join(', ') }} {{ people | join('/', attribute='n') }}", vars,
         "312 3, 1, 2 x/y"},
        {"{{ d | items | list }} {{ d | list }} {{ 'ab' | list }}", vars,
         "[('b', 1), ('a', 2)] ['b', 'a'] ['a', 'b']"},
        {"{{ l | sort }} {{ l | sort(reverse=true) }} {{ ['b', 'A', 'a'] | sort }}", vars,
         "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b']"},
        {"{{ people | map(attribute='n') | list }} {{ people | map(attribute='age', default=0) | list }}",
         vars, "['x', 'y'] [3, 0]"},
        {"{{ ['a', 'b'] | map('upper') | list }} {{ people | sort(attribute='n', reverse=true) | "
         "map(attribute='n') "
         "| join }}",
         vars, "['A', 'B'] yx"},
        {"{{ l | select('odd') | list }} {{ l | reject('equalto', 1) | list }} {{ [0, 1, ''] | select | list "
         "}}",
         vars, "[3, 1] [3, 2] [1]"},
        {"{{ people | selectattr('age') | map(attribute='n') | list }} "
         "{{ people | rejectattr('n', 'equalto', 'x') | map(attribute='n') | list }}",
         vars, "['x'] ['y']"},
    });
}

TEST(JinjaFilters, DefaultAndConversions) {
    expect_renders({
        {"{{ missing | default('d') }} [{{ '' | default('d') }}] {{ '' | default('d', true) }} {{ 0 | d(5) "
         "}}",
         "{}", "d [] d 0"},
        {"{{ none | default('d') }} {{ missing.attr | default('x') if missing is defined else 'u' }}", "{}",
         "None u"},
        {"{{ 3.7 | int }} {{ '42' | int }} {{ ' 12 ' | int }} {{ '1_0' | int }} {{ '4.5' | int }} {{ 'x' | "
         "int }}",
         "{}", "3 42 12 10 4 0"},
        {"{{ 'x' | int(7) }} {{ none | int }} {{ true | int }} {{ '1e2' | int }}", "{}", "7 0 1 100"},
        {"{{ '1.5' | float }} {{ 2 | float }} {{ 'abc' | float }} {{ -3 | abs }} {{ -2.5 | abs }}", "{}",
         "1.5 2.0 0.0 3 2.5"},
    });
}

TEST(JinjaFilters, ToJson) {
    const char* vars = R"({"v": {"b": 1, "a": [1, 2.5, "é\n\"q\"", null, true, {}, []]}})";
    expect_renders({
        {"{{ v | tojson }}", vars, "{\"b\": 1, \"a\": [1, 2.5, \"é\\n\\\"q\\\"\", null, true, {}, []]}"},
        {"{{ v | tojson(indent=2) }}", vars,
         "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2.5,\n    \"é\\n\\\"q\\\"\",\n    null,\n    true,\n    "
         "{},\n"
         "    []\n  ]\n}"},
        {"{{ v | tojson(sort_keys=true, separators=(',', ':')) }}", vars,
         "{\"a\":[1,2.5,\"é\\n\\\"q\\\"\",null,true,{},[]],\"b\":1}"},
        {"{{ 'é😀<>&\\'' | tojson }} {{ 'é😀' | tojson(ensure_ascii=true) }}", vars,
         "\"é😀<>&'\" \"\\u00e9\\ud83d\\ude00\""},
        {"{{ '\\x01\\x7f' | tojson }} {{ 1e20 | tojson }} {{ (1, 2) | tojson }}", vars,
         "\"\\u0001\x7f\" 1e+20 [1, 2]"},
    });
}

}  // namespace
}  // namespace minfer::test
