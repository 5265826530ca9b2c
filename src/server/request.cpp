#include "server/request.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"
#include "server/request_parts.h"
#include "server/structured.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;

double number_in(const json& body, const char* name, double lo, double hi, double dflt) {
    const json* v = field(body, name);
    if (!v) return dflt;
    if (!v->is_number()) throw wrong_type(name, "a number", *v);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        throw bad_request("'" + std::string(name) + "' must be between " + json(lo).dump() + " and " +
                          json(hi).dump() + ", got " + v->dump());
    return x;
}

std::optional<int64_t> integer_in(const json& body, const char* name, int64_t lo, int64_t hi) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() &&
        !(v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>()))
        throw wrong_type(name, "an integer", *v);
    const double as_double = v->get<double>();
    if (as_double < double(lo) || as_double > double(hi))
        throw bad_request("'" + std::string(name) + "' must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + ", got " + v->dump());
    return v->is_number_unsigned() ? int64_t(v->get<uint64_t>()) : v->get<int64_t>();
}

// stop: a string or a list of at most 16 non-empty strings.
std::vector<std::string> stop_strings(const json& body) {
    const json* v = field(body, "stop");
    if (!v) return {};
    if (v->is_string())
        return v->get<std::string>().empty() ? std::vector<std::string>{}
                                             : std::vector<std::string>{v->get<std::string>()};
    if (!v->is_array()) throw wrong_type("stop", "a string or an array of strings", *v);
    if (v->size() > 16)
        throw bad_request("'stop' holds at most 16 strings, got " + std::to_string(v->size()));
    std::vector<std::string> out;
    for (const json& s : *v) {
        if (!s.is_string()) throw wrong_type("stop[]", "a string", s);
        if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
    }
    return out;
}

// prompt: a string, a one-string array, or an array of token ids.
void completion_prompt(const json& body, CompletionRequest& r) {
    const json* v = field(body, "prompt");
    if (!v) throw bad_request("'prompt' is required", "missing_required_parameter");
    if (v->is_string()) {
        r.prompt = v->get<std::string>();
        return;
    }
    if (!v->is_array()) throw wrong_type("prompt", "a string or an array of token ids", *v);
    if (v->size() == 1 && (*v)[0].is_string()) {
        r.prompt = (*v)[0].get<std::string>();
        return;
    }
    std::vector<int32_t> ids;
    for (const json& t : *v) {
        if (!t.is_number_integer())
            throw bad_request("'prompt' as an array must hold token ids (one string at most)");
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
            throw bad_request("'prompt' holds token id " + t.dump() + ", out of range");
        ids.push_back(int32_t(id));
    }
    r.prompt_ids = std::move(ids);
}

void sampling(const json& body, CompletionRequest& r) {
    SamplerParams& s = r.gen.sampling;
    s.temp = float(number_in(body, "temperature", 0, 2, s.temp));
    s.top_p = float(number_in(body, "top_p", 0, 1, s.top_p));
    s.min_p = float(number_in(body, "min_p", 0, 1, s.min_p));
    s.top_k = int32_t(integer_in(body, "top_k", 0, 1 << 30).value_or(s.top_k));
    s.presence_penalty = float(number_in(body, "presence_penalty", -2, 2, s.presence_penalty));
    s.frequency_penalty = float(number_in(body, "frequency_penalty", -2, 2, s.frequency_penalty));
    s.repeat_penalty = float(number_in(body, "repeat_penalty", 0, 100, s.repeat_penalty));
    if (const auto seed = integer_in(body, "seed", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max())) {
        s.seed = uint64_t(*seed);
        r.seed_given = true;
    }
}

// Chat asks with {"logprobs": true, "top_logprobs": 0..20}; completions with "logprobs": 0..20, the
// number of alternatives (OpenAI's legacy API).
int logprobs(const json& body, Endpoint endpoint) {
    if (endpoint == Endpoint::Completion) {
        if (const json* v = field(body, "logprobs"); v && v->is_boolean()) return v->get<bool>() ? 0 : -1;
        return int(integer_in(body, "logprobs", 0, 20).value_or(-1));
    }
    const bool on = boolean(body, "logprobs", false);
    const std::optional<int64_t> top = integer_in(body, "top_logprobs", 0, 20);
    if (top && !on) throw bad_request("'top_logprobs' needs 'logprobs': true");
    return on ? int(top.value_or(0)) : -1;
}

}  // namespace

json parse_json_object(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded())
        throw bad_request("the body is not valid JSON (or not valid UTF-8)", "invalid_json");
    if (!j.is_object())
        throw bad_request("the body must be a JSON object, not " + std::string(type_name(j)), "invalid_json");
    return j;
}

CompletionRequest parse_completion_request(const std::string& text, Endpoint endpoint,
                                           const ParseLimits& lim) {
    const json body = parse_json_object(text);
    CompletionRequest r;
    r.endpoint = endpoint;
    if (const json* m = field(body, "model")) {
        if (!m->is_string()) throw wrong_type("model", "a string", *m);
        r.model = m->get<std::string>();
    }
    if (endpoint == Endpoint::Chat)
        chat_request(body, r);
    else
        completion_prompt(body, r);
    r.logprobs = logprobs(body, endpoint);
    sampling(body, r);
    const char* max_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    r.max_tokens = integer_in(body, max_name, 1, std::numeric_limits<int64_t>::max());
    if (r.max_tokens && *r.max_tokens > lim.n_ctx)
        throw bad_request("'" + std::string(max_name) + "' is " + std::to_string(*r.max_tokens) +
                          "; the context holds " + std::to_string(lim.n_ctx) + " tokens");
    r.n = int(integer_in(body, "n", 1, lim.max_n).value_or(1));
    r.gen.stop = stop_strings(body);
    r.gen.ignore_eos = boolean(body, "ignore_eos", false);
    r.format = response_format_grammar(body);
    r.stream = boolean(body, "stream", false);
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
        r.include_usage = boolean(*so, "include_usage", false);
    }
    return r;
}

}  // namespace minfer::server
