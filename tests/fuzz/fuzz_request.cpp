// libFuzzer target: the server's request parsing (src/server/request.cpp: a body as JSON, then every
// field of /v1/chat/completions or /v1/completions checked), and for a chat request that parses, its
// messages rendered with the model's chat template and tokenized (server/prompt.cpp), as a handler
// does. Bit 0 of byte 0 picks the endpoint (odd: chat), bit 1 the model (the embedded Qwen2 model, or
// the shared Llama-3 vocabulary when present); the rest is the body. An ApiError is the expected
// rejection; anything else (a crash, a sanitizer report, another exception, a parsed request outside
// the limits) is a finding.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/prompt.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using minfer::server::CompletionRequest;
using minfer::server::Endpoint;

constexpr minfer::server::ParseLimits kLimits{512, 4};

struct Model {
    std::unique_ptr<minfer::GgufFile> file;
    std::unique_ptr<minfer::Tokenizer> tok;
    std::unique_ptr<minfer::server::PromptBuilder> prompt;
};

std::vector<Model> load_models() {
    std::vector<Model> out;
    for (const std::string& path : {std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf",
                                    std::string(MINFER_SOURCE_DIR) + "/../shared/models/llama3-vocab.gguf"}) {
        try {
            Model m;
            m.file = minfer::GgufFile::open(path);
            m.tok = minfer::Tokenizer::from_gguf(*m.file);
            m.prompt = std::make_unique<minfer::server::PromptBuilder>(*m.file, *m.tok);
            out.push_back(std::move(m));
        } catch (const minfer::Error&) {
        }
    }
    return out;
}

// What a request that parsed promises the handlers.
void check(const CompletionRequest& r) {
    const bool ok = r.n >= 1 && r.n <= kLimits.max_n && r.logprobs >= -1 && r.logprobs <= 20 &&
                    (!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= kLimits.n_ctx)) &&
                    r.gen.stop.size() <= 16 && (r.endpoint != Endpoint::Chat || !r.messages.empty());
    if (!ok) __builtin_trap();
    for (const std::string& s : r.gen.stop)
        if (s.empty()) __builtin_trap();
}

}  // namespace

const std::vector<Model>& models() {
    static const std::vector<Model> m = load_models();
    return m;
}

// libFuzzer calls this before the first input, so that loading the vocabularies (seconds under ASan)
// does not count against the first input's timeout; the ctest replay loads them on first use.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    models();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (models().empty() || size == 0) return 0;
    const Endpoint endpoint = data[0] & 1 ? Endpoint::Chat : Endpoint::Completion;
    const Model& model = models()[size_t(data[0] >> 1 & 1) % models().size()];
    const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        const CompletionRequest r = minfer::server::parse_completion_request(body, endpoint, kLimits);
        check(r);
        for (int32_t id : model.prompt->prepare(r).tokens)
            if (endpoint == Endpoint::Chat && (id < 0 || id >= model.tok->n_vocab())) __builtin_trap();
    } catch (const minfer::server::ApiError& e) {
        if (e.status != 400) __builtin_trap();
    }
    return 0;
}
