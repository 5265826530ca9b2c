// allOf as one schema: the parts' keywords combined so that a value satisfies the result exactly when it
// satisfies every part. Object keywords merge property by property (a name a part does not declare is
// governed by that part's additionalProperties), bounds take the tighter value, enums intersect, and
// anything that cannot be combined (two different patterns, two anyOf lists) is refused with the keyword
// named. Also used for $ref and anyOf with sibling keywords.
#include <algorithm>

#include "grammar/grammar.h"
#include "grammar/number.h"
#include "grammar/schema_compiler.h"

namespace minfer::grammar {

namespace {

constexpr size_t kMaxMergeParts = 256;

struct Merger {
    const std::string& path;
    std::vector<Json> parts;  // flattened constraint objects
    bool empty = false;       // some part admits nothing

    Json number_bound(const Json& a, const Json& b, bool take_larger) const {
        const auto da = parse_decimal(json_text(a)), db = parse_decimal(json_text(b));
        if (!da || !db) return a;
        const int c = compare(*da, *db);
        return (take_larger ? c >= 0 : c <= 0) ? a : b;
    }

    Json type_intersection(const Json& a, const Json& b) const {
        std::vector<std::string> ta = schema_types({{"type", a}}, path),
                                 tb = schema_types({{"type", b}}, path);
        auto has = [](const std::vector<std::string>& t, const char* name) {
            return std::find(t.begin(), t.end(), name) != t.end();
        };
        Json out = Json::array();
        for (const std::string& t : ta) {
            if (has(tb, t.c_str()))
                out.push_back(t);
            else if (t == "integer" && has(tb, "number"))
                out.push_back(t);
            else if (t == "number" && has(tb, "integer"))
                out.push_back("integer");
        }
        return out;
    }

    // Combines the values two parts give one keyword.
    void combine(Json& out, const std::string& key, const Json& v) {
        Json& cur = out[key];
        if (cur == v) return;
        if (key == "type") {
            cur = type_intersection(cur, v);
            empty = empty || cur.empty();
        } else if (key == "enum") {
            Json both = Json::array();
            for (const Json& x : cur)
                if (v.is_array() && std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
            cur = both;
        } else if (key == "const") {
            empty = true;
        } else if (key == "minimum" || key == "exclusiveMinimum" || key == "maximum" ||
                   key == "exclusiveMaximum") {
            if (!cur.is_number() || !v.is_number()) throw SchemaError(key, path, "must be a number");
            cur = number_bound(cur, v, key == "minimum" || key == "exclusiveMinimum");
        } else if (key == "minLength" || key == "minItems" || key == "maxLength" || key == "maxItems") {
            const uint32_t a = count_keyword(out, key.c_str(), 0, path),
                           b = count_keyword({{key, v}}, key.c_str(), 0, path);
            cur = key.rfind("min", 0) == 0 ? std::max(a, b) : std::min(a, b);
        } else if (key == "items" && (cur.is_object() || cur.is_boolean()) &&
                   (v.is_object() || v.is_boolean())) {
            cur = Json{{"allOf", Json::array({cur, v})}};
        } else {
            throw SchemaError("allOf", path, "cannot combine two different '" + key + "' keywords");
        }
    }

    // properties and additionalProperties: each name's schema is every part's view of it.
    void merge_objects(Json& out) const {
        std::vector<std::string> names;
        bool any = false;
        for (const Json& p : parts) {
            if (!p.contains("properties") && !p.contains("additionalProperties")) continue;
            any = true;
            if (p.contains("properties") && !p["properties"].is_object())
                throw SchemaError("properties", path, "must be an object of schemas");
            const Json props = p.value("properties", Json::object());
            for (const auto& [name, s] : props.items())
                if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
        }
        if (!any) return;
        Json props = Json::object();
        for (const std::string& name : names) props[name] = property_schema(name);
        Json extra = Json::array();
        for (const Json& p : parts)
            if (p.contains("additionalProperties") && p["additionalProperties"] != true)
                extra.push_back(p["additionalProperties"]);
        if (!props.empty()) out["properties"] = props;
        if (std::find(extra.begin(), extra.end(), false) != extra.end())
            out["additionalProperties"] = false;
        else if (extra.size() == 1)
            out["additionalProperties"] = extra[0];
        else if (extra.size() > 1)
            out["additionalProperties"] = Json{{"allOf", extra}};
    }

    Json property_schema(const std::string& name) const {
        Json schemas = Json::array();
        for (const Json& p : parts) {
            if (p.contains("properties") && p["properties"].contains(name)) {
                schemas.push_back(p["properties"][name]);
            } else if (p.contains("additionalProperties")) {
                if (p["additionalProperties"] == false) return false;
                schemas.push_back(p["additionalProperties"]);
            }
        }
        return schemas.size() == 1 ? schemas[0] : Json{{"allOf", schemas}};
    }

    void merge_required(Json& out) const {
        Json req = Json::array();
        for (const Json& p : parts) {
            if (!p.contains("required")) continue;
            if (!p["required"].is_array()) throw SchemaError("required", path, "must be an array of strings");
            for (const Json& name : p["required"])
                if (std::find(req.begin(), req.end(), name) == req.end()) req.push_back(name);
        }
        if (!req.empty()) out["required"] = req;
    }
};

}  // namespace

Json SchemaCompiler::merge(const std::vector<Json>& input, const std::string& path) const {
    Merger m{path, {}, false};
    std::vector<Json> todo(input.rbegin(), input.rend());
    size_t seen = 0;
    while (!todo.empty()) {
        if (++seen > kMaxMergeParts)
            throw SchemaError("allOf", path,
                              "more than " + std::to_string(kMaxMergeParts) + " schemas to combine");
        Json p = std::move(todo.back());
        todo.pop_back();
        if (p.is_boolean()) {
            if (p == false) return false;
            continue;
        }
        if (!p.is_object()) throw SchemaError("allOf", path, "a schema must be an object or a boolean");
        check_keywords(p, path);
        Json c = constraints_of(p);
        if (c.contains("$ref")) todo.push_back(resolve(c["$ref"], path)), c.erase("$ref");
        if (c.contains("allOf")) {
            if (!c["allOf"].is_array())
                throw SchemaError("allOf", path, "must be a non-empty array of schemas");
            for (auto it = c["allOf"].rbegin(); it != c["allOf"].rend(); ++it) todo.push_back(*it);
            c.erase("allOf");
        }
        m.parts.push_back(std::move(c));
    }
    Json out = Json::object();
    m.merge_objects(out);
    m.merge_required(out);
    for (const Json& p : m.parts)
        for (const auto& [key, value] : p.items()) {
            if (key == "properties" || key == "additionalProperties" || key == "required") continue;
            if (!out.contains(key))
                out[key] = value;
            else
                m.combine(out, key, value);
        }
    if (m.empty) return false;
    return out;
}

}  // namespace minfer::grammar
