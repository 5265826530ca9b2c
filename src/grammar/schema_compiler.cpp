// Schema dispatch ($ref, allOf, anyOf/oneOf, enum/const, type), scalar emission, the public entry
// points and SchemaError. See schema_compiler.h.
#include "grammar/schema_compiler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "grammar/charset.h"
#include "grammar/grammar.h"
#include "grammar/number.h"
#include "grammar/regex.h"

namespace minfer::grammar {

namespace {

constexpr std::array<std::string_view, 12> kIgnored = {"title",    "description", "default",  "examples",
                                                       "$schema",  "$id",         "$comment", "deprecated",
                                                       "readOnly", "writeOnly",   "$defs",    "definitions"};
constexpr std::array<std::string_view, 22> kSupported = {"type",
                                                         "properties",
                                                         "required",
                                                         "additionalProperties",
                                                         "items",
                                                         "prefixItems",
                                                         "minItems",
                                                         "maxItems",
                                                         "enum",
                                                         "const",
                                                         "anyOf",
                                                         "oneOf",
                                                         "allOf",
                                                         "$ref",
                                                         "minLength",
                                                         "maxLength",
                                                         "pattern",
                                                         "format",
                                                         "minimum",
                                                         "maximum",
                                                         "exclusiveMinimum",
                                                         "exclusiveMaximum"};
constexpr std::array<std::string_view, 7> kTypes = {"null",   "boolean", "object", "array",
                                                    "string", "number",  "integer"};

bool contains(std::span<const std::string_view> list, std::string_view key) {
    return std::find(list.begin(), list.end(), key) != list.end();
}

std::string where(const std::string& path) {
    return path.empty() ? "the schema root" : path;
}

std::string schema_error_text(const std::string& keyword, const std::string& path,
                              const std::string& detail) {
    if (detail.empty()) return "unsupported keyword '" + keyword + "' at " + where(path);
    return "'" + keyword + "' at " + where(path) + ": " + detail;
}

// The keyword a size limit is reported under: the one most likely to have made the schema large.
std::string limit_keyword(const Json& s) {
    for (const char* k : {"pattern", "format", "maxLength", "minLength", "maxItems", "minItems", "enum",
                          "properties", "prefixItems", "items", "anyOf", "oneOf", "allOf", "$ref"})
        if (s.is_object() && s.contains(k)) return k;
    return "schema";
}

bool type_matches(const Json& v, std::string_view type) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
}

std::optional<Bound> bound(const Json& c, const char* inclusive, const char* exclusive, bool lower,
                           const std::string& path) {
    std::optional<Bound> b;
    for (const char* key : {inclusive, exclusive}) {
        if (!c.contains(key)) continue;
        const Json& v = c[key];
        if (!v.is_number()) throw SchemaError(key, path, "must be a number");
        const std::optional<Decimal> d = parse_decimal(json_text(v));
        if (!d) throw SchemaError(key, path, "the bound " + json_text(v) + " is out of range");
        const Bound nb{*d, key == exclusive};
        const int cmp = b ? compare(nb.value, b->value) : 0;
        if (!b || (lower ? cmp > 0 : cmp < 0) || (cmp == 0 && nb.exclusive)) b = nb;
    }
    return b;
}

struct DepthGuard {
    explicit DepthGuard(int& n) : n_(n) { ++n_; }
    ~DepthGuard() { --n_; }
    int& n_;
};

}  // namespace

SchemaError::SchemaError(std::string kw, std::string p, const std::string& detail)
    : Error(schema_error_text(kw, p, detail)), keyword(std::move(kw)), path(std::move(p)) {}

// ---- shared helpers ---------------------------------------------------------------------------------

void emit_ws(Nfa& nfa, uint32_t from, uint32_t to) {
    nfa.eps(from, to);
    nfa.bytes(from, ' ', ' ', to);
    uint32_t indent = nfa.node();
    nfa.bytes(from, '\n', '\n', indent);
    nfa.eps(indent, to);
    for (int i = 0; i < kMaxIndent; ++i) {
        const uint32_t next = nfa.node();
        nfa.bytes(indent, ' ', ' ', next);
        nfa.bytes(indent, '\t', '\t', next);
        nfa.eps(next, to);
        indent = next;
    }
}

