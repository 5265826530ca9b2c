// int8x2 activations: the two-level quantizer (SIMD vs scalar bit for bit, x - d * (254 hi + lo) within
// half a step d), the int8x2 dots (SIMD vs scalar within a rounding budget), and the int8x2 dot against
// the f32 reference dot on unquantized activations: within the two-level representation error, and far
// below the int8 dot's error on the same rows.
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

using quants::BlockQ8X2;

class Int8x2Type : public ::testing::TestWithParam<GgmlType> {};

const BlockQ8X2& x2_block(const std::vector<uint8_t>& xq, int64_t i) {
    return reinterpret_cast<const BlockQ8X2*>(xq.data())[i / 32];
}

// The value block element i stands for, d * (254 hi + lo), in double (exact).
double x2_value(const std::vector<uint8_t>& xq, int64_t i) {
    const BlockQ8X2& b = x2_block(xq, i);
    return double(b.d) * (254 * b.hi[i % 32] + b.lo[i % 32]);
}

// The residual x - 254 d * hi that lo quantizes, in double (exact).
double x2_residual(const std::vector<uint8_t>& xq, const std::vector<float>& x, int64_t i) {
    const BlockQ8X2& b = x2_block(xq, i);
    return double(x[size_t(i)]) - 254.0 * double(b.d) * b.hi[i % 32];
}

TEST(Int8x2Act, TableEntries) {
    for (GgmlType t : kAllQuantTypes) {
        const QuantTraits& q = traits(t);
        const bool x2 = std::find(std::begin(kX2Types), std::end(kX2Types), t) != std::end(kX2Types) &&
                        (!lowbit(t) || quants_use_avx512());
        EXPECT_EQ(q.vec_dot_x2 != nullptr, x2) << q.name;
        EXPECT_EQ(q.quantize_x2 != nullptr, x2) << q.name;
        EXPECT_EQ(q.vec_dot_x2_cols != nullptr, x2) << q.name;
        if (!x2) continue;
        EXPECT_EQ(q.vec_dot_x2 != q.vec_dot_x2_ref, quants_use_avx2()) << q.name;
        EXPECT_EQ(q.quantize_x2 != q.quantize_x2_ref, quants_use_avx2()) << q.name;
    }
    EXPECT_EQ(act_x2_row_bytes(2 * 256), 16 * (sizeof(BlockQ8X2) + 8 * sizeof(int32_t) + 8) + 8 * 128);
    EXPECT_EQ(act_x2_row_bytes(96), 3 * (sizeof(BlockQ8X2) + 8 * sizeof(int32_t) + 8) + 128);
}

// Both versions round the same products the same way (round half to even, one fused multiply-add for
// the residual), so the blocks must be identical byte for byte. d = max |x| / (127 * 254); the high level
// is within half a step 254 d of x (plus the rounding of x * (1 / (254 d))), so the residual is within
// 127 d and the low level rounds it to within d / 2 (plus the roundings of the residual and of
// r * (1 / d), 2^-21 |r| in all); s is d * (254 sum(hi) + sum(lo)), the integer exact; the offsets after
// the blocks are 32 times the merged sums of each four elements.
TEST_P(Int8x2Type, QuantizeMatchesReferenceAndBoundsResidual) {
    const QuantTraits& q = traits(GetParam());
    SKIP_WITHOUT_X2(q);
    std::mt19937 rng(5);
    for (int64_t n : lengths(q)) {
        const std::vector<float> x = activations(rng, n);
        const size_t bytes = act_x2_row_bytes(n);
        std::vector<uint8_t> simd(bytes, 0xAA), ref(bytes, 0x55);
        q.quantize_x2(x.data(), simd.data(), n);
        q.quantize_x2_ref(x.data(), ref.data(), n);
        ASSERT_EQ(simd, ref) << q.name << " n=" << n;
        for (int64_t i = 0; i < n; ++i) {
            const BlockQ8X2& b = x2_block(ref, i);
            const double r = x2_residual(ref, x, i);
            ASSERT_LE(std::fabs(r), 127.0 * b.d + std::ldexp(std::fabs(x[size_t(i)]), -21))
                << q.name << " i=" << i;
            ASSERT_LE(std::fabs(x[size_t(i)] - x2_value(ref, i)), 0.5 * b.d + std::ldexp(std::fabs(r), -21))
                << q.name << " i=" << i;
        }
        for (int64_t i = 0; i < n; i += 32) {
            const BlockQ8X2& b = x2_block(ref, i);
            float amax = 0.0f;
            int sum = 0;
            for (int l = 0; l < 32; ++l)
                amax = std::max(amax, std::fabs(x[size_t(i + l)])), sum += 254 * b.hi[l] + b.lo[l];
            EXPECT_EQ(b.d, amax / 32258.0f) << q.name << " block " << i / 32;
            EXPECT_EQ(b.s, b.d * float(sum)) << q.name << " block " << i / 32;
            for (int k = 0; k < 8; ++k) {  // the Q6_K dot's offsets: 32 times each lane's merged sum
                int lane = 0;
                for (int l = 4 * k; l < 4 * k + 4; ++l) lane += 254 * b.hi[l] + b.lo[l];
                EXPECT_EQ(quants::x2_offsets(ref.data(), n)[8 * (i / 32) + k], 32 * lane)
                    << q.name << " block " << i / 32;
            }
            const quants::X2Wide wide = quants::x2_wide(ref.data(), n);  // the 512-bit dots' copy
            EXPECT_EQ(wide.d[i / 32], b.d) << q.name << " block " << i / 32;
            EXPECT_EQ(wide.s[i / 32], b.s) << q.name << " block " << i / 32;
            if (i / 64 >= n / 64) continue;  // an odd last block has no pair
            const int8_t* pair = wide.pairs + 128 * (i / 64) + 32 * ((i / 32) % 2);
            EXPECT_EQ(std::memcmp(pair, b.hi, 32), 0) << q.name << " block " << i / 32;
            EXPECT_EQ(std::memcmp(pair + 64, b.lo, 32), 0) << q.name << " block " << i / 32;
        }
    }
}

