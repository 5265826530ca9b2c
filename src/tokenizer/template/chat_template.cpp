#include "tokenizer/template/chat_template.h"

#include "tokenizer/template/jinja_eval.h"
#include "tokenizer/template/jinja_parser.h"

namespace minfer {

namespace {

template <typename Json>
std::string render_impl(const std::string& tmpl, const Json& messages, bool add_generation_prompt,
                        const Json& extra) {
    if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
    if (!extra.is_null() && !extra.is_object())
        throw Error("chat template: extra variables must be a JSON object");
    std::vector<std::pair<std::string, jinja::Value>> globals = {
        {"messages", jinja::Value::from_json(messages)},
        {"tools", jinja::Value(nullptr)},
        {"documents", jinja::Value(nullptr)},
        {"add_generation_prompt", jinja::Value(add_generation_prompt)},
    };
    if (extra.is_object())
        for (auto it = extra.begin(); it != extra.end(); ++it)
            globals.emplace_back(it.key(), jinja::Value::from_json(it.value()));
    return jinja::render(jinja::parse_template(tmpl), globals);
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
