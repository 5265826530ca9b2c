// The quant traits table: scalar reference dequantizers, dot products (double accumulation) and
// round-to-nearest quantizers for every type minfer computes with, and the run-time choice between them
// and the AVX2 kernels of quants_avx2.cpp; the int8-activation kernels come from quants_q8*.cpp, the
// low-bit formats (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4) from quants_lowbit*.cpp.
#include "quant/quants.h"

#include <cpuid.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "quant/quants_impl.h"
#include "quant/quants_lowbit.h"
#include "quant/quants_ref.h"
#include "util/env.h"
#include "util/fp16.h"

namespace minfer {
namespace {

using quants::abs_max;
using quants::BlockQ4_0;
using quants::BlockQ4_1;
using quants::BlockQ4K;
using quants::BlockQ5_0;
using quants::BlockQ5_1;
using quants::BlockQ5K;
using quants::BlockQ6K;
using quants::BlockQ8_0;
using quants::dot_ref;
using quants::fp16_ceil;
using quants::k_scale_min;
using quants::kQK0;
using quants::kQKK;
using quants::level;
using quants::to_float_ref;

// ---- Dequantization of one block ----

void deq_f32(const float& w, float* y) {
    *y = w;
}
void deq_f16(const uint16_t& w, float* y) {
    *y = fp16_to_f32(w);
}
void deq_bf16(const uint16_t& w, float* y) {
    *y = bf16_to_f32(w);
}

void deq_q8_0(const BlockQ8_0& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int l = 0; l < kQK0; ++l) y[l] = float(b.qs[l]) * d;
}

void deq_q4_0(const BlockQ4_0& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int l = 0; l < kQK0 / 2; ++l) {
        y[l] = float((b.qs[l] & 0xF) - 8) * d;
        y[l + kQK0 / 2] = float((b.qs[l] >> 4) - 8) * d;
    }
}

// Levels 0..15 (0..31) of a 32-element block of Q4_0/Q4_1 (Q5_0/Q5_1): element l < 16 is the low nibble
// of qs[l], element l + 16 the high nibble; the Q5 types add bit l of the 32-bit word qh as 16.
template <class Block>
void block32_levels(const Block& b, int* q) {
    uint32_t qh = 0;
    if constexpr (requires { b.qh; }) std::memcpy(&qh, b.qh, sizeof qh);
    for (int l = 0; l < kQK0 / 2; ++l) {
        q[l] = (b.qs[l] & 0xF) | int((qh >> l) & 1) << 4;
        q[l + kQK0 / 2] = (b.qs[l] >> 4) | int((qh >> (l + kQK0 / 2)) & 1) << 4;
    }
}

void deq_q5_0(const BlockQ5_0& b, float* y) {
    const float d = fp16_to_f32(b.d);
    int q[kQK0];
    block32_levels(b, q);
    for (int l = 0; l < kQK0; ++l) y[l] = float(q[l] - 16) * d;
}

// Q4_1 / Q5_1: value = fma(q, d, m), one rounding (see quants_impl.h).
template <class Block>
void deq_block32_min(const Block& b, float* y) {
    const float d = fp16_to_f32(b.d);
    const float m = fp16_to_f32(b.m);
    int q[kQK0];
    block32_levels(b, q);
    for (int l = 0; l < kQK0; ++l) y[l] = std::fma(float(q[l]), d, m);
}

// Q4_K and Q5_K: sub-block j takes nibble (j & 1) of qs[32 (j / 2) + l]; Q5_K adds bit j of qh[l] as 16.
template <class Block>
void deq_k_type1(const Block& b, float* y) {
    const float d = fp16_to_f32(b.d);
    const float dmin = fp16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        k_scale_min(b.scales, j, &sc, &m);
        const float d1 = d * float(sc);
        const float m1 = dmin * float(m);
        const uint8_t* qs = b.qs + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        for (int l = 0; l < 32; ++l) {
            int q = (qs[l] >> shift) & 0xF;
            if constexpr (std::is_same_v<Block, BlockQ5K>) q |= ((b.qh[l] >> j) & 1) << 4;
            y[32 * j + l] = std::fma(d1, float(q), -m1);
        }
    }
}

