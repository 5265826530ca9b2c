// libFuzzer target: BPE (Qwen2, Llama-3) and SPM (llama) encode and decode on arbitrary text, special
// tokens included, and decode of arbitrary token ids. The vocabularies are the shared test models
// ($MINFER_TEST_DATA/models, default ../shared); without them every input is skipped.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

std::vector<std::unique_ptr<minfer::Tokenizer>> load_tokenizers() {
    const char* env = std::getenv("MINFER_TEST_DATA");
    const std::string dir =
        (env && *env ? std::string(env) : std::string(MINFER_SOURCE_DIR) + "/../shared") + "/models/";
    std::vector<std::unique_ptr<minfer::Tokenizer>> out;
    for (const char* name : {"qwen-vocab.gguf", "llama3-vocab.gguf", "stories260K.gguf"}) {
        try {
            out.push_back(minfer::Tokenizer::from_gguf(*minfer::GgufFile::open(dir + name)));
        } catch (const minfer::Error&) {
        }
    }
    return out;
}

void check_ids(const minfer::Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
        if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
}

}  // namespace

// Byte 0 picks the tokenizer and the flags; the rest is the text, and also read as token ids.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const auto tokenizers = load_tokenizers();
    if (tokenizers.empty() || size == 0) return 0;
    const minfer::Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
    const bool parse_special = (data[0] >> 4) & 1, add_bos = (data[0] >> 5) & 1;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        const std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
        check_ids(tok, ids);
        tok.decode(ids);
        std::vector<int32_t> raw;
        for (size_t i = 0; i + 4 <= text.size(); i += 4) {
            uint32_t v = 0;
            std::memcpy(&v, text.data() + i, 4);
            raw.push_back(int32_t(v % uint32_t(tok.n_vocab())));
        }
        tok.decode(raw);
        for (int32_t id : raw) tok.token_to_bytes(id);
    } catch (const minfer::Error&) {
    }
    return 0;
}
