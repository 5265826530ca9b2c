#include "tokenizer/tokenizer.h"

#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace minfer {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
    if (!f.has("tokenizer.ggml.model"))
        throw Error(f.path() + ": no tokenizer in the file (tokenizer.ggml.model is missing)");
    const std::string model = f.get_str("tokenizer.ggml.model");
    if (model == "gpt2") return std::make_unique<BpeTokenizer>(f);
    if (model == "llama") return std::make_unique<SpmTokenizer>(f);
    throw Error(f.path() + ": unsupported tokenizer.ggml.model = '" + model + "' (supported: gpt2, llama)");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string bytes;
    for (const int32_t id : ids) bytes += token_to_bytes(id);
    return unicode::sanitize_utf8(bytes);
}

}  // namespace minfer
