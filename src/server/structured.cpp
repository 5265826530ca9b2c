#include "server/structured.h"

#include "grammar/grammar.h"
#include "server/request_parts.h"

namespace minfer::server {

namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const grammar::Grammar> compile(const json& schema, const std::string& name) {
    std::shared_ptr<const grammar::Grammar> g;
    try {
        g = grammar::compile_json_schema(schema);
    } catch (const grammar::SchemaError& e) {
        throw bad_request("'" + name + "': " + e.what(), "invalid_schema");
    }
    if (!g) throw bad_request("'" + name + "' admits no value", "invalid_schema");
    return g;
}

// {"name": {"const": NAME}, KEY: PARAMETERS}, the parameters' $defs lifted to the root where their
// references point.
json call_schema(const json& function, const char* key, json& defs) {
    json params = function.contains("parameters") ? function["parameters"] : json{{"type", "object"}};
    for (const char* key : {"$defs", "definitions"})
        if (params.contains(key) && params[key].is_object()) {
            for (const auto& [k, v] : params[key].items()) defs[key][k] = v;
            params.erase(key);
        }
    return {{"type", "object"},
            {"properties", {{"name", {{"const", function["name"]}}}, {key, params}}},
            {"required", {"name", key}},
            {"additionalProperties", false}};
}

}  // namespace

std::shared_ptr<const grammar::Grammar> response_format_grammar(const json& body) {
    const json* f = field(body, "response_format");
    if (!f) return nullptr;
    if (!f->is_object()) throw wrong_type("response_format", "an object", *f);
    const json* type = field(*f, "type");
    if (!type || !type->is_string()) throw bad_request("'response_format.type' must be a string");
    const std::string t = type->get<std::string>();
    if (t == "text") return nullptr;
    if (t == "json_object") return grammar::any_json_object();
    if (t != "json_schema")
        throw bad_request("'response_format.type' is '" + t + "'; expected text, json_object or json_schema");
    const json* js = field(*f, "json_schema");
    if (!js || !js->is_object()) throw bad_request("'response_format.json_schema' must be an object");
    const json* schema = field(*js, "schema");
    if (!schema) return grammar::any_json_object();  // a name alone, as OpenAI allows: any object
    if (!schema->is_object() && !schema->is_boolean())
        throw wrong_type("response_format.json_schema.schema", "an object", *schema);
    return compile(*schema, "response_format.json_schema.schema");
}

std::shared_ptr<const grammar::Grammar> forced_call_grammar(const CompletionRequest& r,
                                                            const char* arguments_key) {
    json defs = json::object(), any_of = json::array();
    std::string name = "tools";
    for (size_t i = 0; i < r.tools.size(); ++i) {
        const json& fn = r.tools[i]["function"];
        if (r.tool_choice == ToolChoice::Named && fn["name"] != r.tool_name) continue;
        if (r.tool_choice == ToolChoice::Named) name = "tools[" + std::to_string(i) + "].function.parameters";
        any_of.push_back(call_schema(fn, arguments_key, defs));
    }
    json schema = any_of.size() == 1 ? any_of[0] : json{{"anyOf", any_of}};
    for (const auto& [k, v] : defs.items()) schema[k] = v;
    return compile(schema, name);
}

}  // namespace minfer::server
