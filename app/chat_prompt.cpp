#include "chat_prompt.h"

#include "gguf/gguf.h"
#include "tokenizer/template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer {

namespace {

std::string token_or_empty(const Tokenizer& tok, int32_t id) {
    return id >= 0 ? tok.token_text(id) : "";
}

}  // namespace

nlohmann::ordered_json chat_message(const std::string& role, const std::string& content) {
    return {{"role", role}, {"content", content}};
}

ChatPrompt::ChatPrompt(const GgufFile& f, const Tokenizer& tok) : tok_(tok) {
    if (!f.has("tokenizer.chat_template")) throw Error(f.path() + ": the model has no chat template");
    tmpl_ = f.get_str("tokenizer.chat_template");
    extra_ = {{"bos_token", token_or_empty(tok, tok.bos_id())},
              {"eos_token", token_or_empty(tok, tok.eos_id())}};
}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
    return render_chat_template(tmpl_, messages, add_generation_prompt, extra_);
}

std::vector<int32_t> ChatPrompt::encode(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt) const {
    return tok_.encode(render(messages, add_generation_prompt), false, true);
}

}  // namespace minfer
