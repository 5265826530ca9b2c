// Structured output: a JSON schema (or "any JSON object") compiled into a context-free grammar over
// bytes, and a Matcher that follows one generation through it and says which tokens may come next.
//
//   auto grammar = minfer::grammar::compile_json_schema(schema);      // throws SchemaError
//   auto vocab = std::make_shared<minfer::grammar::Vocab>(token_bytes, eog_ids);  // once per tokenizer
//   minfer::grammar::Matcher m(grammar, vocab);
//   std::vector<uint64_t> bits;
//   while (!m.done()) {
//       m.fill_mask(bits);                   // bit id set: token id may be sampled now
//       int32_t id = sample_with(bits);      // the eog ids are set once the value is complete
//       if (vocab->is_eog(id)) break;
//       m.accept(id);
//   }
//
// The text a grammar admits: the value with properties in schema order (optional ones may be left out),
// compact JSON with at most one space, or a newline and up to kMaxIndent spaces or tabs, wherever JSON
// allows whitespace (and before the value, not after it), so a model cannot loop on whitespace. Strings
// are any valid JSON string (escapes, UTF-8 matched byte by byte); under a pattern or format each
// character is written as a JSON serializer would (raw UTF-8, only '"', '\' and controls escaped).
// Numbers have capped digit counts so that every value fits a double (number.h). See
// schema_compiler.h for the keywords.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/matcher.h"
#include "grammar/vocab.h"
#include "util/error.h"

namespace minfer::grammar {

class Grammar;

// A schema the compiler cannot turn into a grammar. keyword: the offending keyword ("patternProperties",
// "pattern", "maxLength", ...); path: the JSON pointer of the schema object holding it ("" for the root,
// "/properties/a"). what(): a user-facing sentence naming both.
struct SchemaError : Error {
    SchemaError(std::string keyword, std::string path, const std::string& detail);
    std::string keyword;
    std::string path;
};

// Properties are emitted in the order the object holds them: pass an ordered_json (as parsed from the
// request) to keep the schema's order; nlohmann::json sorts keys alphabetically.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema);
// response_format {"type": "json_object"}: any JSON object.
std::shared_ptr<const Grammar> any_json_object();

}  // namespace minfer::grammar
