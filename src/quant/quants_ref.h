// Internal to the quant traits table: scalar helpers shared by the reference code of quants.cpp and
// quants_lowbit.cpp (baseline x86-64 only; the *_avx2.cpp files must not include this header).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "util/fp16.h"

namespace minfer::quants {

// Dequantize blocks of QK elements with Deq; n is a multiple of QK.
template <class Block, int QK, void (*Deq)(const Block&, float*)>
void to_float_ref(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const Block*>(src);
    for (int64_t i = 0; i < n / QK; ++i) Deq(b[i], dst + i * QK);
}

// sum_i w[i] x[i] of the dequantized weights, accumulated in double and rounded once.
template <class Block, int QK, void (*Deq)(const Block&, float*)>
float dot_ref(const void* src, const float* x, int64_t n) {
    const auto* b = static_cast<const Block*>(src);
    float w[QK];
    double acc = 0.0;
    for (int64_t i = 0; i < n / QK; ++i) {
        Deq(b[i], w);
        for (int l = 0; l < QK; ++l) acc += double(w[l]) * double(x[i * QK + l]);
    }
    return float(acc);
}

// Smallest fp16 >= v, for finite v >= 0 within fp16 range.
inline uint16_t fp16_ceil(float v) {
    uint16_t h = f32_to_fp16(v);
    if (fp16_to_f32(h) < v) ++h;
    return h;
}

inline float abs_max(const float* x, int n) {
    float a = 0.0f;
    for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
    return a;
}

// Nearest integer of x / d clamped to [lo, hi]; 0 when the step is 0 (all-zero block).
inline int level(float x, float d, int lo, int hi) {
    if (d == 0.0f) return 0;
    return std::clamp(int(std::nearbyint(x / d)), lo, hi);
}

}  // namespace minfer::quants
