// Object and array rules. An object is written with its properties in schema order: from "property i
// is next" the key of any later property may come as long as every property skipped is optional, so
// required properties are always present and optional ones may be left out; additional properties
// (when allowed) come after the declared ones, with keys (written canonically) that are none of the
// declared names. An array is its prefixItems in order, then a counted loop of ", item" for the rest,
// bounded by minItems and maxItems.
#include <algorithm>
#include <map>

#include "grammar/charset.h"
#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "grammar/schema_compiler.h"

namespace minfer::grammar {

namespace {

struct Property {
    std::string name;
    Json schema;
    std::string path;
    bool required = false;
};

Json subset(const Json& c, std::initializer_list<const char*> keys) {
    Json out = Json::object();
    for (const char* k : keys)
        if (c.contains(k)) out[k] = c[k];
    return out;
}

bool is_schema(const Json& v) {
    return v.is_object() || v.is_boolean();
}

// Strings that are none of `names`: a trie of the names whose every missing edge leads to an accepting
// sink, with the names' own ends not accepting.
CharNfa names_complement(const std::vector<std::string>& names, const std::string& path) {
    CharNfa c;
    const uint32_t sink = c.node();
    c.edge(sink, CodeSet::scalars(), sink);
    c.set_accepting(sink);
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> child;
    std::vector<bool> terminal(1, false);
    for (const std::string& name : names) {
        std::vector<uint32_t> cps;
        if (!decode_utf8(name, cps))
            throw SchemaError("properties", path, "a property name is not valid UTF-8");
        uint32_t at = 0;
        for (uint32_t cp : cps) {
            auto [it, fresh] = child.try_emplace({at, cp}, 0);
            if (fresh) it->second = c.node(), terminal.resize(c.size(), false);
            at = it->second;
        }
        terminal.resize(c.size(), false);
        terminal[at] = true;
    }
    std::map<uint32_t, CodeSet> taken;
    for (const auto& [edge, to] : child) {
        c.edge(edge.first, CodeSet::single(edge.second), to);
        taken[edge.first].add(edge.second, edge.second);
    }
    for (uint32_t n = 0; n < c.size(); ++n) {
        if (n == sink) continue;
        if (!terminal[n]) c.set_accepting(n);
        const CodeSet others = taken.count(n) ? taken[n].complement() : CodeSet::scalars();
        if (!others.empty()) c.edge(n, others, sink);
    }
    return c;
}

}  // namespace

// Builds one object rule; see the file comment for the shape.
struct ObjectWriter {
    SchemaCompiler& sc;
    Nfa& nfa;
    const std::string& path;
    std::vector<Property> props;
    Json additional = true;
    std::vector<uint32_t> rest;     // rest[i]: a pair was written, property i is the next candidate
    std::vector<uint32_t> key_end;  // after property i's quoted key
    uint32_t additional_key = UINT32_MAX;

    void read_shape(const Json& c) {
        if (c.contains("additionalProperties")) additional = c["additionalProperties"];
        if (!is_schema(additional))
            throw SchemaError("additionalProperties", path, "must be a schema or a boolean");
        if (c.contains("properties")) {
            if (!c["properties"].is_object())
                throw SchemaError("properties", path, "must be an object of schemas");
            for (const auto& [name, schema] : c["properties"].items())
                props.push_back(
                    {name, schema, pointer_append(pointer_append(path, "properties"), name), false});
        }
        if (!c.contains("required")) return;
        if (!c["required"].is_array()) throw SchemaError("required", path, "must be an array of strings");
        for (const Json& name : c["required"]) {
            if (!name.is_string()) throw SchemaError("required", path, "must be an array of strings");
            auto it =
                std::find_if(props.begin(), props.end(), [&](const Property& p) { return p.name == name; });
            if (it == props.end()) {
                props.push_back({name.get<std::string>(), additional,
                                 pointer_append(path, "additionalProperties"), true});
            } else
                it->required = true;
        }
    }

