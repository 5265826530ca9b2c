// Scalar references of the low-bit formats (layouts in quants_lowbit.h): dequantization, round-to-nearest
// quantizers, and the int8-activation dots; and their table entries (the activation quantizers are
// quants_q8*.cpp's).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quants_lowbit.h"
#include "quant/quants_ref.h"
#include "util/fp16.h"

namespace minfer::quants {
namespace {

// ---- Levels of one element ----

int q2_k_level(const BlockQ2K& b, int e) {  // 0..3
    return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

int q3_k_level(const BlockQ3K& b, int e) {  // q - 4, in -4..3
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int hi = (b.hmask[e % 32] >> (e / 32)) & 1;
    return lo + 4 * hi - 4;
}

int nibble(const uint8_t* qs, int l) {  // element l of 32: low nibbles of qs[0..16), then the high ones
    return l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4;
}

// ---- Dequantization of one block ----

void deq_q2_k(const BlockQ2K& b, float* y) {
    const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
    for (int k = 0; k < 16; ++k) {
        const float d1 = d * float(b.scales[k] & 0xF), m1 = dmin * float(b.scales[k] >> 4);
        for (int l = 0; l < 16; ++l) y[16 * k + l] = std::fma(d1, float(q2_k_level(b, 16 * k + l)), -m1);
    }
}

void deq_q3_k(const BlockQ3K& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int k = 0; k < 16; ++k) {
        const float dl = d * float(q3_k_scale(b.scales, k) - 32);
        for (int l = 0; l < 16; ++l) y[16 * k + l] = dl * float(q3_k_level(b, 16 * k + l));
    }
}

void deq_iq4_nl(const BlockIQ4NL& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int l = 0; l < kQK0; ++l) y[l] = d * float(kIQ4NLValues[nibble(b.qs, l)]);
}

void deq_iq4_xs(const BlockIQ4XS& b, float* y) {
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < 8; ++j) {
        const float dl = d * float(iq4_xs_scale(b, j) - 32);
        for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * float(kIQ4NLValues[nibble(b.qs + 16 * j, l)]);
    }
}

void deq_mxfp4(const BlockMXFP4& b, float* y) {
    const float d = mxfp4_scale(b.e);
    for (int l = 0; l < kQK0; ++l) y[l] = float(kMXFP4Values[nibble(b.qs, l)]) * d;
}

// ---- Quantization (round to nearest; scales rounded up so that no input leaves its grid, as in
// quants.cpp, except where a grid is one-sided: see each type) ----

// Store level q (0..3) of element e in the 2-bit planes of Q2_K / Q3_K.
void put_2bit(uint8_t* qs, int e, int q) {
    qs[32 * (e / 128) + e % 32] |= uint8_t((q & 3) << (2 * ((e % 128) / 32)));
}

// Q2_K: as Q4_K's grid (quants.cpp) with 16 sub-blocks and 4-bit sc_k, m_k: dmin * m_k >= -min(0, lo_k),
// then d * sc_k >= (hi_k + dmin * m_k) / 3.
void quant_q2_k_block(const float* x, BlockQ2K& b) {
    const auto g = choose_k_grid<16, 16, 15>(x, 3);  // 16 sub-blocks of 16, 4-bit scales and mins
    b.d = g.d;
    b.dmin = g.dmin;
    std::memset(b.qs, 0, sizeof b.qs);
    for (int k = 0; k < 16; ++k) {
        b.scales[k] = uint8_t(g.sc[k] | (g.m[k] << 4));
        for (int l = 0; l < 16; ++l)
            put_2bit(b.qs, 16 * k + l, level(x[16 * k + l] + g.m1[k], g.d1[k], 0, 3));
    }
}

// The element of largest magnitude (the first of them), with its sign.
float signed_abs_max(const float* x, int n) {
    float v = 0.0f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
    return v;
}

