#include <set>

#include "server/request_parts.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;
using ordered = nlohmann::ordered_json;

// Message content: a string, or an array of {"type": "text", "text": ...} parts joined.
std::string message_content(const json& m, size_t i) {
    const std::string name = "messages[" + std::to_string(i) + "].content";
    const auto it = m.find("content");
    if (it == m.end() || it->is_null()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) throw wrong_type(name, "a string or an array of text parts", *it);
    std::string out;
    for (const json& part : *it) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string())
            throw bad_request(
                "'" + name +
                "' parts must be {\"type\": \"text\", \"text\": STRING} (only text is supported)");
        out += part["text"].get<std::string>();
    }
    return out;
}

std::string string_field(const json& obj, const char* key, const std::string& name) {
    const json* v = field(obj, key);
    if (!v || !v->is_string()) throw bad_request("'" + name + "." + key + "' must be a string");
    return v->get<std::string>();
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}], the
// arguments (a JSON text in OpenAI's API) parsed, since templates print them as JSON values.
ordered tool_calls(const json& calls, const std::string& name, std::set<std::string>& ids) {
    if (!calls.is_array()) throw wrong_type(name, "an array", calls);
    ordered out = ordered::array();
    for (size_t j = 0; j < calls.size(); ++j) {
        const std::string at = name + "[" + std::to_string(j) + "]";
        const json& c = calls[j];
        if (!c.is_object()) throw wrong_type(at, "an object", c);
        const json* fn = field(c, "function");
        if (!fn || !fn->is_object()) throw bad_request("'" + at + ".function' must be an object");
        const std::string id = string_field(c, "id", at);
        const json* args = field(*fn, "arguments");
        ordered parsed = ordered::object();
        if (args && args->is_string()) {
            parsed = ordered::parse(args->get<std::string>(), nullptr, false);
            if (parsed.is_discarded()) throw bad_request("'" + at + ".function.arguments' is not valid JSON");
        } else if (args) {
            parsed = *args;
        }
        ids.insert(id);
        out.push_back(
            {{"id", id},
             {"type", "function"},
             {"function", {{"name", string_field(*fn, "name", at + ".function")}, {"arguments", parsed}}}});
    }
    return out;
}

ordered chat_message(const json& m, size_t i, std::set<std::string>& call_ids) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw wrong_type(name, "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad_request("'" + name + ".role' must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
        throw bad_request("'" + name + ".role' is '" + r +
                          "'; expected system, developer, user, assistant or tool");
    ordered out = {{"role", r == "developer" ? "system" : r}, {"content", message_content(m, i)}};
    if (r == "assistant") {
        // Templates read the reasoning as reasoning_content (Qwen3) or thinking (gpt-oss).
        for (const char* key : {"reasoning_content", "reasoning", "thinking"})
            if (const json* v = field(m, key); v && v->is_string())
                out["reasoning_content"] = out["thinking"] = *v;
        if (const json* calls = field(m, "tool_calls"))
            out["tool_calls"] = tool_calls(*calls, name + ".tool_calls", call_ids);
    }
    if (r == "tool") {
        const std::string id = string_field(m, "tool_call_id", name);
        if (!call_ids.count(id))
            throw bad_request("'" + name + ".tool_call_id' is '" + id +
                                  "', which no earlier assistant message's tool_calls holds",
                              "invalid_tool_call_id");
        out["tool_call_id"] = id;
    }
    if (const json* n = field(m, "name"); n && n->is_string()) out["name"] = *n;
    return out;
}

ordered chat_messages(const json& body) {
    const json* v = field(body, "messages");
    if (!v) throw bad_request("'messages' is required", "missing_required_parameter");
    if (!v->is_array()) throw wrong_type("messages", "an array", *v);
    if (v->empty()) throw bad_request("'messages' must hold at least one message");
    ordered out = ordered::array();
    std::set<std::string> call_ids;
    for (size_t i = 0; i < v->size(); ++i) out.push_back(chat_message((*v)[i], i, call_ids));
    return out;
}

bool valid_function_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (const char c : n)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
    return true;
}

