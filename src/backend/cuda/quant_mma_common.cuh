// The parts the tensor-core products share (quant_mma.cu: int8 levels times int8x2 x; quant_mma_f16.cu:
// the levels dequantized to half times half x): the warp tile, the weight formats' block readers, the
// shared-memory stages of weights, the split of a row's blocks and the stores. Private to those files.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_blocks.cuh"
#include "backend/cuda/quant_cuda.h"
#include "util/error.h"

namespace minfer::cuda::mma {

using qblocks::h2f;
using qblocks::spread_bit4;

constexpr int kWarps = 4;                      // warps of a thread block (of one column group)
constexpr int kMt = 2;                         // m16 tiles of a warp
constexpr int kBlockRows = kWarps * kMt * 16;  // rows of a thread block
constexpr int kMaxSplits = 16;

inline int64_t cols8(int64_t nt) {
    return (nt + 7) / 8 * 8;
}

// Plain loads, so that the formats read a weight block in global memory (the direct kernel) or staged in
// shared memory (the staged kernel) alike.
template <class T>
__device__ __forceinline__ T ld(const uint8_t* p) {
    return *reinterpret_cast<const T*>(p);
}
__device__ __forceinline__ uint2 ld64(const uint8_t* p) {
    return ld<uint2>(p);
}
// A block's 16- and 32-bit pieces, wherever it is (global or shared memory).
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) {
    return qblocks::ld16<false>(p);
}
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
    return qblocks::ld32_a2<false>(p);
}
template <int N>
__device__ __forceinline__ void ld_words_a2(const uint8_t* p, uint32_t (&w)[N]) {
    qblocks::ld_words_a2<N, false>(p, w);
}

// Weight formats. kSub 32-element blocks per weight block of kBytes bytes; levels() gives lane t's eight
// levels of block `sub` (elements 8t..8t+3 in w0, 8t+4..8t+7 in w1) as int8 (unsigned for Q4_K, whose
// minimum term carries the offset); scales() the block's multipliers ws (one per 16-element half when
// kHalves is 2) and minimum wm.
struct Q4K {
    static constexpr int kSub = 8, kBytes = 144, kHalves = 1;
    static constexpr bool kMin = true;
    struct Head {
        float d, dmin;
        uint32_t q[3];  // the 12 bytes of 6-bit scales and minimums
    };
    __device__ static Head head(const uint8_t* b) {
        const uint4 h = ld<uint4>(b);
        const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
        return {dm.x, dm.y, {h.y, h.z, h.w}};
    }
    __device__ static int byte(const Head& h, int k) { return int(h.q[k / 4] >> (8 * (k % 4))) & 0xFF; }
    // ggml's get_scale_min_k4.
    __device__ static void scales(const Head& h, int j, float (&ws)[1], float& wm) {
        int sc, m;
        if (j < 4) {
            sc = byte(h, j) & 63, m = byte(h, j + 4) & 63;
        } else {
            sc = (byte(h, j + 4) & 0xF) | ((byte(h, j - 4) >> 6) << 4);
            m = (byte(h, j + 4) >> 4) | ((byte(h, j) >> 6) << 4);
        }
        ws[0] = h.d * float(sc), wm = h.dmin * float(m);
    }
    // Block j's elements are nibble j % 2 of qs[32 (j / 2) ..].
    __device__ static void levels(const uint8_t* b, int j, int t, uint32_t& w0, uint32_t& w1) {
        const uint2 v = ld64(b + 16 + 32 * (j / 2) + 8 * t);
        const int s = 4 * (j % 2);
        w0 = (v.x >> s) & 0x0F0F0F0Fu, w1 = (v.y >> s) & 0x0F0F0F0Fu;
    }
};

