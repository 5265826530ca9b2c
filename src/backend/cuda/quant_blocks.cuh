// Device-side decoders of the GGUF block layouts (quant/quants_impl.h), shared by the matvec and
// dequantization kernels, and the host-side dispatch from a GgmlType to its decoder.
//
// A decoder splits a block between kLanes consecutive lanes of a warp (32 / kLanes blocks per warp step).
// Lane `sub` loads its part of a block (load), decodes the scales it needs once (scales), then produces
// kGroups runs of kWidth consecutive elements (group), run g starting at element offset(sub, g) of the
// block; each kContig consecutive groups are adjacent in the block. Values are computed exactly
// as the CPU reference to_float_ref computes them (same operations, same fused multiply-adds), so
// dequantization is bit-exact. Quantized decoders also expose their integer levels for the matvec: group g
// as four unsigned bytes (levels), and the affine map value = a * level + b shared by the kGroups / kRuns
// consecutive groups of each run (affine), so a dot product needs one multiply-add per weight. Loads respect
// each layout's alignment: blocks of 34, 18, 22, 110 and 210 bytes are only 2-byte aligned and are read 16
// bits at a time or as aligned words joined by funnel shifts, MXFP4's 17 bytes likewise from any byte; the
// rest assume a 16-byte aligned matrix. The low-bit formats' decoders (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4)
// are in quant_blocks_lowbit.cuh, included below.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gguf/ggml_type.h"
#include "util/error.h"

namespace minfer::cuda::qblocks {

__device__ __forceinline__ float h2f(uint32_t h) {
    return __half2float(__ushort_as_half(uint16_t(h)));
}
// kReadOnly: through the read-only data path (__ldg: global memory the kernel never writes); false: plain
// loads, for blocks that may be staged in shared memory (quant_mma.cu).
template <bool kReadOnly = true>
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) {
    const auto* q = reinterpret_cast<const unsigned short*>(p);
    if constexpr (kReadOnly) return __ldg(q);
    return *q;
}
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
}
template <bool kReadOnly = true>
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {  // 32 bits from a 2-byte aligned address
    return ld16<kReadOnly>(p) | ld16<kReadOnly>(p + 2) << 16;
}
// The N 32-bit words at the 2-byte aligned address p, from N aligned 32-bit loads and one 16-bit load joined
// by funnel shifts (about half the load instructions of 16-bit pieces). When p is 2 mod 4 the first load
// also reads the two bytes before p, which lie in the matrix: matrices start 16-byte aligned.
template <int N, bool kReadOnly = true>
__device__ __forceinline__ void ld_words_a2(const uint8_t* p, uint32_t (&w)[N]) {
    const auto* a = reinterpret_cast<const unsigned int*>(uintptr_t(p) & ~uintptr_t(3));
    const uint32_t shift = (uintptr_t(p) & 2) * 8;
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) {
        if constexpr (kReadOnly)
            v[i] = __ldg(a + i);
        else
            v[i] = a[i];
    }
    v[N] = ld16<kReadOnly>(p + 4 * N - 2);
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) {
    return (w >> (8 * k)) & 0xFF;
}

// float(byte i of v) - bias, exactly: the byte becomes the mantissa of 2^23 + byte (one PRMT), and the
// subtraction is exact. Avoids I2F, which runs at a quarter of the FMA rate.
__device__ __forceinline__ float byte_minus(uint32_t v, int i, float bias) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540 | i)) - (8388608.0f + bias);
}

#if defined(__CUDA_FTZ) && __CUDA_FTZ
#error "level_tiny needs subnormal floats: build the CUDA code without -ftz=true / --use_fast_math"
#endif

// Byte i of v as the subnormal float v_i * 2^-149 (the level is the mantissa): one PRMT, no conversion.
// Times x * 2^64 it gives v_i * x * 2^-85, rounded as a normal product is when v_i * |x| >= 2^-41
// (x itself must stay below 2^64 in magnitude, far beyond any activation).
__device__ __forceinline__ float level_tiny(uint32_t v, int i) {
    return __uint_as_float(__byte_perm(v, 0, 0x4440 | i));
}
constexpr float kTinyX = 0x1p64f;     // x scale that keeps level_tiny products normal
constexpr float kTinyUndo = 0x1p85f;  // 2^(149 - 64): back from level_tiny * x * kTinyX units

