#include "tokenizer/template/chat_template.h"

#include "tokenizer/template/jinja_eval.h"
#include "tokenizer/template/jinja_parser.h"

namespace minfer {

namespace {

// Control bytes (and C1 controls encoded as UTF-8) as \xNN escapes, so that a template's error
// message cannot move the terminal's cursor or rewrite what was printed before.
std::string escape_controls(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        const bool c1 = c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                        static_cast<unsigned char>(s[i + 1]) < 0xA0;
        if (c >= 0x20 && c != 0x7f && !c1) {
            out += static_cast<char>(c);
            continue;
        }
        const unsigned code = c1 ? static_cast<unsigned char>(s[++i]) : c;
        const char hex[] = "0123456789abcdef";
        out += c1 ? "\\u00" : "\\x";
        out += hex[code >> 4];
        out += hex[code & 15];
    }
    return out;
}

template <typename Json>
std::string render_impl(const std::string& tmpl, const Json& messages, bool add_generation_prompt,
                        const Json& extra) {
    if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
    if (!extra.is_null() && !extra.is_object())
        throw Error("chat template: extra variables must be a JSON object");
    std::vector<std::pair<std::string, jinja::Value>> globals;
    try {
        globals = {
            {"messages", jinja::Value::from_json(messages)},
            {"tools", jinja::Value(nullptr)},
            {"documents", jinja::Value(nullptr)},
            {"add_generation_prompt", jinja::Value(add_generation_prompt)},
        };
        if (extra.is_object())
            for (auto it = extra.begin(); it != extra.end(); ++it)
                globals.emplace_back(it.key(), jinja::Value::from_json(it.value()));
    } catch (const jinja::EvalError& e) {
        throw Error(std::string("chat template variables: ") + e.what());
    }
    try {
        return jinja::render(jinja::parse_template(tmpl), globals);
    } catch (const Error& e) {
        throw Error(escape_controls(e.what()));
    }
}

}  // namespace

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages,
                                 bool add_generation_prompt, const nlohmann::json& extra) {
    return render_impl(tmpl, messages, add_generation_prompt, extra);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra) {
    return render_impl(tmpl, messages, add_generation_prompt, extra);
}

}  // namespace minfer