int q6_k_level(const BlockQ6K& b, int e) {  // q - 32 of element e, layout in quants_impl.h
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int lo = (b.ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0xF;
    const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
    return (lo | (hi << 4)) - 32;
}

void deq_q6_k(const BlockQ6K& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int e = 0; e < kQKK; ++e) y[e] = d * float(b.scales[e / 16]) * float(q6_k_level(b, e));
}

// ---- Quantization ----
// Every scale is rounded *up* to the next fp16 / integer step, so that no input falls outside its
// block's grid: the error of each element is then at most half a step of its (sub-)block.

uint16_t fp16_floor(float v) {  // largest fp16 <= v, for finite v within fp16 range
    if (v < 0.0f) return uint16_t(fp16_ceil(-v) | 0x8000);
    uint16_t h = f32_to_fp16(v);
    if (fp16_to_f32(h) > v) --h;
    return h;
}

void quant_f32(const float* x, void* dst, int64_t n) {
    std::memcpy(dst, x, size_t(n) * sizeof(float));
}

void quant_f16(const float* x, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(x[i]);
}

void quant_bf16(const float* x, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
}

void quant_q8_0(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        b[i].d = fp16_ceil(abs_max(x, kQK0) / 127.0f);
        const float d = fp16_to_f32(b[i].d);
        for (int l = 0; l < kQK0; ++l) b[i].qs[l] = int8_t(level(x[l], d, -127, 127));
    }
}

// Inverse of block32_levels: store levels 0..15 (0..31) of a 32-element block.
template <class Block>
void pack_block32(const int* q, Block& b) {
    uint32_t qh = 0;
    for (int l = 0; l < kQK0 / 2; ++l) {
        b.qs[l] = uint8_t((q[l] & 0xF) | ((q[l + kQK0 / 2] & 0xF) << 4));
        qh |= uint32_t(q[l] >> 4) << l;
        qh |= uint32_t(q[l + kQK0 / 2] >> 4) << (l + kQK0 / 2);
    }
    if constexpr (requires { b.qh; }) std::memcpy(b.qh, &qh, sizeof qh);
}

// Q4_0 / Q5_0, as ggml: the value of largest magnitude maps to level -kHalf (-8 / -16), so the grid
// reaches kHalf steps on its side; an opposite-signed value beyond kHalf - 0.5 steps clamps to kHalf - 1.
template <class Block, int kHalf>
void quant_block32_sym(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        float vmax = 0.0f;
        for (int l = 0; l < kQK0; ++l)
            if (std::fabs(x[l]) > std::fabs(vmax)) vmax = x[l];
        const uint16_t mag = fp16_ceil(std::fabs(vmax) / float(kHalf));
        b[i].d = vmax > 0.0f ? uint16_t(mag | 0x8000) : mag;
        const float d = fp16_to_f32(b[i].d);
        int q[kQK0];
        for (int l = 0; l < kQK0; ++l) q[l] = level(x[l], d, -kHalf, kHalf - 1) + kHalf;
        pack_block32(q, b[i]);
    }
}

// Q4_1 / Q5_1: m is the block minimum rounded down to fp16 and d the rest of the range over kMax levels
// rounded up, so the grid [m, m + kMax * d] covers the block.
template <class Block, int kMax>
void quant_block32_min(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        const float lo = *std::min_element(x, x + kQK0), hi = *std::max_element(x, x + kQK0);
        b[i].m = fp16_floor(lo);
        const float m = fp16_to_f32(b[i].m);
        b[i].d = fp16_ceil((hi - m) / float(kMax));
        const float d = fp16_to_f32(b[i].d);
        int q[kQK0];
        for (int l = 0; l < kQK0; ++l) q[l] = level(x[l] - m, d, 0, kMax);
        pack_block32(q, b[i]);
    }
}