// Dense F32 / F16 / BF16: a "block" of W elements (4 when n_in % 4 == 0, else 1) per lane.
template <GgmlType T, int W>
struct DecDense {
    static constexpr int kElems = W, kLanes = 1, kGroups = 1, kWidth = W;
    static constexpr int kRuns = 0;    // no integer levels: the matvec multiplies the values themselves
    static constexpr int kContig = 1;  // groups that are consecutive in the block
    static constexpr int kBytes = W * (T == GgmlType::F32 ? 4 : 2);
    struct Raw {
        uint32_t v[T == GgmlType::F32 ? W : (W + 1) / 2];
    };
    struct Scales {};
    __device__ static Raw load(const uint8_t* b, int) {
        Raw r;
        if constexpr (T == GgmlType::F32 && W == 4) {
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(b));
            r.v[0] = u.x, r.v[1] = u.y, r.v[2] = u.z, r.v[3] = u.w;
        } else if constexpr (T == GgmlType::F32) {
            r.v[0] = ld32(b);
        } else if constexpr (W == 4) {
            const uint2 u = __ldg(reinterpret_cast<const uint2*>(b));
            r.v[0] = u.x, r.v[1] = u.y;
        } else {
            r.v[0] = ld16(b);
        }
        return r;
    }
    __device__ static Scales scales(const Raw&, int) { return {}; }
    __device__ static int offset(int, int) { return 0; }
    __device__ static void group(const Raw& r, const Scales&, int, int, float (&w)[W]) {
#pragma unroll
        for (int i = 0; i < W; ++i) {
            if constexpr (T == GgmlType::F32) {
                w[i] = __uint_as_float(r.v[i]);
            } else {
                const uint32_t h = (r.v[i / 2] >> (16 * (i % 2))) & 0xFFFF;
                w[i] = T == GgmlType::F16 ? h2f(h) : __uint_as_float(h << 16);
            }
        }
    }
};

// Q8_0: 2 lanes per block, lane `sub` takes qs[16 sub, 16 sub + 16); value = float(q) * d.
struct DecQ8_0 {
    static constexpr int kElems = 32, kBytes = 34, kLanes = 2, kGroups = 4, kWidth = 4, kRuns = 1,
                         kContig = 4;
    struct Raw {
        uint32_t d, qs[4];
    };
    struct Scales {
        float d;
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        Raw r;
        r.d = ld16(b);
        ld_words_a2(b + 2 + 16 * sub, r.qs);
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) { return {h2f(r.d)}; }
    __device__ static int offset(int sub, int g) { return 16 * sub + 4 * g; }
    __device__ static uint32_t levels(const Raw& r, int, int g) {
        return r.qs[g] ^ 0x80808080u;  // q + 128 in every byte
    }
    __device__ static float2 affine(const Raw&, const Scales& sc, int, int) { return {sc.d, -128.0f * sc.d}; }
    __device__ static void group(const Raw& r, const Scales& sc, int sub, int g, float (&w)[4]) {
        const uint32_t biased = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = byte_minus(biased, i, 128.0f) * sc.d;
    }
};