// Q6_K padded to 224 bytes (pad_matrix: ql[128], qh[64], scales[16], d). Block j = 4 n + c of half n:
// nibble c / 2 of ql[64 n + 32 (c % 2) ..], bits 2c of qh[32 n ..]; w = d * scale * (q - 32), the
// scale changing every 16 elements.
struct Q6K {
    static constexpr int kSub = 8, kBytes = 224, kHalves = 2;
    static constexpr bool kMin = false;
    struct Head {
        float d;
        uint32_t sc[4];
    };
    __device__ static Head head(const uint8_t* b) {
        const uint4 s = ld<uint4>(b + 192);
        return {h2f(ld16(b + 208)), {s.x, s.y, s.z, s.w}};
    }
    __device__ static void scales(const Head& h, int j, float (&ws)[2], float& wm) {
        const int k = 8 * (j / 4) + 2 * (j % 4);
#pragma unroll
        for (int i = 0; i < 2; ++i)
            ws[i] = h.d * float(int8_t(uint8_t(h.sc[(k + i) / 4] >> (8 * ((k + i) % 4)))));
        wm = 0.0f;
    }
    __device__ static void levels(const uint8_t* b, int j, int t, uint32_t& w0, uint32_t& w1) {
        const int n = j / 4, c = j % 4;
        const uint2 ql = ld64(b + 64 * n + 32 * (c % 2) + 8 * t), qh = ld64(b + 128 + 32 * n + 8 * t);
        const int s = 4 * (c / 2);
        w0 = __vsub4(((ql.x >> s) & 0x0F0F0F0Fu) | (((qh.x >> (2 * c)) & 0x03030303u) << 4), 0x20202020u);
        w1 = __vsub4(((ql.y >> s) & 0x0F0F0F0Fu) | (((qh.y >> (2 * c)) & 0x03030303u) << 4), 0x20202020u);
    }
};

// The 32-element formats' common part: one half scale d at the block's start, no minimum.
struct ScaledBlock32 {
    static constexpr int kSub = 1, kHalves = 1;
    static constexpr bool kMin = false;
    struct Head {
        float d;
    };
    __device__ static Head head(const uint8_t* b) { return {h2f(ld16(b))}; }
    __device__ static void scales(const Head& h, int, float (&ws)[1], float& wm) { ws[0] = h.d, wm = 0.0f; }
};

// Q8_0 (34 bytes: d, qs[32]), 2-byte aligned.
struct Q8_0 : ScaledBlock32 {
    static constexpr int kBytes = 34;
    __device__ static void levels(const uint8_t* b, int, int t, uint32_t& w0, uint32_t& w1) {
        uint32_t w[2];
        ld_words_a2<2>(b + 2 + 8 * t, w);
        w0 = w[0], w1 = w[1];
    }
};

// Q4_0 (18 bytes: d, qs[16]) and Q5_0 (22 bytes: d, qh[4], qs[16]), 2-byte aligned: element l < 16 is
// the low nibble of qs[l], l >= 16 the high nibble of qs[l - 16], Q5_0's fifth bit is bit l of qh;
// w = d * (q - 8) or d * (q - 16), as signed levels.
template <bool kQ5>
struct Block32 : ScaledBlock32 {
    static constexpr int kBytes = kQ5 ? 22 : 18;
    __device__ static void levels(const uint8_t* b, int, int t, uint32_t& w0, uint32_t& w1) {
        uint32_t w[2];
        ld_words_a2<2>(b + (kQ5 ? 6 : 2) + 8 * (t % 2), w);
        const int s = 4 * (t / 2);
        w0 = (w[0] >> s) & 0x0F0F0F0Fu, w1 = (w[1] >> s) & 0x0F0F0F0Fu;
        if constexpr (kQ5) {
            const uint32_t qh = ld32_a2(b + 2) >> (8 * t);
            w0 |= spread_bit4(qh), w1 |= spread_bit4(qh >> 4);
        }
        const uint32_t offset = kQ5 ? 0x10101010u : 0x08080808u;
        w0 = __vsub4(w0, offset), w1 = __vsub4(w1, offset);
    }
};

