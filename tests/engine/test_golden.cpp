// Golden tests against references we did not write (../shared/refs, README there): float64 HF
// transformers for the F16/BF16 mini models, float64 on dequantized weights for the quantized files,
// and llama.cpp's greedy output for stories260K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "golden_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

constexpr double kLogitTol = 2e-3;  // absolute, against the float64 reference (issue acceptance)

struct FloatCase {
    const char* model;     // qwen2-mini, ...
    const char* type;      // F16, BF16
    int tp = 1;            // tensor-parallel ranks
    bool in_repo = false;  // the file and its references are in tests/data/minis, not $MINFER_TEST_DATA
};

// A test name from a model and type: "qwen3moe-mini", "F16" -> "qwen3moe_mini_F16".
std::string case_name(std::string model, const std::string& type) {
    std::replace(model.begin(), model.end(), '-', '_');
    return model + "_" + type;
}

void PrintTo(const FloatCase& c, std::ostream* os) {
    *os << c.model << "-" << c.type << " at " << c.tp << " ranks";
}

// The golden settings with `tp` tensor-parallel ranks.
SessionParams golden_params_tp(int64_t n_ctx, int tp) {
    SessionParams p = golden_params(n_ctx);
    p.tensor_parallel = tp;
    return p;
}

class FloatGolden : public ::testing::TestWithParam<FloatCase> {};

TEST_P(FloatGolden, GreedyAndLogitsMatchFloat64Reference) {
    const FloatCase& c = GetParam();
    const std::string name = c.model;
    const auto model_file = [&](const std::string& f) {
        return c.in_repo ? repo_mini_path(f) : model_path(f);
    };
    const auto ref_file_of = [&](const std::string& f) {
        return c.in_repo ? repo_mini_path(f) : ref_path(f);
    };
    const std::string file = model_file(name + "-" + c.type + ".gguf");
    const std::string ref_file = ref_file_of(name + ".ref.json");
    MINFER_REQUIRE_FILE(file);
    MINFER_REQUIRE_FILE(ref_file);
    const auto ref = load_json(ref_file);
    const auto model = Model::load(file);
    Session s(*model, golden_params_tp(512, c.tp));
    const int64_t n_vocab = model->hp.n_vocab;

    std::vector<float> full;
    if (std::ifstream f(ref_file_of(name + ".logits.f32"), std::ios::binary); f) {
        f.seekg(0, std::ios::end);
        full.resize(size_t(f.tellg()) / sizeof(float));
        f.seekg(0);
        f.read(reinterpret_cast<char*>(full.data()), std::streamsize(full.size() * sizeof(float)));
    }
    for (const auto& p : ref["prompts"]) {
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        SCOPED_TRACE(p["text"].get<std::string>());
        EXPECT_EQ(greedy(s, ids, 48), p["greedy_ids"].get<std::vector<int32_t>>());

        const std::vector<float> logits = teacher_forced(s, ids);
        for (size_t t = 0; t < ids.size(); ++t) {
            const auto top_ids = p["top10_ids"][t].get<std::vector<int32_t>>();
            const auto top_logits = p["top10_logits"][t].get<std::vector<double>>();
            for (size_t k = 0; k < top_ids.size(); ++k)
                ASSERT_NEAR(logits[t * size_t(n_vocab) + size_t(top_ids[k])], top_logits[k], kLogitTol)
                    << "position " << t << " token " << top_ids[k];
        }
        if (!p.contains("full_logits_offset_floats") || full.empty()) continue;
        const auto off = p["full_logits_offset_floats"].get<size_t>();
        ASSERT_EQ(p["full_logits_shape"][1].get<int64_t>(), n_vocab);
        ASSERT_LE(off + logits.size(), full.size());
        double max_diff = 0;
        for (size_t i = 0; i < logits.size(); ++i)
            max_diff = std::max(max_diff, std::fabs(double(logits[i]) - full[off + i]));
        EXPECT_LE(max_diff, kLogitTol) << "full logits";
    }
}

