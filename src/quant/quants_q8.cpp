// Scalar references of the int8-activation path: the activation quantizers (BlockQ8A, BlockQ8K) and the
// quantized-weight . quantized-activation dots. Integer products are summed exactly per block; the
// 32-element dots then accumulate d_w * d_x * sum in double (the AVX2 twins sum in f32, within a stated
// budget), the K-quant dots combine each super-block's exact sums with the same f32 fused multiply-adds
// in the same order as their twins, so those agree bit for bit. The int8x2 versions (BlockQ8X2) scale
// each 32-element block's exact sum q . (254 hi + lo) in double (their twins in f32, within a budget).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/quants_impl.h"
#include "util/fp16.h"

namespace minfer::quants {

void x2_fill_tail(void* xq, int64_t n) {
    const auto* blocks = static_cast<const BlockQ8X2*>(xq);
    const int64_t nb = n / kQK0;
    int32_t* offsets = x2_offsets(xq, n);
    for (int64_t i = 0; i < nb; ++i)
        for (int k = 0; k < 8; ++k) {
            int32_t sum = 0;
            for (int l = 4 * k; l < 4 * k + 4; ++l) sum += 254 * blocks[i].hi[l] + blocks[i].lo[l];
            offsets[8 * i + k] = 32 * sum;
        }
    const X2Wide wide = x2_wide(xq, n);
    auto* pairs = const_cast<int8_t*>(wide.pairs);
    for (int64_t p = 0; p < nb / 2; ++p) {
        std::memcpy(pairs + 128 * p, blocks[2 * p].hi, kQK0);
        std::memcpy(pairs + 128 * p + 32, blocks[2 * p + 1].hi, kQK0);
        std::memcpy(pairs + 128 * p + 64, blocks[2 * p].lo, kQK0);
        std::memcpy(pairs + 128 * p + 96, blocks[2 * p + 1].lo, kQK0);
    }
    auto* d = const_cast<float*>(wide.d);
    auto* s = const_cast<float*>(wide.s);
    for (int64_t i = 0; i < nb; ++i) d[i] = blocks[i].d, s[i] = blocks[i].s;
}

}  // namespace minfer::quants

namespace minfer::quants::ref {
namespace {

// Scale and round-to-nearest-even levels of one block: d = max |x| / 127, q = nearbyint(x / d) computed
// as x * (1 / d), so that |q| <= 127. Returns d; all-zero blocks get d = 0 and q = 0.
float quantize_block(const float* x, int n, int8_t* q) {
    float amax = 0.0f;
    for (int l = 0; l < n; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < n; ++l) q[l] = int8_t(std::nearbyint(x[l] * id));
    return d;
}

int sum_levels(const int8_t* q, int n) {
    int s = 0;
    for (int l = 0; l < n; ++l) s += q[l];
    return s;
}

// Levels of a 32-element weight block as the dots use them: signed for Q8_0 / Q4_0 / Q5_0 (value d * q),
// unsigned 0..15 / 0..31 for Q4_1 / Q5_1 (value d * q + m). Element order as in quants_impl.h.
template <class Block>
void block32_levels(const Block& b, int* q) {
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
        for (int l = 0; l < kQK0; ++l) q[l] = b.qs[l];
        return;
    } else {
        uint32_t qh = 0;
        if constexpr (requires { b.qh; }) std::memcpy(&qh, b.qh, sizeof qh);
        for (int l = 0; l < kQK0 / 2; ++l) {
            q[l] = (b.qs[l] & 0xF) | int((qh >> l) & 1) << 4;
            q[l + kQK0 / 2] = (b.qs[l] >> 4) | int((qh >> (l + kQK0 / 2)) & 1) << 4;
        }
        constexpr bool kSym = std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockQ5_0>;
        constexpr int kOffset = std::is_same_v<Block, BlockQ4_0> ? 8 : 16;
        if constexpr (kSym)
            for (int l = 0; l < kQK0; ++l) q[l] -= kOffset;
    }
}

template <class Block>
float block32_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8A*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQK0; ++i) {
        int q[kQK0];
        block32_levels(b[i], q);
        int sumi = 0;
        for (int l = 0; l < kQK0; ++l) sumi += q[l] * y[i].qs[l];
        const float d = fp16_to_f32(b[i].d) * y[i].d;
        acc += double(d) * double(sumi);
        if constexpr (requires { b[i].m; }) acc += double(fp16_to_f32(b[i].m)) * double(y[i].s);
    }
    return float(acc);
}

// Level 0..15 (Q4_K) or 0..31 (Q5_K) of element e = 32j + l of a super-block (layout in quants_impl.h).
template <class Block>
int k_type1_level(const Block& b, int e) {
    const int j = e / 32, l = e % 32;
    int q = (b.qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
    if constexpr (std::is_same_v<Block, BlockQ5K>) q |= ((b.qh[l] >> j) & 1) << 4;
    return q;
}

template <class Block>
float k_type1_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            k_scale_min(b[i].scales, j, &sc, &m);
            int s = 0;
            for (int l = 0; l < 32; ++l) s += k_type1_level(b[i], 32 * j + l) * y[i].qs[32 * j + l];
            isum += sc * s;
            msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        // The exact sums of the scale and minimum terms, folded in by two f32 fused multiply-adds.
        const float d = y[i].d * fp16_to_f32(b[i].d), dmin = -y[i].d * fp16_to_f32(b[i].dmin);
        acc = std::fma(dmin, float(msum), std::fma(d, float(isum), acc));
    }
    return acc;
}

