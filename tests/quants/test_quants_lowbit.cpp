// Known answers for the low-bit formats: blocks built byte by byte, and the values they stand for worked
// out here from the format definitions (ggml's block_q2_K, block_q3_K, block_iq4_nl, block_iq4_xs,
// block_mxfp4 and their dequantize_row_* loops), independently of quants_lowbit.cpp. Scales and levels
// are chosen so that every value is exact in f32, so reference and SIMD dequantization must give these
// bits; products are formed in ggml's order (sub-block step first), which fixes the sign of zeros:
// (d * (sc - 32)) * q is -0 for a zero step and a negative level.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace minfer::test {
namespace {

using quants::BlockIQ4NL;
using quants::BlockIQ4XS;
using quants::BlockMXFP4;
using quants::BlockQ2K;
using quants::BlockQ3K;

// ggml's kvalues_iq4nl, written out again.
const int kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// A byte pattern that visits every 2-bit field value in every position over the block.
uint8_t pattern(int i) {
    return uint8_t(i * 37 + 11);
}

// Both dequantizers of the table give exactly `want`.
void expect_decodes(GgmlType t, const void* blocks, const std::vector<float>& want) {
    const QuantTraits& q = traits(t);
    const auto n = int64_t(want.size());
    for (const bool simd : {false, true}) {
        std::vector<float> got(want.size(), NAN);
        (simd ? q.to_float : q.to_float_ref)(blocks, got.data(), n);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(f32_bits(got[size_t(i)]), f32_bits(want[size_t(i)]))
                << q.name << (simd ? " (table)" : " (ref)") << " element " << i << ": " << got[size_t(i)]
                << " vs " << want[size_t(i)];
    }
}

TEST(LowbitLayout, FieldOffsetsMatchGgml) {
    EXPECT_EQ(offsetof(BlockQ2K, qs), 16u);
    EXPECT_EQ(offsetof(BlockQ2K, d), 80u);
    EXPECT_EQ(offsetof(BlockQ2K, dmin), 82u);
    EXPECT_EQ(offsetof(BlockQ3K, qs), 32u);
    EXPECT_EQ(offsetof(BlockQ3K, scales), 96u);
    EXPECT_EQ(offsetof(BlockQ3K, d), 108u);
    EXPECT_EQ(offsetof(BlockIQ4NL, qs), 2u);
    EXPECT_EQ(offsetof(BlockIQ4XS, scales_h), 2u);
    EXPECT_EQ(offsetof(BlockIQ4XS, scales_l), 4u);
    EXPECT_EQ(offsetof(BlockIQ4XS, qs), 8u);
    EXPECT_EQ(offsetof(BlockMXFP4, qs), 1u);
}

// Q2_K: element 128h + 32j + l (l < 32) is bits 2j..2j+1 of qs[32h + l]; sub-block e / 16 has scale
// (low nibble) and min (high nibble) in scales[e / 16]; value d * sc * q - dmin * m.
TEST(LowbitKnownAnswers, Q2K) {
    BlockQ2K b{};
    for (int k = 0; k < 16; ++k) b.scales[k] = uint8_t(k | ((15 - k) << 4));  // sc = k, m = 15 - k
    for (int i = 0; i < 64; ++i) b.qs[i] = pattern(i);
    b.d = f32_to_fp16(0.5f);
    b.dmin = f32_to_fp16(0.25f);
    std::vector<float> want(256);
    for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 32; ++l) {
                const int e = 128 * h + 32 * j + l, k = e / 16;
                const int q = (pattern(32 * h + l) >> (2 * j)) & 3;
                want[size_t(e)] = 0.5f * float(k * q) - 0.25f * float(15 - k);
            }
    expect_decodes(GgmlType::Q2_K, &b, want);
}

// Q3_K: 6-bit scales S_k stored as ggml packs them (low nibbles: k < 8 in the low half of scales[k], k >= 8
// in the high half of scales[k - 8]; top two bits in bits 2 (k / 4) of scales[8 + k % 4]); element
// 128h + 32j + l has low bits 2j..2j+1 of qs[32h + l] and, unless bit 4h + j of hmask[l] is set, 4 taken off.
TEST(LowbitKnownAnswers, Q3K) {
    const int S[16] = {0, 1, 31, 32, 33, 63, 47, 16, 8, 62, 2, 40, 55, 30, 34, 17};
    BlockQ3K b{};
    for (int k = 0; k < 16; ++k) {
        b.scales[k % 8] |= uint8_t((S[k] & 0xF) << (k < 8 ? 0 : 4));
        b.scales[8 + k % 4] |= uint8_t((S[k] >> 4) << (2 * (k / 4)));
    }
    for (int i = 0; i < 32; ++i) b.hmask[i] = pattern(3 * i + 1);
    for (int i = 0; i < 64; ++i) b.qs[i] = pattern(i);
    b.d = f32_to_fp16(0.25f);
    std::vector<float> want(256);
    for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 32; ++l) {
                const int e = 128 * h + 32 * j + l;
                const int lo = (pattern(32 * h + l) >> (2 * j)) & 3;
                const bool high = (pattern(3 * l + 1) >> (4 * h + j)) & 1;
                want[size_t(e)] = (0.25f * float(S[e / 16] - 32)) * float(lo - (high ? 0 : 4));
            }
    expect_decodes(GgmlType::Q3_K, &b, want);
}

