#include "server/messages.h"

#include <httplib.h>

#include <set>

#include "server/chat_run.h"
#include "server/engine_loop.h"
#include "server/messages_render.h"
#include "server/prompt.h"
#include "server/request_parts.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;

std::string indexed(const std::string& name, size_t i) {
    return name + "[" + std::to_string(i) + "]";
}

// obj[key] as a string; `where` names obj in the message ("" at the top level).
std::string string_at(const json& obj, const char* key, const std::string& where) {
    const std::string name = where.empty() ? key : where + "." + key;
    const json* v = field(obj, key);
    if (!v) throw bad_request("'" + name + "' is required", "missing_required_parameter");
    if (!v->is_string()) throw wrong_type(name, "a string", *v);
    return v->get<std::string>();
}

// A content block's type, the block checked to be an object.
std::string block_type(const json& b, const std::string& at) {
    if (!b.is_object()) throw wrong_type(at, "an object", b);
    return string_at(b, "type", at);
}

ApiError unsupported_block(const std::string& at, const std::string& type, const char* served) {
    return bad_request("'" + at + ".type' is '" + type + "'; " + served);
}

// The id the parser gave and the template sees: "toolu_X" is read as "call_X" (what minfer sent as
// toolu_X); any other id is kept as is.
std::string chat_tool_id(const std::string& id) {
    return id.rfind("toolu_", 0) == 0 ? "call_" + id.substr(6) : id;
}

// A string, or an array of {"type": "text", "text": STRING} blocks joined: system, tool_result content.
std::string text_of(const json& v, const std::string& name) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) throw wrong_type(name, "a string or an array of text blocks", v);
    std::string out;
    for (size_t j = 0; j < v.size(); ++j) {
        const std::string at = indexed(name, j);
        const std::string type = block_type(v[j], at);
        if (type != "text") throw unsupported_block(at, type, "only text blocks are served here");
        out += string_at(v[j], "text", at);
    }
    return out;
}

// The chat messages made so far and the ids of the tool_use blocks among them.
struct Conversation {
    json messages = json::array();
    std::set<std::string> call_ids;
};

// A tool_result block as a chat "tool" message answering an earlier tool_use.
json tool_result(const json& b, const std::string& at, const Conversation& c) {
    const std::string given = string_at(b, "tool_use_id", at), id = chat_tool_id(given);
    if (!c.call_ids.count(id))
        throw bad_request("'" + at + ".tool_use_id' is '" + given +
                              "', which no earlier assistant message's tool_use block holds",
                          "invalid_tool_use_id");
    const json* content = field(b, "content");
    std::string text = content ? text_of(*content, at + ".content") : "";
    if (const json* e = field(b, "is_error")) {
        if (!e->is_boolean()) throw wrong_type(at + ".is_error", "a boolean", *e);
        if (e->get<bool>()) text = "Error: " + text;  // templates have no field for it: the model reads it
    }
    return {{"role", "tool"}, {"tool_call_id", id}, {"content", text}};
}

// A user message's blocks: text joined into user messages, each tool_result a tool message, in order.
void user_message(const json& blocks, const std::string& name, Conversation& c) {
    std::string text;
    bool has_text = false;
    auto flush = [&] {
        if (has_text) c.messages.push_back({{"role", "user"}, {"content", std::exchange(text, {})}});
        has_text = false;
    };
    for (size_t j = 0; j < blocks.size(); ++j) {
        const std::string at = indexed(name + ".content", j);
        const std::string type = block_type(blocks[j], at);
        if (type == "text") {
            text += string_at(blocks[j], "text", at);
            has_text = true;
        } else if (type == "tool_result") {
            flush();
            c.messages.push_back(tool_result(blocks[j], at, c));
        } else {
            throw unsupported_block(at, type, "a user message holds text and tool_result blocks");
        }
    }
    flush();
}

json tool_use(const json& b, const std::string& at, Conversation& c) {
    const std::string id = chat_tool_id(string_at(b, "id", at)), name = string_at(b, "name", at);
    const json* input = field(b, "input");
    if (!input) throw bad_request("'" + at + ".input' is required", "missing_required_parameter");
    if (!input->is_object()) throw wrong_type(at + ".input", "an object", *input);
    c.call_ids.insert(id);
    return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", *input}}}};
}

