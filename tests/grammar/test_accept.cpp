// Which texts each keyword admits: accept_bytes on whole values (accepted and complete) and on texts
// that must be refused, at the edges of every bound.
#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace minfer::grammar::test {
namespace {

// True when `text` is a whole value of `schema`.
bool accepts(const std::string& schema, const std::string& text) {
    Matcher m(compile_json_schema(Json::parse(schema)), small_vocab());
    return m.accept_bytes(text) && m.complete();
}

TEST(GrammarAccept, Scalars) {
    EXPECT_TRUE(accepts(R"({"type":"null"})", "null"));
    EXPECT_FALSE(accepts(R"({"type":"null"})", "nul"));
    EXPECT_TRUE(accepts(R"({"type":"boolean"})", "false"));
    EXPECT_FALSE(accepts(R"({"type":"boolean"})", "\"true\""));
    EXPECT_TRUE(accepts(R"({"type":["string","null"]})", "null"));
    EXPECT_TRUE(accepts(R"({"type":["string","null"]})", R"("x")"));
    EXPECT_FALSE(accepts(R"({"type":["string","null"]})", "1"));
}

TEST(GrammarAccept, Strings) {
    const char* s = R"({"type":"string"})";
    EXPECT_TRUE(accepts(s, R"("")"));
    EXPECT_TRUE(accepts(s, R"("a \"q\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00")"));
    EXPECT_TRUE(accepts(s, "\"caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\""));
    EXPECT_FALSE(accepts(s, "\"a\nb\""));          // raw control character
    EXPECT_FALSE(accepts(s, "\"\xC3\""));          // truncated UTF-8
    EXPECT_FALSE(accepts(s, "\"\xED\xA0\x80\""));  // an encoded surrogate
    EXPECT_FALSE(accepts(s, "\"\xC0\xAF\""));      // overlong
    EXPECT_FALSE(accepts(s, R"("\ud83d")"));       // lone high surrogate
    EXPECT_FALSE(accepts(s, R"("\x")"));
    EXPECT_FALSE(accepts(s, R"("a)"));
}

TEST(GrammarAccept, StringLengthCountsCharacters) {
    const char* s = R"({"type":"string","minLength":2,"maxLength":3})";
    EXPECT_FALSE(accepts(s, R"("a")"));
    EXPECT_TRUE(accepts(s, R"("ab")"));
    EXPECT_TRUE(accepts(s, "\"\xE4\xB8\xAD\\n\xF0\x9F\x98\x80\""));  // three characters
    EXPECT_TRUE(accepts(s, R"("\ud83d\ude00x")"));                   // a surrogate pair is one
    EXPECT_FALSE(accepts(s, R"("abcd")"));
    EXPECT_TRUE(accepts(R"({"type":"string","maxLength":100000000})", R"("abc")"));
    EXPECT_FALSE(accepts(R"({"type":"string","minLength":100000000})", R"("abc")"));
}

TEST(GrammarAccept, Patterns) {
    const char* phone = R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})";
    EXPECT_TRUE(accepts(phone, R"("555-1234")"));
    EXPECT_FALSE(accepts(phone, R"("555-123")"));
    EXPECT_FALSE(accepts(phone, R"("x555-1234")"));
    const char* search = R"({"type":"string","pattern":"ab+c"})";  // unanchored: anywhere in the string
    EXPECT_TRUE(accepts(search, R"("xxabbbcyy")"));
    EXPECT_FALSE(accepts(search, R"("xxacyy")"));
    const char* cls = R"({"type":"string","pattern":"^[^a-c\\s]{2,}(x|y)?$"})";
    EXPECT_TRUE(accepts(cls, R"("dZx")"));
    EXPECT_FALSE(accepts(cls, R"("da")"));
    EXPECT_FALSE(accepts(cls, R"("d ")"));
    const char* quote = R"({"type":"string","pattern":"^a\"b\\\\.$"})";  // escapes written canonically
    EXPECT_TRUE(accepts(quote, R"("a\"b\\x")"));
    EXPECT_FALSE(accepts(quote, R"("a\"b\\\n")"));  // '.' excludes a newline
    const char* both = R"({"type":"string","pattern":"^[a-z]*$","minLength":2,"maxLength":3})";
    EXPECT_TRUE(accepts(both, R"("abc")"));
    EXPECT_FALSE(accepts(both, R"("a")"));
    EXPECT_FALSE(accepts(both, R"("abcd")"));
}

TEST(GrammarAccept, Formats) {
    EXPECT_TRUE(accepts(R"({"type":"string","format":"date"})", R"("2024-02-29")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"date"})", R"("2023-02-29")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"date"})", R"("2023-04-31")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"date"})", R"("2000-02-29")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"date"})", R"("1900-02-29")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-01-31T23:59:59.5+05:30")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-01-31T24:00:00Z")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"time"})", R"("08:30:00Z")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"email"})", R"("a.b+c@example.co")"));
    EXPECT_FALSE(accepts(R"({"type":"string","format":"email"})", R"("a..b@example.co")"));
    EXPECT_TRUE(accepts(R"({"type":"string","format":"hostname"})", R"("any text")"));  // ignored
}