// Q3_K, as Q4_0 (quants.cpp): the element of largest magnitude of sub-block k maps to level -4, so the
// step d * (sc_k - 32) takes the opposite sign; |sc_k - 32| <= 31, d rounded up so that it reaches.
void quant_q3_k_block(const float* x, BlockQ3K& b) {
    float need[16], max_need = 0.0f;  // signed step that maps the extreme element to -4
    for (int k = 0; k < 16; ++k) {
        need[k] = -signed_abs_max(x + 16 * k, 16) / 4.0f;
        max_need = std::max(max_need, std::fabs(need[k]));
    }
    b.d = fp16_ceil(max_need / 31.0f);
    const float d = fp16_to_f32(b.d);
    std::memset(b.hmask, 0, sizeof b.hmask);
    std::memset(b.qs, 0, sizeof b.qs);
    std::memset(b.scales, 0, sizeof b.scales);
    for (int k = 0; k < 16; ++k) {
        const int mag = d > 0.0f ? std::min(31, int(std::ceil(std::fabs(need[k]) / d))) : 0;
        const int sc = (need[k] < 0.0f ? -mag : mag) + 32;
        b.scales[k % 8] |= uint8_t((sc & 0xF) << (4 * (k / 8)));
        b.scales[8 + k % 4] |= uint8_t((sc >> 4) << (2 * (k / 4)));
        for (int l = 0; l < 16; ++l) {
            const int e = 16 * k + l, q = level(x[e], d * float(sc - 32), -4, 3) + 4;
            put_2bit(b.qs, e, q);
            b.hmask[e % 32] |= uint8_t((q >> 2) << (e / 32));
        }
    }
}

// Index of the entry of `values` nearest to v (the first of two equally near).
int nearest_index(const int8_t* values, float v) {
    int best = 0;
    for (int i = 1; i < 16; ++i)
        if (std::fabs(v - float(values[i])) < std::fabs(v - float(values[best]))) best = i;
    return best;
}

// 32 elements as nibbles of the grid values * step (IQ4_NL's element order); step 0 gives level 0 values.
void pack_nibbles(const float* x, const int8_t* values, float step, uint8_t* qs) {
    int q[32];
    for (int l = 0; l < 32; ++l) q[l] = nearest_index(values, step != 0.0f ? x[l] / step : 0.0f);
    for (int l = 0; l < 16; ++l) qs[l] = uint8_t(q[l] | (q[l + 16] << 4));
}

// IQ4_NL: the element of largest magnitude maps to -127 (the step takes its opposite sign, magnitude
// rounded up); opposite-signed elements beyond 113 steps clamp to 113.
void quant_iq4_nl_block(const float* x, BlockIQ4NL& b) {
    const float v = signed_abs_max(x, kQK0);
    const uint16_t mag = fp16_ceil(std::fabs(v) / 127.0f);
    b.d = v > 0.0f ? uint16_t(mag | 0x8000) : mag;
    pack_nibbles(x, kIQ4NLValues, fp16_to_f32(b.d), b.qs);
}

// IQ4_XS: IQ4_NL's rule per sub-block of 32, with the step d * (ls_j - 32), |ls_j - 32| <= 31.
void quant_iq4_xs_block(const float* x, BlockIQ4XS& b) {
    float need[8], max_need = 0.0f;
    for (int j = 0; j < 8; ++j) {
        need[j] = -signed_abs_max(x + 32 * j, 32) / 127.0f;
        max_need = std::max(max_need, std::fabs(need[j]));
    }
    b.d = fp16_ceil(max_need / 31.0f);
    const float d = fp16_to_f32(b.d);
    b.scales_h = 0;
    std::memset(b.scales_l, 0, sizeof b.scales_l);
    for (int j = 0; j < 8; ++j) {
        const int mag = d > 0.0f ? std::min(31, int(std::ceil(std::fabs(need[j]) / d))) : 0;
        const int ls = (need[j] < 0.0f ? -mag : mag) + 32;
        b.scales_l[j / 2] |= uint8_t((ls & 0xF) << (4 * (j % 2)));
        b.scales_h |= uint16_t((ls >> 4) << (2 * j));
        pack_nibbles(x + 32 * j, kIQ4NLValues, d * float(ls - 32), b.qs + 16 * j);
    }
}

// MXFP4: the smallest exponent whose grid reaches max |x| (12 * 2^(e - 128) >= max |x|; ggml takes
// floor(log2 max |x|) - 2 + 127 instead, which clamps the top quarter of the range), at most 252 so that
// every value stays finite; then the nearest grid value of each element.
void quant_mxfp4_block(const float* x, BlockMXFP4& b) {
    const float amax = abs_max(x, kQK0);
    int e = 0;
    if (amax > 0.0f) {
        e = std::clamp(std::ilogb(amax) + 125, 0, 252);
        while (e < 252 && std::ldexp(12.0f, e - 128) < amax) ++e;
    }
    b.e = uint8_t(e);
    pack_nibbles(x, kMXFP4Values, mxfp4_scale(b.e), b.qs);
}

// ---- int8 activations: exact integer sums; the K-quants fold each super-block's sums in with the same f32
// fused multiply-adds as their AVX2 twins (bit for bit), IQ4_NL / MXFP4 accumulate in double ----

