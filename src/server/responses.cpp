#include "server/responses.h"

#include <httplib.h>

#include <cmath>
#include <regex>
#include <set>

#include "server/chat_run.h"
#include "server/engine_loop.h"
#include "server/http.h"
#include "server/prompt.h"
#include "server/request_parts.h"
#include "server/responses_render.h"

namespace minfer::server {

namespace {

using ordered = nlohmann::ordered_json;
using nlohmann::json;

std::string indexed(const std::string& name, size_t i) {
    return name + "[" + std::to_string(i) + "]";
}

std::string string_of(const ordered& obj, const char* key, const std::string& name) {
    const ordered* v = field(obj, key);
    if (!v) throw bad_request("'" + name + "." + key + "' is required", "missing_required_parameter");
    if (!v->is_string()) throw wrong_type(name + "." + key, "a string", *v);
    return v->get<std::string>();
}

// Text: a string, or text parts ({"type": "input_text" or "output_text", "text": STRING}) joined.
std::string text_of(const ordered& v, const std::string& name) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) throw wrong_type(name, "a string or an array of text parts", v);
    std::string out;
    for (size_t j = 0; j < v.size(); ++j) {
        const std::string part = indexed(name, j);
        if (!v[j].is_object()) throw wrong_type(part, "an object", v[j]);
        const std::string type = string_of(v[j], "type", part);
        if (type != "input_text" && type != "output_text")
            throw bad_request("'" + part + ".type' is '" + type +
                              "'; only text parts (input_text, output_text) are served");
        out += string_of(v[j], "text", part);
    }
    return out;
}

// The chat conversation built from `instructions` and `input`, with the call ids met so far.
struct Conversation {
    ordered messages = ordered::array();
    std::set<std::string> call_ids;
};

void add_message(const ordered& item, const std::string& name, Conversation& c) {
    const std::string role = string_of(item, "role", name);
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        throw bad_request("'" + name + ".role' is '" + role +
                          "'; expected user, assistant, system or developer");
    const ordered* content = field(item, "content");
    if (!content) throw bad_request("'" + name + ".content' is required", "missing_required_parameter");
    c.messages.push_back({{"role", role}, {"content", text_of(*content, name + ".content")}});
}

// An earlier call: a tool call of the assistant message it follows (an empty one begins when the last
// message is not the assistant's), its arguments parsed, as chat requests hold them.
void add_call(const ordered& item, const std::string& name, Conversation& c) {
    const std::string id = string_of(item, "call_id", name), fn = string_of(item, "name", name);
    const ordered args = ordered::parse(string_of(item, "arguments", name), nullptr, false);
    if (args.is_discarded()) throw bad_request("'" + name + ".arguments' is not valid JSON");
    if (c.messages.empty() || c.messages.back()["role"] != "assistant")
        c.messages.push_back({{"role", "assistant"}, {"content", ""}});
    c.messages.back()["tool_calls"].push_back(
        {{"id", id}, {"type", "function"}, {"function", {{"name", fn}, {"arguments", args}}}});
    c.call_ids.insert(id);
}

void add_call_output(const ordered& item, const std::string& name, Conversation& c) {
    const std::string id = string_of(item, "call_id", name);
    if (!c.call_ids.count(id))
        throw bad_request("'" + name + ".call_id' is '" + id + "', which no earlier function_call item holds",
                          "invalid_tool_call_id");
    const ordered* output = field(item, "output");
    if (!output) throw bad_request("'" + name + ".output' is required", "missing_required_parameter");
    c.messages.push_back(
        {{"role", "tool"}, {"tool_call_id", id}, {"content", text_of(*output, name + ".output")}});
}