TEST(GrammarAccept, IntegerBounds) {
    const char* s = R"({"type":"integer","minimum":-5,"maximum":10})";
    for (const char* ok : {"-5", "-1", "0", "7", "10"}) EXPECT_TRUE(accepts(s, ok)) << ok;
    for (const char* bad : {"-6", "11", "100", "-0", "01", "1.0", "1e1", "10.5"})
        EXPECT_FALSE(accepts(s, bad)) << bad;
    const char* ex = R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1000})";
    EXPECT_FALSE(accepts(ex, "0"));
    EXPECT_TRUE(accepts(ex, "1"));
    EXPECT_TRUE(accepts(ex, "999"));
    EXPECT_FALSE(accepts(ex, "1000"));
    const char* frac = R"({"type":"integer","minimum":1.5,"maximum":3.5})";
    EXPECT_FALSE(accepts(frac, "1"));
    EXPECT_TRUE(accepts(frac, "2"));
    EXPECT_TRUE(accepts(frac, "3"));
    EXPECT_FALSE(accepts(frac, "4"));
    // Unbounded integers have at most 19 digits (numbers 16 + 16 and a two-digit exponent).
    EXPECT_TRUE(accepts(R"({"type":"integer"})", "-1234567890123456789"));
    EXPECT_FALSE(accepts(R"({"type":"integer"})", "12345678901234567890"));
    EXPECT_TRUE(accepts(R"({"type":"number"})", "-1234567890123456.1234567890123456e-99"));
    EXPECT_FALSE(accepts(R"({"type":"number"})", "1e100"));
    // With bounds, as many digits as the bounds need.
    EXPECT_TRUE(
        accepts(R"({"type":"integer","minimum":0,"maximum":1e30})", "999999999999999999999999999999"));
}

TEST(GrammarAccept, NumberBounds) {
    const char* s = R"({"type":"number","maximum":10})";
    for (const char* ok : {"10", "9.99", "10.000", "-3.5", "0", "0.0"}) EXPECT_TRUE(accepts(s, ok)) << ok;
    for (const char* bad : {"10.5", "11", "10.0001", "1e1", "-0", "-0.0"})
        EXPECT_FALSE(accepts(s, bad)) << bad;
    // -0.0 equals 0, which exclusiveMinimum 0 excludes.
    const char* pos = R"({"type":"number","exclusiveMinimum":0})";
    for (const char* bad : {"0", "-0.0", "0.000", "-1"}) EXPECT_FALSE(accepts(pos, bad)) << bad;
    for (const char* ok : {"0.001", "5", "123456.75"}) EXPECT_TRUE(accepts(pos, ok)) << ok;
    const char* range = R"({"type":"number","minimum":-1.25,"exclusiveMaximum":0.5})";
    for (const char* ok : {"-1.25", "-1.2", "0", "0.49999"}) EXPECT_TRUE(accepts(range, ok)) << ok;
    for (const char* bad : {"-1.26", "0.5", "0.50", "1"}) EXPECT_FALSE(accepts(range, bad)) << bad;
    const char* tiny = R"({"type":"number","minimum":0.1,"maximum":0.1})";
    EXPECT_TRUE(accepts(tiny, "0.1"));
    EXPECT_TRUE(accepts(tiny, "0.100"));
    EXPECT_FALSE(accepts(tiny, "0.11"));
    EXPECT_TRUE(accepts(R"({"type":"number"})", "-0.5e-3"));
    EXPECT_TRUE(accepts(R"({"type":"number"})", "12E+30"));
    EXPECT_FALSE(accepts(R"({"type":"number"})", "01"));
    EXPECT_FALSE(accepts(R"({"type":"number"})", "1."));
}