float vec_dot_q2_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ2K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        int isum = 0, msum = 0;
        for (int k = 0; k < 16; ++k) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += q2_k_level(b[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += (b[i].scales[k] & 0xF) * s;
            msum += (b[i].scales[k] >> 4) * y[i].bsums[k];
        }
        const float d = y[i].d * fp16_to_f32(b[i].d), dmin = -y[i].d * fp16_to_f32(b[i].dmin);
        acc = std::fma(dmin, float(msum), std::fma(d, float(isum), acc));
    }
    return acc;
}

float vec_dot_q3_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ3K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        int isum = 0;
        for (int k = 0; k < 16; ++k) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += q3_k_level(b[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += (q3_k_scale(b[i].scales, k) - 32) * s;
        }
        acc = std::fma(y[i].d * fp16_to_f32(b[i].d), float(isum), acc);
    }
    return acc;
}

float vec_dot_iq4_xs(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        int isum = 0;  // |isum| < 8 * 32 * 32 * 127 * 127 < 2^31
        for (int j = 0; j < 8; ++j) {
            int s = 0;
            for (int l = 0; l < 32; ++l) s += kIQ4NLValues[nibble(b[i].qs + 16 * j, l)] * y[i].qs[32 * j + l];
            isum += (iq4_xs_scale(b[i], j) - 32) * s;
        }
        acc = std::fma(y[i].d * fp16_to_f32(b[i].d), float(isum), acc);
    }
    return acc;
}

float block_scale(const BlockIQ4NL& b) {
    return fp16_to_f32(b.d);
}
float block_scale(const BlockMXFP4& b) {
    return mxfp4_scale(b.e);
}

// IQ4_NL / MXFP4: one grid of 16 values, one scale per 32 elements.
template <class Block, const int8_t* kValues>
float nl_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8A*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQK0; ++i) {
        int s = 0;
        for (int l = 0; l < kQK0; ++l) s += kValues[nibble(b[i].qs, l)] * y[i].qs[l];
        acc += double(block_scale(b[i]) * y[i].d) * double(s);
    }
    return float(acc);
}

// ---- int8x2 activations (BlockQ8X2, 32 elements a block): exact integer sums per activation block,
// scaled and summed in double as quants_q8.cpp's references ----

// sum_l q[l] * (254 hi[l] + lo[l]) over the elements [l0, l0 + len) of y, exact.
int64_t x2_isum(const BlockQ8X2& y, const int* q, int l0 = 0, int len = kQK0) {
    int64_t s = 0;
    for (int l = l0; l < l0 + len; ++l) s += int64_t(q[l]) * (254 * y.hi[l] + y.lo[l]);
    return s;
}

// IQ4_NL / MXFP4: block i against activation block i.
template <class Block, const int8_t* kValues>
float nl_vec_dot_x2(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQK0; ++i) {
        int q[kQK0];
        for (int l = 0; l < kQK0; ++l) q[l] = kValues[nibble(b[i].qs, l)];
        acc += double(block_scale(b[i]) * y[i].d) * double(x2_isum(y[i], q));
    }
    return float(acc);
}

// Sub-block j of super-block i against activation block 8i + j; d * (ls_j - 32) is exact.
float vec_dot_x2_iq4_xs(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQKK; ++i)
        for (int j = 0; j < 8; ++j) {
            int q[kQK0];
            for (int l = 0; l < kQK0; ++l) q[l] = kIQ4NLValues[nibble(b[i].qs + 16 * j, l)];
            const float dl = fp16_to_f32(b[i].d) * float(iq4_xs_scale(b[i], j) - 32);
            acc += double(dl * y[8 * i + j].d) * double(x2_isum(y[8 * i + j], q));
        }
    return float(acc);
}

// Q2_K / Q3_K: elements 32g .. 32g + 32 of super-block i (sub-blocks 2g, 2g + 1) against activation block
// 8i + g. Q2_K's minimum term takes each 16-element half's represented sum.
float vec_dot_x2_q2_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ2K*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        for (int g = 0; g < 8; ++g) {
            const BlockQ8X2& yg = y[8 * i + g];
            int q[kQK0], one[kQK0];
            for (int l = 0; l < kQK0; ++l)
                q[l] = (b[i].scales[2 * g + l / 16] & 0xF) * q2_k_level(b[i], 32 * g + l), one[l] = 1;
            acc += double(d * yg.d) * double(x2_isum(yg, q));
            for (int h = 0; h < 2; ++h)
                acc -= double(dmin * float(b[i].scales[2 * g + h] >> 4)) * double(yg.d) *
                       double(x2_isum(yg, one, 16 * h, 16));
        }
    }
    return float(acc);
}

