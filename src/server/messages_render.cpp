#include "server/messages_render.h"

#include <httplib.h>

#include <random>

#include "server/messages.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;

// JSON text with invalid UTF-8 replaced, so rendering never throws; keys in the order they were set.
std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// "event: NAME\ndata: {"type": NAME, ...}\n\n": each event's data names its own type, as Anthropic's do.
std::string event(const char* name, const json& fields) {
    json j = {{"type", name}};
    for (const auto& [k, v] : fields.items()) j[k] = v;
    return std::string("event: ") + name + "\ndata: " + dump(j) + "\n\n";
}

std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
    return id;
}

// The parser's "call_X" as Anthropic spells tool-use ids: "toolu_X".
std::string anthropic_tool_id(const std::string& id) {
    return "toolu_" + (id.rfind("call_", 0) == 0 ? id.substr(5) : id);
}

// A call's arguments as tool_use input, an object: arguments cut short (max_tokens) give {}.
json tool_input(const std::string& arguments) {
    json v = json::parse(arguments, nullptr, false);
    return v.is_object() ? v : json::object();
}

// Anthropic counts prompt tokens read from the cache apart from input_tokens.
json usage_json(const GenerationResult& r) {
    return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
            {"output_tokens", int64_t(r.ids.size())},
            {"cache_read_input_tokens", r.cached_tokens}};
}

struct StopInfo {
    const char* reason;
    json sequence;  // the stop sequence met, or null
};

// The stop sequence that ended the answer: the text is cut before it, the tokens still spell it.
json stop_sequence_met(const MessageMeta& m, const GenerationResult& r) {
    if (m.stop_sequences.empty()) return nullptr;
    std::string spelled;
    for (const int32_t id : r.ids)
        if (!m.tok->is_special(id)) spelled += m.tok->token_to_bytes(id);
    if (spelled.size() <= r.text.size() || spelled.compare(0, r.text.size(), r.text) != 0) return nullptr;
    const std::string_view rest = std::string_view(spelled).substr(r.text.size());
    for (const std::string& s : m.stop_sequences)
        if (rest.substr(0, s.size()) == s) return s;
    return nullptr;
}

// max_tokens (also a choice cut short by shutdown), tool_use, stop_sequence or end_turn.
StopInfo stop_of(const MessageMeta& m, const ChatAnswer& a) {
    if (a.result.finish != FinishReason::Stop) return {"max_tokens", nullptr};
    if (a.called_tools) return {"tool_use", nullptr};
    json met = stop_sequence_met(m, a.result);
    if (!met.is_null()) return {"stop_sequence", std::move(met)};
    return {"end_turn", nullptr};
}

const char* error_type(int status) {
    switch (status) {
        case 400:
            return "invalid_request_error";
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
            return "overloaded_error";
        default:
            return status < 500 ? "invalid_request_error" : "api_error";
    }
}

// The blocks of one streamed message, opened and stopped in order.
class MessageStream final : public ChatStreamWriter {
  public:
    explicit MessageStream(MessageMeta m) : m_(std::move(m)) {}

    std::string begin(int64_t prompt_tokens) override {
        const json message = {{"id", m_.id},
                              {"type", "message"},
                              {"role", "assistant"},
                              {"model", m_.model},
                              {"content", json::array()},
                              {"stop_reason", nullptr},
                              {"stop_sequence", nullptr},
                              {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
        return event("message_start", {{"message", message}});
    }

    std::string parts(const ChatDelta& d) override {
        std::string out;
        if (!d.reasoning.empty())
            out += open(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}) +
                   delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
        if (!d.content.empty())
            out += open(Block::Text, {{"type", "text"}, {"text", ""}}) +
                   delta({{"type", "text_delta"}, {"text", d.content}});
        for (const ToolCallDelta& t : d.tool_calls) {
            if (!t.id.empty())
                out += open(Block::ToolUse, {{"type", "tool_use"},
                                             {"id", anthropic_tool_id(t.id)},
                                             {"name", t.name},
                                             {"input", json::object()}});
            if (!t.arguments.empty())
                out += delta({{"type", "input_json_delta"}, {"partial_json", t.arguments}});
        }
        return out;
    }

    std::string end(const ChatAnswer& a) override {
        StopInfo s = stop_of(m_, a);
        return close() +
               event("message_delta",
                     {{"delta", {{"stop_reason", s.reason}, {"stop_sequence", std::move(s.sequence)}}},
                      {"usage", usage_json(a.result)}}) +
               event("message_stop", json::object());
    }

    // Anthropic's error event; the SDKs throw it as the typed error of its type.
    std::string fail(const ApiError& e) override {
        return "event: error\ndata: " + anthropic_error_json(e) + "\n\n";
    }

  private:
    enum class Block { None, Thinking, Text, ToolUse };

    // A block of `kind`, opened unless it is the open one (every tool_use is a block of its own).
    std::string open(Block kind, const json& start) {
        if (kind == open_ && kind != Block::ToolUse) return "";
        std::string out = close();
        open_ = kind;
        return out + event("content_block_start", {{"index", index_}, {"content_block", start}});
    }
    std::string close() {
        if (open_ == Block::None) return "";
        open_ = Block::None;
        return event("content_block_stop", {{"index", index_++}});
    }
    std::string delta(const json& d) const {
        return event("content_block_delta", {{"index", index_}, {"delta", d}});
    }

    MessageMeta m_;
    Block open_ = Block::None;
    size_t index_ = 0;  // the open block's, or the next one's
};

}  // namespace

bool anthropic_route(const std::string& path) {
    return path == "/v1/messages";
}

std::string anthropic_error_json(const ApiError& e) {
    return dump({{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", e.what()}}}});
}

void send_anthropic_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503 || e.status == 429) res.set_header("Retry-After", "1");
    res.set_content(anthropic_error_json(e), "application/json");
}

void anthropic_guarded(httplib::Response& res, const std::function<void()>& fn) {
    try {
        fn();
    } catch (const ApiError& e) {
        send_anthropic_error(res, e);
    } catch (const Error& e) {
        send_anthropic_error(res, bad_request(e.what()));
    } catch (const nlohmann::json::exception& e) {
        send_anthropic_error(res, bad_request(e.what()));
    } catch (const std::exception& e) {
        send_anthropic_error(res, {500, "server_error", "internal_error", e.what()});
    }
}

MessageMeta make_message_meta(const std::string& model, const Tokenizer& tok,
                              std::vector<std::string> stops) {
    return {random_id("msg_"), model, &tok, std::move(stops)};
}

json message_json(const MessageMeta& m, const ChatAnswer& a) {
    json content = json::array();
    const ChatDelta& d = a.parts;
    if (!d.reasoning.empty())
        content.push_back({{"type", "thinking"}, {"thinking", d.reasoning}, {"signature", ""}});
    if (!d.content.empty()) content.push_back({{"type", "text"}, {"text", d.content}});
    for (const ToolCallDelta& t : d.tool_calls)
        content.push_back({{"type", "tool_use"},
                           {"id", anthropic_tool_id(t.id)},
                           {"name", t.name},
                           {"input", tool_input(t.arguments)}});
    StopInfo s = stop_of(m, a);
    return {{"id", m.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", m.model},
            {"content", std::move(content)},
            {"stop_reason", s.reason},
            {"stop_sequence", std::move(s.sequence)},
            {"usage", usage_json(a.result)}};
}

std::shared_ptr<ChatStreamWriter> message_stream_writer(MessageMeta m) {
    return std::make_shared<MessageStream>(std::move(m));
}

}  // namespace minfer::server
