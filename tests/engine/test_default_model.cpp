// The embedded default model (models/qwen2-mini-Q8_0.gguf) ships with the repo, so its greedy output is
// pinned here without ../shared: the ids are the float64 reference's (HF transformers on the weights
// dequantized from this very file, refs/qwen2-mini-Q8_0.ref.json, first prompt), not our engine's.
#include <gtest/gtest.h>

#include "golden_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

const std::string kDefaultModel = std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf";

TEST(DefaultModel, GreedyEqualsFloat64Reference) {
    const std::vector<int32_t> prompt = {785,  1140, 943, 374, 264,
                                         5206, 480,  511, 4375};  // "The list type is a mutable sequence"
    const std::vector<int32_t> reference = {
        943,  13,  220,  576, 549, 76,   769,  25,   63,  93,   1700, 4847, 495, 563,  3989, 4393,
        4675, 264, 1140, 315, 607, 819,  683,  2056, 279, 511,  4375, 943,  13,  220,  576,  549,
        76,   769, 25,   63,  93,  1700, 4847, 495,  563, 3989, 4393, 4675, 264, 1140, 315,  607};
    const auto model = Model::load(kDefaultModel);
    Session s(*model, {128, 2});
    EXPECT_EQ(greedy(s, prompt, 48), reference);
}

TEST(DefaultModel, AllReferencePromptsGreedy) {
    MINFER_REQUIRE_FILE(ref_path("qwen2-mini-Q8_0.ref.json"));
    const auto ref = load_json(ref_path("qwen2-mini-Q8_0.ref.json"));
    const auto model = Model::load(kDefaultModel);
    Session s(*model, {256, 2});
    for (const auto& p : ref["prompts"])
        EXPECT_EQ(greedy(s, p["ids"].get<std::vector<int32_t>>(), 48),
                  p["greedy_ids"].get<std::vector<int32_t>>())
            << p["text"];
}

}  // namespace
}  // namespace minfer::test
