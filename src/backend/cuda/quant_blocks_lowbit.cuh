// Device-side decoders of the low-bit GGUF layouts (quant/quants_lowbit.h): Q2_K, Q3_K, IQ4_NL, IQ4_XS and
// MXFP4, with the interface of quant_blocks.cuh's decoders (see its header comment). This file is part of
// quant_blocks.cuh, which includes it after its load and conversion helpers (h2f, ld16, ld32,
// ld_words_a2, byte_minus) and before with_decoder: include quant_blocks.cuh, not this file.
//
// Values are computed as the CPU's to_float_ref computes them (quants_lowbit.cpp: same operations, same
// fused multiply-adds; a product's operands in either order). The matvec takes levels as unsigned bytes
// with value = a * level + b per run: Q2_K's levels are q itself, Q3_K's are q in 0..7 with b = -4 a (the
// CPU's q - 4); the lookup formats (IQ4_NL, IQ4_XS, MXFP4), whose values are signed table entries times a
// scale, give the entry plus a bias that makes it unsigned (IQ4: + 128, MXFP4: + 12) with b = -bias * a,
// exact in f32 (IQ4: a power of two times a; MXFP4: a is a power of two). The tables are looked up in
// registers by byte permutes (lookup16x2).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gguf/ggml_type.h"