INSTANTIATE_TEST_SUITE_P(Models, FloatGolden,
                         ::testing::Values(FloatCase{"qwen2-mini", "F16"}, FloatCase{"qwen2-mini", "BF16"},
                                           FloatCase{"qwen3-mini", "F16"}, FloatCase{"qwen3-mini", "BF16"},
                                           FloatCase{"llama-mini", "F16"}, FloatCase{"llama-mini", "BF16"}),
                         [](const auto& info) { return case_name(info.param.model, info.param.type); });

// The architectures whose minis this repository holds (scripts/make-arch-mini.py, trained and referenced
// in float64 throughout on an H100): qwen3moe (4 layers, 8 experts, 2 per token), gemma3 (6 layers,
// window 16, linear RoPE scaling on the global layer) and gpt-oss (4 layers alternating window 16 and
// global, sinks, YaRN x32, 8 biased experts).
INSTANTIATE_TEST_SUITE_P(RepoMinis, FloatGolden,
                         ::testing::Values(FloatCase{"qwen3moe-mini", "F16", 1, true},
                                           FloatCase{"gemma3-mini", "F16", 1, true},
                                           FloatCase{"gptoss-mini", "F16", 1, true}),
                         [](const auto& info) { return case_name(info.param.model, info.param.type); });

// The same references at two tensor-parallel ranks (models/shard.h): the partial sums of attn_output and
// ffn_down add in another order, within the same budget.
INSTANTIATE_TEST_SUITE_P(TensorParallel, FloatGolden,
                         ::testing::Values(FloatCase{"qwen2-mini", "F16", 2},
                                           FloatCase{"qwen3-mini", "BF16", 2},
                                           FloatCase{"llama-mini", "F16", 2}),
                         [](const auto& info) {
                             return case_name(info.param.model, info.param.type) + "_tp2";
                         });

// Quantized files: teacher-forced top-1 agreement with the float64 reference on the dequantized weights,
// over prompt + reference greedy continuation, must be at least llama.cpp's (measured, in the issue).
struct QuantCase {
    const char* model;
    const char* type;
    double llamacpp_agreement;  // fraction of the positions llama.cpp gets right
    int tp = 1;                 // tensor-parallel ranks
    bool in_repo = false;  // the reference is in tests/data/minis, the file unpacked from its archive there
};

void PrintTo(const QuantCase& c, std::ostream* os) {
    *os << c.model << "-" << c.type << " at " << c.tp << " ranks";
}

class QuantGolden : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantGolden, TopOneAgreementAtLeastLlamaCpp) {
    const auto [name, type, floor, tp, in_repo] = GetParam();
    const std::string base = std::string(name) + "-" + type;
    const std::string file = in_repo ? unpacked_mini_path(base + ".gguf") : model_path(base + ".gguf");
    const std::string ref_file = in_repo ? repo_mini_path(base + ".ref.json") : ref_path(base + ".ref.json");
    MINFER_REQUIRE_FILE(file);
    MINFER_REQUIRE_FILE(ref_file);
    const auto ref = load_json(ref_file);
    const auto model = Model::load(file);
    Session s(*model, golden_params_tp(512, tp));
    const auto n_vocab = size_t(model->hp.n_vocab);
    int agree = 0, total = 0;
    for (const auto& p : ref["prompts"]) {
        auto ids = p["ids"].get<std::vector<int32_t>>();
        const auto cont = p["greedy_ids"].get<std::vector<int32_t>>();
        std::vector<int32_t> expected;
        for (const auto& top : p["top10_ids"]) expected.push_back(top[0].get<int32_t>());
        for (size_t j = 1; j < cont.size(); ++j)
            expected.push_back(p["greedy_top5"][j]["ids"][0].get<int32_t>());
        ids.insert(ids.end(), cont.begin(), cont.end() - 1);
        ASSERT_EQ(ids.size(), expected.size());
        const std::vector<float> logits = teacher_forced(s, ids);
        for (size_t t = 0; t < ids.size(); ++t, ++total)
            agree += argmax(std::span<const float>(logits.data() + t * n_vocab, n_vocab)) == expected[t];
    }
    // six prompts and 48 reference tokens each; the shared references' last prompt is 33 ids, the
    // minis' (qwen3-mini.ref.json's prompts) 19
    EXPECT_EQ(total, in_repo ? 404 : 418);
    const double rate = double(agree) / total;
    RecordProperty("agreement", std::to_string(rate));
    std::printf("%s at %d rank(s): top-1 agreement %d/%d = %.2f%% (llama.cpp %.2f%%)\n", base.c_str(), tp,
                agree, total, 100 * rate, 100 * floor);
    EXPECT_GE(rate + 1e-9, floor);
}