// Spreads bits 0..3 of x to bit 4 of bytes 0..3 (the fifth bits of four Q5 levels).
__device__ __forceinline__ uint32_t spread_bit4(uint32_t x) {
    return (((x & 0xF) * 0x00204081u) & 0x01010101u) << 4;
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: 2 lanes per block, lane `sub` takes qs[8 sub, 8 sub + 8): group g holds
// elements 16 (g / 2) + 8 sub + 4 (g % 2) + i, low nibbles for g < 2 and high nibbles for g >= 2.
// Q*_0: value = float(q - offset) * d; Q*_1: value = fma(float(q), d, m).
template <GgmlType T>
struct DecBlock32 {
    static constexpr bool kQ5 = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
    static constexpr bool kMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
    static constexpr int kElems = 32, kLanes = 2, kGroups = 4, kWidth = 4, kRuns = 1, kContig = 2;
    static constexpr int kHead = (kMin ? 4 : 2) + (kQ5 ? 4 : 0);  // bytes before qs
    static constexpr int kBytes = kHead + 16;
    struct Raw {
        uint32_t dm, qh, qs[2];
    };
    struct Scales {
        float d, m;
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        Raw r{0, 0, {0, 0}};
        if constexpr (kMin) {  // 20- and 24-byte blocks: 4-byte aligned
            r.dm = ld32(b);
            if constexpr (kQ5) r.qh = ld32(b + 4);
            r.qs[0] = ld32(b + kHead + 8 * sub), r.qs[1] = ld32(b + kHead + 8 * sub + 4);
        } else {  // 18- and 22-byte blocks: 2-byte aligned
            r.dm = ld16(b);
            if constexpr (kQ5) r.qh = ld32_a2(b + 2);
            ld_words_a2(b + kHead + 8 * sub, r.qs);
        }
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) {
        return {h2f(r.dm & 0xFFFF), kMin ? h2f(r.dm >> 16) : 0.0f};
    }
    __device__ static int offset(int sub, int g) { return 16 * (g / 2) + 8 * sub + 4 * (g % 2); }
    __device__ static uint32_t levels(const Raw& r, int sub, int g) {
        uint32_t q = (r.qs[g % 2] >> (4 * (g / 2))) & 0x0F0F0F0Fu;
        if constexpr (kQ5) q |= spread_bit4(r.qh >> offset(sub, g));
        return q;
    }
    __device__ static float2 affine(const Raw&, const Scales& sc, int, int) {
        return {sc.d, kMin ? sc.m : (kQ5 ? -16.0f : -8.0f) * sc.d};
    }
    __device__ static void group(const Raw& r, const Scales& sc, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (kMin) {
                w[i] = __fmaf_rn(byte_minus(q, i, 0.0f), sc.d, sc.m);
            } else {
                w[i] = byte_minus(q, i, kQ5 ? 16.0f : 8.0f) * sc.d;
            }
        }
    }
};

__device__ __forceinline__ uint32_t word(const uint4& u, int c) {
    return c == 0 ? u.x : c == 1 ? u.y : c == 2 ? u.z : u.w;
}

