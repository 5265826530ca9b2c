// Schemas the compiler refuses: every keyword outside the supported set names itself and its JSON
// pointer, malformed keyword values and patterns are precise, and hostile sizes (huge repetitions,
// lengths, nesting) are refused or compiled in bounded memory.
#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar_test_util.h"

namespace minfer::grammar::test {
namespace {

// The SchemaError compiling `schema` throws; fails the test when it compiles.
SchemaError error_of(const std::string& schema) {
    try {
        compile_json_schema(Json::parse(schema));
    } catch (const SchemaError& e) {
        return e;
    }
    ADD_FAILURE() << "compiled: " << schema;
    return SchemaError("", "", "none");
}

TEST(GrammarSchemaErrors, UnsupportedKeywordsNameThemselvesAndTheirPath) {
    for (const char* kw :
         {"patternProperties", "if", "then", "else", "not", "dependentRequired", "dependentSchemas",
          "uniqueItems", "multipleOf", "minProperties", "maxProperties", "contains", "minContains",
          "propertyNames", "unevaluatedProperties", "additionalItems", "$anchor", "nullable"}) {
        const std::string schema =
            std::string(R"({"type":"object","properties":{"a/b":{"type":"object","properties":)") +
            R"({"x~":{")" + kw + R"(":{}}}}}})";
        const SchemaError e = error_of(schema);
        EXPECT_EQ(e.keyword, kw);
        EXPECT_EQ(e.path, "/properties/a~1b/properties/x~0");
        EXPECT_EQ(std::string(e.what()),
                  std::string("unsupported keyword '") + kw + "' at /properties/a~1b/properties/x~0");
    }
    const SchemaError root = error_of(R"({"not":{"type":"null"}})");
    EXPECT_EQ(std::string(root.what()), "unsupported keyword 'not' at the schema root");
    EXPECT_EQ(error_of(R"({"items":{"uniqueItems":true}})").path, "/items");
    EXPECT_EQ(error_of(R"({"anyOf":[{"type":"null"},{"multipleOf":2}]})").path, "/anyOf/1");
    EXPECT_EQ(error_of(R"({"$defs":{"a":{"if":{}}},"$ref":"#/$defs/a"})").path, "/$defs/a");
    EXPECT_EQ(error_of(R"({"type":"array","prefixItems":[{"contains":{}}]})").path, "/prefixItems/0");
}

TEST(GrammarSchemaErrors, UnsupportedPatterns) {
    for (const char* p : {"(?=a)b", "(?!a)", "(?<=a)b", "\\\\bword", "(a)\\\\1", "\\\\p{L}", "a^b", "a$b",
                          "(^a)", "[a", "a{2", "a{3,1}", "*a", "a**", "\\\\k<n>", "\\\\cA", "(a"}) {
        const SchemaError e = error_of(std::string(R"({"type":"string","pattern":")") + p + R"("})");
        EXPECT_EQ(e.keyword, "pattern") << p;
        EXPECT_NE(std::string(e.what()).find("unsupported regular expression"), std::string::npos)
            << e.what();
    }
}

TEST(GrammarSchemaErrors, MalformedValues) {
    EXPECT_EQ(error_of(R"({"type":"strin"})").keyword, "type");
    EXPECT_EQ(error_of(R"({"type":[]})").keyword, "type");
    EXPECT_EQ(error_of(R"({"type":"string","minLength":-1})").keyword, "minLength");
    EXPECT_EQ(error_of(R"({"type":"string","maxLength":1.5})").keyword, "maxLength");
    EXPECT_EQ(error_of(R"({"type":"number","minimum":"1"})").keyword, "minimum");
    EXPECT_EQ(error_of(R"({"type":"number","exclusiveMinimum":true})").keyword, "exclusiveMinimum");
    EXPECT_EQ(error_of(R"({"type":"object","required":"a"})").keyword, "required");
    EXPECT_EQ(error_of(R"({"type":"object","properties":[]})").keyword, "properties");
    EXPECT_EQ(error_of(R"({"anyOf":[]})").keyword, "anyOf");
    EXPECT_EQ(error_of(R"({"enum":"a"})").keyword, "enum");
    EXPECT_EQ(error_of(R"({"$ref":"other.json#/a"})").keyword, "$ref");
    EXPECT_EQ(error_of(R"({"$ref":"#/$defs/missing"})").keyword, "$ref");
    EXPECT_EQ(error_of(R"(["type"])").keyword, "schema");
    const SchemaError none = error_of(R"({"type":"integer","minimum":5,"maximum":4})");
    EXPECT_EQ(std::string(none.what()), "'schema' at the schema root: the schema admits no JSON value");
    EXPECT_EQ(error_of(R"({"enum":[]})").keyword, "schema");
    EXPECT_EQ(error_of(R"(false)").keyword, "schema");
}

TEST(GrammarSchemaErrors, Combinations) {
    EXPECT_EQ(error_of(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})").keyword, "allOf");
    EXPECT_EQ(error_of(R"({"anyOf":[{}],"oneOf":[{}]})").keyword, "oneOf");
    const SchemaError loop =
        error_of(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},
        "$ref":"#/$defs/a"})");
    EXPECT_EQ(loop.keyword, "$ref");
    EXPECT_NE(std::string(loop.what()).find("leads back to itself"), std::string::npos) << loop.what();
    EXPECT_EQ(error_of(R"({"$ref":"#"})").keyword, "$ref");
    EXPECT_EQ(error_of(R"({"$defs":{"a":{"$ref":"#/$defs/a","type":"object"}},"$ref":"#/$defs/a"})").keyword,
              "allOf");
}

TEST(GrammarSchemaErrors, HostileSizesAreRefusedOrBounded) {
    // Counted loops: no expansion at all.
    EXPECT_LT(compile_json_schema(Json::parse(R"({"type":"string","maxLength":100000000})"))->n_states(),
              200u);
    EXPECT_NO_THROW(
        compile_json_schema(Json::parse(R"({"type":"array","minItems":3,"maxItems":4000000000})")));
    // Repetitions inside patterns expand, up to a cap.
    EXPECT_EQ(error_of(R"({"type":"string","pattern":"^(a{1000}){1000}$"})").keyword, "pattern");
    EXPECT_EQ(error_of(R"({"type":"string","pattern":"^((a{100}){100}){100}$"})").keyword, "pattern");
    EXPECT_EQ(error_of(R"({"type":"string","pattern":"^a{99999999}$"})").keyword, "pattern");
    const SchemaError len = error_of(R"({"type":"string","pattern":"^[a-z]*$","maxLength":100000})");
    EXPECT_EQ(len.keyword, "maxLength");
    EXPECT_EQ(len.path, "");
    std::string deep = R"({"type":"integer"})";
    for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
    const SchemaError nest = error_of(deep);
    EXPECT_NE(std::string(nest.what()).find("nests deeper than"), std::string::npos) << nest.what();
    EXPECT_NO_THROW(
        compile_json_schema(Json::parse(R"({"type":"number","minimum":-1e300,"maximum":5e-300})")));
}

}  // namespace
}  // namespace minfer::grammar::test