namespace minfer::cuda::qblocks {

// The N 32-bit words at the byte address p (any alignment), from the N + 1 aligned 32-bit words around
// them joined by funnel shifts. The loads read only the aligned words that hold bytes of [p, p + 4N), so
// they stay within the matrix (matrices start 16-byte aligned). kReadOnly: as ld16's.
template <int N, bool kReadOnly = true>
__device__ __forceinline__ void ld_words_a1(const uint8_t* p, uint32_t (&w)[N]) {
    const auto* a = reinterpret_cast<const unsigned int*>(uintptr_t(p) & ~uintptr_t(3));
    const uint32_t shift = uint32_t(uintptr_t(p) & 3) * 8;
    // The word of the last byte: a + N when p is not aligned, else a + N - 1 (then unused: shift is 0).
    const auto* last = reinterpret_cast<const unsigned int*>((uintptr_t(p) + 4 * N - 1) & ~uintptr_t(3));
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = kReadOnly ? __ldg(a + i) : a[i];
    v[N] = kReadOnly ? __ldg(last) : *last;
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

// Word k of a 16-entry byte table (entry i is byte i % 4 of word i / 4): the int8 values v plus bias.
constexpr uint32_t table_word(const int8_t (&v)[16], int bias, int k) {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w |= uint32_t(uint8_t(v[4 * k + i] + bias)) << (8 * i);
    return w;
}

// ggml's kvalues_iq4nl (quants_lowbit.h's kIQ4NLValues) + 128: 1..241.
constexpr int8_t kIQ4NLLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};
// ggml's kvalues_mxfp4 (kMXFP4Values, the E2M1 values doubled) + 12: 0..24.
constexpr int8_t kMXFP4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The biased tables as scalar constants (device code may read constexpr scalars, not arrays).
struct IQ4Table {
    static constexpr int kBias = 128;
    static constexpr uint32_t kW0 = table_word(kIQ4NLLevels, kBias, 0),
                              kW1 = table_word(kIQ4NLLevels, kBias, 1),
                              kW2 = table_word(kIQ4NLLevels, kBias, 2),
                              kW3 = table_word(kIQ4NLLevels, kBias, 3);
};
struct MXFP4Table {
    static constexpr int kBias = 12;
    static constexpr uint32_t kW0 = table_word(kMXFP4Levels, kBias, 0),
                              kW1 = table_word(kMXFP4Levels, kBias, 1),
                              kW2 = table_word(kMXFP4Levels, kBias, 2),
                              kW3 = table_word(kMXFP4Levels, kBias, 3);
};
// The same tables unbiased, their entries as signed bytes (the int8 tensor cores' levels, quant_mma.cu).
template <const int8_t (&kLevels)[16]>
struct SignedTable {
    static constexpr uint32_t kW0 = table_word(kLevels, 0, 0), kW1 = table_word(kLevels, 0, 1),
                              kW2 = table_word(kLevels, 0, 2), kW3 = table_word(kLevels, 0, 3);
};
static_assert(IQ4Table::kW0 == 0x3F2D1801u && IQ4Table::kW3 == 0xF1D9C5B5u);
static_assert(MXFP4Table::kW1 == 0x18141210u && MXFP4Table::kW3 == 0x00040608u);
static_assert(SignedTable<kMXFP4Levels>::kW1 == 0x0C080604u && SignedTable<kMXFP4Levels>::kW3 == 0xF4F8FAFCu);

// Table T's entries of the eight nibbles of w (llama.cpp's get_int_from_table_16): x holds those of the
// low nibbles of bytes 0..3, y those of the high nibbles. Each permute selects with the three low bits of
// four nibbles (masked here), the fourth bit choosing between the table's halves.
template <class T>
__device__ __forceinline__ uint2 lookup16x2(uint32_t w) {
    const uint32_t idx = w & 0x77777777u, half = 0x32103210u | (w & 0x88888888u) >> 1;
    uint32_t tmp[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const uint32_t lo = __byte_perm(T::kW0, T::kW1, idx >> (16 * i));
        const uint32_t hi = __byte_perm(T::kW2, T::kW3, idx >> (16 * i));
        tmp[i] = __byte_perm(lo, hi, half >> (16 * i));
    }
    return {__byte_perm(tmp[0], tmp[1], 0x6420), __byte_perm(tmp[0], tmp[1], 0x7531)};
}

// Q2_K (84-byte blocks, 4-byte aligned): 8 lanes per super-block; lane k takes qs[8k, 8k + 8), i.e. with
// h = k / 4, l = 8 (k % 4): group g holds elements 128h + 32 (g / 2) + l + 4 (g % 2) + i, bits 2 (g / 2)
// and 2 (g / 2) + 1 of the bytes of qs word g % 2. Groups 2j and 2j + 1 lie in sub-block
// 8h + 2j + (k % 4) / 2 (run j). value = fma(d * sc, float(q), -(dmin * m)).
struct DecQ2K {
    static constexpr int kElems = 256, kBytes = 84, kLanes = 8, kGroups = 8, kWidth = 4;
    static constexpr int kRuns = 4, kContig = 2;
    struct Raw {
        uint32_t qs[2];
        uint32_t sc;  // scales[] of runs 0..3 (low nibble sc, high nibble m)
        uint32_t dm;  // d, dmin
    };
    struct Scales {
        float d1[4], m1[4];
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        const int h = sub / 4, p = (sub % 4) / 2;
        Raw r;
        r.qs[0] = ld32(b + 16 + 8 * sub), r.qs[1] = ld32(b + 20 + 8 * sub);
        // scales[8h + 2j + p] for j = 0..3: bytes p, p + 2 of each of the two words.
        r.sc = __byte_perm(ld32(b + 8 * h), ld32(b + 8 * h + 4), p ? 0x7531 : 0x6420);
        r.dm = ld32(b + 80);
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) {
        const float d = h2f(r.dm & 0xFFFF), dmin = h2f(r.dm >> 16);
        const uint32_t sc = r.sc & 0x0F0F0F0Fu, m = (r.sc >> 4) & 0x0F0F0F0Fu;
        Scales s;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            s.d1[j] = d * byte_minus(sc, j, 0.0f), s.m1[j] = dmin * byte_minus(m, j, 0.0f);
        return s;
    }
    __device__ static int offset(int sub, int g) {
        return 128 * (sub / 4) + 32 * (g / 2) + 8 * (sub % 4) + 4 * (g % 2);
    }
    __device__ static uint32_t levels(const Raw& r, int, int g) {
        return (r.qs[g % 2] >> (2 * (g / 2))) & 0x03030303u;
    }
    __device__ static float2 affine(const Raw&, const Scales& s, int, int run) {
        return {s.d1[run], -s.m1[run]};
    }
    __device__ static void group(const Raw& r, const Scales& s, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = __fmaf_rn(s.d1[g / 2], byte_minus(q, i, 0.0f), -s.m1[g / 2]);
    }
};

// Q3_K (110-byte blocks, 2-byte aligned): Q2_K's lanes, groups and runs over qs; the third bit of element
// 128h + 32j + l is bit 4h + j of hmask[l]. Levels are q = lo + 4 hi in 0..7; value = (d * (sc - 32)) *
// float(q - 4), sc the 6-bit scale of the run's sub-block (q3_k_scale).
struct DecQ3K {
    static constexpr int kElems = 256, kBytes = 110, kLanes = 8, kGroups = 8, kWidth = 4;
    static constexpr int kRuns = 4, kContig = 2;
    struct Raw {
        uint32_t hm[2], qs[2];
        uint32_t sc;  // the 6-bit scales of runs 0..3
        uint32_t d;
    };
    struct Scales {
        float dl[4];
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        const int h = sub / 4, p = (sub % 4) / 2;
        Raw r;
        ld_words_a2(b + 8 * (sub % 4), r.hm);
        ld_words_a2(b + 32 + 8 * sub, r.qs);
        uint32_t s[3];
        ld_words_a2(b + 96, s);
        // Sub-block 8h + 2j + p: low 4 bits are nibble h of scales[2j + p]; top 2 bits are bits 4h + 2 (j /
        // 2) and the next of scales[8 + 2 (j % 2) + p].
        const uint32_t lo = (__byte_perm(s[0], s[1], p ? 0x7531 : 0x6420) >> (4 * h)) & 0x0F0F0F0Fu;
        const uint32_t top = __byte_perm(s[2], 0, p ? 0x3131 : 0x2020) >> (4 * h);
        const uint32_t hi = (top & 0x00000303u) | ((top >> 2) & 0x03030000u);
        r.sc = lo | hi << 4;
        r.d = ld16(b + 108);
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) {
        const float d = h2f(r.d);
        Scales s;
#pragma unroll
        for (int j = 0; j < 4; ++j) s.dl[j] = d * byte_minus(r.sc, j, 32.0f);
        return s;
    }
    __device__ static int offset(int sub, int g) {
        return DecQ2K::offset(sub, g);
    }
    __device__ static uint32_t levels(const Raw& r, int sub, int g) {
        const int j = g / 2;
        const uint32_t lo = (r.qs[g % 2] >> (2 * j)) & 0x03030303u;
        const uint32_t hi = (r.hm[g % 2] >> (4 * (sub / 4) + j)) & 0x01010101u;
        return lo | hi << 2;
    }
    __device__ static float2 affine(const Raw&, const Scales& s, int, int run) {
        return {s.dl[run], -4.0f * s.dl[run]};
    }
    __device__ static void group(const Raw& r, const Scales& s, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = s.dl[g / 2] * byte_minus(q, i, 4.0f);
    }
};

// IQ4_NL (18-byte blocks, 2-byte aligned) and MXFP4 (17-byte blocks, 1-byte aligned): Q4_0's geometry
// (DecBlock32): 2 lanes per block, lane `sub` takes qs[8 sub, 8 sub + 8), group g holds elements 16 (g / 2)
// + 8 sub + 4 (g % 2) + i, low nibbles for g < 2 and high nibbles after. IQ4_NL: value = d * kvalue[q];
// MXFP4: value = kvalue[q] * 2^(e - 128) (mxfp4_scale, subnormal for e < 2). The matvec multiplies each
// run's a by 2^85 (kTinyUndo), so exponents e >= 171 (scales of 2^43 and more) overflow there to inf;
// dequantization takes every e.
template <GgmlType T>
struct DecNL32 {
    static constexpr bool kMx = T == GgmlType::MXFP4;
    static constexpr int kElems = 32, kBytes = kMx ? 17 : 18, kLanes = 2, kGroups = 4, kWidth = 4;
    static constexpr int kRuns = 1, kContig = 2;
    using Table = std::conditional_t<kMx, MXFP4Table, IQ4Table>;
    static constexpr int kBias = Table::kBias;
    struct Raw {
        uint32_t d, qs[2];  // d: the fp16 scale (IQ4_NL) or the exponent byte (MXFP4)
    };
    struct Scales {
        float d;
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        Raw r;
        if constexpr (kMx) {
            r.d = __ldg(b);
            ld_words_a1(b + 1 + 8 * sub, r.qs);
        } else {
            r.d = ld16(b);
            ld_words_a2(b + 2 + 8 * sub, r.qs);
        }
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) {
        if constexpr (kMx) return {__uint_as_float(r.d < 2 ? 0x00200000u << r.d : (r.d - 1) << 23)};
        return {h2f(r.d)};
    }
    __device__ static int offset(int sub, int g) { return 16 * (g / 2) + 8 * sub + 4 * (g % 2); }
    __device__ static uint32_t levels(const Raw& r, int, int g) {  // the entries + kBias
        const uint2 v = lookup16x2<Table>(r.qs[g % 2]);
        return g < 2 ? v.x : v.y;
    }
    __device__ static float2 affine(const Raw&, const Scales& sc, int, int) {
        return {sc.d, -float(kBias) * sc.d};
    }
    __device__ static void group(const Raw& r, const Scales& sc, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = sc.d * byte_minus(q, i, float(kBias));  // entry * scale
    }
};

// IQ4_XS (136-byte blocks, 8-byte aligned): 8 lanes per super-block; lane k takes sub-block k, qs[16k,
// 16k + 16) in IQ4_NL's order: group g holds elements 32k + 4g + i, low nibbles of qs word g for g < 4,
// high nibbles of word g - 4 after (one run). value = (d * (ls - 32)) * kvalue[q], ls the 6-bit scale.
struct DecIQ4XS {
    static constexpr int kElems = 256, kBytes = 136, kLanes = 8, kGroups = 8, kWidth = 4;
    static constexpr int kRuns = 1, kContig = 8;
    struct Raw {
        uint32_t qs[4];
        uint32_t d, ls;
    };
    struct Scales {
        float dl;
    };
    __device__ static Raw load(const uint8_t* b, int sub) {
        const uint2 head = __ldg(reinterpret_cast<const uint2*>(b));  // d, scales_h, scales_l[4]
        const uint2 q0 = __ldg(reinterpret_cast<const uint2*>(b + 8 + 16 * sub));
        const uint2 q1 = __ldg(reinterpret_cast<const uint2*>(b + 16 + 16 * sub));
        Raw r;
        r.qs[0] = q0.x, r.qs[1] = q0.y, r.qs[2] = q1.x, r.qs[3] = q1.y;
        r.d = head.x & 0xFFFF;
        // Low 4 bits: nibble sub % 2 of scales_l[sub / 2]; top 2 bits: bits 2 sub, 2 sub + 1 of scales_h.
        r.ls = ((head.y >> (4 * sub)) & 0xF) | ((head.x >> (16 + 2 * sub)) & 3) << 4;
        return r;
    }
    __device__ static Scales scales(const Raw& r, int) { return {h2f(r.d) * byte_minus(r.ls, 0, 32.0f)}; }
    __device__ static int offset(int sub, int g) { return 32 * sub + 4 * g; }
    __device__ static uint32_t levels(const Raw& r, int, int g) {  // the entries + 128
        const uint2 v = lookup16x2<IQ4Table>(r.qs[g % 4]);
        return g < 4 ? v.x : v.y;
    }
    __device__ static float2 affine(const Raw&, const Scales& s, int, int) {
        return {s.dl, -float(IQ4Table::kBias) * s.dl};
    }
    __device__ static void group(const Raw& r, const Scales& s, int sub, int g, float (&w)[4]) {
        const uint32_t q = levels(r, sub, g);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = s.dl * byte_minus(q, i, float(IQ4Table::kBias));
    }
};

}  // namespace minfer::cuda::qblocks