// An assistant message's blocks: text joined, thinking as reasoning_content, tool_use as tool_calls.
void assistant_message(const json& blocks, const std::string& name, Conversation& c) {
    std::string text, reasoning;
    json calls = json::array();
    for (size_t j = 0; j < blocks.size(); ++j) {
        const std::string at = indexed(name + ".content", j);
        const std::string type = block_type(blocks[j], at);
        if (type == "text")
            text += string_at(blocks[j], "text", at);
        else if (type == "thinking")
            reasoning += string_at(blocks[j], "thinking", at);
        else if (type == "tool_use")
            calls.push_back(tool_use(blocks[j], at, c));
        else if (type != "redacted_thinking")  // opaque to any model but Anthropic's: left out
            throw unsupported_block(at, type,
                                    "an assistant message holds text, thinking and tool_use blocks");
    }
    json m = {{"role", "assistant"}, {"content", text}};
    if (!reasoning.empty()) m["reasoning_content"] = reasoning;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    c.messages.push_back(std::move(m));
}

void message(const json& m, const std::string& name, Conversation& c) {
    if (!m.is_object()) throw wrong_type(name, "an object", m);
    const std::string role = string_at(m, "role", name);
    if (role != "user" && role != "assistant")
        throw bad_request("'" + name + ".role' is '" + role + "'; expected user or assistant");
    const json* content = field(m, "content");
    if (!content) throw bad_request("'" + name + ".content' is required", "missing_required_parameter");
    if (content->is_string()) {
        c.messages.push_back({{"role", role}, {"content", *content}});
        return;
    }
    if (!content->is_array())
        throw wrong_type(name + ".content", "a string or an array of content blocks", *content);
    if (content->empty()) throw bad_request("'" + name + ".content' must hold at least one block");
    if (role == "user")
        user_message(*content, name, c);
    else
        assistant_message(*content, name, c);
}

// system, then the messages, as chat messages.
json chat_messages(const json& body) {
    Conversation c;
    if (const json* s = field(body, "system"))
        if (std::string text = text_of(*s, "system"); !text.empty())
            c.messages.push_back({{"role", "system"}, {"content", std::move(text)}});
    const json* v = field(body, "messages");
    if (!v) throw bad_request("'messages' is required", "missing_required_parameter");
    if (!v->is_array()) throw wrong_type("messages", "an array", *v);
    if (v->empty()) throw bad_request("'messages' must hold at least one message");
    for (size_t i = 0; i < v->size(); ++i) message((*v)[i], indexed("messages", i), c);
    return c.messages;
}

// tools: [{name, description?, input_schema}] as chat functions (custom tools only: Anthropic's server
// tools run on Anthropic's side).
json chat_tools(const json& v) {
    if (!v.is_array()) throw wrong_type("tools", "an array", v);
    json out = json::array();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string at = indexed("tools", i);
        const json& t = v[i];
        if (!t.is_object()) throw wrong_type(at, "an object", t);
        if (const json* type = field(t, "type"); type && *type != "custom")
            throw bad_request("'" + at + ".type' is " + type->dump() +
                              "; only custom tools {name, description, input_schema} are served");
        json fn = {{"name", string_at(t, "name", at)}};
        if (field(t, "description")) fn["description"] = string_at(t, "description", at);
        const json* schema = field(t, "input_schema");
        if (!schema) throw bad_request("'" + at + ".input_schema' is required", "missing_required_parameter");
        if (!schema->is_object()) throw wrong_type(at + ".input_schema", "a JSON schema object", *schema);
        fn["parameters"] = *schema;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return out;
}

// tool_choice {type: auto | any | tool | none, name, disable_parallel_tool_use} into the chat body.
void chat_tool_choice(const json& v, json& chat) {
    if (!v.is_object()) throw wrong_type("tool_choice", "an object", v);
    const std::string type = string_at(v, "type", "tool_choice");
    if (type == "auto" || type == "none")
        chat["tool_choice"] = type;
    else if (type == "any")
        chat["tool_choice"] = "required";
    else if (type == "tool")
        chat["tool_choice"] = {{"type", "function"},
                               {"function", {{"name", string_at(v, "name", "tool_choice")}}}};
    else
        throw bad_request("'tool_choice.type' is '" + type + "'; expected auto, any, tool or none");
    if (const json* d = field(v, "disable_parallel_tool_use")) {
        if (!d->is_boolean()) throw wrong_type("tool_choice.disable_parallel_tool_use", "a boolean", *d);
        chat["parallel_tool_calls"] = !d->get<bool>();
    }
}

