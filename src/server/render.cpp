#include "server/render.h"

#include <atomic>
#include <chrono>
#include <random>

#include "server/api_error.h"

namespace minfer::server {

using nlohmann::json;

namespace {

// 24 random hex digits after the prefix, like OpenAI's ids.
std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
    return id;
}

json base(const ResponseMeta& m, bool chunk) {
    const bool chat = m.endpoint == Endpoint::Chat;
    return {{"id", m.id},
            {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"system_fingerprint", "minfer"}};
}

}  // namespace

ResponseMeta make_meta(Endpoint endpoint, const std::string& model) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return {endpoint, random_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-"), model,
            std::chrono::duration_cast<std::chrono::seconds>(now).count()};
}

const char* finish_name(FinishReason r) {
    return r == FinishReason::Stop ? "stop" : "length";
}

json usage_json(const std::vector<GenerationResult>& results) {
    int64_t completion = 0;
    for (const GenerationResult& r : results) completion += int64_t(r.ids.size());
    const int64_t prompt = results.empty() ? 0 : results[0].prompt_tokens;
    const int64_t cached = results.empty() ? 0 : results[0].cached_tokens;
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json completion_json(const ResponseMeta& m, const std::vector<GenerationResult>& results) {
    json out = base(m, false);
    json choices = json::array();
    for (size_t i = 0; i < results.size(); ++i) {
        json c = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", finish_name(results[i].finish)}};
        if (m.endpoint == Endpoint::Chat)
            c["message"] = {{"role", "assistant"}, {"content", results[i].text}};
        else
            c["text"] = results[i].text;
        choices.push_back(std::move(c));
    }
    out["choices"] = std::move(choices);
    out["usage"] = usage_json(results);
    return out;
}

json chunk_json(const ResponseMeta& m, const Delta& d) {
    json out = base(m, true);
    json c = {{"index", d.index},
              {"logprobs", nullptr},
              {"finish_reason", d.finish ? json(finish_name(*d.finish)) : json(nullptr)}};
    if (m.endpoint == Endpoint::Chat) {
        json delta = json::object();
        if (d.role) delta["role"] = "assistant";
        if (d.role || !d.text.empty()) delta["content"] = d.text;
        c["delta"] = std::move(delta);
    } else {
        c["text"] = d.text;
    }
    out["choices"] = json::array({std::move(c)});
    return out;
}

json usage_chunk_json(const ResponseMeta& m, const std::vector<GenerationResult>& results) {
    json out = base(m, true);
    out["choices"] = json::array();
    out["usage"] = usage_json(results);
    return out;
}

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
    return "data: " + dump(j) + "\n\n";
}

std::string error_json(const ApiError& e) {
    return dump({{"error",
                  {{"message", e.what()},
                   {"type", e.type},
                   {"param", nullptr},
                   {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}});
}

}  // namespace minfer::server
