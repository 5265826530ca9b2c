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

// The scales of a "type 1" K-quant block (Q2_K, Q4_K, Q5_K) of S sub-blocks of L elements: sub-block j
// gets the grid [-m1_j, -m1_j + nmax * d1_j] covering [min(0, lo_j), hi_j], with m1_j = dmin * m_j and
// d1_j = d * sc_j, the integer scales m_j, sc_j at most M (Q4_K/Q5_K: 8 of 32, 6-bit; Q2_K: 16 of 16,
// 4-bit). d and dmin are rounded up so that every sub-block's grid reaches.
template <int S, int L, int M>
struct KGrid {
    uint16_t d, dmin;
    int sc[S], m[S];
    float d1[S], m1[S];
};

template <int S, int L, int M>
KGrid<S, L, M> choose_k_grid(const float* x, int nmax) {
    KGrid<S, L, M> g;
    float lo[S], hi[S], need[S];
    float max_min = 0.0f, max_need = 0.0f;
    for (int j = 0; j < S; ++j) {
        lo[j] = std::min(0.0f, *std::min_element(x + L * j, x + L * j + L));
        hi[j] = *std::max_element(x + L * j, x + L * j + L);
        max_min = std::max(max_min, -lo[j]);
    }
    g.dmin = fp16_ceil(max_min / float(M));
    const float dmin = fp16_to_f32(g.dmin);
    for (int j = 0; j < S; ++j) {
        g.m[j] = dmin > 0.0f ? std::min(M, int(std::ceil(-lo[j] / dmin))) : 0;
        g.m1[j] = dmin * float(g.m[j]);
        need[j] = (hi[j] + g.m1[j]) / float(nmax);
        max_need = std::max(max_need, need[j]);
    }
    g.d = fp16_ceil(max_need / float(M));
    const float d = fp16_to_f32(g.d);
    for (int j = 0; j < S; ++j) {
        g.sc[j] = d > 0.0f ? std::min(M, int(std::ceil(need[j] / d))) : 0;
        g.d1[j] = d * float(g.sc[j]);
    }
    return g;
}

}  // namespace minfer::quants
