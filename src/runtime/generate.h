// The generation loop: prefill the prompt (logits of the last token only), then decode one token at a
// time until n_predict, end of generation, a stop string, or the end of the context.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace minfer {

struct GenerateParams {
    int64_t n_predict = 128;
    bool ignore_eos = false;  // end of generation does not stop (it is not banned either)
    bool special = false;     // the text shows control tokens (<|im_end|>, ...), as llama.cpp's --special
    SamplerParams sampling;
    std::vector<std::string> stop;      // stop strings: generation ends when the text contains one
    std::function<bool()> should_stop;  // polled before each token (e.g. Ctrl-C); empty: never
};

struct GenerateResult {
    std::vector<int32_t> ids;  // generated tokens, without the end-of-generation token that stopped
    std::string text;          // their text, cut before a stop string
    double prefill_s = 0, decode_s = 0;
    bool hit_context_limit = false;
};

// `prompt` is forwarded from the session's current n_past, so a caller holding a conversation in the KV
// cache passes only the new tokens. `sampler` sees the prompt and the generated tokens (its penalty
// window and random state carry over between calls); the overload without it uses a fresh one.
GenerateResult generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& gp, Sampler& sampler,
                        const std::function<void(std::string_view)>& on_text = {});
GenerateResult generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& gp, const std::function<void(std::string_view)>& on_text = {});

}  // namespace minfer