    bool optional_from(size_t i) const {
        return std::none_of(props.begin() + i, props.end(), [](const Property& p) { return p.required; });
    }

    // The keys that may follow at `at` when property i is the next candidate.
    void keys(uint32_t at, size_t i) {
        for (size_t j = i; j < props.size(); ++j) {
            nfa.literal(at, json_text(props[j].name), key_end[j]);
            if (props[j].required) return;
        }
        if (additional != false) nfa.eps(at, additional_pair());
    }

    // A shared entry to "additional key : value", which leads to rest.back().
    uint32_t additional_pair() {
        if (additional_key != UINT32_MAX) return additional_key;
        additional_key = nfa.node();
        const uint32_t open = nfa.node(), close = nfa.node();
        nfa.bytes(additional_key, '"', '"', open);
        if (props.empty()) {
            emit_any_char(nfa, open, open);
            nfa.eps(open, close);
        } else {
            std::vector<std::string> names;
            for (const Property& p : props) names.push_back(p.name);
            emit_chars(names_complement(names, path), nfa, open, close);
        }
        const uint32_t key_done = nfa.node();
        nfa.bytes(close, '"', '"', key_done);
        value(key_done, additional, pointer_append(path, "additionalProperties"), rest.back());
        return additional_key;
    }

    // ws ':' ws value ws, from after a key to `to`.
    void value(uint32_t from, const Json& schema, const std::string& value_path, uint32_t to) {
        const uint32_t colon = nfa.node(), after_colon = nfa.node(), v = nfa.node(), v_end = nfa.node();
        emit_ws(nfa, from, colon);
        nfa.bytes(colon, ':', ':', after_colon);
        emit_ws(nfa, after_colon, v);
        sc.emit(schema, value_path, nfa, v, v_end);
        emit_ws(nfa, v_end, to);
    }

    void write() {
        const size_t n = props.size();
        for (size_t i = 0; i <= n; ++i) rest.push_back(nfa.node());
        for (size_t j = 0; j < n; ++j) key_end.push_back(nfa.node());
        const uint32_t open = nfa.node(), first = nfa.node();
        nfa.bytes(Nfa::kStart, '{', '{', open);
        emit_ws(nfa, open, first);
        keys(first, 0);
        if (optional_from(0)) nfa.bytes(first, '}', '}', Nfa::kAccept);
        for (size_t i = n == 0 ? 0 : 1; i <= n; ++i) {
            const uint32_t comma = nfa.node(), next_key = nfa.node();
            nfa.bytes(rest[i], ',', ',', comma);
            emit_ws(nfa, comma, next_key);
            keys(next_key, i);
            if (optional_from(i)) nfa.bytes(rest[i], '}', '}', Nfa::kAccept);
        }
        for (size_t j = 0; j < n; ++j) value(key_end[j], props[j].schema, props[j].path, rest[j + 1]);
    }
};

uint32_t SchemaCompiler::object_rule(const Json& c, const std::string& path) {
    const std::string key = json_text(subset(c, {"properties", "required", "additionalProperties"}));
    if (auto it = objects_.find(key); it != objects_.end()) return it->second;
    const uint32_t r = new_rule("properties", path);
    objects_[key] = r;
    ObjectWriter w{*this, b_.nfa(r), path, {}, true, {}, {}, UINT32_MAX};
    w.read_shape(c);
    w.write();
    return r;
}

// Builds one array rule; see the file comment.
struct ArrayWriter {
    SchemaCompiler& sc;
    Nfa& nfa;
    const std::string& path;
    std::vector<Json> prefix;
    Json items = true;
    std::string items_path;
    uint32_t min = 0, max = kUnbounded;

