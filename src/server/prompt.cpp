#include "server/prompt.h"

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/request.h"
#include "server/structured.h"
#include "server/tool_prompt.h"
#include "tokenizer/template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::server {

namespace {

std::string token_or_empty(const Tokenizer& tok, int32_t id) {
    return id >= 0 ? tok.token_text(id) : "";
}

// Whether `text` ends with `tag`, whitespace after it aside.
bool ends_with_tag(std::string_view text, std::string_view tag) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
    return text.size() >= tag.size() && text.substr(text.size() - tag.size()) == tag;
}

// The forced start of a call, its opening tag (Llama 3's calls have none); the call's grammar
// (structured.h) writes the rest. A
// thinking model first gets an empty reasoning block, as the template's `enable_thinking: false` gives.
std::string forced_call(const ChatSyntax& syntax, std::string_view prompt) {
    std::string out;
    if (ends_with_tag(prompt, "<think>"))
        out = "\n\n</think>\n\n";
    else if (syntax.think_tags && !ends_with_tag(prompt, "</think>"))
        out = "<think>\n\n</think>\n\n";
    if (syntax.tools == ToolSyntax::Hermes) out += "<tool_call>\n";
    return out;
}

}  // namespace

PromptBuilder::PromptBuilder(const GgufFile& f, const Tokenizer& tok, const std::string& chat_template)
    : tok_(tok) {
    if (!chat_template.empty())
        tmpl_ = chat_template;
    else if (f.has("tokenizer.chat_template"))
        tmpl_ = f.get_str("tokenizer.chat_template");
    if (tmpl_) syntax_ = detect_chat_syntax(*tmpl_);
    extra_ = {{"bos_token", token_or_empty(tok, tok.bos_id())},
              {"eos_token", token_or_empty(tok, tok.eos_id())}};
}

std::string PromptBuilder::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const nlohmann::ordered_json& variables) const {
    if (!tmpl_) throw bad_request("the model has no chat template; use /v1/completions", "no_chat_template");
    nlohmann::ordered_json extra = extra_;
    for (const auto& [k, v] : variables.items()) extra[k] = v;
    try {
        return render_chat_template(*tmpl_, messages, add_generation_prompt, extra);
    } catch (const Error& e) {
        throw bad_request(std::string("the chat template rejected the messages: ") + e.what(),
                          "template_error");
    }
}

PreparedPrompt PromptBuilder::prepare(const CompletionRequest& r) const {
    PreparedPrompt p;
    if (r.endpoint != Endpoint::Chat) {
        p.tokens = r.prompt_ids ? *r.prompt_ids : tok_.encode(r.prompt, true, true);
        p.grammar.grammar = r.format;
        return p;
    }
    p.syntax = syntax_;
    p.parse_tools = !r.tools.empty() && r.tool_choice != ToolChoice::None;
    nlohmann::ordered_json variables = r.template_kwargs;
    const nlohmann::ordered_json offered = p.parse_tools ? r.tools : nlohmann::ordered_json::array();
    if (syntax_.native_tools && p.parse_tools) variables["tools"] = offered;
    std::string text =
        render(syntax_.native_tools ? r.messages : messages_with_tools(r.messages, offered), true, variables);
    p.syntax.starts_in_reasoning = syntax_.think_tags && ends_with_tag(text, "<think>");
    if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) {
        p.forced = forced_call(syntax_, text);
        text += p.forced;
        p.syntax.starts_in_reasoning = false;
        p.grammar.grammar = forced_call_grammar(r, syntax_.arguments_key());
    } else if (r.format) {
        p.grammar.grammar = r.format;
        // A thinking model reasons freely first: the value follows its </think>.
        if (syntax_.think_tags && !ends_with_tag(text, "</think>")) p.grammar.after = "</think>";
    }
    p.tokens = tok_.encode(text, false, true);
    p.text = std::move(text);
    return p;
}

}  // namespace minfer::server