// IQ4_NL (18 bytes: half d, qs[16]; 2-byte aligned) and MXFP4 (17 bytes: E8M0 exponent e, qs[16]; 1-byte
// aligned): Q4_0's nibble order, each nibble an index into a 16-entry table of signed levels
// (kIQ4NLLevels, or kMXFP4Levels: twice the E2M1 values) looked up by byte permutes; w = d * level, d the
// half scale or 2^(e - 128) (mxfp4_scale, exact in f32).
template <bool kMx>
struct NL32 : ScaledBlock32 {
    static constexpr int kBytes = kMx ? 17 : 18;
    using Table = qblocks::SignedTable<kMx ? qblocks::kMXFP4Levels : qblocks::kIQ4NLLevels>;
    __device__ static Head head(const uint8_t* b) {
        if constexpr (!kMx) return {h2f(ld16(b))};
        const uint32_t e = *b;
        return {__uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23)};
    }
    __device__ static void levels(const uint8_t* b, int, int t, uint32_t& w0, uint32_t& w1) {
        uint32_t w[2];
        if constexpr (kMx)
            qblocks::ld_words_a1<2, false>(b + 1 + 8 * (t % 2), w);
        else
            ld_words_a2<2>(b + 2 + 8 * (t % 2), w);
        const uint2 v0 = qblocks::lookup16x2<Table>(w[0]), v1 = qblocks::lookup16x2<Table>(w[1]);
        w0 = t < 2 ? v0.x : v0.y, w1 = t < 2 ? v1.x : v1.y;
    }
};

// f(W{}) with the reader W of weight type t: the formats mma_fits admits (it is checked first).
template <class F>
void with_format(GgmlType t, const F& f) {
    switch (t) {
        case GgmlType::Q4_K:
            return f(Q4K{});
        case GgmlType::Q6_K:
            return f(Q6K{});
        case GgmlType::Q8_0:
            return f(Q8_0{});
        case GgmlType::Q5_0:
            return f(Block32<true>{});
        case GgmlType::Q4_0:
            return f(Block32<false>{});
        case GgmlType::IQ4_NL:
            return f(NL32<false>{});
        case GgmlType::MXFP4:
            return f(NL32<true>{});
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::IQ4_XS:
            throw Error(std::string("CUDA tensor-core product: no block reader for the low-bit type ") +
                        ggml_type_name(t) + " (mma_fits refuses it)");
        default:
            throw Error(std::string("CUDA tensor-core product: no block reader for ") + ggml_type_name(t));
    }
}

// A warp's outputs: rows r0.., columns c0.., into y (+ bias) (+ res), or split z's partial sums into
// part ([splits][nt][n_out]) when part is not null.
template <int kNb, class Args>
__device__ __forceinline__ void store_tiles(const Args& a, float* part, int r0, int c0,
                                            const float (&acc)[kMt][kNb][4]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int m = 0; m < kMt; ++m)
#pragma unroll
        for (int n = 0; n < kNb; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + 16 * m + 8 * (e / 2) + g, c = c0 + 8 * n + 2 * t + e % 2;
                if (r >= a.n_out || c >= a.nt) continue;
                const int64_t i = int64_t(c) * a.n_out + r;
                if (part) {
                    part[int64_t(blockIdx.z) * a.nt * a.n_out + i] = acc[m][n][e];
                    continue;
                }
                float v = acc[m][n][e];
                if (a.bias) v += a.bias[r];
                if (a.res) v += a.res[i];
                a.y[i] = v;
            }
}

// A stage's weights: 256 elements of each row for the K-quants, four 32-element blocks for the others.
template <class W>
struct WeightStage {
    static constexpr int kBlocks = W::kSub == 1 ? 4 : 1;  // weight blocks of a row per stage
    static constexpr int kSub = W::kSub * kBlocks;        // 32-element blocks per stage: 8 or 4
    static constexpr int kElems = 32 * kSub;
    static constexpr int kRowBytes = W::kBytes * kBlocks;
    // cp.async size: 8 for the 32-element formats, 4 for MXFP4's 68-byte stages.
    static constexpr int kChunk = kRowBytes % 16 == 0 ? 16 : kRowBytes % 8 == 0 ? 8 : 4;
    // Rows 32 mod 128 bytes apart: lanes (g, t) reading 8 bytes at g * stride + 8 t hit distinct banks.
    static constexpr int kRowStride = (kRowBytes - 32 + 127) / 128 * 128 + 32;
    static constexpr int kWBytes = kBlockRows * kRowStride;
};

