// Quantized matrix times a few dozen to a few hundred columns on the f16 tensor cores (mma.sync
// m16n8k16, f16 x f16 -> f32). Thread blocks of 128 rows, shared-memory stages and splits are the int8
// kernel's (quant_mma.cu, quant_mma_common.cuh); what differs is the inner step and the warps' tiles.
// Lane (g, t) reads the levels of elements 8t..8t+7 of a 32-element block for rows g and g + 8 (the
// format's levels()), dequantizes them to half as dequant_f16 does (fmaf(ws, level, -wm) in f32, rounded
// to nearest), and takes the same elements of column g's x as one 16-byte load: two m16n8k16 products per
// block, the first on elements 8t..8t+3, the second on 8t+4..8t+7 (A and B share the assignment of
// elements to k, so any one works). Each warp covers all 64 columns of a tile, so each weight is
// dequantized once (the f32 to half conversions are most of the instructions); two k groups of four
// warps take the first and second half of every stage's blocks, each summing its blocks in row order,
// and their sums are added at the end (group 0's plus group 1's), whatever the column count.
//
// Measured on the H200 at 64 columns against column groups of 32 (each weight dequantized twice):
// 7b.gate 88.6 -> 76.9 us, 7b.down 72.3 -> 59.1, 7b.lm_head (Q6_K) 612 -> 507. Taking the m16 tiles one
// after the other (fewer registers, x loaded twice) or one thread block an SM measured slower.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_common.cuh"
#include "backend/cuda/quant_mma_f16.h"
#include "util/error.h"