TEST(GrammarAccept, Objects) {
    const char* s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
        "c":{"type":"boolean"}},"required":["a","c"],"additionalProperties":false})";
    EXPECT_TRUE(accepts(s, R"({"a":1,"c":true})"));
    EXPECT_TRUE(accepts(s, R"({"a":1,"b":"x","c":true})"));
    EXPECT_TRUE(accepts(s, "{\n  \"a\": 1,\n  \"c\": false\n}"));
    EXPECT_FALSE(accepts(s, R"({"a":1})"));                    // missing required
    EXPECT_FALSE(accepts(s, R"({"c":true,"a":1})"));           // schema order
    EXPECT_FALSE(accepts(s, R"({"a":1,"c":true,"d":null})"));  // additionalProperties false
    EXPECT_FALSE(accepts(s, R"({"a":"1","c":true})"));         // wrong type
    const char* extra = R"({"type":"object","properties":{"a":{"type":"integer"}},
        "additionalProperties":{"type":"string"}})";
    EXPECT_TRUE(accepts(extra, R"({"a":1,"z":"x","y":"w"})"));
    EXPECT_TRUE(accepts(extra, R"({"ab":"x"})"));
    EXPECT_FALSE(accepts(extra, R"({"z":1})"));
    EXPECT_FALSE(accepts(extra, R"({"a":"x"})"));  // "a" is declared: its own schema applies
    EXPECT_TRUE(accepts(R"({"type":"object"})", R"({"k\u00e9y":[1,{"x":null}],"":{}})"));
    EXPECT_TRUE(accepts(R"({"type":"object","required":["x"]})", R"({"x":[true]})"));
    EXPECT_FALSE(accepts(R"({"type":"object","required":["x"]})", R"({})"));
}

TEST(GrammarAccept, Arrays) {
    const char* s = R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})";
    EXPECT_FALSE(accepts(s, "[1]"));
    EXPECT_TRUE(accepts(s, "[1,2]"));
    EXPECT_TRUE(accepts(s, "[1, 2, 3]"));
    EXPECT_FALSE(accepts(s, "[1,2,3,4]"));
    EXPECT_FALSE(accepts(s, "[1,\"2\"]"));
    const char* tuple = R"({"type":"array","prefixItems":[{"type":"string"},{"type":"null"}],"items":false})";
    EXPECT_TRUE(accepts(tuple, R"(["a",null])"));
    EXPECT_TRUE(accepts(tuple, R"(["a"])"));
    EXPECT_FALSE(accepts(tuple, R"(["a",null,1])"));
    EXPECT_TRUE(accepts(R"({"type":"array","maxItems":0})", "[]"));
    EXPECT_FALSE(accepts(R"({"type":"array","maxItems":0})", "[1]"));
    Matcher huge(compile_json_schema(Json::parse(R"({"type":"array","minItems":100000000})")), small_vocab());
    EXPECT_TRUE(huge.accept_bytes("[1,2"));  // a counted loop: no expansion, and not complete early
    EXPECT_FALSE(huge.accept_bytes("]"));
    Matcher m(compile_json_schema(Json::parse(R"({"type":"array","maxItems":1000000000})")), small_vocab());
    EXPECT_TRUE(m.accept_bytes("[1,2,3]"));
}

