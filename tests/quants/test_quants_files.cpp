// Real files: tensors of the quantized qwen2-mini models, dequantized by the traits table, must match the
// same tensors of the F16 model. llama.cpp wrote these files, so this checks our block layouts against
// ggml's own quantizer: a misread layout (wrong nibble order, scale packing, field offset) gives errors
// of the order of the values themselves (~100%).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mini_gguf.h"
#include "quant_test_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

// Relative RMSE each tensor type may show against F16. Rounding to a grid of step s costs s / sqrt(12)
// RMS; with steps set by the block maxima of these Gaussian-like weights that is about 0.5% for Q8_0,
// 2% Q6_K, 4% Q5_K, 7-8% Q4_K/Q4_0 (measured on these files: 0.53%, 1.8%, 3.6%, 7.1%, 8.6%). The limits
// keep 1.4-1.9x headroom; a misread layout lands near 100%. BF16 vs F16: both hold rounded copies of
// the same weights, at most 2^-9 relative apart.
double rmse_limit(GgmlType t) {
    switch (t) {
        case GgmlType::BF16:
            return 0.003;
        case GgmlType::Q8_0:
            return 0.01;
        case GgmlType::Q6_K:
            return 0.03;
        case GgmlType::Q5_K:
            return 0.05;
        case GgmlType::Q4_K:
            return 0.10;
        case GgmlType::Q4_0:
            return 0.12;
        default:
            return 0.0;
    }
}

struct Loaded {
    GgmlType type;
    int64_t n;
    const uint8_t* data;
};

Loaded load(const MiniGguf& f, const std::string& name) {
    const MiniGguf::Tensor* t = f.find(name);
    if (!t) throw std::runtime_error("missing tensor " + name);
    const QuantTraits& q = traits(GgmlType(t->type));
    int64_t rows = 1;
    for (size_t i = 1; i < t->dims.size(); ++i) rows *= t->dims[i];
    const int64_t n = t->dims[0] * rows;
    return {q.type, n, f.data(*t, quant_row_bytes(q, t->dims[0]) * uint64_t(rows))};
}

std::vector<float> dequantize(const Loaded& t) {
    std::vector<float> out(static_cast<size_t>(t.n));
    traits(t.type).to_float(t.data, out.data(), t.n);
    return out;
}

class QuantFile : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantFile, TensorsMatchF16Model) {
    const std::string f16_path = model_path("qwen2-mini-F16.gguf");
    const std::string q_path = model_path(std::string("qwen2-mini-") + GetParam() + ".gguf");
    MINFER_REQUIRE_FILE(f16_path);
    MINFER_REQUIRE_FILE(q_path);
    const MiniGguf f16(f16_path), qf(q_path);
    for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                             "blk.0.ffn_down.weight", "blk.1.ffn_gate.weight"}) {
        const Loaded ref = load(f16, name), got = load(qf, name);
        ASSERT_EQ(ref.type, GgmlType::F16) << name;
        ASSERT_EQ(got.n, ref.n) << name;
        const std::vector<float> want = dequantize(ref), have = dequantize(got);
        const double rmse = relative_rmse(have.data(), want.data(), ref.n);
        RecordProperty(std::string(name) + "." + traits(got.type).name, std::to_string(rmse));
        EXPECT_LE(rmse, rmse_limit(got.type)) << GetParam() << " " << name << " as " << traits(got.type).name;
        if (traits(got.type).block_size > 1) {  // the dense BF16 model may hold exactly the F16 values
            EXPECT_GT(rmse, 0.0) << name << ": quantized weights equal to F16 mean the file was misread";
        }
    }
}

// The SIMD kernels on real blocks: dequantization bit-exact against the reference, and the dot of the
// first rows with a random vector within the rounding budget explained in test_quants.cpp.
TEST_P(QuantFile, KernelsAgreeOnRealBlocks) {
    const std::string q_path = model_path(std::string("qwen2-mini-") + GetParam() + ".gguf");
    MINFER_REQUIRE_FILE(q_path);
    const MiniGguf qf(q_path);
    std::mt19937 rng(5);
    for (const char* name : {"token_embd.weight", "blk.0.ffn_down.weight", "blk.0.attn_k.weight"}) {
        const Loaded w = load(qf, name);
        const MiniGguf::Tensor& t = *qf.find(name);
        const QuantTraits& q = traits(w.type);
        const std::vector<float> simd = dequantize(w);
        std::vector<float> ref(static_cast<size_t>(w.n));
        q.to_float_ref(w.data, ref.data(), w.n);
        ASSERT_EQ(std::memcmp(simd.data(), ref.data(), ref.size() * sizeof(float)), 0) << name;
        const int64_t n_in = t.dims[0];
        const std::vector<float> x = gaussian(rng, n_in);
        for (int64_t r = 0; r < 16; ++r) {
            const uint8_t* row = w.data + size_t(r) * quant_row_bytes(q, n_in);
            double abs_sum = 0.0;
            for (int64_t i = 0; i < n_in; ++i) abs_sum += std::fabs(double(ref[size_t(r * n_in + i)]) * x[i]);
            const double budget = (double(n_in) / 32.0 + 13.0) * std::ldexp(1.0, -24) * abs_sum;
            EXPECT_NEAR(q.dot(row, x.data(), n_in), q.dot_ref(row, x.data(), n_in), budget)
                << name << " row " << r;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Qwen2Mini, QuantFile,
                         ::testing::Values("BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param);
                         });

}  // namespace
}  // namespace minfer::test