float vec_dot_x2_q3_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ3K*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQKK; ++i)
        for (int g = 0; g < 8; ++g) {
            int q[kQK0];
            for (int l = 0; l < kQK0; ++l)
                q[l] = (q3_k_scale(b[i].scales, 2 * g + l / 16) - 32) * q3_k_level(b[i], 32 * g + l);
            acc += double(fp16_to_f32(b[i].d) * y[8 * i + g].d) * double(x2_isum(y[8 * i + g], q));
        }
    return float(acc);
}

// ---- Integer levels (QuantTraits::to_levels): the dequantizers' factors, w = scale * q bit for bit ----

template <class Block, const int8_t* kValues>
void nl_levels(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    for (int64_t i = 0; i < n / kQK0; ++i) {
        for (int l = 0; l < kQK0; ++l) q[kQK0 * i + l] = kValues[nibble(b[i].qs, l)];
        scale[i] = block_scale(b[i]), min[i] = 0.0f;
    }
}

void levels_iq4_xs(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    for (int64_t i = 0; i < n / kQKK; ++i)
        for (int j = 0; j < 8; ++j) {
            for (int l = 0; l < kQK0; ++l)
                q[kQKK * i + 32 * j + l] = kIQ4NLValues[nibble(b[i].qs + 16 * j, l)];
            scale[8 * i + j] = fp16_to_f32(b[i].d) * float(iq4_xs_scale(b[i], j) - 32), min[8 * i + j] = 0.0f;
        }
}

void levels_q3_k(const void* w, int8_t* q, float* scale, float* min, int64_t n) {  // level_block 16
    const auto* b = static_cast<const BlockQ3K*>(w);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        for (int k = 0; k < 16; ++k)
            scale[16 * i + k] = fp16_to_f32(b[i].d) * float(q3_k_scale(b[i].scales, k) - 32),
                           min[16 * i + k] = 0.0f;
        for (int e = 0; e < kQKK; ++e) q[kQKK * i + e] = int8_t(q3_k_level(b[i], e));
    }
}

template <class Block, int QK, void (*Quant)(const float*, Block&)>
void quantize_ref(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<Block*>(dst);
    for (int64_t i = 0; i < n / QK; ++i) Quant(x + i * QK, b[i]);
}

// ---- The table entries ----

using ToFloatFn = void (*)(const void*, float*, int64_t);
using DotFn = float (*)(const void*, const float*, int64_t);

using VecDotFn = float (*)(const void*, const void*, int64_t);

// The int8 dot of an entry: its activation format and reference and AVX2 versions.
struct Int8Dot {
    VecDotType act;
    VecDotFn ref, simd;
};

template <class Block, int QK, void (*Deq)(const Block&, float*), void (*Quant)(const float*, Block&)>
QuantTraits entry(GgmlType type, const char* name, ToFloatFn to_float_simd, DotFn dot_simd, Int8Dot int8,
                  bool simd) {
    QuantTraits q{};
    q.type = type;
    q.name = name;
    q.block_size = QK;
    q.type_size = sizeof(Block);
    q.to_float_ref = to_float_ref<Block, QK, Deq>;
    q.dot_ref = dot_ref<Block, QK, Deq>;
    q.from_float_ref = quantize_ref<Block, QK, Quant>;
    q.to_float = simd ? to_float_simd : q.to_float_ref;
    q.dot = simd ? dot_simd : q.dot_ref;
    const bool k = int8.act == VecDotType::Q8_K;
    q.vec_dot_type = int8.act;
    q.quantize_act_ref = k ? ref::quantize_q8k : ref::quantize_q8a;
    q.quantize_act = !simd ? q.quantize_act_ref : k ? avx2::quantize_q8k : avx2::quantize_q8a;
    q.vec_dot_q8_ref = int8.ref;
    q.vec_dot_q8 = simd ? int8.simd : int8.ref;
    return q;
}

using ColsFn = void (*)(const void*, const void*, size_t, int64_t, int, float*);
using LevelsFn = void (*)(const void*, int8_t*, float*, float*, int64_t);

// vec_dot_x2_cols_ref: the reference dot per column.
template <VecDotFn Dot>
void x2_cols_ref(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    for (int c = 0; c < ncols; ++c) out[c] = Dot(w, static_cast<const char*>(xq) + size_t(c) * stride, n);
}

// An entry's int8x2 dots (reference and AVX-512) and integer levels (reference and SIMD; none for Q2_K,
// whose minimum per 16 elements the int16 GEMM lacks).
struct X2Levels {
    VecDotFn x2_ref, x2_wide;
    ColsFn cols_ref, cols_wide;
    LevelsFn levels_ref, levels_simd;
    int level_block;
};

