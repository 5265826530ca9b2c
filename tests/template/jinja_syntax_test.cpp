// Template syntax: text, comments, literals, whitespace control as HF configures Jinja2 (trim_blocks,
// lstrip_blocks), raw blocks, and the errors the lexer and parser report.
#include "template_test_util.h"

namespace minfer::test {
namespace {

TEST(JinjaSyntax, TextCommentsAndLiterals) {
    expect_renders({
        {"plain text only", "{}", "plain text only"},
        {"a{# a comment #}b", "{}", "ab"},
        {"{{ 'single' }} {{ \"double\" }}", "{}", "single double"},
        {"{{ 'a\\nb\\t\\'q\\' \\\"d\\\" \\\\ \\x41\\u00e9' }}", "{}", "a\nb\t'q' \"d\" \\ A\xc3\xa9"},
        {"{{ 'unknown \\q escape' }}", "{}", "unknown \\q escape"},
        {"{{ 'ab' 'cd' }}", "{}", "abcd"},
        {"{{ 42 }} {{ -7 }} {{ 1_000 }} {{ 2.5 }} {{ 1e3 }} {{ 1.5e-7 }}", "{}",
         "42 -7 1000 2.5 1000.0 1.5e-07"},
        {"{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", "{}", "True False None True None"},
        {"{{ [1, 'a', none, [true]] }}", "{}", "[1, 'a', None, [True]]"},
        {"{{ {'k': 'v', 'n': {'x': 1}} }}", "{}", "{'k': 'v', 'n': {'x': 1}}"},
        {"{{ (1, 'b') }} {{ (1,) }} {{ () }}", "{}", "(1, 'b') (1,) ()"},
        {"{{ {'a': {'b': 1}}['a']['b'] }}", "{}", "1"},
        {"{{ \"it's\" }} {{ [\"it's\"] }}", "{}", "it's [\"it's\"]"},
        {"{{ '%}' }}{{ '}}' }}", "{}", "%}}}"},
        {"{{ missing }}|", "{}", "|"},
    });
}

TEST(JinjaSyntax, TrimBlocksAndLstripBlocks) {
    expect_renders({
        {"a\n  {% if true %}\nx\n  {% endif %}\nb", "{}", "a\nx\nb"},
        {"  {% if true %}x{% endif %}|", "{}", "x|"},
        {"a  {% if true %}x{% endif %}", "{}", "a  x"},
        {"a\n  {# comment #}\nb", "{}", "a\nb"},
        {"a\n  {{ 1 }}\nb", "{}", "a\n  1\nb"},
        {"{% if true %}\r\nx{% endif %}", "{}", "x"},
        {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "{}", "  1\n  2\n"},
        {"{% if true %}\n\nx{% endif %}", "{}", "\nx"},
        {"{% if true %}  {% endif %}|", "{}", "  |"},
        {"{% if true %}\n  {% endif %}|", "{}", "|"},
    });
}

TEST(JinjaSyntax, WhitespaceControlModifiers) {
    expect_renders({
        {"a {{- 1 -}} \n b", "{}", "a1b"},
        {"a\n\t {%- if true %} b{% endif %}", "{}", "a b"},
        {"a\n {% if true -%}\n\n b{% endif %}", "{}", "a\nb"},
        {"a\n  {%+ if true %}\nx{% endif +%}\nb", "{}", "a\n  x\nb"},
        {"x {#- c -#} y", "{}", "xy"},
        {"{%- if true -%}  x  {%- endif -%}  ", "{}", "x"},
    });
}

TEST(JinjaSyntax, NewlinesAndTrailingNewline) {
    expect_renders({
        {"x\n", "{}", "x"},
        {"x\n\n", "{}", "x\n"},
        {"x\r\n", "{}", "x"},
        {"a\r\nb\rc", "{}", "a\nb\nc"},
    });
}

TEST(JinjaSyntax, RawBlock) {
    expect_renders({
        {"a\n  {% raw %}{{ x }}{% if %}{% endraw %}", "{}", "a\n{{ x }}{% if %}"},
        {"{% raw -%}  a  {%- endraw %}", "{}", "a"},
    });
}

TEST(JinjaSyntax, LexerErrors) {
    expect_error("ok\n{{ x", {"line 2", "unterminated tag '{{'"});
    expect_error("{% if x", {"line 1", "unterminated tag '{%'"});
    expect_error("a\n\n{# never closed", {"line 3", "unterminated comment"});
    expect_error("{{ 'abc }}", {"unterminated string"});
    expect_error("{{ a ! b }}", {"unexpected character '!'"});
    expect_error("{% raw %}abc", {"endraw"});
}

TEST(JinjaSyntax, ParserErrors) {
    expect_error("{% if x %}a", {"missing '{% endif %}'", "line 1"});
    expect_error("{% for x in y %}a\n{% endif %}", {"line 2", "'{% endif %}'"});
    expect_error("\n{% endfor %}", {"line 2", "unexpected '{% endfor %}'"});
    expect_error("{% frobnicate %}", {"unknown tag '{% frobnicate %}'"});
    expect_error("{% include 'x.jinja' %}", {"unsupported tag '{% include %}'"});
    expect_error("{% filter upper %}x{% endfilter %}", {"unsupported tag '{% filter %}'"});
    expect_error("{% for x in y recursive %}{% endfor %}", {"recursive"});
    expect_error("{% break %}", {"outside of a loop"});
    expect_error("{{ x | nosuchfilter }}", {"unknown filter 'nosuchfilter'"});
    expect_error("\n\n{{ x is nosuchtest }}", {"line 3", "unknown test 'nosuchtest'"});
    expect_error("{{ 1 + }}", {"unexpected '}}'"});
    expect_error("{{ f(*args) }}", {"*args"});
    expect_error("{{ [1, 2) }}", {"expected ']'"});
    expect_error("{% set x %}a", {"missing '{% endset %}'"});
}

}  // namespace
}  // namespace minfer::test
