// int8 activations: the activation quantizers (SIMD vs scalar bit for bit, error within half a step),
// the int8 dots (SIMD vs scalar: K-quants bit for bit, 32-element types within a rounding budget) and
// the int8 dot against the f32 reference dot on unquantized activations (activation rounding budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "act_test_util.h"

namespace minfer::test {
namespace {

class Int8Type : public ::testing::TestWithParam<GgmlType> {};

TEST(Int8Act, TableEntries) {
    for (GgmlType t : kAllQuantTypes) {
        const QuantTraits& q = traits(t);
        const bool int8 = std::find(std::begin(kInt8Types), std::end(kInt8Types), t) != std::end(kInt8Types);
        EXPECT_EQ(q.vec_dot_q8 != nullptr, int8) << q.name;
        EXPECT_EQ(q.vec_dot_type, !int8 ? VecDotType::F32 : k_quant(t) ? VecDotType::Q8_K : VecDotType::Q8_0);
        if (!int8) continue;
        EXPECT_EQ(q.vec_dot_q8 != q.vec_dot_q8_ref, quants_use_avx2()) << q.name;
        EXPECT_EQ(q.quantize_act != q.quantize_act_ref, quants_use_avx2()) << q.name;
        EXPECT_EQ(act_row_bytes(q, 2 * 256), k_quant(t) ? 2 * sizeof(BlockQ8K) : 16 * sizeof(BlockQ8A));
    }
}

// Both versions compute d, 1 / d and every x * (1 / d) with the same single roundings and round half to
// even, so the blocks must be identical byte for byte; the level of each element is within half a step
// (plus the rounding of the product) of x / d, the block sums are exact.
TEST_P(Int8Type, QuantizeActMatchesReferenceAndRoundsToNearest) {
    const QuantTraits& q = traits(GetParam());
    std::mt19937 rng(5);
    for (int64_t n : lengths(q)) {
        const std::vector<float> x = activations(rng, n);
        const size_t bytes = act_row_bytes(q, n);
        std::vector<uint8_t> simd(bytes, 0xAA), ref(bytes, 0x55);
        q.quantize_act(x.data(), simd.data(), n);
        q.quantize_act_ref(x.data(), ref.data(), n);
        ASSERT_EQ(simd, ref) << q.name << " n=" << n;
        std::vector<float> xd(static_cast<size_t>(n)), d(static_cast<size_t>(n));
        dequantize_act(q, ref.data(), n, xd.data(), d.data());
        for (int64_t i = 0; i < n; ++i)
            ASSERT_LE(std::fabs(xd[i] - x[i]), 0.5f * d[i] + std::ldexp(std::fabs(x[i]), -21))
                << q.name << " i=" << i;
        for (int64_t b = 0; b < n / 32; ++b) {
            if (q.vec_dot_type == VecDotType::Q8_0) {
                const auto& blk = reinterpret_cast<const BlockQ8A*>(ref.data())[b];
                int s = 0;
                for (int8_t v : blk.qs) s += v;
                EXPECT_EQ(blk.s, blk.d * float(s));
            } else {
                const auto& blk = reinterpret_cast<const BlockQ8K*>(ref.data())[b / 8];
                for (int k = 0; k < 2; ++k) {
                    int s = 0;
                    for (int l = 0; l < 16; ++l) s += blk.qs[32 * (b % 8) + 16 * k + l];
                    EXPECT_EQ(blk.bsums[2 * (b % 8) + k], s);
                }
            }
        }
    }
}

// Rounding budget of the SIMD dot against the reference on the same quantized activations. K-quants:
// identical exact integer sums per super-block, folded by the same f32 operations: bit for bit.
// 32-element types: the reference sums d_w d_x sum(q_w q_x) (+ m_w s_x) per block in double, the SIMD
// version in 2 x 8 f32 lanes of exact 4-product integer sums, then a horizontal reduction and the scalar
// minimum sum: each term passes through at most n/32 + 8 roundings, so
// |simd - ref| <= (n/32 + 8) u sum_i (|w_i - mu_i| + |mu_i|) |xd_i| (+ one more rounding of the result).
TEST_P(Int8Type, SimdVecDotMatchesReference) {
    const QuantTraits& q = traits(GetParam());
    std::mt19937 rng(17);
    for (int64_t n : lengths(q)) {
        for (int trial = 0; trial < 4; ++trial) {
            const std::vector<uint8_t> row = random_row(rng, q.type, n);
            const std::vector<float> x = activations(rng, n);
            std::vector<uint8_t> xq(act_row_bytes(q, n));
            q.quantize_act_ref(x.data(), xq.data(), n);
            const float ref = q.vec_dot_q8_ref(row.data(), xq.data(), n);
            const float simd = q.vec_dot_q8(row.data(), xq.data(), n);
            if (k_quant(q.type)) {
                ASSERT_EQ(f32_bits(simd), f32_bits(ref))
                    << q.name << " n=" << n << ": " << simd << " vs " << ref;
                continue;
            }
            std::vector<float> w(static_cast<size_t>(n)), xd(static_cast<size_t>(n)),
                d(static_cast<size_t>(n));
            q.to_float_ref(row.data(), w.data(), n);
            dequantize_act(q, xq.data(), n, xd.data(), d.data());
            const std::vector<float> mu = weight_minimums(q, row.data(), n);
            double mag = 0.0;
            for (int64_t i = 0; i < n; ++i)
                mag += (std::fabs(double(w[i]) - mu[i]) + std::fabs(mu[i])) * std::fabs(xd[i]);
            const double budget = (double(n) / 32.0 + 9.0) * kU * mag * (1.0 + 1e-6);
            EXPECT_NEAR(simd, ref, budget + 1e-30) << q.name << " n=" << n << " trial " << trial;
        }
    }
}

// The int8 dot against the f32 reference dot on the unquantized activations: the activation rounding
// changes the sum by at most sum_i (|w_i - mu_i| + |mu_i|) * d_i / 2 (the kernels multiply the exact
// d_w q and mu terms), plus f32 rounding of the order (n/32 + 16) u of the magnitudes (also covering the
// few-ulp difference between the exact w - mu and its rounded dequantization).
TEST_P(Int8Type, VecDotWithinActivationRoundingOfF32Dot) {
    const QuantTraits& q = traits(GetParam());
    std::mt19937 rng(23);
    double worst = 0.0;
    for (int64_t n : lengths(q)) {
        for (int trial = 0; trial < 4; ++trial) {
            const std::vector<float> wf = gaussian(rng, n);
            std::vector<uint8_t> row(quant_row_bytes(q, n));
            q.from_float_ref(wf.data(), row.data(), n);
            const std::vector<float> x = activations(rng, n);
            std::vector<uint8_t> xq(act_row_bytes(q, n));
            q.quantize_act(x.data(), xq.data(), n);
            std::vector<float> w(static_cast<size_t>(n)), xd(static_cast<size_t>(n)),
                d(static_cast<size_t>(n));
            q.to_float_ref(row.data(), w.data(), n);
            dequantize_act(q, xq.data(), n, xd.data(), d.data());
            const std::vector<float> mu = weight_minimums(q, row.data(), n);
            double act_err = 0.0, mag = 0.0, abs_sum = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const double wm = std::fabs(double(w[i]) - mu[i]) + std::fabs(mu[i]);
                act_err += wm * 0.5 * d[i];
                mag += wm * (std::fabs(x[i]) + d[i]);
                abs_sum += std::fabs(double(w[i]) * x[i]);
            }
            const float f32 = q.dot_ref(row.data(), x.data(), n);
            const float int8 = q.vec_dot_q8(row.data(), xq.data(), n);
            const double budget = act_err * (1.0 + 1e-5) + (double(n) / 32.0 + 16.0) * kU * mag;
            EXPECT_NEAR(int8, f32, budget) << q.name << " n=" << n << " trial " << trial;
            worst = std::max(worst, std::fabs(double(int8) - f32) / abs_sum);
        }
    }
    RecordProperty("worst_error_over_sum_abs", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Int8Types, Int8Type, ::testing::ValuesIn(kInt8Types), type_name);

}  // namespace
}  // namespace minfer::test
