// Runtime failures: raise_exception, undefined values, type errors and unsupported operations all throw
// minfer::Error naming the problem and the template line rather than rendering a different prompt.
#include "template_test_util.h"

namespace minfer::test {
namespace {

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
    const std::string tmpl =
        "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
        "{{ raise_exception('Conversation roles must be user or assistant, got ' + m.role) }}{% endif %}"
        "{{ m.content }}{% endfor %}";
    const auto ok = nlohmann::json::parse(R"([{"role": "user", "content": "a"}])");
    EXPECT_EQ(render_chat_template(tmpl, ok, false), "a");
    const auto bad = nlohmann::json::parse(R"([{"role": "tool", "content": "a"}])");
    try {
        render_chat_template(tmpl, bad, false);
        ADD_FAILURE() << "raise_exception did not throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("Conversation roles must be user or assistant, got tool"),
                  std::string::npos)
            << e.what();
    }
}

TEST(JinjaErrors, UndefinedValues) {
    expect_error("line1\n{{ x.y }}", {"line 2", "'x' is undefined"});
    expect_error("{{ m.a.b }}", {"'dict object' has no attribute 'a'"}, R"({"m": {}})");
    expect_error("{{ m['a']['b'] }}", {"'dict object' has no attribute 'a'"}, R"({"m": {}})");
    expect_error("{{ x + 1 }}", {"'x' is undefined"});
    expect_error("{{ nofunc(1) }}", {"'nofunc' is undefined"});
    expect_error("{{ 'a'.format(1) }}", {"'str object' has no attribute 'format'"});
    expect_error("{{ x | tojson }}", {"not JSON serializable"});
}

TEST(JinjaErrors, TypeErrors) {
    expect_error("\n\n{{ 'a' + 1 }}", {"line 3", "unsupported operand type(s) for +: 'str' and 'int'"});
    expect_error("{{ 1 / 0 }}", {"division or modulo by zero"});
    expect_error("{{ 1 < 'a' }}", {"'<' not supported between instances of 'int' and 'str'"});
    expect_error("{{ 1 in 'abc' }}", {"requires string as left operand"});
    expect_error("{% for x in 5 %}{% endfor %}", {"'int' object is not iterable"});
    expect_error("{% for x in none %}{% endfor %}", {"'NoneType' object is not iterable"});
    expect_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {"cannot unpack 3 values into 2 variables"});
    expect_error("{% set d = {} %}{% set d.x = 1 %}", {"not a namespace"});
    expect_error("{{ 9223372036854775807 + 1 }}", {"integer overflow"});
    expect_error("{{ '%s' % 1 }}", {"string formatting"});
    expect_error("{{ [1][::0] }}", {"slice step cannot be zero"});
    expect_error("{{ l[0][1:] }}", {"'int object' is not subscriptable"}, R"({"l": [5]})");
}

TEST(JinjaErrors, BadArguments) {
    expect_error("{{ 'a' | trim('x', 'y') }}", {"trim() takes at most 1 positional arguments"});
    expect_error("{{ 'a' | tojson(colour=1) }}", {"unexpected keyword argument 'colour'"});
    expect_error("{{ 'a'.startswith() }}", {"startswith() argument must be a string"});
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {"macro 'm' takes 1 arguments"});
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", {"macro 'm' has no parameter 'b'"});
    expect_error("{{ range() }}", {"range() expects at least 1 argument"});
    expect_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", {"nested too deeply"});
}

TEST(JinjaErrors, UnsupportedCaseConversionOfNonAsciiLetters) {
    expect_error("{{ 'Élan' | lower }}", {"non-ASCII"});
    expect_renders({{"{{ '日本 ok' | upper }}", "{}", "日本 OK"}});
}

TEST(JinjaErrors, BadInputs) {
    EXPECT_THROW(render_chat_template("x", nlohmann::json::object(), false), Error);
    EXPECT_THROW(render_chat_template("x", nlohmann::json::array(), false, nlohmann::json::array()), Error);
}

// A template's error message may carry its own text (raise_exception, an unexpected character): control
// bytes are escaped so that printing it cannot drive the terminal.
TEST(JinjaErrors, ControlBytesInMessagesAreEscaped) {
    const std::string esc = "\x1b[2J";
    const std::vector<std::string> templates = {"{{ raise_exception('" + esc + "boom\x07') }}",
                                                "{{ 1 " + esc + " }}", "{{ x }}\x01{{ nofilter | \x9b }}",
                                                "{{ raise_exception('\xc2\x9b"
                                                "2J') }}"};
    for (const std::string& tmpl : templates) {
        SCOPED_TRACE(tmpl);
        try {
            render_vars(tmpl);
            ADD_FAILURE() << "rendered";
        } catch (const Error& e) {
            const std::string msg = e.what();
            for (unsigned char c : msg)
                EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "raw byte " << int(c) << ": " << msg;
            EXPECT_EQ(msg.find("\xc2\x9b"), std::string::npos) << msg;
        }
    }
    expect_error("{{ raise_exception('" + esc + "boom') }}", {"\\x1b[2Jboom"});
    expect_error(
        "{{ raise_exception('\xc2\x9b"
        "x') }}",
        {"\\u009bx"});
}

}  // namespace
}  // namespace minfer::test
