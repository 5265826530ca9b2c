// Helpers for the chat-template tests: render a template with variables given as JSON text, check a
// table of (template, variables, expected output) cases, and check that rendering fails with a message.
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/template/chat_template.h"
#include "util/error.h"

namespace minfer::test {

// Renders `tmpl` with no messages, add_generation_prompt=false and the JSON object `vars` as variables.
inline std::string render_vars(const std::string& tmpl, const std::string& vars = "{}") {
    return render_chat_template(tmpl, nlohmann::ordered_json::array(), false,
                                nlohmann::ordered_json::parse(vars));
}

// One rendering case; expectations were checked against Python jinja2 configured as HF transformers does.
struct TemplateCase {
    const char* tmpl;
    const char* vars;
    const char* expected;
};

inline void expect_renders(std::initializer_list<TemplateCase> cases) {
    for (const TemplateCase& c : cases) {
        SCOPED_TRACE(std::string("template: ") + c.tmpl);
        try {
            EXPECT_EQ(render_vars(c.tmpl, c.vars), c.expected);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "threw: " << e.what();
        }
    }
}

// Expects rendering to throw minfer::Error whose message contains every string in `needles`.
inline void expect_error(const std::string& tmpl, std::initializer_list<std::string> needles,
                         const std::string& vars = "{}") {
    SCOPED_TRACE("template: " + tmpl);
    try {
        const std::string out = render_vars(tmpl, vars);
        ADD_FAILURE() << "rendered without error: \"" << out << "\"";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg;
    }
}

}  // namespace minfer::test