std::string pointer_append(const std::string& path, std::string_view token) {
    std::string out = path + "/";
    for (char c : token) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

void check_keywords(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.items())
        if (!contains(kIgnored, key) && !contains(kSupported, key)) throw SchemaError(key, path, "");
}

Json constraints_of(const Json& s) {
    Json c = Json::object();
    for (const auto& [key, value] : s.items())
        if (!contains(kIgnored, key)) c[key] = value;
    return c;
}

std::vector<std::string> schema_types(const Json& c, const std::string& path) {
    if (!c.contains("type")) return {"null", "boolean", "object", "array", "string", "number"};
    const Json& t = c["type"];
    std::vector<std::string> out;
    for (const Json& name : t.is_array() ? t : Json::array({t})) {
        if (!name.is_string() || !contains(kTypes, name.get<std::string>()))
            throw SchemaError("type", path,
                              "must be one of null, boolean, object, array, string, number, integer "
                              "or a list of them");
        out.push_back(name.get<std::string>());
    }
    if (out.empty()) throw SchemaError("type", path, "must name at least one type");
    return out;
}

uint32_t count_keyword(const Json& c, const char* key, uint32_t fallback, const std::string& path) {
    if (!c.contains(key)) return fallback;
    const Json& v = c[key];
    if (!type_matches(v, "integer") || v.get<double>() < 0)
        throw SchemaError(key, path, "must be a non-negative integer");
    if (v.is_number_unsigned())
        return static_cast<uint32_t>(std::min<uint64_t>(v.get<uint64_t>(), kUnbounded - 1));
    return static_cast<uint32_t>(std::min<double>(v.get<double>(), kUnbounded - 1));
}

