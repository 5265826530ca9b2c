// Helpers shared by the int8 and int8x2 activation tests: the types with integer dots, activations with
// awkward blocks, and each element's weight minimum term.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace minfer::test {

using quants::BlockQ4_1;
using quants::BlockQ4K;
using quants::BlockQ8A;
using quants::BlockQ8K;

inline constexpr double kU = 0x1p-24;  // f32 unit roundoff

// The types with int8 dots, and among them those with int8x2 dots: all, the low-bit formats (kLowbitTypes)
// only where the AVX-512 kernels run (the tests of those skip elsewhere: skip_without_x2).
inline const GgmlType kInt8Types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,
                                      GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,
                                      GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                      GgmlType::MXFP4};
inline const GgmlType kX2Types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,
                                    GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,
                                    GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                    GgmlType::MXFP4};
inline const GgmlType kLowbitTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                        GgmlType::MXFP4};

inline bool lowbit(GgmlType t) {
    return std::find(std::begin(kLowbitTypes), std::end(kLowbitTypes), t) != std::end(kLowbitTypes);
}

#define SKIP_WITHOUT_X2(q) \
    if (!(q).vec_dot_x2) GTEST_SKIP() << (q).name << ": int8x2 dots only with AVX-512 (F, BW, VL, VNNI)"

inline std::string type_name(const ::testing::TestParamInfo<GgmlType>& info) {
    return traits(info.param).name;
}

// The types with Q8_K activations (256-element super-blocks).
inline bool k_quant(GgmlType t) {
    return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::Q2_K ||
           t == GgmlType::Q3_K || t == GgmlType::IQ4_XS;
}

// Gaussian activations with some blocks of other shapes: zero, constant, tiny, huge, one outlier, and
// values exactly halfway between two levels (round half to even).
inline std::vector<float> activations(std::mt19937& rng, int64_t n) {
    std::vector<float> x = gaussian(rng, n);
    const auto fill = [&](int64_t b, auto f) {
        for (int64_t i = 32 * b; i < std::min(n, 32 * b + 32); ++i) x[size_t(i)] = f(i);
    };
    if (n >= 8 * 32) {
        fill(1, [](int64_t) { return 0.0f; });
        fill(2, [](int64_t) { return -0.75f; });
        fill(3, [&](int64_t i) { return x[size_t(i)] * 1e-6f; });
        fill(4, [&](int64_t i) { return x[size_t(i)] * 1e4f; });
        fill(5, [&](int64_t i) { return i % 32 == 7 ? 50.0f : x[size_t(i)]; });
        fill(6, [](int64_t i) { return i % 32 == 0 ? 127.0f : float(i % 32) - 0.5f; });
    }
    return x;
}

// The dequantized activations d * q and their scales d, element by element.
inline void dequantize_act(const QuantTraits& q, const uint8_t* xq, int64_t n, float* xd, float* d) {
    for (int64_t i = 0; i < n; ++i) {
        if (q.vec_dot_type == VecDotType::Q8_K) {
            const auto& b = reinterpret_cast<const BlockQ8K*>(xq)[i / 256];
            d[i] = b.d, xd[i] = b.d * float(b.qs[i % 256]);
        } else {
            const auto& b = reinterpret_cast<const BlockQ8A*>(xq)[i / 32];
            d[i] = b.d, xd[i] = b.d * float(b.qs[i % 32]);
        }
    }
}

// mu[i]: the minimum term of element i's weight (value = d * q + mu with unsigned q; Q4_0 / Q5_0 are
// d * q - 8 d / - 16 d, Q2_K d * sc * q - dmin * m, IQ4_NL / IQ4_XS / MXFP4 d * (v + 128) - 128 d and
// d * (v + 12) - 12 d in their AVX-512 dots); 0 for Q8_0, Q6_K and Q3_K (their dots multiply signed levels,
// or subtract Q3_K's offset in integers). The kernels sum the d *
// q and mu terms separately, so |w - mu| + |mu| bounds what their roundings see.
inline std::vector<float> weight_minimums(const QuantTraits& q, const uint8_t* row, int64_t n) {
    std::vector<float> mu(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* blk = row + size_t(i / q.block_size) * q.type_size;
        if (q.type == GgmlType::Q4_0 || q.type == GgmlType::Q5_0) {  // value d * (q - 8) or d * (q - 16)
            const float d = fp16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
            mu[size_t(i)] = (q.type == GgmlType::Q4_0 ? -8.0f : -16.0f) * d;
        } else if (q.type == GgmlType::Q4_1 || q.type == GgmlType::Q5_1) {  // d, m lead both layouts
            mu[size_t(i)] = fp16_to_f32(reinterpret_cast<const BlockQ4_1*>(blk)->m);
        } else if (q.type == GgmlType::Q4_K || q.type == GgmlType::Q5_K) {
            const auto& b = *reinterpret_cast<const BlockQ4K*>(blk);
            int sc, m;
            quants::k_scale_min(b.scales, int(i % 256) / 32, &sc, &m);
            mu[size_t(i)] = -fp16_to_f32(b.dmin) * float(m);
        } else if (q.type == GgmlType::IQ4_NL) {  // the AVX-512 dot offsets the grid by 128
            mu[size_t(i)] = -128.0f * fp16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
        } else if (q.type == GgmlType::MXFP4) {  // ... MXFP4's by 12
            mu[size_t(i)] = -12.0f * quants::mxfp4_scale(blk[0]);
        } else if (q.type == GgmlType::IQ4_XS) {  // ... and IQ4_XS's by 128
            const auto& b = *reinterpret_cast<const quants::BlockIQ4XS*>(blk);
            mu[size_t(i)] =
                -128.0f * fp16_to_f32(b.d) * float(quants::iq4_xs_scale(b, int(i % 256) / 32) - 32);
        } else if (q.type == GgmlType::Q2_K) {
            const auto& b = *reinterpret_cast<const quants::BlockQ2K*>(blk);
            mu[size_t(i)] = -fp16_to_f32(b.dmin) * float(b.scales[i % 256 / 16] >> 4);
        }
    }
    return mu;
}

inline std::vector<int64_t> lengths(const QuantTraits& q) {
    std::vector<int64_t> out;
    for (int64_t blocks : {1, 2, 3, 5, 16, 33}) out.push_back(blocks * q.block_size);
    return out;
}

}  // namespace minfer::test
