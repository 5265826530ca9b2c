#include "server/prompt.h"

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/request.h"
#include "tokenizer/template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::server {

namespace {

std::string token_or_empty(const Tokenizer& tok, int32_t id) {
    return id >= 0 ? tok.token_text(id) : "";
}

}  // namespace

PromptBuilder::PromptBuilder(const GgufFile& f, const Tokenizer& tok) : tok_(tok) {
    if (f.has("tokenizer.chat_template")) tmpl_ = f.get_str("tokenizer.chat_template");
    extra_ = {{"bos_token", token_or_empty(tok, tok.bos_id())},
              {"eos_token", token_or_empty(tok, tok.eos_id())}};
}

std::string PromptBuilder::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
    if (!tmpl_) throw bad_request("the model has no chat template; use /v1/completions", "no_chat_template");
    try {
        return render_chat_template(*tmpl_, messages, add_generation_prompt, extra_);
    } catch (const Error& e) {
        throw bad_request(std::string("the chat template rejected the messages: ") + e.what(),
                          "template_error");
    }
}

std::vector<int32_t> PromptBuilder::tokens(const CompletionRequest& r) const {
    if (r.endpoint == Endpoint::Chat) return tok_.encode(render(r.messages, true), false, true);
    if (r.prompt_ids) return *r.prompt_ids;
    return tok_.encode(r.prompt, true, true);
}

}  // namespace minfer::server