TEST(GrammarAccept, EnumConstAnyOfRefs) {
    EXPECT_TRUE(accepts(R"({"enum":["red",1,null,{"a":[1]}]})", R"({"a":[1]})"));
    EXPECT_FALSE(accepts(R"({"enum":["red",1,null]})", R"("blue")"));
    EXPECT_FALSE(accepts(R"({"type":"string","enum":["red",1]})", "1"));
    EXPECT_FALSE(accepts(R"({"enum":["a","bb"],"maxLength":1})", R"("bb")"));
    EXPECT_TRUE(accepts(R"({"enum":["a","bb"],"maxLength":1})", R"("a")"));
    EXPECT_TRUE(accepts(R"({"const":"x"})", R"("x")"));
    const char* any = R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})";
    EXPECT_TRUE(accepts(any, "5"));
    EXPECT_TRUE(accepts(any, R"("a")"));
    EXPECT_FALSE(accepts(any, R"("ab")"));
    const char* tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})";
    EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
    EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"kids":[]}]})"));
    const char* merged =
        R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
        {"properties":{"b":{"type":"string"}},"required":["b"]}]})";
    EXPECT_TRUE(accepts(merged, R"({"a":1,"b":"x"})"));
    EXPECT_FALSE(accepts(merged, R"({"a":1})"));
}

TEST(GrammarAccept, WhitespaceIsBounded) {
    const char* s = R"({"type":"object","properties":{"a":{"type":"array"}}})";
    EXPECT_TRUE(accepts(s, "{ \"a\" : [ 1 , 2 ] }"));
    EXPECT_TRUE(accepts(s, "{\n" + std::string(20, ' ') + "\"a\": []}"));
    EXPECT_FALSE(accepts(s, "{\n" + std::string(21, ' ') + "\"a\": []}"));
    EXPECT_FALSE(accepts(s, "{  \"a\": []}"));
    EXPECT_FALSE(accepts(s, "{\n\n\"a\": []}"));
    EXPECT_FALSE(accepts(s, "{\"a\": []} "));  // nothing after the value
    Matcher m(compile_json_schema(Json::parse(s)), small_vocab());
    ASSERT_TRUE(m.accept_bytes("{\"a\":[]}"));
    EXPECT_TRUE(m.done());
}

TEST(GrammarAccept, TokensSpanningSymbolsAndSplitCharacters) {
    const auto v = small_vocab();
    auto id = [&](const std::string& b) {
        for (int32_t i = 0; i < v->size(); ++i)
            if (v->token_bytes(i) == b) return i;
        return -1;
    };
    const char* s = R"({"type":"array","items":{"type":"object","properties":{"a":{"type":"string"}},
        "required":["a"]}})";
    Matcher m(compile_json_schema(Json::parse(s)), v);
    for (const char* t :
         {"[{", "\"a", "\":\"", "\xE4\xB8", "\xAD\xE6\x96\x87", "\"},{\"", "a", "\":\"", "x", "\"}", "]"})
        ASSERT_TRUE(m.accept(id(t))) << "token " << t;
    EXPECT_TRUE(m.done());
    EXPECT_FALSE(m.accept(id("]")));
    EXPECT_TRUE(m.accept(v->eog_ids()[0]));
    std::vector<uint64_t> bits;
    m.fill_mask(bits);
    for (uint64_t w : bits) EXPECT_EQ(w, 0u);
}

TEST(GrammarAccept, AnyJsonObject) {
    Matcher m(any_json_object(), small_vocab());
    EXPECT_FALSE(m.accept_bytes("[]"));
    EXPECT_TRUE(m.accept_bytes(R"( {"a": [1, 2.5e3, "x", {"b": null}], "c": {}})"));
    EXPECT_TRUE(m.done());
}

}  // namespace
}  // namespace minfer::grammar::test
