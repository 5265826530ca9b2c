// The mask against its plain reference twin: at every step of seeded random walks, fill_mask must
// equal the brute force (every token tried on a copy of the matcher), bit for bit, on the small
// vocabulary and on the real Qwen vocabulary.
#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace minfer::grammar::test {
namespace {

// Schemas that reach every kind of state: free and bounded strings, patterns, formats, numbers with
// and without bounds, enums, anyOf with shared prefixes, recursion, additional properties, any JSON.
const char* const kTwinSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","age"]})",
    R"({"type":"string","minLength":3,"maxLength":12})",
    R"({"type":"string","pattern":"^[a-z]+(-[a-z0-9]+)*$"})",
    R"({"type":"string","format":"date-time"})",
    R"({"type":"number","exclusiveMinimum":-2.5,"maximum":1000})",
    R"({"type":"array","items":{"anyOf":[{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]},
        {"type":"object","properties":{"id":{"type":"string"}},"required":["id"]},{"type":"null"}]},"minItems":1})",
    R"({"$defs":{"t":{"type":"object","properties":{"v":{"enum":["a","b",3,null]},"k":{"type":"array",
        "items":{"$ref":"#/$defs/t"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/t"})",
    R"({"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":{"type":"number"}})",
    R"({"type":"string","minLength":2})",
    R"({})",
};

void run_twin(const std::shared_ptr<const Vocab>& vocab, int walks, int steps) {
    int checked = 0;
    for (size_t s = 0; s < std::size(kTwinSchemas); ++s) {
        const auto g = compile_json_schema(Json::parse(kTwinSchemas[s]));
        for (int w = 0; w < walks; ++w) {
            const uint32_t seed = static_cast<uint32_t>(1000 * s + w);
            random_walk(
                g, vocab, seed, steps / 2, steps, [&](const Matcher& m, const std::vector<uint64_t>& bits) {
                    const std::vector<uint64_t> ref = brute_force_mask(m, *vocab);
                    ASSERT_EQ(bits.size(), ref.size());
                    ++checked;
                    if (std::memcmp(bits.data(), ref.data(), bits.size() * sizeof(uint64_t)) == 0) return;
                    for (int32_t id = 0; id < vocab->size(); ++id)
                        if (bit(bits, id) != bit(ref, id)) {
                            ADD_FAILURE() << "schema " << s << " seed " << seed << ": token " << id << " ("
                                          << Json(vocab->token_bytes(id))
                                                 .dump(-1, ' ', true, Json::error_handler_t::replace)
                                          << ") mask " << bit(bits, id) << " brute force " << bit(ref, id);
                            return;
                        }
                });
        }
    }
    EXPECT_GT(checked, walks * 10);
}

TEST(GrammarMaskTwin, SmallVocabulary) {
    run_twin(small_vocab(), 30, 120);
}

TEST(GrammarMaskTwin, QwenVocabulary) {
    MINFER_REQUIRE_FILE(minfer::test::model_path("qwen-vocab.gguf"));
    run_twin(qwen_vocab(), 4, 30);
}

}  // namespace
}  // namespace minfer::grammar::test