    void read_shape(const Json& c) {
        min = count_keyword(c, "minItems", 0, path);
        max = count_keyword(c, "maxItems", kUnbounded, path);
        items_path = pointer_append(path, "items");
        if (c.contains("prefixItems")) {
            if (!c["prefixItems"].is_array())
                throw SchemaError("prefixItems", path, "must be an array of schemas");
            prefix.assign(c["prefixItems"].begin(), c["prefixItems"].end());
        }
        if (!c.contains("items")) return;
        if (c["items"].is_array() && !c.contains("prefixItems")) {  // the draft-07 tuple form
            prefix.assign(c["items"].begin(), c["items"].end());
            return;
        }
        items = c["items"];
        if (!is_schema(items)) throw SchemaError("items", path, "must be a schema or a boolean");
    }

    // Writes item `schema` from `from`, with a separating comma unless it is the first; returns the
    // node after it and the whitespace that follows.
    uint32_t item(uint32_t from, bool first, const Json& schema, const std::string& item_path) {
        uint32_t start = from;
        if (!first) {
            const uint32_t comma = nfa.node();
            start = nfa.node();
            nfa.bytes(from, ',', ',', comma);
            emit_ws(nfa, comma, start);
        }
        const uint32_t end = nfa.node(), after = nfa.node();
        sc.emit(schema, item_path, nfa, start, end);
        emit_ws(nfa, end, after);
        return after;
    }

    void write() {
        const uint32_t open = nfa.node();
        uint32_t at = nfa.node();
        nfa.bytes(Nfa::kStart, '[', '[', open);
        emit_ws(nfa, open, at);
        if (min > max) return;
        if (min == 0) nfa.bytes(at, ']', ']', Nfa::kAccept);
        const uint32_t fixed = static_cast<uint32_t>(std::min<size_t>(prefix.size(), max));
        for (uint32_t p = 0; p < fixed; ++p) {
            at = item(at, p == 0, prefix[p],
                      pointer_append(pointer_append(path, "prefixItems"), std::to_string(p)));
            if (p + 1 >= min) nfa.bytes(at, ']', ']', Nfa::kAccept);
        }
        if (items == false || max <= prefix.size()) return;
        uint32_t written = fixed;
        if (written == 0) at = item(at, true, items, items_path), written = 1;
        const uint32_t loop_min = min > written ? min - written : 0;
        const uint32_t loop_max = max == kUnbounded ? kUnbounded : max - written;
        const uint32_t end = nfa.node();
        if (loop_max == 0)
            nfa.eps(at, end);
        else
            nfa.loop(at, sc.b_.add_loop(sc.separated_item_rule(items, items_path), loop_min, loop_max), end);
        nfa.bytes(end, ']', ']', Nfa::kAccept);
    }
};

uint32_t SchemaCompiler::array_rule(const Json& c, const std::string& path) {
    const std::string key = json_text(subset(c, {"items", "prefixItems", "minItems", "maxItems"}));
    if (auto it = arrays_.find(key); it != arrays_.end()) return it->second;
    const uint32_t r = new_rule("items", path);
    arrays_[key] = r;
    ArrayWriter w{*this, b_.nfa(r), path, {}, true, {}, 0, kUnbounded};
    w.read_shape(c);
    w.write();
    return r;
}

// ", item" followed by whitespace: the body of an array's counted loop.
uint32_t SchemaCompiler::separated_item_rule(const Json& items, const std::string& path) {
    const std::string key = json_text(items);
    if (auto it = items_.find(key); it != items_.end()) return it->second;
    const uint32_t r = new_rule("items", path);
    items_[key] = r;
    Nfa& nfa = b_.nfa(r);
    const uint32_t comma = nfa.node(), start = nfa.node(), end = nfa.node();
    nfa.bytes(Nfa::kStart, ',', ',', comma);
    emit_ws(nfa, comma, start);
    emit(items, path, nfa, start, end);
    emit_ws(nfa, end, Nfa::kAccept);
    return r;
}

}  // namespace minfer::grammar
