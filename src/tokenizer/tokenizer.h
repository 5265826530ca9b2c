// Text <-> token ids from what the GGUF carries: byte-level BPE (tokenizer.ggml.model = "gpt2") with the
// pre-tokenizer named by tokenizer.ggml.pre, and SentencePiece BPE (tokenizer.ggml.model = "llama").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace minfer {

class GgufFile;

class Tokenizer {
  public:
    // Reads the vocabulary from `f`; throws Error naming the file when it is missing or unsupported.
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
    virtual ~Tokenizer() = default;

    // add_bos: prepend BOS when the vocabulary asks for it (tokenizer.ggml.add_bos_token).
    // parse_special: recognise control tokens (<|im_start|>, <s>, ...) written in the text; when false they
    // are plain text. User-defined added tokens (<think>, <tool_call>, ...) are always recognised, as in HF
    // tokenizers and llama.cpp.
    // Invalid UTF-8 in `text` is replaced with U+FFFD, never a crash.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const = 0;
    // Bytes of one token as it appears in text (byte-level/byte-fallback decoded, ▁ -> space).
    virtual std::string token_to_bytes(int32_t id) const = 0;
    // Concatenated token bytes; invalid UTF-8 in the result is replaced with U+FFFD.
    std::string decode(const std::vector<int32_t>& ids) const;

    virtual int32_t n_vocab() const = 0;
    virtual const std::string& token_text(int32_t id) const = 0;  // the vocabulary string, as stored
    virtual int32_t bos_id() const = 0;                           // -1 when none
    virtual int32_t eos_id() const = 0;                           // -1 when none
    virtual bool is_eog(int32_t id) const = 0;  // end of generation: eos, eot, <|im_end|>, ...
    // Control and unused tokens (<|im_end|>, <|endoftext|>, padding): no text in a generation's output,
    // as llama.cpp renders them without --special and vLLM with skip_special_tokens.
    virtual bool is_special(int32_t id) const = 0;
};

// Turns a token stream into text without ever emitting half a UTF-8 character: feed() returns the
// complete characters available so far; flush() returns what is left (invalid tails as U+FFFD).
// skip_special: special tokens (Tokenizer::is_special) add no text.
class StreamDecoder {
  public:
    StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}
    std::string feed(int32_t id);
    std::string flush();

  private:
    const Tokenizer& tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace minfer