// thinking {type: enabled (budget_tokens) | adaptive | disabled} as the template's enable_thinking. The
// budget is checked, not enforced: nothing caps the reasoning's length but max_tokens.
void chat_thinking(const json& v, json& chat) {
    if (!v.is_object()) throw wrong_type("thinking", "an object", v);
    const std::string type = string_at(v, "type", "thinking");
    if (type != "enabled" && type != "adaptive" && type != "disabled")
        throw bad_request("'thinking.type' is '" + type + "'; expected enabled, adaptive or disabled");
    if (type == "enabled") {
        const json* b = field(v, "budget_tokens");
        if (!b) throw bad_request("'thinking.budget_tokens' is required", "missing_required_parameter");
        if (!b->is_number_integer() || b->get<int64_t>() < 1)
            throw bad_request("'thinking.budget_tokens' must be a positive integer, got " + b->dump());
    }
    chat["enable_thinking"] = type != "disabled";
}

// The body as /v1/chat/completions takes it; the fields it checks itself (max_tokens, top_p, top_k,
// stream) are passed as sent.
json chat_body(const json& body) {
    json chat = {{"model", string_at(body, "model", "")}, {"messages", chat_messages(body)}};
    if (!field(body, "max_tokens"))
        throw bad_request("'max_tokens' is required", "missing_required_parameter");
    if (const json* t = field(body, "temperature"); t && t->is_number() && t->get<double>() > 1)
        throw bad_request("'temperature' must be between 0 and 1, got " + t->dump());
    for (const char* key : {"max_tokens", "temperature", "top_p", "top_k", "stream"})
        if (const json* v = field(body, key)) chat[key] = *v;
    if (const json* t = field(body, "tools")) chat["tools"] = chat_tools(*t);
    if (const json* c = field(body, "tool_choice")) chat_tool_choice(*c, chat);
    if (const json* t = field(body, "thinking")) chat_thinking(*t, chat);
    return chat;
}

std::vector<std::string> stop_sequences(const json& body) {
    const json* v = field(body, "stop_sequences");
    if (!v) return {};
    if (!v->is_array()) throw wrong_type("stop_sequences", "an array of strings", *v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
        const json& s = (*v)[i];
        if (!s.is_string() || s.get<std::string>().empty())
            throw bad_request("'" + indexed("stop_sequences", i) + "' must be a non-empty string");
        out.push_back(s.get<std::string>());
    }
    return out;
}

// The chat parser's field names as this route's body spells them (tools[i].function.name ->
// tools[i].name, tool_choice.function.name -> tool_choice.name, parameters -> input_schema).
ApiError anthropic_names(const ApiError& e) {
    std::string m = e.what();
    for (const auto& [from, to] :
         {std::pair{".function.name", ".name"}, {".function.parameters", ".input_schema"}})
        for (size_t at; (at = m.find(from)) != std::string::npos;)
            m.replace(at, std::string(from).size(), to);
    return {e.status, e.type, e.code, m};
}

CompletionRequest messages_request(const std::string& text, const ParseLimits& lim,
                                   std::vector<std::string>& stops) {
    const json body = parse_json_object(text);
    const std::string chat = chat_body(body).dump();
    stops = stop_sequences(body);
    CompletionRequest r;
    try {
        r = parse_completion_request(chat, Endpoint::Chat, lim);
    } catch (const ApiError& e) {
        throw anthropic_names(e);
    }
    r.gen.stop = stops;
    return r;
}

}  // namespace

void handle_messages(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res) {
    std::vector<std::string> stops;
    CompletionRequest r = messages_request(req.body, {ctx.loop.n_ctx(), 1}, stops);
    MessageMeta meta = make_message_meta(ctx.model_name, ctx.prompt.tokenizer(), std::move(stops));
    if (r.stream) return run_chat_streaming(ctx, r, message_stream_writer(std::move(meta)), res);
    if (const std::optional<ChatAnswer> a = run_chat_whole(ctx, r, req))
        res.set_content(message_json(meta, *a).dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
}

}  // namespace minfer::server