// One input item; one without a type is a message. Reasoning items are dropped: minfer does not give
// the model its earlier reasoning back.
void add_item(const ordered& item, size_t i, Conversation& c) {
    const std::string name = indexed("input", i);
    if (!item.is_object()) throw wrong_type(name, "an object", item);
    const ordered* type = field(item, "type");
    if (type && !type->is_string()) throw wrong_type(name + ".type", "a string", *type);
    const std::string t = type ? type->get<std::string>() : "message";
    if (t == "message")
        add_message(item, name, c);
    else if (t == "function_call")
        add_call(item, name, c);
    else if (t == "function_call_output")
        add_call_output(item, name, c);
    else if (t != "reasoning")
        throw bad_request("'" + name + ".type' is '" + t +
                          "'; expected message, function_call, function_call_output or reasoning");
}

// instructions (a system message first), then input: a string (one user message) or items.
ordered chat_messages(const ordered& body) {
    Conversation c;
    if (const ordered* v = field(body, "instructions")) {
        if (!v->is_string()) throw wrong_type("instructions", "a string", *v);
        c.messages.push_back({{"role", "system"}, {"content", *v}});
    }
    const ordered* input = field(body, "input");
    if (!input) throw bad_request("'input' is required", "missing_required_parameter");
    if (input->is_string())
        c.messages.push_back({{"role", "user"}, {"content", *input}});
    else if (!input->is_array())
        throw wrong_type("input", "a string or an array of items", *input);
    else
        for (size_t i = 0; i < input->size(); ++i) add_item((*input)[i], i, c);
    if (c.messages.empty()) throw bad_request("'input' holds no message");
    return c.messages;
}

// Function tools are flat here ({type, name, description, parameters, strict}); chat nests them.
ordered chat_tools(const ordered& v) {
    if (!v.is_array()) throw wrong_type("tools", "an array", v);
    ordered out = ordered::array();
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string name = indexed("tools", i);
        if (!v[i].is_object()) throw wrong_type(name, "an object", v[i]);
        if (v[i].value("type", ordered()) != "function")
            throw bad_request("'" + name + ".type' must be \"function\" (the only tool type served)");
        ordered fn = v[i];
        fn.erase("type");
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return out;
}

// "auto", "none" and "required" as chat has them (it checks the word); {"type": "function", "name"}.
ordered chat_tool_choice(const ordered& v) {
    if (v.is_string()) return v;
    if (!v.is_object())
        throw wrong_type("tool_choice", "a string or {\"type\": \"function\", \"name\": ...}", v);
    const std::string type = string_of(v, "type", "tool_choice");
    if (type != "function")
        throw bad_request("'tool_choice.type' is '" + type + "'; only function tools are served");
    return {{"type", "function"}, {"function", {{"name", string_of(v, "name", "tool_choice")}}}};
}