// tools: at most 128 functions {type: "function", function: {name, description?, parameters?, strict?}}.
ordered tools(const json& body) {
    const json* v = field(body, "tools");
    if (!v) return ordered::array();
    if (!v->is_array()) throw wrong_type("tools", "an array", *v);
    if (v->size() > 128)
        throw bad_request("'tools' holds at most 128 functions, got " + std::to_string(v->size()));
    std::set<std::string> names;
    for (size_t i = 0; i < v->size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const json& t = (*v)[i];
        if (!t.is_object() || t.value("type", json()) != "function")
            throw bad_request("'" + at + ".type' must be \"function\" (the only tool type served)");
        const json* fn = field(t, "function");
        if (!fn || !fn->is_object()) throw bad_request("'" + at + ".function' must be an object");
        const std::string n = string_field(*fn, "name", at + ".function");
        if (!valid_function_name(n))
            throw bad_request("'" + at + ".function.name' is '" + n +
                              "'; names are 1 to 64 of a-z, A-Z, 0-9, _ and -");
        if (!names.insert(n).second)
            throw bad_request("'" + at + ".function.name': '" + n + "' is named twice");
        if (const json* p = field(*fn, "parameters"); p && !p->is_object())
            throw wrong_type(at + ".function.parameters", "a JSON schema object", *p);
    }
    return *v;  // key order as sent: templates print the schemas, grammars follow them
}

void tool_choice(const json& body, CompletionRequest& r) {
    const json* v = field(body, "tool_choice");
    if (!v) return;
    if (v->is_string()) {
        const std::string c = v->get<std::string>();
        if (c == "auto")
            r.tool_choice = ToolChoice::Auto;
        else if (c == "none")
            r.tool_choice = ToolChoice::None;
        else if (c == "required")
            r.tool_choice = ToolChoice::Required;
        else
            throw bad_request("'tool_choice' is '" + c +
                              "'; expected auto, none, required or {\"type\": \"function\", ...}");
    } else {
        const json* fn = v->is_object() ? field(*v, "function") : nullptr;
        if (!fn || !fn->is_object())
            throw bad_request(
                "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        r.tool_choice = ToolChoice::Named;
        r.tool_name = string_field(*fn, "name", "tool_choice.function");
        bool known = false;
        for (const auto& t : r.tools) known = known || t["function"]["name"] == r.tool_name;
        if (!known)
            throw bad_request(
                "'tool_choice.function.name' is '" + r.tool_name + "', which no tool in 'tools' is called",
                "unknown_tool");
    }
    if (r.tool_choice != ToolChoice::Auto && r.tool_choice != ToolChoice::None && r.tools.empty())
        throw bad_request("'tool_choice' asks for a tool call but 'tools' is empty");
}

// enable_thinking (as vLLM and llama-server take it), reasoning_effort (OpenAI's: gpt-oss's template
// reads it; "none" turns a thinking template's reasoning off, any other effort on) and
// chat_template_kwargs: the template's variables.
ordered template_kwargs(const json& body) {
    ordered out = ordered::object();
    if (const json* k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) throw wrong_type("chat_template_kwargs", "an object", *k);
        for (const char* reserved : {"messages", "tools", "add_generation_prompt"})
            if (k->contains(reserved))
                throw bad_request("'chat_template_kwargs." + std::string(reserved) +
                                  "' is set by the request itself");
        out = *k;
    }
    if (const json* e = field(body, "enable_thinking")) {
        if (!e->is_boolean()) throw wrong_type("enable_thinking", "a boolean", *e);
        out["enable_thinking"] = *e;
    }
    if (const json* e = field(body, "reasoning_effort")) {
        static const std::set<std::string> efforts = {"none", "minimal", "low", "medium", "high"};
        if (!e->is_string() || !efforts.count(e->get<std::string>()))
            throw bad_request("'reasoning_effort' must be none, minimal, low, medium or high, not " +
                              e->dump());
        out["reasoning_effort"] = *e;
        if (!out.contains("enable_thinking")) out["enable_thinking"] = *e != "none";
    }
    return out;
}

}  // namespace

void chat_request(const json& body, CompletionRequest& r) {
    r.messages = chat_messages(body);
    r.tools = tools(body);
    tool_choice(body, r);
    r.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
    r.template_kwargs = template_kwargs(body);
}

}  // namespace minfer::server