namespace minfer::cuda {
namespace {

using namespace mma;

struct F16Args {
    const uint8_t* w;
    int64_t row_bytes;
    int n_out, nt, nt8;
    int nb;           // weight blocks per row
    int per_split;    // weight blocks of one split (grid z)
    const __half* x;  // [nt][n_in]
    int64_t n_in;
    float* y;
    const float* bias;
    const float* res;
    float* part;  // [splits][nt][n_out], or null when unsplit
};

// A stage: the weights (WeightStage), then x's columns [kCols][kXStride] as halves of the stage's
// elements, 64 mod 128 bytes apart so that a quarter warp's 16-byte loads of two columns hit distinct
// banks.
template <class W>
struct F16Stage : WeightStage<W> {
    using WeightStage<W>::kElems;
    using WeightStage<W>::kWBytes;
    static constexpr int kXStride = 2 * kElems + 64;
    __host__ __device__ static constexpr int bytes(int cols) { return kWBytes + cols * kXStride; }
    __host__ __device__ static constexpr int stages(int cols) { return stages_for(bytes(cols)); }
};

// Stage k of x's columns c0..c0 + cols (columns past nt repeat the last one; their outputs are never
// stored) into dst.
template <class W, int kThreads>
__device__ __forceinline__ void stage_x16(const F16Args& a, int c0, int cols, int k, uint8_t* dst) {
    using S = F16Stage<W>;
    constexpr int kPerCol = 2 * S::kElems / 16;
    for (int i = int(threadIdx.x); i < cols * kPerCol; i += kThreads) {
        const int c = i / kPerCol, q = i % kPerCol;
        const __half* src = a.x + int64_t(min(c0 + c, a.nt - 1)) * a.n_in + int64_t(k) * S::kElems + 8 * q;
        cp_async<16>(dst + c * S::kXStride + q * 16, src);
    }
}

// Levels i and i + 1 of the four in `lv` (unsigned bytes, or signed ones when kSigned) as the half pair
// {half(fmaf(ws, level, -wm))}: the conversion by byte_minus is exact, so the halves are dequant_f16's.
template <bool kSigned>
__device__ __forceinline__ uint32_t dequant2(uint32_t lv, int i, float ws, float wm) {
    const uint32_t u = kSigned ? lv ^ 0x80808080u : lv;
    const float bias = kSigned ? 128.0f : 0.0f;
    const __half2 h = __floats2half2_rn(__fmaf_rn(ws, qblocks::byte_minus(u, i, bias), -wm),
                                        __fmaf_rn(ws, qblocks::byte_minus(u, i + 1, bias), -wm));
    return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragments of one m16 tile's 32-element block: a[q] for elements 8t + 4q..8t + 4q + 3, from the
// levels lv (row g: lv[0] elements 0-3, lv[2] 4-7; row g + 8: lv[1], lv[3]) and each row's scales.
template <class W>
__device__ __forceinline__ void dequant_tile(const uint32_t (&lv)[4], const float (&ws)[2],
                                             const float (&wm)[2], uint32_t (&a)[2][4]) {
    constexpr bool kSigned = !W::kMin;
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h: row g, row g + 8
            a[q][h] = dequant2<kSigned>(lv[2 * q + h], 0, ws[h], wm[h]);
            a[q][2 + h] = dequant2<kSigned>(lv[2 * q + h], 2, ws[h], wm[h]);
        }
}

// Blocks kJ0..kJ1 - 1 of a stage's 32-element blocks: the warp's two m16 tiles (row group rw) by its
// 8 kNb of the stage's kCols columns from cb on, those below cols.
template <class W, int kNb, int kCols, int kJ0, int kJ1>
__device__ __forceinline__ void stage_math16(const uint8_t* wst, const uint8_t* xst, int rw, int cb, int cols,
                                             float (&acc)[kMt][kNb][4]) {
    using S = F16Stage<W>;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint8_t* rows[kMt][2];
#pragma unroll
    for (int m = 0; m < kMt; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) rows[m][h] = wst + (rw * kMt * 16 + 16 * m + 8 * h + g) * S::kRowStride;
    typename W::Head hd[kMt][2];
#pragma unroll
    for (int j = kJ0; j < kJ1; ++j) {
        const int blk = j / W::kSub * W::kBytes, sub = j % W::kSub;
        uint32_t a[kMt][2][4];
#pragma unroll
        for (int m = 0; m < kMt; ++m) {
            float ws[2], wm[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (j == kJ0 || sub == 0) hd[m][h] = W::head(rows[m][h] + blk);
                float s[W::kHalves];
                W::scales(hd[m][h], sub, s, wm[h]);
                ws[h] = s[W::kHalves == 2 ? t / 2 : 0];  // Q6_K: lane t's elements are in half t / 2
            }
            uint32_t lv[4];
            W::levels(rows[m][0] + blk, sub, t, lv[0], lv[2]);
            W::levels(rows[m][1] + blk, sub, t, lv[1], lv[3]);
            dequant_tile<W>(lv, ws, wm, a[m]);
        }
#pragma unroll
        for (int n = 0; n < kNb; ++n) {
            const int col = cb + 8 * n;
            if (col >= cols) break;  // uniform across the warp
            const uint4 xb = *reinterpret_cast<const uint4*>(xst + (col + g) * S::kXStride + 64 * j + 16 * t);
#pragma unroll
            for (int m = 0; m < kMt; ++m) {
                mma_f16(acc[m][n], a[m][0], xb.x, xb.y);
                mma_f16(acc[m][n], a[m][1], xb.z, xb.w);
            }
        }
    }
}

// The f16 product's parts for staged_block. With two k groups, group kg takes half kg of each stage's
// blocks.
struct F16Product {
    template <class W>
    using Stage = F16Stage<W>;
    template <class W, int kCols, int kThreads>
    __device__ static void load_x(const F16Args& a, int c0, int cols, int k, uint8_t* dst) {
        stage_x16<W, kThreads>(a, c0, cols, k, dst);
    }
    template <class W, int kNb, int kCols, int kKGroups>
    __device__ static void math(const uint8_t* wst, const uint8_t* xst, int rw, int cb, int cols, int kg,
                                float (&acc)[kMt][kNb][4]) {
        constexpr int kSub = F16Stage<W>::kSub;
        static_assert(kKGroups == 1 || (kKGroups == 2 && kSub % 2 == 0), "one or two k groups");
        if constexpr (kKGroups == 1) {
            stage_math16<W, kNb, kCols, 0, kSub>(wst, xst, rw, cb, cols, acc);
        } else if (kg == 0) {
            stage_math16<W, kNb, kCols, 0, kSub / 2>(wst, xst, rw, cb, cols, acc);
        } else {
            stage_math16<W, kNb, kCols, kSub / 2, kSub>(wst, xst, rw, cb, cols, acc);
        }
    }
};

// Grid: x column tiles of 8 kNb kGroups, y row blocks, z splits (staged_block, as the int8 staged kernel).
template <class W, int kNb, int kGroups, int kKGroups, int kStages, int kPerSm>
__global__ void __launch_bounds__(staged_threads(kGroups, kKGroups), kPerSm) f16_kernel(F16Args a) {
    staged_block<F16Product, W, kNb, kGroups, kKGroups, kStages>(a);
}

// Tiles of 64 columns: each warp takes all 64, so each weight is dequantized once, and two k groups of
// four warps share each stage's blocks.
template <class W>
void launch_f16(const F16Args& a, int splits, Stream s) {
    constexpr int kNb = 8, kGroups = 1, kKGroups = 2, kCols = 8 * kNb * kGroups;
    constexpr int kStages = F16Stage<W>::stages(kCols),
                  kPerSm = blocks_per_sm(kStages * F16Stage<W>::bytes(kCols));
    static_assert(kStages >= 2, "two stages of 64 columns must fit in shared memory");
    launch_staged_block<f16_kernel<W, kNb, kGroups, kKGroups, kStages, kPerSm>, F16Stage<W>, kCols,
                        staged_threads(kGroups, kKGroups), kStages>("mma f16 kernel", a, splits, s);
}

}  // namespace

bool mma_f16_fits(const QMatrix& w) {
    if (!mma_fits(w)) return false;
    const Layout l = layout_of(w.type);  // rows of whole stages (split_of's `staged`, without the device)
    return w.n_in / l.block_elems % l.stage_blocks == 0;
}

void matmul_mma_f16(const QMatrix& w, const void* x16, int64_t nt, float* y, const float* bias,
                    const float* res, float* scratch, Stream s) {
    if (!mma_f16_fits(w)) throw Error("CUDA matmul_mma_f16: matrix type or layout not supported");
    if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || reinterpret_cast<uintptr_t>(x16) % 16 != 0)
        throw Error("CUDA matmul_mma_f16: weights and x must be 16-byte aligned");
    if (w.n_out == 0 || nt == 0) return;
    const Layout l = layout_of(w.type);
    const int64_t nb = w.n_in / l.block_elems;
    const Split sp = split_of(w);
    if (sp.splits > 1 && !scratch) throw Error("CUDA matmul_mma_f16: split product without scratch");
    const F16Args a{static_cast<const uint8_t*>(w.data),
                    nb * l.block_bytes,
                    int(w.n_out),
                    int(nt),
                    int(cols8(nt)),
                    int(nb),
                    sp.per_split,
                    static_cast<const __half*>(x16),
                    w.n_in,
                    y,
                    bias,
                    res,
                    sp.splits > 1 ? scratch : nullptr};
    with_format(w.type, [&](auto fmt) { launch_f16<decltype(fmt)>(a, sp.splits, s); });
    if (sp.splits > 1) reduce_splits(scratch, sp.splits, nt, w.n_out, bias, res, y, s);
}

}  // namespace minfer::cuda