// The reference scales each block's exact sum q . (254 hi + lo) in double; the SIMD version converts its
// 8 int32 lanes to f32 (rounded past 2^24) and accumulates them times d_w * d (K-quants: times
// (d_w * the sub-block scale, exact) * d, one rounding as well) in 8 f32 lanes, the minimum terms (unsigned
// levels with m_w * s, for Q4_0 / Q5_0 too, where the reference uses signed levels) in their own chain, then
// reduces: every term passes through at most n/16 + 16 roundings, so |simd - ref| <= (n/16 + 16) u sum_i
// (|w_i - mu_i| + |mu_i|) |x2_i|.
void check_x2_dot(const QuantTraits& q, float (*dot)(const void*, const void*, int64_t), const char* isa) {
    std::mt19937 rng(17);
    for (int64_t n : lengths(q)) {
        for (int trial = 0; trial < 4; ++trial) {
            const std::vector<uint8_t> row = random_row(rng, q.type, n);
            const std::vector<float> x = activations(rng, n);
            std::vector<uint8_t> xq(act_x2_row_bytes(n));
            q.quantize_x2_ref(x.data(), xq.data(), n);
            std::vector<float> w(static_cast<size_t>(n));
            q.to_float_ref(row.data(), w.data(), n);
            const std::vector<float> mu = weight_minimums(q, row.data(), n);
            double mag = 0.0;
            for (int64_t i = 0; i < n; ++i)
                mag += (std::fabs(double(w[i]) - mu[i]) + std::fabs(mu[i])) * std::fabs(x2_value(xq, i));
            const float ref = q.vec_dot_x2_ref(row.data(), xq.data(), n);
            const float simd = dot(row.data(), xq.data(), n);
            const double budget = (double(n) / 16.0 + 16.0) * kU * mag * (1.0 + 1e-6);
            EXPECT_NEAR(simd, ref, budget + 1e-30)
                << q.name << " " << isa << " n=" << n << " trial " << trial;
        }
    }
}

TEST_P(Int8x2Type, SimdVecDotMatchesReference) {
    const QuantTraits& q = traits(GetParam());
    SKIP_WITHOUT_X2(q);
    check_x2_dot(q, q.vec_dot_x2, "table");
}

// The table holds one SIMD dot per type, the widest this CPU runs; the types with an AVX-512 dot also
// keep their AVX2 one, and each is checked wherever the CPU runs it (the AVX-512 ones pair two blocks
// per vector: the same budget holds, with n/64 + 6 roundings per lane chain).
using Dot = float (*)(const void*, const void*, int64_t);
const std::pair<GgmlType, std::pair<Dot, Dot>> kWideDots[] = {
    {GgmlType::Q8_0, {quants::avx2::vec_dot_x2_q8_0, quants::avx512::vec_dot_x2_q8_0}},
    {GgmlType::Q4_0, {quants::avx2::vec_dot_x2_q4_0, quants::avx512::vec_dot_x2_q4_0}},
    {GgmlType::Q5_0, {quants::avx2::vec_dot_x2_q5_0, quants::avx512::vec_dot_x2_q5_0}},
    {GgmlType::Q4_K, {quants::avx2::vec_dot_x2_q4_k, quants::avx512::vec_dot_x2_q4_k}},
    {GgmlType::Q5_K, {quants::avx2::vec_dot_x2_q5_k, quants::avx512::vec_dot_x2_q5_k}},
    {GgmlType::Q6_K, {quants::avx2::vec_dot_x2_q6_k, quants::avx512::vec_dot_x2_q6_k}},
};