// text.format: json_schema's name, schema and strict sit beside its type here, under "json_schema" in
// chat's response_format; other formats are the same (chat checks them). Null for none.
ordered chat_response_format(const ordered& text) {
    if (!text.is_object()) throw wrong_type("text", "an object", text);
    const ordered* f = field(text, "format");
    if (!f || !f->is_object() || f->value("type", ordered()) != "json_schema") return f ? *f : ordered();
    ordered schema = *f;
    schema.erase("type");
    return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// reasoning.effort as the chat request's reasoning_effort: "none" turns a thinking template's reasoning
// off, any other effort on, and gpt-oss's template reads the effort itself; absent, the template decides.
void chat_reasoning(const ordered& body, ordered& chat) {
    const ordered* r = field(body, "reasoning");
    if (!r) return;
    if (!r->is_object()) throw wrong_type("reasoning", "an object", *r);
    const ordered* effort = field(*r, "effort");
    if (!effort) return;
    static const std::set<std::string> efforts = {"none", "minimal", "low", "medium", "high"};
    if (!effort->is_string() || !efforts.count(effort->get<std::string>()))
        throw bad_request("'reasoning.effort' must be none, minimal, low, medium or high, not " +
                          effort->dump());
    chat["reasoning_effort"] = *effort;
}

// The request as a chat body. minfer keeps no responses, so none can be continued.
ordered chat_body(const ordered& body) {
    for (const char* key : {"previous_response_id", "conversation"})
        if (field(body, key))
            throw bad_request(
                "'" + std::string(key) +
                    "' is not supported: minfer keeps no responses; send the conversation in 'input'",
                "unsupported_parameter");
    ordered chat = {{"messages", chat_messages(body)}};
    for (const char* key : {"model", "temperature", "top_p", "parallel_tool_calls", "stream"})
        if (const ordered* v = field(body, key)) chat[key] = *v;
    if (const ordered* v = field(body, "max_output_tokens")) chat["max_tokens"] = *v;
    if (const ordered* v = field(body, "tools")) chat["tools"] = chat_tools(*v);
    if (const ordered* v = field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
    if (const ordered* v = field(body, "text"))
        if (ordered f = chat_response_format(*v); !f.is_null()) chat["response_format"] = std::move(f);
    chat_reasoning(body, chat);
    return chat;
}

// A sampling default as its decimal (0.8, not the float's 0.800000011920929).
double decimal(float x) {
    return std::round(double(x) * 1e6) / 1e6;
}

// What the response repeats of the (valid) request, the defaults where it was silent.
json echo(const ordered& body, const CompletionRequest& r) {
    auto sent = [&](const ordered& obj, const char* key, json dflt) {
        const ordered* v = field(obj, key);
        return v ? json(*v) : dflt;
    };
    const ordered* text = field(body, "text");
    const ordered* reasoning = field(body, "reasoning");
    return {{"instructions", sent(body, "instructions", nullptr)},
            {"tools", sent(body, "tools", json::array())},
            {"tool_choice", sent(body, "tool_choice", "auto")},
            {"text", {{"format", text ? sent(*text, "format", {{"type", "text"}}) : json{{"type", "text"}}}}},
            {"temperature", sent(body, "temperature", decimal(r.gen.sampling.temp))},
            {"top_p", sent(body, "top_p", decimal(r.gen.sampling.top_p))},
            {"parallel_tool_calls", r.parallel_tool_calls},
            {"max_output_tokens", r.max_tokens ? json(*r.max_tokens) : json(nullptr)},
            {"reasoning",
             {{"effort", reasoning ? sent(*reasoning, "effort", nullptr) : json()}, {"summary", nullptr}}},
            {"metadata", sent(body, "metadata", json::object())},
            {"user", sent(body, "user", nullptr)},
            {"previous_response_id", nullptr},
            {"store", false},
            {"truncation", "disabled"}};
}

// The chat parser and the prompt name chat's fields; these are their names in this request.
ApiError with_responses_names(const ApiError& e) {
    static const std::pair<std::regex, const char*> names[] = {
        {std::regex(R"('response_format\.json_schema\.)"), "'text.format."},
        {std::regex(R"('response_format)"), "'text.format"},
        {std::regex(R"('max_tokens')"), "'max_output_tokens'"},
        {std::regex(R"('tools\[(\d+)\]\.function\.)"), "'tools[$1]."},
        {std::regex(R"('tool_choice\.function\.)"), "'tool_choice."}};
    std::string message = e.what();
    for (const auto& [from, to] : names) message = std::regex_replace(message, from, to);
    return {e.status, e.type, e.code, message};
}

}  // namespace

void handle_responses(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res) {
    const ordered body = parse_json_object(req.body);
    try {
        CompletionRequest r =
            parse_completion_request(chat_body(body).dump(), Endpoint::Chat, {ctx.loop.n_ctx(), 16});
        ResponsesMeta meta = make_responses_meta(ctx.model_name, echo(body, r), ctx.prompt.tokenizer());
        if (r.stream) {
            run_chat_streaming(ctx, r, responses_stream_writer(std::move(meta)), res);
            return;
        }
        if (const std::optional<ChatAnswer> a = run_chat_whole(ctx, r, req))
            res.set_content(dump(response_json(meta, *a)), "application/json");
    } catch (const ApiError& e) {
        throw with_responses_names(e);
    }
}

}  // namespace minfer::server
