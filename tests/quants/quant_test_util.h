// Helpers shared by the quant tests: the types under test, random blocks with sane scales, and the
// relative error measures.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "quant/quants.h"
#include "quant/quants_impl.h"
#include "quant/quants_lowbit.h"
#include "util/fp16.h"

namespace minfer::test {

inline const GgmlType kAllQuantTypes[] = {
    GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,   GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
    GgmlType::Q5_0, GgmlType::Q5_1,   GgmlType::Q4_K,   GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K,
    GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

inline const QuantTraits& traits(GgmlType t) {
    const QuantTraits* q = quant_traits(t);
    if (!q) throw std::runtime_error("no quant traits");
    return *q;
}

inline std::vector<float> gaussian(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = dist(rng);
    return v;
}

// A finite fp16 of magnitude in [2^-12, 2^2), either sign: a plausible block scale.
inline uint16_t random_scale(std::mt19937& rng) {
    std::uniform_real_distribution<float> mag(-12.0f, 2.0f);
    const float v = std::exp2(mag(rng));
    return f32_to_fp16(rng() & 1 ? v : -v);
}

inline void set_scale(uint8_t* p, uint16_t h) {
    std::memcpy(p, &h, 2);
}

// `n` elements of type `t` worth of random bytes, with every fp16 scale field replaced by a sane value
// and dense F16/BF16 elements kept finite (so dot products stay finite).
inline std::vector<uint8_t> random_row(std::mt19937& rng, GgmlType t, int64_t n) {
    const QuantTraits& q = traits(t);
    if (t == GgmlType::F32) {
        const std::vector<float> v = gaussian(rng, n);
        std::vector<uint8_t> bytes(v.size() * 4);
        std::memcpy(bytes.data(), v.data(), bytes.size());
        return bytes;
    }
    std::vector<uint8_t> bytes(quant_row_bytes(q, n));
    for (uint8_t& b : bytes) b = uint8_t(rng());
    for (int64_t i = 0; i < n / q.block_size; ++i) {
        uint8_t* blk = bytes.data() + size_t(i) * q.type_size;
        switch (t) {
            case GgmlType::F16:
                set_scale(blk, random_scale(rng));
                break;
            case GgmlType::BF16: {
                const uint16_t b = uint16_t(f32_bits(fp16_to_f32(random_scale(rng))) >> 16);
                std::memcpy(blk, &b, 2);
                break;
            }
            case GgmlType::Q8_0:
            case GgmlType::Q4_0:
            case GgmlType::Q5_0:
                set_scale(blk, random_scale(rng));
                break;
            case GgmlType::Q4_1:
            case GgmlType::Q5_1:
            case GgmlType::Q4_K:
            case GgmlType::Q5_K:
                set_scale(blk, random_scale(rng));
                set_scale(blk + 2, random_scale(rng));
                break;
            case GgmlType::Q6_K:
                set_scale(blk + offsetof(quants::BlockQ6K, d), random_scale(rng));
                break;
            case GgmlType::Q2_K:
                set_scale(blk + offsetof(quants::BlockQ2K, d), random_scale(rng));
                set_scale(blk + offsetof(quants::BlockQ2K, dmin), random_scale(rng));
                break;
            case GgmlType::Q3_K:
                set_scale(blk + offsetof(quants::BlockQ3K, d), random_scale(rng));
                break;
            case GgmlType::IQ4_NL:
            case GgmlType::IQ4_XS:
                set_scale(blk, random_scale(rng));
                break;
            case GgmlType::MXFP4:  // exponent 2^-13 .. 2^6 (e = 255 would overflow the larger levels)
                blk[0] = uint8_t(115 + rng() % 20);
                break;
            default:
                break;
        }
    }
    return bytes;
}

// sqrt(sum (a - b)^2 / sum b^2): error of `a` relative to the reference `b`.
inline double relative_rmse(const float* a, const float* b, int64_t n) {
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        ref += double(b[i]) * b[i];
    }
    return ref > 0.0 ? std::sqrt(err / ref) : std::sqrt(err);
}

}  // namespace minfer::test
