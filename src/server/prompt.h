// Prompts of the served model: chat messages rendered with the GGUF's chat template
// (tokenizer.chat_template) and tokenized with control tokens recognised, as `minfer run --chat` does;
// completion prompts tokenized as `minfer run -p` does (BOS when the vocabulary asks). Tools go to the
// template as its `tools` variable when it renders them, otherwise into the messages (tool_prompt.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/constraint.h"
#include "server/chat_output.h"

namespace minfer {
class GgufFile;
class Tokenizer;
}  // namespace minfer

namespace minfer::server {

struct CompletionRequest;

// A request's prompt and what its answer's text will look like.
struct PreparedPrompt {
    std::vector<int32_t> tokens;
    std::string text;          // chat: the rendered prompt the tokens spell
    ChatSyntax syntax;         // chat: how to split the answer
    bool parse_tools = false;  // chat: tools were offered
    // Chat with a forced call (tool_choice required or named): the start of the answer, written into the
    // prompt so the model continues it; the parser reads it before the generated text.
    std::string forced;
    GrammarSpec grammar;  // what the answer must be: response_format, or a forced call's JSON
};

class PromptBuilder {
  public:
    // chat_template: replaces the GGUF's when not empty (serve --chat-template-file).
    PromptBuilder(const GgufFile& f, const Tokenizer& tok, const std::string& chat_template = "");

    // The template applied to `messages`; throws ApiError (400) when the model has no template or the
    // template rejects the conversation (raise_exception).
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) const;
    // The request's prompt: rendered messages (with tools, the template's variables and a forced call's
    // start), the prompt text or the given ids.
    PreparedPrompt prepare(const CompletionRequest& r) const;
    const Tokenizer& tokenizer() const { return tok_; }

  private:
    const Tokenizer& tok_;
    std::optional<std::string> tmpl_;
    ChatSyntax syntax_;
    nlohmann::ordered_json extra_;  // bos_token, eos_token
};

}  // namespace minfer::server