// The low-bit formats' AVX-512 dots (they have no AVX2 int8x2 ones).
const std::pair<GgmlType, Dot> kLowbitWideDots[] = {
    {GgmlType::Q2_K, quants::avx512::vec_dot_x2_q2_k},
    {GgmlType::Q3_K, quants::avx512::vec_dot_x2_q3_k},
    {GgmlType::IQ4_NL, quants::avx512::vec_dot_x2_iq4_nl},
    {GgmlType::IQ4_XS, quants::avx512::vec_dot_x2_iq4_xs},
    {GgmlType::MXFP4, quants::avx512::vec_dot_x2_mxfp4},
};

TEST(Int8x2Dots, Avx2MatchesReference) {
    if (!quants_use_avx2()) GTEST_SKIP() << "this CPU lacks AVX2";
    for (const auto& [type, fns] : kWideDots) check_x2_dot(traits(type), fns.first, "avx2");
}

TEST(Int8x2Dots, Avx512MatchesReference) {
    if (!quants_use_avx512())
        GTEST_SKIP() << "this CPU lacks AVX-512 (F, BW, VL, VNNI), or MINFER_NO_AVX512 is set";
    for (const auto& [type, fns] : kWideDots) check_x2_dot(traits(type), fns.second, "avx512");
    for (const auto& [type, dot] : kLowbitWideDots) check_x2_dot(traits(type), dot, "avx512");
}

// The int8x2 dot against the f32 reference dot on the unquantized activations. The minimum terms use
// s, the sum of the represented values, so the dot is sum_i w_i d (254 hi_i + lo_i) up to f32 rounding:
// it differs from the f32 dot by at most sum_i |w_i| (d_i / 2 + 2^-21 |r_i|) (the quantizer's bound),
// plus roundings of order (n/16 + 16) u of the magnitudes. Over all rows, its total error must also be
// below 1/50 of the int8 dot's (the format's point; the ratio of the steps is 254).
TEST_P(Int8x2Type, VecDotWithinRepresentationOfF32Dot) {
    const QuantTraits& q = traits(GetParam());
    SKIP_WITHOUT_X2(q);
    std::mt19937 rng(23);
    double worst = 0.0, total_x2 = 0.0, total_int8 = 0.0;
    for (int64_t n : lengths(q)) {
        for (int trial = 0; trial < 4; ++trial) {
            const std::vector<float> wf = gaussian(rng, n);
            std::vector<uint8_t> row(quant_row_bytes(q, n));
            q.from_float_ref(wf.data(), row.data(), n);
            const std::vector<float> x = activations(rng, n);
            std::vector<uint8_t> xq(act_x2_row_bytes(n)), xq8(act_row_bytes(q, n));
            q.quantize_x2(x.data(), xq.data(), n);
            q.quantize_act(x.data(), xq8.data(), n);
            std::vector<float> w(static_cast<size_t>(n));
            q.to_float_ref(row.data(), w.data(), n);
            const std::vector<float> mu = weight_minimums(q, row.data(), n);
            double rep_err = 0.0, mag = 0.0, abs_sum = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const double d = x2_block(xq, i).d, r = x2_residual(xq, x, i);
                const double wm = std::fabs(double(w[i]) - mu[i]) + std::fabs(mu[i]);
                rep_err += std::fabs(w[i]) * (0.5 * d + std::ldexp(std::fabs(r), -21));
                mag += wm * (std::fabs(x[i]) + d);
                abs_sum += std::fabs(double(w[i]) * x[i]);
            }
            const float f32 = q.dot_ref(row.data(), x.data(), n);
            const float x2 = q.vec_dot_x2(row.data(), xq.data(), n);
            const double budget = rep_err * (1.0 + 1e-5) + (double(n) / 16.0 + 16.0) * kU * mag;
            EXPECT_NEAR(x2, f32, budget) << q.name << " n=" << n << " trial " << trial;
            worst = std::max(worst, std::fabs(double(x2) - f32) / abs_sum);
            total_x2 += std::fabs(double(x2) - f32);
            total_int8 += std::fabs(double(q.vec_dot_q8(row.data(), xq8.data(), n)) - f32);
        }
    }
    EXPECT_LT(50.0 * total_x2, total_int8) << q.name;
    RecordProperty("worst_error_over_sum_abs", std::to_string(worst));
    RecordProperty("int8_over_int8x2_error", std::to_string(total_int8 / total_x2));
}

INSTANTIATE_TEST_SUITE_P(Int8x2Types, Int8x2Type, ::testing::ValuesIn(kX2Types), type_name);

}  // namespace
}  // namespace minfer::test