constexpr int kHalfSmBytes = 113 << 10;  // shared memory of each of two thread blocks on an SM

// Two thread blocks per SM with 2-4 stages of `bytes` when they fit, else one with up to 4.
__host__ __device__ constexpr int stages_for(int bytes) {
    const int two = kHalfSmBytes / bytes, one = 2 * kHalfSmBytes / bytes;
    return two >= 2 ? (two < 4 ? two : 4) : (one < 4 ? one : 4);
}

// Thread blocks of `bytes` shared memory that fit an SM: two or one (stages_for's choice).
__host__ __device__ constexpr int blocks_per_sm(int bytes) {
    return bytes <= kHalfSmBytes ? 2 : 1;
}

// Threads of a staged_block thread block: kWarps warps per column group and k group.
__host__ __device__ constexpr int staged_threads(int groups, int k_groups) {
    return kWarps * groups * k_groups * 32;
}

template <int N>
__device__ __forceinline__ void cp_async(uint8_t* smem, const void* gmem) {
    const auto dst = unsigned(__cvta_generic_to_shared(smem));
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(gmem), "n"(N));
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// Stage k of rows rb.. (rows past n_out repeat the last one) into dst: [kBlockRows][kRowStride], copied
// by kThreads threads.
template <class W, int kThreads, class Args>
__device__ __forceinline__ void stage_weights(const Args& a, int rb, int k, uint8_t* dst) {
    using S = WeightStage<W>;
    constexpr int kPerRow = S::kRowBytes / S::kChunk;
    for (int i = int(threadIdx.x); i < kBlockRows * kPerRow; i += kThreads) {
        const int r = i / kPerRow, c = i % kPerRow;
        const uint8_t* src =
            a.w + int64_t(min(rb + r, a.n_out - 1)) * a.row_bytes + int64_t(k) * S::kRowBytes + c * S::kChunk;
        cp_async<S::kChunk>(dst + r * S::kRowStride + c * S::kChunk, src);
    }
}

// A thread block's walk over the n stages of its rows and split through kStages shared-memory buffers of
// kStageBytes: the first kStages - 1 stages requested ahead (their weights before the wait for the
// previous kernel, which writes x, and their x after it), then for each stage: wait until it is in,
// refill the buffer that stage i + kStages - 1 takes, compute on stage i. load_w(k, buf) and
// load_x(k, buf) request stage k's weights and x (cp.async); math(buf) consumes a stage.
template <int kStages, int kStageBytes, class LoadW, class LoadX, class Math>
__device__ __forceinline__ void run_stages(uint8_t* smem, int n, const LoadW& load_w, const LoadX& load_x,
                                           const Math& math) {
    const auto buf = [&](int i) { return smem + (i % kStages) * kStageBytes; };
    for (int i = 0; i < kStages - 1 && i < n; ++i) load_w(i, buf(i));
    wait_for_inputs();
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < n) load_x(i, buf(i));
        cp_commit();
    }
    for (int i = 0; i < n; ++i) {
        cp_wait<kStages - 2>();
        __syncthreads();  // stage i is in, and every warp is done with the buffer refilled next
        if (const int next = i + kStages - 1; next < n) {
            load_w(next, buf(next));
            load_x(next, buf(next));
        }
        cp_commit();
        math(buf(i));
    }
}