int q6_k_level(const BlockQ6K& b, int e) {  // 0..63 (value d * sc * (q - 32)), layout in quants_impl.h
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int lo = (b.ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0xF;
    const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
    return lo | (hi << 4);
}

// ---- int8x2 ----

// d_w * d * sum_l q_l (254 hi_l + lo_l) of one activation block, with integer weight levels q (scale
// included): the sum exact, d_w * d rounded to f32 as in the AVX2 twins, the product in double.
double x2_term(float dw, const BlockQ8X2& y, const int* q) {
    int64_t sum = 0;
    for (int l = 0; l < kQK0; ++l) sum += int64_t(q[l]) * (254 * y.hi[l] + y.lo[l]);
    return double(dw * y.d) * double(sum);
}

template <class Block>
float block32_vec_dot_x2(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQK0; ++i) {
        int q[kQK0];
        block32_levels(b[i], q);
        acc += x2_term(fp16_to_f32(b[i].d), y[i], q);
        if constexpr (requires { b[i].m; }) acc += double(fp16_to_f32(b[i].m)) * double(y[i].s);
    }
    return float(acc);
}

// Sub-block j of super-block i against activation block 8i + j: d * sc_j * q and -dmin * m_j * s.
template <class Block>
float k_type1_vec_dot_x2(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        for (int j = 0; j < 8; ++j) {
            int sc, m, q[32];
            k_scale_min(b[i].scales, j, &sc, &m);
            for (int l = 0; l < 32; ++l) q[l] = sc * k_type1_level(b[i], 32 * j + l);
            const BlockQ8X2& yj = y[8 * i + j];
            acc += x2_term(fp16_to_f32(b[i].d), yj, q);
            acc -= double(fp16_to_f32(b[i].dmin)) * double(m) * double(yj.s);
        }
    }
    return float(acc);
}

}  // namespace

void quantize_q8a(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8A*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        b[i].d = quantize_block(x, kQK0, b[i].qs);
        b[i].s = b[i].d * float(sum_levels(b[i].qs, kQK0));
    }
}

void quantize_q8k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8K*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
        b[i].d = quantize_block(x, kQKK, b[i].qs);
        for (int k = 0; k < kQKK / 16; ++k) b[i].bsums[k] = int16_t(sum_levels(b[i].qs + 16 * k, 16));
    }
}

float vec_dot_q8_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<BlockQ8_0>(w, xq, n);
}
float vec_dot_q4_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<BlockQ4_0>(w, xq, n);
}
float vec_dot_q4_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<BlockQ4_1>(w, xq, n);
}
float vec_dot_q5_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<BlockQ5_0>(w, xq, n);
}
float vec_dot_q5_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<BlockQ5_1>(w, xq, n);
}
float vec_dot_q4_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot<BlockQ4K>(w, xq, n);
}
float vec_dot_q5_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot<BlockQ5K>(w, xq, n);
}

// sum_k sc_k * sum_l q_l x_l over the 16 sub-blocks with levels 0..63, minus 32 * sum_k sc_k * bsums[k].
float vec_dot_q6_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ6K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        int isum = 0, msum = 0;
        for (int k = 0; k < kQKK / 16; ++k) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += q6_k_level(b[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += b[i].scales[k] * s;
            msum += b[i].scales[k] * y[i].bsums[k];
        }
        acc = std::fma(y[i].d * fp16_to_f32(b[i].d), float(isum - 32 * msum), acc);
    }
    return acc;
}

// d = max |x| / (127 * 254); hi = nearbyint(x * (1 / (254 d))), lo = nearbyint(r * (1 / d)) with the
// residual r = x - d * (254 hi) (one fused multiply-add); s = d * (254 sum(hi) + sum(lo)), exact integer.
void quantize_q8x2(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8X2*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        float amax = 0.0f;
        for (int l = 0; l < kQK0; ++l) amax = std::max(amax, std::fabs(x[l]));
        const float d = amax / (127.0f * 254.0f);
        const float ih = d != 0.0f ? 1.0f / (254.0f * d) : 0.0f, il = d != 0.0f ? 1.0f / d : 0.0f;
        for (int l = 0; l < kQK0; ++l) {
            b[i].hi[l] = int8_t(std::nearbyint(x[l] * ih));
            const float r = std::fma(-d, float(254 * b[i].hi[l]), x[l]);
            b[i].lo[l] = int8_t(std::nearbyint(r * il));
        }
        b[i].d = d;
        b[i].s = d * float(254 * sum_levels(b[i].hi, kQK0) + sum_levels(b[i].lo, kQK0));
    }
    x2_fill_tail(dst, n);
}

float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot_x2<BlockQ8_0>(w, xq, n);
}
float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot_x2<BlockQ4_0>(w, xq, n);
}
float vec_dot_x2_q4_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot_x2<BlockQ4_1>(w, xq, n);
}
float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot_x2<BlockQ5_0>(w, xq, n);
}
float vec_dot_x2_q5_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot_x2<BlockQ5_1>(w, xq, n);
}
float vec_dot_x2_q4_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot_x2<BlockQ4K>(w, xq, n);
}
float vec_dot_x2_q5_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot_x2<BlockQ5K>(w, xq, n);
}

// Group g (32 elements, sub-blocks 2g and 2g + 1) of super-block i against activation block 8i + g.
float vec_dot_x2_q6_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ6K*>(w);
    const auto* y = static_cast<const BlockQ8X2*>(xq);
    double acc = 0.0;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        for (int g = 0; g < 8; ++g) {
            int q[32];
            for (int l = 0; l < 32; ++l)
                q[l] = b[i].scales[2 * g + l / 16] * (q6_k_level(b[i], 32 * g + l) - 32);
            acc += x2_term(fp16_to_f32(b[i].d), y[8 * i + g], q);
        }
    }
    return float(acc);
}

}  // namespace minfer::quants::ref