using Q45KGrid = quants::KGrid<8, 32, 63>;  // Q4_K/Q5_K: 8 sub-blocks of 32, 6-bit scales and mins

// Inverse of k_scale_min: 6-bit values of sub-blocks 0..3 whole in bytes 0..7, sub-blocks 4..7 split
// into low nibbles (bytes 8..11) and top 2 bits (top of bytes 0..7).
void pack_k_scales(const Q45KGrid& g, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t(g.sc[j] | ((g.sc[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t(g.m[j] | ((g.m[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((g.sc[j + 4] & 0xF) | ((g.m[j + 4] & 0xF) << 4));
    }
}

template <class Block>
void quant_k_type1(const float* x, void* dst, int64_t n) {
    constexpr bool kQ5 = std::is_same_v<Block, BlockQ5K>;
    constexpr int kMax = kQ5 ? 31 : 15;
    auto* b = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
        const Q45KGrid g = quants::choose_k_grid<8, 32, 63>(x, kMax);
        b[i].d = g.d;
        b[i].dmin = g.dmin;
        pack_k_scales(g, b[i].scales);
        std::memset(b[i].qs, 0, sizeof b[i].qs);
        if constexpr (kQ5) std::memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < kQKK; ++e) {
            const int j = e / 32, l = e % 32;
            const int q = level(x[e] + g.m1[j], g.d1[j], 0, kMax);
            b[i].qs[32 * (j / 2) + l] |= uint8_t((q & 0xF) << (4 * (j & 1)));
            if constexpr (kQ5) b[i].qh[l] |= uint8_t((q >> 4) << j);
        }
    }
}

// Q6_K: sub-block k of 16 gets step d * sc_k >= its max |x| / 31, so levels stay within [-31, 31].
void quant_q6_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ6K*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
        float need[16], max_need = 0.0f;
        for (int k = 0; k < 16; ++k) {
            need[k] = abs_max(x + 16 * k, 16) / 31.0f;
            max_need = std::max(max_need, need[k]);
        }
        b[i].d = fp16_ceil(max_need / 127.0f);
        const float d = fp16_to_f32(b[i].d);
        std::memset(b[i].ql, 0, sizeof b[i].ql);
        std::memset(b[i].qh, 0, sizeof b[i].qh);
        for (int k = 0; k < 16; ++k)
            b[i].scales[k] = int8_t(d > 0.0f ? std::min(127.0f, std::ceil(need[k] / d)) : 0.0f);
        for (int e = 0; e < kQKK; ++e) {
            const float step = d * float(b[i].scales[e / 16]);
            const int q = level(x[e], step, -32, 31) + 32;
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            b[i].ql[64 * h + 32 * (g & 1) + l] |= uint8_t((q & 0xF) << (4 * (g >> 1)));
            b[i].qh[32 * h + l] |= uint8_t((q >> 4) << (2 * g));
        }
    }
}

// ---- Integer levels (QuantTraits::to_levels) ----

template <class Block, int Offset>  // Q8_0 / Q4_0 / Q5_0: w = d * (q - offset)
void lev_block32_sym(const Block& b, int8_t* q, float* scale, float* min) {
    int lv[kQK0];
    if constexpr (std::is_same_v<Block, BlockQ8_0>)
        for (int l = 0; l < kQK0; ++l) lv[l] = b.qs[l];
    else
        block32_levels(b, lv);
    for (int l = 0; l < kQK0; ++l) q[l] = int8_t(lv[l] - Offset);
    *scale = fp16_to_f32(b.d), *min = 0.0f;
}

template <class Block>  // Q4_1 / Q5_1: w = fma(q, d, m)
void lev_block32_min(const Block& b, int8_t* q, float* scale, float* min) {
    int lv[kQK0];
    block32_levels(b, lv);
    for (int l = 0; l < kQK0; ++l) q[l] = int8_t(lv[l]);
    *scale = fp16_to_f32(b.d), *min = -fp16_to_f32(b.m);
}

template <class Block>  // Q4_K / Q5_K: deq_k_type1's d1 and m1 per sub-block of 32
void lev_k_type1(const Block& b, int8_t* q, float* scale, float* min) {
    const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        k_scale_min(b.scales, j, &sc, &m);
        scale[j] = d * float(sc), min[j] = dmin * float(m);
        const uint8_t* qs = b.qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) {
            int v = (qs[l] >> (4 * (j & 1))) & 0xF;
            if constexpr (std::is_same_v<Block, BlockQ5K>) v |= ((b.qh[l] >> j) & 1) << 4;
            q[32 * j + l] = int8_t(v);
        }
    }
}

void lev_q6_k(const BlockQ6K& b, int8_t* q, float* scale, float* min) {  // deq_q6_k's d * sc per 16
    const float d = fp16_to_f32(b.d);
    for (int k = 0; k < 16; ++k) scale[k] = d * float(b.scales[k]), min[k] = 0.0f;
    for (int e = 0; e < kQKK; ++e) q[e] = int8_t(q6_k_level(b, e));
}

template <class Block, int QK, int LB, void (*Lev)(const Block&, int8_t*, float*, float*)>
void to_levels(const void* src, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const Block*>(src);
    for (int64_t i = 0; i < n / QK; ++i) Lev(b[i], q + i * QK, scale + i * (QK / LB), min + i * (QK / LB));
}

// ---- The table ----

template <class Block, int QK, void (*Deq)(const Block&, float*)>
QuantTraits entry(GgmlType type, const char* name, void (*quant)(const float*, void*, int64_t),
                  void (*to_float_simd)(const void*, float*, int64_t),
                  float (*dot_simd)(const void*, const float*, int64_t), bool simd) {
    QuantTraits q{};
    q.type = type;
    q.name = name;
    q.block_size = QK;
    q.type_size = sizeof(Block);
    q.to_float_ref = to_float_ref<Block, QK, Deq>;
    q.dot_ref = dot_ref<Block, QK, Deq>;
    q.from_float_ref = quant;
    q.to_float = simd ? to_float_simd : q.to_float_ref;
    q.dot = simd ? dot_simd : q.dot_ref;
    return q;
}

using VecDotFn = float (*)(const void*, const void*, int64_t);
using ColsFn = void (*)(const void*, const void*, size_t, int64_t, int, float*);

// vec_dot_x2_cols_ref: the reference dot per column.
template <VecDotFn Dot>
void cols_ref(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    for (int c = 0; c < ncols; ++c) out[c] = Dot(w, static_cast<const char*>(xq) + size_t(c) * stride, n);
}

// The int8 and int8x2 entries of a table entry: ref and SIMD versions of quantize_act, vec_dot_q8,
// vec_dot_x2 and vec_dot_x2_cols (quantize_x2 is the same for every type).
struct Q8Fns {
    VecDotType type;
    void (*quantize_ref)(const float*, void*, int64_t);
    void (*quantize_simd)(const float*, void*, int64_t);
    VecDotFn dot_ref, dot_simd, x2_ref, x2_simd;
    ColsFn cols_ref, cols_simd;
};

QuantTraits with_q8(QuantTraits q, const Q8Fns& f, bool simd) {
    q.vec_dot_type = f.type;
    q.quantize_act_ref = f.quantize_ref;
    q.vec_dot_q8_ref = f.dot_ref;
    q.quantize_act = simd ? f.quantize_simd : f.quantize_ref;
    q.vec_dot_q8 = simd ? f.dot_simd : f.dot_ref;
    q.quantize_x2_ref = quants::ref::quantize_q8x2;
    q.vec_dot_x2_ref = f.x2_ref;
    q.vec_dot_x2_cols_ref = f.cols_ref;
    q.quantize_x2 = simd ? quants::avx2::quantize_q8x2 : quants::ref::quantize_q8x2;
    q.vec_dot_x2 = simd ? f.x2_simd : f.x2_ref;
    q.vec_dot_x2_cols = simd ? f.cols_simd : f.cols_ref;
    return q;
}

// The int8x2 kernels of a type: reference, AVX2 and (nullptr where none) AVX-512 dot and columns dot.
struct X2Fns {
    VecDotFn ref, avx2, avx512;
    ColsFn cols_ref, cols_avx2, cols_avx512;
};

// Q8_0-style activations (BlockQ8A) for the 32-element types, Q8_K (BlockQ8K) for the K-quants; the
// AVX-512 int8x2 kernels where this CPU has them.
Q8Fns q8fns(VecDotType type, VecDotFn ref, VecDotFn simd, const X2Fns& x2) {
    const bool wide = quants_use_avx512() && x2.avx512;
    const bool k = type == VecDotType::Q8_K;
    return {type,
            k ? quants::ref::quantize_q8k : quants::ref::quantize_q8a,
            k ? quants::avx2::quantize_q8k : quants::avx2::quantize_q8a,
            ref,
            simd,
            x2.ref,
            wide ? x2.avx512 : x2.avx2,
            x2.cols_ref,
            wide ? x2.cols_avx512 : x2.cols_avx2};
}

// build_table's eleven types, then the low-bit formats of quants_lowbit.cpp.
using Table = std::array<QuantTraits, 11 + quants::kLowbitCount>;

using LevelsFn = void (*)(const void*, int8_t*, float*, float*, int64_t);

struct Levels {
    GgmlType type;
    LevelsFn ref, simd;  // simd: nullptr where the reference serves
    int block;
    bool min;
};

void set_levels(Table& t, bool simd) {
    namespace v = quants::avx2;
    const Levels levels[] = {
        {GgmlType::Q8_0, to_levels<BlockQ8_0, kQK0, 32, lev_block32_sym<BlockQ8_0, 0>>, v::levels_q8_0, 32,
         false},
        {GgmlType::Q4_0, to_levels<BlockQ4_0, kQK0, 32, lev_block32_sym<BlockQ4_0, 8>>, v::levels_q4_0, 32,
         false},
        {GgmlType::Q5_0, to_levels<BlockQ5_0, kQK0, 32, lev_block32_sym<BlockQ5_0, 16>>, v::levels_q5_0, 32,
         false},
        {GgmlType::Q4_1, to_levels<BlockQ4_1, kQK0, 32, lev_block32_min<BlockQ4_1>>, nullptr, 32, true},
        {GgmlType::Q5_1, to_levels<BlockQ5_1, kQK0, 32, lev_block32_min<BlockQ5_1>>, nullptr, 32, true},
        {GgmlType::Q4_K, to_levels<BlockQ4K, kQKK, 32, lev_k_type1<BlockQ4K>>, v::levels_q4_k, 32, true},
        {GgmlType::Q5_K, to_levels<BlockQ5K, kQKK, 32, lev_k_type1<BlockQ5K>>, v::levels_q5_k, 32, true},
        {GgmlType::Q6_K, to_levels<BlockQ6K, kQKK, 16, lev_q6_k>, v::levels_q6_k, 16, false},
    };
    for (const Levels& l : levels)
        for (QuantTraits& e : t)
            if (e.type == l.type) {
                e.to_levels_ref = l.ref, e.to_levels = simd && l.simd ? l.simd : l.ref;
                e.level_block = l.block, e.level_min = l.min;
            }
}

Table build_table() {
    namespace v = quants::avx2;
    namespace r = quants::ref;
    const bool s = quants_use_avx2();
    Table t = {
        entry<float, 1, deq_f32>(GgmlType::F32, "F32", quant_f32, v::to_float_f32, v::dot_f32, s),
        entry<uint16_t, 1, deq_f16>(GgmlType::F16, "F16", quant_f16, v::to_float_f16, v::dot_f16, s),
        entry<uint16_t, 1, deq_bf16>(GgmlType::BF16, "BF16", quant_bf16, v::to_float_bf16, v::dot_bf16, s),
        entry<BlockQ8_0, kQK0, deq_q8_0>(GgmlType::Q8_0, "Q8_0", quant_q8_0, v::to_float_q8_0, v::dot_q8_0,
                                         s),
        entry<BlockQ4_0, kQK0, deq_q4_0>(GgmlType::Q4_0, "Q4_0", quant_block32_sym<BlockQ4_0, 8>,
                                         v::to_float_q4_0, v::dot_q4_0, s),
        entry<BlockQ4_1, kQK0, deq_block32_min<BlockQ4_1>>(
            GgmlType::Q4_1, "Q4_1", quant_block32_min<BlockQ4_1, 15>, v::to_float_q4_1, v::dot_q4_1, s),
        entry<BlockQ5_0, kQK0, deq_q5_0>(GgmlType::Q5_0, "Q5_0", quant_block32_sym<BlockQ5_0, 16>,
                                         v::to_float_q5_0, v::dot_q5_0, s),
        entry<BlockQ5_1, kQK0, deq_block32_min<BlockQ5_1>>(
            GgmlType::Q5_1, "Q5_1", quant_block32_min<BlockQ5_1, 31>, v::to_float_q5_1, v::dot_q5_1, s),
        entry<BlockQ4K, kQKK, deq_k_type1<BlockQ4K>>(GgmlType::Q4_K, "Q4_K", quant_k_type1<BlockQ4K>,
                                                     v::to_float_q4_k, v::dot_q4_k, s),
        entry<BlockQ5K, kQKK, deq_k_type1<BlockQ5K>>(GgmlType::Q5_K, "Q5_K", quant_k_type1<BlockQ5K>,
                                                     v::to_float_q5_k, v::dot_q5_k, s),
        entry<BlockQ6K, kQKK, deq_q6_k>(GgmlType::Q6_K, "Q6_K", quant_q6_k, v::to_float_q6_k, v::dot_q6_k, s),
    };
    namespace w = quants::avx512;
    const std::pair<GgmlType, Q8Fns> q8[] = {
        {GgmlType::Q8_0,
         q8fns(VecDotType::Q8_0, r::vec_dot_q8_0, v::vec_dot_q8_0,
               {r::vec_dot_x2_q8_0, v::vec_dot_x2_q8_0, w::vec_dot_x2_q8_0, cols_ref<r::vec_dot_x2_q8_0>,
                v::vec_dot_x2_cols_q8_0, w::vec_dot_x2_cols_q8_0})},
        {GgmlType::Q4_0,
         q8fns(VecDotType::Q8_0, r::vec_dot_q4_0, v::vec_dot_q4_0,
               {r::vec_dot_x2_q4_0, v::vec_dot_x2_q4_0, w::vec_dot_x2_q4_0, cols_ref<r::vec_dot_x2_q4_0>,
                v::vec_dot_x2_cols_q4_0, w::vec_dot_x2_cols_q4_0})},
        {GgmlType::Q4_1, q8fns(VecDotType::Q8_0, r::vec_dot_q4_1, v::vec_dot_q4_1,
                               {r::vec_dot_x2_q4_1, v::vec_dot_x2_q4_1, nullptr, cols_ref<r::vec_dot_x2_q4_1>,
                                v::vec_dot_x2_cols_q4_1, nullptr})},
        {GgmlType::Q5_0,
         q8fns(VecDotType::Q8_0, r::vec_dot_q5_0, v::vec_dot_q5_0,
               {r::vec_dot_x2_q5_0, v::vec_dot_x2_q5_0, w::vec_dot_x2_q5_0, cols_ref<r::vec_dot_x2_q5_0>,
                v::vec_dot_x2_cols_q5_0, w::vec_dot_x2_cols_q5_0})},
        {GgmlType::Q5_1, q8fns(VecDotType::Q8_0, r::vec_dot_q5_1, v::vec_dot_q5_1,
                               {r::vec_dot_x2_q5_1, v::vec_dot_x2_q5_1, nullptr, cols_ref<r::vec_dot_x2_q5_1>,
                                v::vec_dot_x2_cols_q5_1, nullptr})},
        {GgmlType::Q4_K,
         q8fns(VecDotType::Q8_K, r::vec_dot_q4_k, v::vec_dot_q4_k,
               {r::vec_dot_x2_q4_k, v::vec_dot_x2_q4_k, w::vec_dot_x2_q4_k, cols_ref<r::vec_dot_x2_q4_k>,
                v::vec_dot_x2_cols_q4_k, w::vec_dot_x2_cols_q4_k})},
        {GgmlType::Q5_K,
         q8fns(VecDotType::Q8_K, r::vec_dot_q5_k, v::vec_dot_q5_k,
               {r::vec_dot_x2_q5_k, v::vec_dot_x2_q5_k, w::vec_dot_x2_q5_k, cols_ref<r::vec_dot_x2_q5_k>,
                v::vec_dot_x2_cols_q5_k, w::vec_dot_x2_cols_q5_k})},
        {GgmlType::Q6_K,
         q8fns(VecDotType::Q8_K, r::vec_dot_q6_k, v::vec_dot_q6_k,
               {r::vec_dot_x2_q6_k, v::vec_dot_x2_q6_k, w::vec_dot_x2_q6_k, cols_ref<r::vec_dot_x2_q6_k>,
                v::vec_dot_x2_cols_q6_k, w::vec_dot_x2_cols_q6_k})},
    };
    for (const auto& [type, fns] : q8)
        for (QuantTraits& e : t)
            if (e.type == type) e = with_q8(e, fns, s);
    set_levels(t, s);
    quants::lowbit_traits(t.data() + t.size() - quants::kLowbitCount, s);
    return t;
}

}  // namespace