// The int8x2 dots and levels only where the AVX-512 kernels run: an AVX2 host keeps the f32 decode and
// prefill, which its scalar int8x2 references would make slower (the int16 GEMM needs AVX-512 anyway).
QuantTraits with_x2(QuantTraits q, const X2Levels& f, bool simd) {
    if (!simd || !quants_use_avx512()) return q;
    q.quantize_x2_ref = ref::quantize_q8x2, q.quantize_x2 = avx2::quantize_q8x2;
    q.vec_dot_x2_ref = f.x2_ref, q.vec_dot_x2 = f.x2_wide;
    q.vec_dot_x2_cols_ref = f.cols_ref, q.vec_dot_x2_cols = f.cols_wide;
    q.to_levels_ref = f.levels_ref, q.to_levels = f.levels_simd;
    q.level_block = f.level_block;
    return q;
}

}  // namespace

void lowbit_traits(QuantTraits* out, bool simd) {
    namespace v = avx2;
    namespace w = avx512;
    const VecDotType q8_0 = VecDotType::Q8_0, q8_k = VecDotType::Q8_K;
    constexpr auto nl_x2 = nl_vec_dot_x2<BlockIQ4NL, kIQ4NLValues>;
    constexpr auto mx_x2 = nl_vec_dot_x2<BlockMXFP4, kMXFP4Values>;
    out[0] = with_x2(entry<BlockQ2K, kQKK, deq_q2_k, quant_q2_k_block>(
                         GgmlType::Q2_K, "Q2_K", v::to_float_q2_k, v::dot_q2_k,
                         {q8_k, vec_dot_q2_k, v::vec_dot_q2_k}, simd),
                     {vec_dot_x2_q2_k, w::vec_dot_x2_q2_k, x2_cols_ref<vec_dot_x2_q2_k>,
                      w::vec_dot_x2_cols_q2_k, nullptr, nullptr, 0},
                     simd);
    out[1] = with_x2(entry<BlockQ3K, kQKK, deq_q3_k, quant_q3_k_block>(
                         GgmlType::Q3_K, "Q3_K", v::to_float_q3_k, v::dot_q3_k,
                         {q8_k, vec_dot_q3_k, v::vec_dot_q3_k}, simd),
                     {vec_dot_x2_q3_k, w::vec_dot_x2_q3_k, x2_cols_ref<vec_dot_x2_q3_k>,
                      w::vec_dot_x2_cols_q3_k, levels_q3_k, v::levels_q3_k, 16},
                     simd);
    out[2] = with_x2(entry<BlockIQ4NL, kQK0, deq_iq4_nl, quant_iq4_nl_block>(
                         GgmlType::IQ4_NL, "IQ4_NL", v::to_float_iq4_nl, v::dot_iq4_nl,
                         {q8_0, nl_vec_dot<BlockIQ4NL, kIQ4NLValues>, v::vec_dot_iq4_nl}, simd),
                     {nl_x2, w::vec_dot_x2_iq4_nl, x2_cols_ref<nl_x2>, w::vec_dot_x2_cols_iq4_nl,
                      nl_levels<BlockIQ4NL, kIQ4NLValues>, v::levels_iq4_nl, 32},
                     simd);
    out[3] = with_x2(entry<BlockIQ4XS, kQKK, deq_iq4_xs, quant_iq4_xs_block>(
                         GgmlType::IQ4_XS, "IQ4_XS", v::to_float_iq4_xs, v::dot_iq4_xs,
                         {q8_k, vec_dot_iq4_xs, v::vec_dot_iq4_xs}, simd),
                     {vec_dot_x2_iq4_xs, w::vec_dot_x2_iq4_xs, x2_cols_ref<vec_dot_x2_iq4_xs>,
                      w::vec_dot_x2_cols_iq4_xs, levels_iq4_xs, v::levels_iq4_xs, 32},
                     simd);
    out[4] = with_x2(entry<BlockMXFP4, kQK0, deq_mxfp4, quant_mxfp4_block>(
                         GgmlType::MXFP4, "MXFP4", v::to_float_mxfp4, v::dot_mxfp4,
                         {q8_0, nl_vec_dot<BlockMXFP4, kMXFP4Values>, v::vec_dot_mxfp4}, simd),
                     {mx_x2, w::vec_dot_x2_mxfp4, x2_cols_ref<mx_x2>, w::vec_dot_x2_cols_mxfp4,
                      nl_levels<BlockMXFP4, kMXFP4Values>, v::levels_mxfp4, 32},
                     simd);
}

}  // namespace minfer::quants
