#include "server/embeddings.h"

#include <httplib.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "gguf/gguf.h"
#include "runtime/embed.h"
#include "server/api_error.h"
#include "server/completions.h"
#include "server/engine_loop.h"
#include "server/http.h"
#include "server/request.h"
#include "server/request_parts.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

struct EmbeddingsRequest {
    std::vector<std::vector<int32_t>> inputs;  // token ids, one list per input
    bool base64 = false;
};

// How a request's text becomes tokens: as a completion prompt, plus EOS when the GGUF asks for it.
struct TextTokenizer {
    const Tokenizer& tok;
    bool add_eos;

    std::vector<int32_t> operator()(const json& text, const std::string& name) const {
        const std::string& s = text.get_ref<const std::string&>();
        if (s.empty()) throw bad_request("'" + name + "' is an empty string; embeddings need some text");
        std::vector<int32_t> ids = tok.encode(s, true, true);
        if (add_eos && tok.eos_id() >= 0) ids.push_back(tok.eos_id());
        return ids;
    }
};

// An array of token ids, each in [0, n_vocab).
std::vector<int32_t> token_ids(const json& arr, const std::string& name, int64_t n_vocab) {
    if (arr.empty()) throw bad_request("'" + name + "' is an empty array of token ids");
    std::vector<int32_t> ids;
    for (const json& t : arr) {
        if (!t.is_number_integer())
            throw bad_request("'" + name + "' must hold token ids (integers), not " + type_name(t),
                              "invalid_type");
        const bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(n_vocab)
                                                     : t.get<int64_t>() >= 0 && t.get<int64_t>() < n_vocab;
        if (!in_range)
            throw bad_request("'" + name + "' holds token id " + t.dump() + ", out of range [0, " +
                              std::to_string(n_vocab) + ")");
        ids.push_back(t.get<int32_t>());
    }
    return ids;
}

// input: a string, an array of strings, an array of token ids, or an array of arrays of token ids.
std::vector<std::vector<int32_t>> inputs(const json& body, const TextTokenizer& text, int64_t n_vocab) {
    const json* v = field(body, "input");
    if (!v) throw bad_request("'input' is required", "missing_required_parameter");
    if (v->is_string()) return {text(*v, "input")};
    constexpr const char* kWant =
        "a string, an array of strings or token ids, or an array of token-id arrays";
    if (!v->is_array()) throw wrong_type("input", kWant, *v);
    if (v->empty()) throw bad_request("'input' is an empty array");
    if (v->size() > kMaxInputs)
        throw bad_request("'input' holds " + std::to_string(v->size()) + " inputs; at most " +
                          std::to_string(kMaxInputs) + " are allowed");
    if ((*v)[0].is_number()) return {token_ids(*v, "input", n_vocab)};
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < v->size(); ++i) {
        const json& e = (*v)[i];
        const std::string name = "input[" + std::to_string(i) + "]";
        if (e.is_string())
            out.push_back(text(e, name));
        else if (e.is_array())
            out.push_back(token_ids(e, name, n_vocab));
        else
            throw wrong_type(name, "a string or an array of token ids", e);
    }
    return out;
}

EmbeddingsRequest parse_request(const std::string& text, const EmbeddingsContext& ctx) {
    const json body = parse_json_object(text);
    const Model& m = ctx.loop.model();
    if (const json* v = field(body, "model"); v && !v->is_string()) throw wrong_type("model", "a string", *v);
    EmbeddingsRequest r;
    if (const json* v = field(body, "encoding_format")) {
        if (!v->is_string() || (*v != "float" && *v != "base64"))
            throw bad_request("'encoding_format' must be \"float\" or \"base64\", not " + v->dump());
        r.base64 = *v == "base64";
    }
    if (const json* v = field(body, "dimensions")) {
        if (!v->is_number_integer()) throw wrong_type("dimensions", "an integer", *v);
        if (v->get<int64_t>() != m.hp.n_embd)
            throw bad_request("'dimensions' is " + v->dump() + ", but this model's embeddings have " +
                              std::to_string(m.hp.n_embd) + " (minfer does not shorten them)");
    }
    const bool add_eos =
        m.file->has("tokenizer.ggml.add_eos_token") && m.file->get_bool("tokenizer.ggml.add_eos_token");
    r.inputs = inputs(body, {ctx.tok, add_eos}, m.hp.n_vocab);
    for (size_t i = 0; i < r.inputs.size(); ++i)
        if (int64_t(r.inputs[i].size()) > ctx.loop.n_ctx())
            throw bad_request("'input" + (r.inputs.size() > 1 ? "[" + std::to_string(i) + "]" : "") +
                              "' has " + std::to_string(r.inputs[i].size()) + " tokens; the context holds " +
                              std::to_string(ctx.loop.n_ctx()));
    return r;
}

// Standard base64 with padding, of the vector's float32 bytes in the host's (little-endian) order.
std::string base64_floats(const std::vector<float>& v) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::vector<unsigned char> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    std::string out;
    out.reserve((b.size() + 2) / 3 * 4);
    for (size_t i = 0; i < b.size(); i += 3) {
        const size_t n = std::min<size_t>(3, b.size() - i);
        const uint32_t w =
            uint32_t(b[i]) << 16 | (n > 1 ? uint32_t(b[i + 1]) << 8 : 0) | (n > 2 ? b[i + 2] : 0);
        for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(w >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

}  // namespace

void handle_embeddings(const EmbeddingsContext& ctx, const httplib::Request& req, httplib::Response& res) {
    const Pooling pooling = embedding_pooling(ctx.pooling, ctx.loop.model().hp);
    if (!pools_to_vector(pooling))
        throw bad_request(std::string("this model's pooling type is '") + pooling_name(pooling) + "' (" +
                              ctx.loop.model().hp.arch +
                              ".pooling_type), which gives no single vector per input; start minfer serve "
                              "with --pooling mean, last or cls",
                          "unsupported_pooling");
    EmbeddingsRequest r = parse_request(req.body, ctx);
    int64_t n_tokens = 0;
    for (const std::vector<int32_t>& ids : r.inputs) n_tokens += int64_t(ids.size());
    request_tokens().prompt = n_tokens;
    const std::vector<std::vector<float>> vectors = ctx.loop.embed(std::move(r.inputs), pooling);
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < vectors.size(); ++i)
        data.push_back({{"object", "embedding"},
                        {"index", i},
                        {"embedding",
                         r.base64 ? nlohmann::json(base64_floats(vectors[i])) : nlohmann::json(vectors[i])}});
    const nlohmann::json out = {{"object", "list"},
                                {"data", std::move(data)},
                                {"model", ctx.model_name},
                                {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
    res.set_content(dump(out), "application/json");
}

}  // namespace minfer::server