std::string json_text(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// ---- dispatch ---------------------------------------------------------------------------------------

void SchemaCompiler::emit(const Json& s, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to) {
    if (nesting_ >= kMaxDepth)
        throw SchemaError(limit_keyword(s), path,
                          "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    DepthGuard guard(nesting_);
    if (s.is_boolean()) {
        if (s.get<bool>()) nfa.call(from, any_value_rule(), to);
        return;
    }
    if (!s.is_object()) throw SchemaError("schema", path, "a schema must be an object or a boolean");
    check_keywords(s, path);
    try {
        emit_constraints(constraints_of(s), path, nfa, from, to);
    } catch (const GrammarLimit& e) {
        throw SchemaError(limit_keyword(s), path, e.what());
    }
}

void SchemaCompiler::emit_constraints(const Json& c, const std::string& path, Nfa& nfa, uint32_t from,
                                      uint32_t to) {
    if (c.empty()) return nfa.call(from, any_value_rule(), to);
    if (c.contains("$ref")) {
        if (c.size() == 1) return nfa.call(from, ref_rule(c["$ref"], path), to);
        Json rest = c;
        rest.erase("$ref");
        return emit(merge({resolve(c["$ref"], path), rest}, path), path, nfa, from, to);
    }
    if (c.contains("allOf")) {
        const Json& all = c["allOf"];
        if (!all.is_array() || all.empty())
            throw SchemaError("allOf", path, "must be a non-empty array of schemas");
        std::vector<Json> parts(all.begin(), all.end());
        Json rest = c;
        rest.erase("allOf");
        parts.push_back(rest);
        return emit(merge(parts, path), path, nfa, from, to);
    }
    if (c.contains("anyOf") || c.contains("oneOf")) return emit_any_of(c, path, nfa, from, to);
    if (c.contains("enum") || c.contains("const")) return emit_enum(c, path, nfa, from, to);
    emit_types(c, path, nfa, from, to);
}

// Each branch with the sibling keywords merged in (they apply to whichever branch matches).
void SchemaCompiler::emit_any_of(const Json& c, const std::string& path, Nfa& nfa, uint32_t from,
                                 uint32_t to) {
    if (c.contains("anyOf") && c.contains("oneOf"))
        throw SchemaError("oneOf", path, "anyOf and oneOf in the same schema are not supported");
    const char* key = c.contains("anyOf") ? "anyOf" : "oneOf";
    const Json& branches = c[key];
    if (!branches.is_array() || branches.empty())
        throw SchemaError(key, path, "must be a non-empty array of schemas");
    Json rest = c;
    rest.erase(key);
    for (size_t i = 0; i < branches.size(); ++i) {
        const std::string sub = pointer_append(pointer_append(path, key), std::to_string(i));
        emit(rest.empty() ? branches[i] : merge({rest, branches[i]}, sub), sub, nfa, from, to);
    }
}

// The listed values that satisfy the sibling keywords; when those go beyond "type", each value is
// checked against a grammar compiled from them.
void SchemaCompiler::emit_enum(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to) {
    if (c.contains("enum") && !c["enum"].is_array()) throw SchemaError("enum", path, "must be an array");
    std::vector<Json> values;
    if (c.contains("const")) values.push_back(c["const"]);
    if (c.contains("enum")) {
        const Json& list = c["enum"];
        if (values.empty())
            values.assign(list.begin(), list.end());
        else if (std::find(list.begin(), list.end(), values[0]) == list.end())
            values.clear();
    }
    Json rest = c;
    rest.erase("enum");
    rest.erase("const");
    const std::vector<std::string> types = schema_types(rest, path);
    std::erase_if(values, [&](const Json& v) {
        return std::none_of(types.begin(), types.end(),
                            [&](const std::string& t) { return type_matches(v, t); });
    });
    rest.erase("type");
    if (!rest.empty()) {
        if (c.contains("type")) rest["type"] = c["type"];
        const std::shared_ptr<const Grammar> check =
            SchemaCompiler(doc_, nesting_, b_.budget()).compile(rest, path);
        static const auto no_tokens =
            std::make_shared<const Vocab>(std::vector<std::string>{}, std::vector<int32_t>{});
        std::erase_if(values, [&](const Json& v) {
            if (!check) return true;
            Matcher m(check, no_tokens);
            return !m.accept_bytes(json_text(v)) || !m.complete();
        });
    }
    for (const Json& v : values) nfa.literal(from, json_text(v), to);
}

void SchemaCompiler::emit_types(const Json& c, const std::string& path, Nfa& nfa, uint32_t from,
                                uint32_t to) {
    const std::vector<std::string> types = schema_types(c, path);
    const bool number = std::find(types.begin(), types.end(), "number") != types.end();
    for (const std::string& t : types) {
        if (t == "null") nfa.literal(from, "null", to);
        if (t == "boolean") nfa.literal(from, "true", to), nfa.literal(from, "false", to);
        if (t == "string") emit_string(c, path, nfa, from, to);
        if (t == "number" || (t == "integer" && !number))
            emit_numeric(c, path, t == "integer", nfa, from, to);
        if (t == "object") nfa.call(from, object_rule(c, path), to);
        if (t == "array") nfa.call(from, array_rule(c, path), to);
    }
}

// ---- scalars ----------------------------------------------------------------------------------------

void SchemaCompiler::emit_string(const Json& c, const std::string& path, Nfa& nfa, uint32_t from,
                                 uint32_t to) {
    const uint32_t min = count_keyword(c, "minLength", 0, path);
    const uint32_t max = count_keyword(c, "maxLength", kUnbounded, path);
    if (min > max) return;
    std::optional<CharNfa> chars;
    if (c.contains("pattern")) {
        if (!c["pattern"].is_string()) throw SchemaError("pattern", path, "must be a string");
        try {
            chars = compile_pattern(c["pattern"].get<std::string>());
        } catch (const PatternError& e) {
            throw SchemaError("pattern", path, std::string("unsupported regular expression: ") + e.what());
        }
    }
    CharNfa format;
    if (c.contains("format") && c["format"].is_string() &&
        compile_format(c["format"].get<std::string>(), format))
        chars = chars ? intersect(*chars, format) : format;
    const uint32_t open = nfa.node(), close = nfa.node();
    nfa.bytes(from, '"', '"', open);
    nfa.bytes(close, '"', '"', to);
    if (chars) {
        if (min > 0 || max != kUnbounded) {
            try {
                chars = intersect(*chars, length_between(min, max));
            } catch (const GrammarLimit& e) {
                throw SchemaError(max != kUnbounded ? "maxLength" : "minLength", path,
                                  std::string("too large together with pattern or format: ") + e.what());
            }
        }
        emit_chars(*chars, nfa, open, close);
    } else if (min == 0 && max == kUnbounded) {
        emit_any_char(nfa, open, open);
        nfa.eps(open, close);
    } else {
        nfa.loop(open, b_.add_loop(char_rule(), min, max), close);
    }
}

void SchemaCompiler::emit_numeric(const Json& c, const std::string& path, bool integer, Nfa& nfa,
                                  uint32_t from, uint32_t to) {
    emit_number(nfa, from, to, integer, bound(c, "minimum", "exclusiveMinimum", true, path),
                bound(c, "maximum", "exclusiveMaximum", false, path));
}

// ---- rules ------------------------------------------------------------------------------------------

uint32_t SchemaCompiler::new_rule(std::string keyword, std::string path) {
    const uint32_t r = b_.add_rule();
    origin_.emplace_back(std::move(keyword), std::move(path));
    return r;
}

const Json& SchemaCompiler::resolve(const Json& ref, const std::string& path) const {
    if (!ref.is_string()) throw SchemaError("$ref", path, "must be a string");
    const std::string r = ref.get<std::string>();
    if (r == "#") return doc_;
    if (r.rfind("#/", 0) != 0)
        throw SchemaError("$ref", path,
                          "only references into this schema (#/...) are supported, not '" + r + "'");
    try {
        return doc_.at(Json::json_pointer(r.substr(1)));
    } catch (const Json::exception&) {
        throw SchemaError("$ref", path, "'" + r + "' does not resolve");
    }
}

uint32_t SchemaCompiler::ref_rule(const Json& ref, const std::string& path) {
    const Json& target = resolve(ref, path);
    const std::string key = ref.get<std::string>();
    if (auto it = refs_.find(key); it != refs_.end()) return it->second;
    const std::string target_path = key.substr(1);
    const uint32_t r = new_rule("$ref", target_path);
    refs_[key] = r;
    emit(target, target_path, b_.nfa(r), Nfa::kStart, Nfa::kAccept);
    return r;
}

uint32_t SchemaCompiler::any_value_rule() {
    if (any_value_ != UINT32_MAX) return any_value_;
    any_value_ = new_rule("schema", "");
    emit_types(Json::object(), "", b_.nfa(any_value_), Nfa::kStart, Nfa::kAccept);
    return any_value_;
}

uint32_t SchemaCompiler::char_rule() {
    if (char_ != UINT32_MAX) return char_;
    char_ = new_rule("maxLength", "");
    emit_any_char(b_.nfa(char_), Nfa::kStart, Nfa::kAccept);
    return char_;
}

std::shared_ptr<const Grammar> SchemaCompiler::finish(uint32_t root) {
    try {
        return b_.finish(root);
    } catch (const RuleError& e) {
        const auto& [keyword, path] = origin_[e.rule];
        if (e.kind == RuleError::Kind::kLeftRecursion)
            throw SchemaError("$ref", path, "the reference leads back to itself before any text is written");
        throw SchemaError(keyword, path, std::string("the grammar is too large: ") + e.what());
    }
}

std::shared_ptr<const Grammar> SchemaCompiler::compile(const Json& schema, const std::string& path) {
    const uint32_t root = new_rule("schema", path);
    Nfa& nfa = b_.nfa(root);
    const uint32_t value = nfa.node();
    emit_ws(nfa, Nfa::kStart, value);
    emit(schema, path, nfa, value, Nfa::kAccept);
    return finish(root);
}

std::shared_ptr<const Grammar> SchemaCompiler::compile_any_object() {
    const uint32_t root = new_rule("schema", "");
    Nfa& nfa = b_.nfa(root);
    const uint32_t value = nfa.node();
    emit_ws(nfa, Nfa::kStart, value);
    nfa.call(value, object_rule(Json::object(), ""), Nfa::kAccept);
    return finish(root);
}

// ---- public entry points ----------------------------------------------------------------------------

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema) {
    std::shared_ptr<const Grammar> g = SchemaCompiler(schema, 0).compile(schema, "");
    if (!g) throw SchemaError("schema", "", "the schema admits no JSON value");
    return g;
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema) {
    return compile_json_schema(nlohmann::ordered_json(schema));
}

std::shared_ptr<const Grammar> any_json_object() {
    static const std::shared_ptr<const Grammar> g = SchemaCompiler(Json::object(), 0).compile_any_object();
    return g;
}

}  // namespace minfer::grammar
