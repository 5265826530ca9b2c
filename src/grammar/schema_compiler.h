// JSON schema -> grammar rules. Scalars (strings, numbers, enum values, booleans, null) are written
// inline into the automaton of the enclosing rule; each object shape, array shape, $ref target and the
// "any value" schema is a rule of its own, called where it is used, so recursive schemas stay finite.
//
// Keywords: type (one or a list), properties, required, additionalProperties, items, prefixItems,
// minItems, maxItems, enum, const, anyOf, oneOf (as anyOf), allOf (merged), $ref (#, #/$defs/...,
// any pointer into the document), $defs, definitions, minLength, maxLength, pattern (regex.h's subset),
// format (date, time, date-time, uuid, email; others ignored), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum; title, description, default, examples, $schema, $id, $comment, deprecated, readOnly
// and writeOnly are ignored. Any other keyword is a SchemaError. A schema without "type" allows every
// type, each restricted by the keywords that apply to it, as JSON Schema says.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/automaton.h"

namespace minfer::grammar {

using Json = nlohmann::ordered_json;

constexpr int kMaxIndent = 20;  // spaces or tabs allowed after a newline between tokens
constexpr int kMaxDepth = 48;   // schema nesting (including $ref and allOf/anyOf expansion)

class SchemaCompiler {
  public:
    // `document`: where $refs resolve; `nesting`: levels an enclosing compiler already used;
    // `budget`: the enclosing compiler's size budget, shared (nullptr: a budget of its own).
    SchemaCompiler(const Json& document, int nesting, size_t* budget = nullptr)
        : doc_(document), nesting_(nesting), b_(budget) {}
    // nullptr when the schema admits no value. Throws SchemaError.
    std::shared_ptr<const Grammar> compile(const Json& schema, const std::string& path);
    std::shared_ptr<const Grammar> compile_any_object();

  private:
    // schema_compiler.cpp: dispatch, references, enums, scalars.
    void emit(const Json& s, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_constraints(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_any_of(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_enum(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_types(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_string(const Json& c, const std::string& path, Nfa& nfa, uint32_t from, uint32_t to);
    void emit_numeric(const Json& c, const std::string& path, bool integer, Nfa& nfa, uint32_t from,
                      uint32_t to);
    uint32_t ref_rule(const Json& ref, const std::string& path);
    const Json& resolve(const Json& ref, const std::string& path) const;
    uint32_t any_value_rule();
    uint32_t char_rule();
    uint32_t new_rule(std::string keyword, std::string path);
    std::shared_ptr<const Grammar> finish(uint32_t root);

    // schema_containers.cpp: objects and arrays.
    uint32_t object_rule(const Json& c, const std::string& path);
    uint32_t array_rule(const Json& c, const std::string& path);
    uint32_t separated_item_rule(const Json& items, const std::string& path);

    // schema_merge.cpp: allOf, and $ref or anyOf with sibling keywords.
    Json merge(const std::vector<Json>& parts, const std::string& path) const;

    friend struct ObjectWriter;
    friend struct ArrayWriter;

    const Json& doc_;
    int nesting_;
    GrammarBuilder b_;
    std::vector<std::pair<std::string, std::string>> origin_;  // per rule: the keyword and path it compiles
    std::map<std::string, uint32_t> refs_, objects_, arrays_, items_;
    uint32_t any_value_ = UINT32_MAX, char_ = UINT32_MAX;
};

// Shared by the compiler's files.
void emit_ws(Nfa& nfa, uint32_t from, uint32_t to);
std::string pointer_append(const std::string& path, std::string_view token);
void check_keywords(const Json& s, const std::string& path);
Json constraints_of(const Json& s);  // the schema object without its descriptive keywords
std::vector<std::string> schema_types(const Json& c, const std::string& path);  // "type" as a list
uint32_t count_keyword(const Json& c, const char* key, uint32_t fallback, const std::string& path);
std::string json_text(const Json& v);  // compact, as the grammar writes literals

}  // namespace minfer::grammar