// IQ4_NL: element l < 16 is the low nibble of qs[l], l + 16 the high; value d * kvalues_iq4nl[nibble]. A
// negative d, and every nibble in both halves.
TEST(LowbitKnownAnswers, IQ4NL) {
    BlockIQ4NL b{};
    b.d = f32_to_fp16(-0.5f);
    for (int l = 0; l < 16; ++l) b.qs[l] = uint8_t(l | ((15 - l) << 4));
    std::vector<float> want(32);
    for (int l = 0; l < 16; ++l) {
        want[size_t(l)] = -0.5f * float(kIQ4NL[l]);
        want[size_t(l + 16)] = -0.5f * float(kIQ4NL[15 - l]);
    }
    expect_decodes(GgmlType::IQ4_NL, &b, want);
}

// IQ4_XS: sub-block j of 32 has the 6-bit scale L_j (low nibble j % 2 of scales_l[j / 2], top bits 2j of
// scales_h) and the nibbles qs[16j..16j + 16) in IQ4_NL's order; value d * (L_j - 32) * kvalues_iq4nl.
TEST(LowbitKnownAnswers, IQ4XS) {
    const int L[8] = {0, 1, 31, 32, 33, 47, 62, 63};
    BlockIQ4XS b{};
    b.d = f32_to_fp16(0.125f);
    for (int j = 0; j < 8; ++j) {
        b.scales_l[j / 2] |= uint8_t((L[j] & 0xF) << (4 * (j % 2)));
        b.scales_h |= uint16_t((L[j] >> 4) << (2 * j));
    }
    for (int i = 0; i < 128; ++i) b.qs[i] = pattern(i);
    std::vector<float> want(256);
    for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 16; ++l) {
            const uint8_t byte = pattern(16 * j + l);
            want[size_t(32 * j + l)] = (0.125f * float(L[j] - 32)) * float(kIQ4NL[byte & 0xF]);
            want[size_t(32 * j + l + 16)] = (0.125f * float(L[j] - 32)) * float(kIQ4NL[byte >> 4]);
        }
    expect_decodes(GgmlType::IQ4_XS, &b, want);
}

// An FP4 E2M1 code as the OCP MX format defines it: sign bit 3, exponent bits 1..2 (bias 1), mantissa
// bit 0; exponent 0 is subnormal (0 or 0.5).
double e2m1(int code) {
    const int exp = (code >> 1) & 3, man = code & 1;
    const double mag = exp == 0 ? 0.5 * man : (1.0 + 0.5 * man) * std::ldexp(1.0, exp - 1);
    return (code & 8) ? -mag : mag;
}

// MXFP4: value E2M1(nibble) * 2^(e - 127) (nibble order of IQ4_NL) for the E8M0 exponents at both ends
// (2^-127 and 2^-126 give subnormal products, 252..255 overflow the larger codes to +-inf: ggml decodes
// e = 255 as 2^128, not NaN) and in between. ggml's table holds no negative zero: nibble 8 gives +0.
TEST(LowbitKnownAnswers, MXFP4) {
    const int exps[] = {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 252, 253, 254, 255};
    const int nb = int(std::size(exps));
    std::vector<BlockMXFP4> b(static_cast<size_t>(nb));
    std::vector<float> want(size_t(32 * nb));
    for (int i = 0; i < nb; ++i) {
        b[size_t(i)].e = uint8_t(exps[i]);
        for (int l = 0; l < 16; ++l) b[size_t(i)].qs[l] = uint8_t(l | ((15 - l) << 4));
        for (int l = 0; l < 32; ++l) {
            const int code = l < 16 ? l : 31 - l;
            const double v = e2m1(code) * std::ldexp(1.0, exps[i] - 127);
            float f = std::fabs(v) <= FLT_MAX ? float(v) : v < 0.0 ? -INFINITY : INFINITY;
            if (code == 8) f = 0.0f;
            want[size_t(32 * i + l)] = f;
        }
    }
    expect_decodes(GgmlType::MXFP4, b.data(), want);
}

}  // namespace
}  // namespace minfer::test