// Adds the kKGroups k groups' accumulators of each warp tile in group order (group 0's, then 1's, ...)
// into group 0's warps, through the shared memory the stages are done with. kPerGroup threads a group;
// a thread and its counterparts in the other groups hold the same outputs.
template <int kNb, int kKGroups, int kPerGroup>
__device__ __forceinline__ void sum_k_groups(uint8_t* smem, int kg, float (&acc)[kMt][kNb][4]) {
    constexpr int kN = kMt * kNb * 4;
    float* buf = reinterpret_cast<float*>(smem);
    float* v = &acc[0][0][0];
    const int tid = int(threadIdx.x) % kPerGroup;
    cp_wait<0>();
    __syncthreads();  // every warp is done with the last stage
    for (int from = 1; from < kKGroups; ++from) {
        if (kg == from)
#pragma unroll
            for (int i = 0; i < kN; ++i) buf[i * kPerGroup + tid] = v[i];
        __syncthreads();
        if (kg == 0)
#pragma unroll
            for (int i = 0; i < kN; ++i) v[i] += buf[i * kPerGroup + tid];
        __syncthreads();
    }
}

// A thread block's part of a staged product: columns c0.. (cols of them, a multiple of 8, at most 8 kNb
// kGroups), rows from blockIdx.y's, the row's stages of split blockIdx.z. kGroups column groups of kWarps
// warps share each stage: warp w takes row group w % kWarps and columns 8 kNb ((w / kWarps) % kGroups)..
// of the tile. With kKGroups k groups, each takes a kKGroups-th of every stage's 32-element blocks (group
// w / (kWarps kGroups)), and their sums are added in group order at the end. P is the product (int8 or
// f16): P::Stage<W> its stage layout, P::load_x<W, kCols, kThreads> its x loader and P::math<W, kNb,
// kCols, kKGroups> its stage arithmetic.
template <class P, class W, int kNb, int kGroups, int kKGroups, int kStages, class Args>
__device__ __forceinline__ void staged_block(const Args& a, int c0, int cols) {
    using S = typename P::template Stage<W>;
    constexpr int kCols = 8 * kNb * kGroups, kStageBytes = S::bytes(kCols);
    constexpr int kPerGroup = staged_threads(kGroups, 1), kThreads = staged_threads(kGroups, kKGroups);
    static_assert(kKGroups == 1 || kMt * kNb * 4 * kPerGroup * 4 <= kStages * kStageBytes,
                  "the k groups' sums must fit where the stages were");
    extern __shared__ __align__(16) uint8_t smem[];
    release_next();
    const int rb = int(blockIdx.y) * kBlockRows;
    const int warp = int(threadIdx.x / 32), rw = warp % kWarps, cb = warp / kWarps % kGroups * 8 * kNb;
    const int kg = warp / (kWarps * kGroups);
    const int k0 = int(blockIdx.z) * a.per_split / S::kBlocks;
    const int n = min(a.nb, (int(blockIdx.z) + 1) * a.per_split) / S::kBlocks - k0;
    float acc[kMt][kNb][4] = {};
    run_stages<kStages, kStageBytes>(
        smem, n, [&](int i, uint8_t* p) { stage_weights<W, kThreads>(a, rb, k0 + i, p); },
        [&](int i, uint8_t* p) {
            P::template load_x<W, kCols, kThreads>(a, c0, cols, k0 + i, p + S::kWBytes);
        },
        [&](const uint8_t* p) {
            P::template math<W, kNb, kCols, kKGroups>(p, p + S::kWBytes, rw, cb, cols, kg, acc);
        });
    if constexpr (kKGroups > 1) sum_k_groups<kNb, kKGroups, kPerGroup>(smem, kg, acc);
    if (kg == 0 && cb < cols) store_tiles<kNb>(a, a.part, rb + rw * kMt * 16, c0 + cb, acc);
}

// staged_block on the product's column tile blockIdx.x.
template <class P, class W, int kNb, int kGroups, int kKGroups, int kStages, class Args>
__device__ __forceinline__ void staged_column_tile(const Args& a) {
    constexpr int kCols = 8 * kNb * kGroups;
    const int c0 = int(blockIdx.x) * kCols;
    staged_block<P, W, kNb, kGroups, kKGroups, kStages>(a, c0, min(kCols, a.nt8 - c0));
}