// F16C is read from CPUID leaf 1 directly: not every compiler's __builtin_cpu_supports knows "f16c"
// (clang 14 rejects it). The avx2 check also covers the OS saving the YMM registers.
bool quants_use_avx2() {
    static const bool ok = [] {
        unsigned eax, ebx, ecx, edx;
        const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
        return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return ok;
}

bool quants_use_avx512() {
    static const bool ok = quants_use_avx2() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512vnni") && !env_flag("MINFER_NO_AVX512");
    return ok;
}

const QuantTraits* quant_traits(GgmlType t) {
    static const Table table = build_table();
    for (const QuantTraits& q : table)
        if (q.type == t) return &q;
    return nullptr;
}

size_t quant_row_bytes(const QuantTraits& q, int64_t n) {
    return size_t(n / q.block_size) * q.type_size;
}

size_t act_row_bytes(const QuantTraits& q, int64_t n) {
    switch (q.vec_dot_type) {
        case VecDotType::Q8_0:
            return size_t(n / kQK0) * sizeof(quants::BlockQ8A);
        case VecDotType::Q8_K:
            return size_t(n / kQKK) * sizeof(quants::BlockQ8K);
        default:
            return size_t(n) * sizeof(float);
    }
}

size_t act_x2_row_bytes(int64_t n) {
    // blocks, offsets, then the wide copy (quants_impl.h)
    return size_t(n / kQK0) * (sizeof(quants::BlockQ8X2) + 8 * sizeof(int32_t) + 2 * sizeof(float)) +
           size_t(n / 64) * 128;
}

}  // namespace minfer