INSTANTIATE_TEST_SUITE_P(
    Files, QuantGolden,
    ::testing::Values(QuantCase{"qwen2-mini", "Q8_0", 0.9904}, QuantCase{"qwen2-mini", "Q6_K", 0.9689},
                      QuantCase{"qwen2-mini", "Q5_K_M", 0.9880}, QuantCase{"qwen2-mini", "Q4_K_M", 0.9856},
                      QuantCase{"qwen2-mini", "Q4_0", 0.9904}, QuantCase{"qwen3-mini", "Q8_0", 0.9737},
                      QuantCase{"qwen3-mini", "Q6_K", 0.9761}, QuantCase{"qwen3-mini", "Q5_K_M", 0.9665},
                      QuantCase{"qwen3-mini", "Q4_K_M", 0.9809}, QuantCase{"qwen3-mini", "Q4_0", 0.9856}),
    [](const auto& info) { return case_name(info.param.model, info.param.type); });

// The types llama.cpp's Qwen3-MoE and gpt-oss files come in, on a 256-wide qwen3moe mini (every matrix
// takes the K-quants and IQ4_XS; scripts/make-arch-mini.py qwen3moe256, quantized by Debian's
// llama-quantize, referenced in float64 on the dequantized weights), each against llama.cpp's
// teacher-forced agreement on the same file (tests/data/minis/*.llamacpp.json).
INSTANTIATE_TEST_SUITE_P(RepoMinis, QuantGolden,
                         ::testing::Values(QuantCase{"qwen3moe256-mini", "Q2_K", 0.9876, 1, true},
                                           QuantCase{"qwen3moe256-mini", "Q3_K_M", 0.9802, 1, true},
                                           QuantCase{"qwen3moe256-mini", "IQ4_NL", 0.9901, 1, true},
                                           QuantCase{"qwen3moe256-mini", "IQ4_XS", 0.9728, 1, true},
                                           QuantCase{"qwen3moe256-mini", "MXFP4_MOE", 0.9901, 1, true}),
                         [](const auto& info) { return case_name(info.param.model, info.param.type); });

// Two ranks, the same floors: Q4_K_M's attn_output stays whole (its blocks of 256 do not split at a head
// boundary of 128 columns) and its FFN splits unevenly (768 = 2 + 1 blocks); Q8_0 splits both evenly.
INSTANTIATE_TEST_SUITE_P(TensorParallel, QuantGolden,
                         ::testing::Values(QuantCase{"qwen2-mini", "Q8_0", 0.9904, 2},
                                           QuantCase{"qwen2-mini", "Q4_K_M", 0.9856, 2},
                                           QuantCase{"qwen3-mini", "Q6_K", 0.9761, 2},
                                           QuantCase{"qwen3-mini", "Q4_0", 0.9856, 2}),
                         [](const auto& info) {
                             return case_name(info.param.model, info.param.type) + "_tp2";
                         });

TEST(Stories260K, GreedyMatchesLlamaCpp) {
    MINFER_REQUIRE_FILE(model_path("stories260K.gguf"));
    MINFER_REQUIRE_FILE(ref_path("stories260K.llamacpp.json"));
    const auto ref = load_json(ref_path("stories260K.llamacpp.json"));
    const auto model = Model::load(model_path("stories260K.gguf"));
    Session s(*model, golden_params(256));
    for (const auto& p : ref["prompts"]) {
        const auto want = p["greedy_ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(greedy(s, p["ids"].get<std::vector<int32_t>>(), int(want.size())), want) << p["text"];
    }
}

}  // namespace
}  // namespace minfer::test