// Launches kKernel, a staged_block kernel of kThreads threads and kStages stages of S over tiles of
// kCols columns, on `grid`; its dynamic shared memory opted in once.
template <auto kKernel, class S, int kCols, int kThreads, int kStages, class... Args>
void launch_staged_grid(const char* what, dim3 grid, Stream s, const Args&... args) {
    constexpr int kBytes = kStages * S::bytes(kCols);
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    MINFER_CUDA_CHECK(opt_in);
    launch(what, kKernel, grid, dim3(kThreads), size_t(kBytes), s, args...);
}

// launch_staged_grid on the product's grid: its column tiles, row blocks and splits.
template <auto kKernel, class S, int kCols, int kThreads, int kStages, class Args>
void launch_staged_block(const char* what, const Args& a, int splits, Stream s) {
    const dim3 grid(unsigned((a.nt8 + kCols - 1) / kCols), unsigned((a.n_out + kBlockRows - 1) / kBlockRows),
                    unsigned(splits));
    launch_staged_grid<kKernel, S, kCols, kThreads, kStages>(what, grid, s, a);
}

struct Layout {
    int block_elems, block_bytes;
    int stage_blocks;  // weight blocks per stage of the staged kernel (StageOf::kBlocks)
};

inline Layout layout_of(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_K:
            return {256, Q4K::kBytes, WeightStage<Q4K>::kBlocks};
        case GgmlType::Q6_K:
            return {256, Q6K::kBytes, WeightStage<Q6K>::kBlocks};
        case GgmlType::Q8_0:
            return {32, Q8_0::kBytes, WeightStage<Q8_0>::kBlocks};
        case GgmlType::Q5_0:
            return {32, Block32<true>::kBytes, WeightStage<Block32<true>>::kBlocks};
        case GgmlType::Q4_0:
            return {32, Block32<false>::kBytes, WeightStage<Block32<false>>::kBlocks};
        case GgmlType::IQ4_NL:
            return {32, NL32<false>::kBytes, WeightStage<NL32<false>>::kBlocks};
        case GgmlType::MXFP4:
            return {32, NL32<true>::kBytes, WeightStage<NL32<true>>::kBlocks};
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::IQ4_XS:
            throw Error(std::string("CUDA matmul_mma: no tensor-core product for the low-bit type ") +
                        ggml_type_name(t) + " (mma_fits refuses it)");
        default:
            throw Error(std::string("CUDA matmul_mma: no tensor-core product for ") + ggml_type_name(t));
    }
}

// Contiguous ranges of each row's blocks, one per thread block along z, so that a matrix of few row
// blocks still fills the device (two thread blocks per SM): a function of the shape and the device. The
// ranges are whole stages when the rows are (both kernels then split alike, and agree bit for bit).
struct Split {
    int splits, per_split;  // per_split: weight blocks of each range but the last
    bool staged;            // the rows are whole stages: the staged kernel can run
};

inline Split split_of(const QMatrix& w) {
    const Layout l = layout_of(w.type);
    const int64_t nb = w.n_in / l.block_elems;
    const bool staged = nb % l.stage_blocks == 0;
    const int64_t unit = staged ? l.stage_blocks : 1, units = nb / unit;
    const int64_t row_blocks = (w.n_out + kBlockRows - 1) / kBlockRows, sms = gpu_warps() / 32;
    const int64_t want = std::clamp<int64_t>((2 * sms + row_blocks - 1) / row_blocks, 1, kMaxSplits);
    const int64_t per = (units + std::min(want, units) - 1) / std::min(want, units) * unit;
    return {int((nb + per - 1) / per), int(per), staged};
}

// y = the splits' partial sums [splits][nt][n_out] added in split order (+ bias) (+ res).
void reduce_splits(const float* part, int splits, int64_t nt, int64_t n_out, const float* bias,
                   const float* res, float* y, Stream s);

}  // namespace minfer::cuda::mma