// Q4_K / Q5_K: 8 lanes per super-block; lane k takes qs[16k, 16k + 16), i.e. with p = k / 2,
// l = 16 (k % 2): group g holds elements 64p + 32 (g / 4) + l + 4 (g % 4) + i, low nibbles (sub-block
// 2p) for g < 4, high nibbles (2p + 1) after. Q5_K's fifth bits: bit 2p (2p + 1) of qh[l + ...].
// value = fma(d * sc, float(q), -(dmin * m)).
template <GgmlType T>
struct DecK1 {
    static constexpr bool kQ5 = T == GgmlType::Q5_K;
    static constexpr int kElems = 256, kBytes = kQ5 ? 176 : 144, kLanes = 8, kGroups = 8, kWidth = 4;
    static constexpr int kRuns = 2, kContig = 4;  // runs: sub-blocks 2p and 2p + 1
    struct Raw {
        uint4 head;  // d, dmin, scales[12]
        uint4 qh, qs;
    };
    struct Scales {
        float d1[2], m1[2];
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        Raw r;
        r.head = __ldg(reinterpret_cast<const uint4*>(b));
        r.qh = kQ5 ? __ldg(reinterpret_cast<const uint4*>(b + 16 + 16 * (sub % 2))) : uint4{};
        r.qs = __ldg(reinterpret_cast<const uint4*>(b + (kQ5 ? 48 : 16) + 16 * sub));
        return r;
    }
    // The 6-bit scales and mins of sub-blocks 2p and 2p + 1 (as the CPU's k_scale_min), both at once in
    // bytes 0 and 1: sub-blocks 0..3 are the low 6 bits of scale bytes j and j + 4; sub-blocks 4..7 take
    // their low 4 bits from byte j + 4 and their top 2 bits from the top of bytes j - 4 and j. One
    // expression serves both halves, with shifts and masks that depend only on the lane (hoisted out of
    // the loop): two shifts and two LOP3 per field instead of both halves' five operations and a select.
    __device__ static Scales scales(const Raw& r, int sub) {
        const float d = h2f(r.head.x & 0xFFFF), dmin = h2f(r.head.x >> 16);
        const int p = sub / 2, k = 16 * (p % 2), top = p < 2 ? k : k + 2;
        const uint32_t keep = p < 2 ? 0x3F3Fu : 0x3030u, low4 = p < 2 ? 0u : 0x0F0Fu;
        const uint32_t sc = ((r.head.y >> top) & keep) | ((r.head.w >> k) & low4);
        const uint32_t m = ((r.head.z >> top) & keep) | ((r.head.w >> (k + 4)) & low4);
        Scales s;
#pragma unroll
        for (int h = 0; h < 2; ++h)
            s.d1[h] = (h == 1 && !kQ5 ? d * 0.0625f : d) * byte_minus(sc, h, 0.0f),
            s.m1[h] = dmin * byte_minus(m, h, 0.0f);
        return s;
    }
    __device__ static int offset(int sub, int g) {
        return 64 * (sub / 2) + 32 * (g / 4) + 16 * (sub % 2) + 4 * (g % 4);
    }
    // Q4_K's high nibbles stay in place, 16 times the level (one mask, no shift per 4 levels); its scale
    // d1[1] is 1/16 of d * sc to match, both exact (powers of two), so every product is unchanged.
    __device__ static uint32_t levels(const Raw& r, int sub, int g) {
        const int h = g / 4;
        if constexpr (!kQ5) return word(r.qs, g % 4) & (h == 0 ? 0x0F0F0F0Fu : 0xF0F0F0F0u);
        uint32_t q = (word(r.qs, g % 4) >> (4 * h)) & 0x0F0F0F0Fu;
        q |= ((word(r.qh, g % 4) >> (2 * (sub / 2) + h)) & 0x01010101u) << 4;
        return q;
    }
    __device__ static float2 affine(const Raw&, const Scales& s, int, int h) {
        return {s.d1[h], -s.m1[h]};
    }
    __device__ static void group(const Raw& r, const Scales& s, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __fmaf_rn(s.d1[g / 4], byte_minus(q, i, 0.0f), -s.m1[g / 4]);
    }
};

// Q6_K (210-byte blocks, 2-byte aligned; kPadded: each block padded to 224 bytes by pad_matrix, so
// 16-byte aligned): 8 lanes per super-block; lane k takes ql[16k, 16k + 16), i.e.
// with h = k / 4, e = (k / 2) % 2, l = 16 (k % 2): group g holds elements 128h + 32 (e + 2 (g / 4)) + l +
// 4 (g % 4) + i, low nibbles for g < 4 and high nibbles after, whose top bits are bits 2e (2e + 4) of
// qh[32h + l + ...]; each half is one 16-element sub-block. value = (d * scale) * float(q - 32).
template <bool kPadded>
struct DecQ6KT {
    static constexpr int kElems = 256, kBytes = kPadded ? 224 : 210, kLanes = 8, kGroups = 8, kWidth = 4;
    static constexpr int kRuns = 2, kContig = 4;  // runs: the two 16-element sub-blocks
    struct Raw {
        uint32_t ql[4], qh[4], d;
        int sc[2];
    };
    struct Scales {
        float ds[2];
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        const int h = sub / 4, e = (sub / 2) % 2, l = 16 * (sub % 2);
        Raw r;
        if constexpr (kPadded) {
            const uint4 ql = __ldg(reinterpret_cast<const uint4*>(b + 16 * sub));
            const uint4 qh = __ldg(reinterpret_cast<const uint4*>(b + 128 + 32 * h + l));
            r.ql[0] = ql.x, r.ql[1] = ql.y, r.ql[2] = ql.z, r.ql[3] = ql.w;
            r.qh[0] = qh.x, r.qh[1] = qh.y, r.qh[2] = qh.z, r.qh[3] = qh.w;
        } else {
            ld_words_a2(b + 16 * sub, r.ql);
            ld_words_a2(b + 128 + 32 * h + l, r.qh);
        }
        const auto* scales = reinterpret_cast<const signed char*>(b + 192 + 8 * h + 2 * e + l / 16);
        r.sc[0] = __ldg(scales), r.sc[1] = __ldg(scales + 4);
        r.d = ld16(b + 208);
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) {
        const float d = h2f(r.d);
        return {{d * float(r.sc[0]), d * float(r.sc[1])}};
    }
    __device__ static int offset(int sub, int g) {
        return 128 * (sub / 4) + 32 * ((sub / 2) % 2 + 2 * (g / 4)) + 16 * (sub % 2) + 4 * (g % 4);
    }
    __device__ static uint32_t levels(const Raw& r, int sub, int g) {
        const int h = g / 4, e = (sub / 2) % 2;
        const uint32_t lo = (r.ql[g % 4] >> (4 * h)) & 0x0F0F0F0Fu;
        const uint32_t hi = (r.qh[g % 4] >> (2 * e + 4 * h)) & 0x03030303u;
        return lo | hi << 4;
    }
    __device__ static float2 affine(const Raw&, const Scales& s, int, int h) {
        return {s.ds[h], -32.0f * s.ds[h]};
    }
    __device__ static void group(const Raw& r, const Scales& s, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = s.ds[g / 4] * byte_minus(q, i, 32.0f);
    }
};

}  // namespace minfer::cuda::qblocks

