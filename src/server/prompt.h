// Prompts of the served model: chat messages rendered with the GGUF's chat template
// (tokenizer.chat_template) and tokenized with control tokens recognised, as `minfer run --chat` does;
// completion prompts tokenized as `minfer run -p` does (BOS when the vocabulary asks).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace minfer {
class GgufFile;
class Tokenizer;
}  // namespace minfer

namespace minfer::server {

struct CompletionRequest;

class PromptBuilder {
  public:
    PromptBuilder(const GgufFile& f, const Tokenizer& tok);

    // The template applied to `messages`; throws ApiError (400) when the model has no template or the
    // template rejects the conversation (raise_exception).
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
    // The request's prompt tokens: rendered messages, the prompt text or the given ids.
    std::vector<int32_t> tokens(const CompletionRequest& r) const;
    const Tokenizer& tokenizer() const { return tok_; }

  private:
    const Tokenizer& tok_;
    std::optional<std::string> tmpl_;
    nlohmann::ordered_json extra_;  // bos_token, eos_token
};

}  // namespace minfer::server
