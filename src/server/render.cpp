#include "server/render.h"

#include <atomic>
#include <chrono>
#include <random>

#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

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

json bytes_of(const std::string& s) {
    json out = json::array();
    for (const char c : s) out.push_back(int(static_cast<unsigned char>(c)));
    return out;
}

json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lp) {
    auto entry = [&](int32_t id, float logprob) {
        const std::string t = tok.token_to_bytes(id);
        return json{{"token", t}, {"logprob", logprob}, {"bytes", bytes_of(t)}};
    };
    json content = json::array();
    for (const TokenLogprob& t : lp) {
        json e = entry(t.id, t.logprob);
        e["top_logprobs"] = json::array();
        for (const auto& [id, logprob] : t.top) e["top_logprobs"].push_back(entry(id, logprob));
        content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lp, size_t& offset) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    for (const TokenLogprob& t : lp) {
        const std::string text = tok.token_to_bytes(t.id);
        tokens.push_back(text);
        token_logprobs.push_back(t.logprob);
        json alternatives = json::object();
        for (const auto& [id, logprob] : t.top) alternatives[tok.token_to_bytes(id)] = logprob;
        top.push_back(std::move(alternatives));
        offsets.push_back(offset);
        offset += text.size();
    }
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
}

// delta.tool_calls as OpenAI streams them: a call's first piece with its id, type and name, the
// arguments in later pieces under the same index.
json tool_call_deltas(const std::vector<ToolCallDelta>& calls) {
    json out = json::array();
    for (const ToolCallDelta& t : calls) {
        json c = {{"index", t.index}};
        if (!t.id.empty()) {
            c["id"] = t.id;
            c["type"] = "function";
            c["function"] = {{"name", t.name}, {"arguments", t.arguments}};
        } else {
            c["function"] = {{"arguments", t.arguments}};
        }
        out.push_back(std::move(c));
    }
    return out;
}

json chat_delta_json(const Delta& d) {
    json delta = json::object();
    if (d.role) delta["role"] = "assistant";
    if (d.role || !d.chat.content.empty()) delta["content"] = d.chat.content;
    if (!d.chat.reasoning.empty()) delta["reasoning_content"] = delta["reasoning"] = d.chat.reasoning;
    if (!d.chat.tool_calls.empty()) delta["tool_calls"] = tool_call_deltas(d.chat.tool_calls);
    return delta;
}

}  // namespace

ResponseMeta make_meta(Endpoint endpoint, const std::string& model) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return {endpoint, random_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-"), model,
            std::chrono::duration_cast<std::chrono::seconds>(now).count()};
}

json logprobs_json(const ResponseMeta& m, const std::vector<TokenLogprob>& lp, size_t& offset) {
    if (!m.tok) return nullptr;
    return m.endpoint == Endpoint::Chat ? chat_logprobs(*m.tok, lp) : completion_logprobs(*m.tok, lp, offset);
}

const char* finish_name(FinishReason r, bool called_tools) {
    if (r != FinishReason::Stop) return "length";
    return called_tools ? "tool_calls" : "stop";
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

json chat_message_json(const ChatDelta& a) {
    json msg = {{"role", "assistant"},
                {"content", a.content.empty() && !a.tool_calls.empty() ? json(nullptr) : json(a.content)}};
    if (!a.reasoning.empty()) msg["reasoning_content"] = msg["reasoning"] = a.reasoning;
    if (a.tool_calls.empty()) return msg;
    msg["tool_calls"] = json::array();
    for (const ToolCallDelta& t : a.tool_calls)
        msg["tool_calls"].push_back({{"id", t.id},
                                     {"type", "function"},
                                     {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    return msg;
}

json completion_json(const ResponseMeta& m, const std::vector<GenerationResult>& results,
                     const std::vector<std::vector<TokenLogprob>>& logprobs,
                     const std::vector<ChatDelta>& answers) {
    json out = base(m, false);
    json choices = json::array();
    for (size_t i = 0; i < results.size(); ++i) {
        size_t offset = 0;
        json c = {{"index", i},
                  {"logprobs", i < logprobs.size() ? logprobs_json(m, logprobs[i], offset) : json(nullptr)},
                  {"finish_reason",
                   finish_name(results[i].finish, i < answers.size() && !answers[i].tool_calls.empty())}};
        if (m.endpoint == Endpoint::Chat)
            c["message"] = chat_message_json(answers.at(i));
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
    size_t offset = d.offset;
    json c = {{"index", d.index},
              {"logprobs", logprobs_json(m, d.logprobs, offset)},
              {"finish_reason", d.finish ? json(finish_name(*d.finish, d.called_tools)) : json(nullptr)}};
    if (m.endpoint == Endpoint::Chat) {
        c["delta"] = chat_delta_json(d);
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

std::string error_json(const ApiError& e) {
    return dump({{"error",
                  {{"message", e.what()},
                   {"type", e.type},
                   {"param", nullptr},
                   {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}});
}

}  // namespace minfer::server