#include "backend/cuda/quant_blocks_lowbit.cuh"  // uses the helpers above

namespace minfer::cuda::qblocks {

template <class D>
constexpr bool kIsQ6K = std::is_same_v<D, DecQ6KT<false>> || std::is_same_v<D, DecQ6KT<true>>;

// Calls f(Decoder{}) for type t (padded: Q6_K blocks padded by pad_matrix); dense types pick the 4-wide
// decoder when n_in % 4 == 0.
template <class F>
void with_decoder(GgmlType t, int64_t n_in, bool padded, F&& f) {
    if (padded && t != GgmlType::Q6_K)
        throw Error(std::string("CUDA quant kernels: no padded layout for ") + ggml_type_name(t));
    const bool wide = n_in % 4 == 0;
    switch (t) {
        case GgmlType::F32:
            return wide ? f(DecDense<GgmlType::F32, 4>{}) : f(DecDense<GgmlType::F32, 1>{});
        case GgmlType::F16:
            return wide ? f(DecDense<GgmlType::F16, 4>{}) : f(DecDense<GgmlType::F16, 1>{});
        case GgmlType::BF16:
            return wide ? f(DecDense<GgmlType::BF16, 4>{}) : f(DecDense<GgmlType::BF16, 1>{});
        case GgmlType::Q8_0:
            return f(DecQ8_0{});
        case GgmlType::Q4_0:
            return f(DecBlock32<GgmlType::Q4_0>{});
        case GgmlType::Q4_1:
            return f(DecBlock32<GgmlType::Q4_1>{});
        case GgmlType::Q5_0:
            return f(DecBlock32<GgmlType::Q5_0>{});
        case GgmlType::Q5_1:
            return f(DecBlock32<GgmlType::Q5_1>{});
        case GgmlType::Q4_K:
            return f(DecK1<GgmlType::Q4_K>{});
        case GgmlType::Q5_K:
            return f(DecK1<GgmlType::Q5_K>{});
        case GgmlType::Q6_K:
            return padded ? f(DecQ6KT<true>{}) : f(DecQ6KT<false>{});
        case GgmlType::Q2_K:
            return f(DecQ2K{});
        case GgmlType::Q3_K:
            return f(DecQ3K{});
        case GgmlType::IQ4_NL:
            return f(DecNL32<GgmlType::IQ4_NL>{});
        case GgmlType::IQ4_XS:
            return f(DecIQ4XS{});
        case GgmlType::MXFP4:
            return f(DecNL32<GgmlType::MXFP4>{});
        default:
            throw Error(std::string("CUDA quant kernels: unsupported type ") + ggml_type_name(t));
    }
}

// Bytes of one row of n_in elements of decoder D's type.
template <class D>
int64_t row_bytes(int64_t n_in) {
    return n_in / D::kElems * D::kBytes;
}

// Throws unless n_in is a whole number of blocks and `p` is aligned to `align` bytes.
void check_layout(GgmlType t, int64_t n_in, const void* p, int align, const char* what);

}  // namespace minfer::cuda::qblocks
