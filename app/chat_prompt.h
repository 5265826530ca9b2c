// Chat prompts for run --chat and chat: a conversation rendered with the model's chat template
// (tokenizer.chat_template) and tokenized with its control tokens recognised.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace minfer {

class GgufFile;
class Tokenizer;

// {"role": role, "content": content}
nlohmann::ordered_json chat_message(const std::string& role, const std::string& content);

class ChatPrompt {
  public:
    // Reads the template from `f`; throws Error when the model has none.
    ChatPrompt(const GgufFile& f, const Tokenizer& tok);

    // The template applied to `messages`, with bos_token and eos_token set from the vocabulary.
    std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
    // render() tokenized with parse_special and without an added BOS: templates write BOS themselves.
    std::vector<int32_t> encode(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;

  private:
    const Tokenizer& tok_;
    std::string tmpl_;
    nlohmann::ordered_json extra_;  // bos_token, eos_token
};

}  // namespace minfer
