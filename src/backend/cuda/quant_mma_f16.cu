// Quantized matrix times a few dozen to a few hundred columns on the f16 tensor cores (mma.sync
// m16n8k16, f16 x f16 -> f32). Thread blocks of 128 rows and shared-memory stages are the int8 kernel's
// (quant_mma.cu, quant_mma_common.cuh), and so are the even splits of rows (f16_split_kernel); rows may
// instead be shared by stream-K ranges (f16_block). What differs is the inner step and the warps' tiles.
// Lane (g, t) reads the levels of elements 8t..8t+7 of a 32-element block for rows g and g + 8 (the
// format's levels()), dequantizes them in half arithmetic (dequant2: the block's scale and minimum
// rounded to half, level * ws - wm rounded once), and takes the same elements of column g's x as one
// 16-byte load: two m16n8k16 products per block, the first on elements 8t..8t+3, the second on
// 8t+4..8t+7 (A and B share the assignment of elements to k, so any one works). Each warp covers all 64
// columns of a tile, so each weight is dequantized once (the conversions to half are a large share of
// the instructions); two k groups of four warps take the first and second half of every stage's blocks,
// each summing its blocks in row order, and their sums are added at the end (group 0's plus group 1's),
// whatever the column count.
//
// Half arithmetic takes three instructions per two weights where the f32 route took seven (PRMT, FADD
// and FFMA for each weight, then a pack): at 64 columns on the H200, 7b.gate 77.1 -> 70.1 us and 7b.down
// 59.3 -> 52.6, and 7B S_TG +6-10% at B = 24-64 (git history of bench/PERF-NOTES-GPU-BATCHED.md,
// twenty-fourth session). Taking the m16 tiles one after the other (fewer registers, x loaded twice) or one
// thread block an SM measured slower.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_sync.cuh"
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
    int per_split;    // rows split evenly: weight blocks of one split (grid z)
    int stages;       // stream-K: shared-memory stages of a row,
    int row_blocks;   // thread-block rows (kBlockRows each),
    int per_block;    // and stages of each thread block's range (grid y), the last one's may be fewer
    const __half* x;  // [nt][n_in]
    int64_t n_in;
    float* y;
    const float* bias;
    const float* res;
    float* part;        // split: [splits][nt][n_out], or null when unsplit; stream-K: the pieces
    unsigned* tickets;  // stream-K: [row blocks][column tiles], zero between launches
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
// {half(level * ws - wm)}, in half arithmetic: one PRMT makes each byte u the mantissa of the half
// 1024 + u, one HSUB2 takes away 1024 (and the sign offset) exactly, and one HFMA2 applies the row's
// scale and minimum, rounded to half (ws2, nwm2: {ws, ws} and {-wm, -wm} as halves), once.
template <bool kSigned>
__device__ __forceinline__ uint32_t dequant2(uint32_t lv, int i, __half2 ws2, __half2 nwm2) {
    const uint32_t u = kSigned ? lv ^ 0x80808080u : lv;
    const uint32_t biased = __byte_perm(u, 0x64646464u, 0x4040u | uint32_t(i + 1) << 8 | uint32_t(i));
    const __half2 offset = __float2half2_rn(kSigned ? 1152.0f : 1024.0f);
    const __half2 level = __hsub2(*reinterpret_cast<const __half2*>(&biased), offset);
    const __half2 h = __hfma2(level, ws2, nwm2);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// The A fragments of one m16 tile's 32-element block: a[q] for elements 8t + 4q..8t + 4q + 3, from the
// levels lv (row g: lv[0] elements 0-3, lv[2] 4-7; row g + 8: lv[1], lv[3]) and each row's scales.
template <class W>
__device__ __forceinline__ void dequant_tile(const uint32_t (&lv)[4], const float (&ws)[2],
                                             const float (&wm)[2], uint32_t (&a)[2][4]) {
    constexpr bool kSigned = !W::kMin;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h: row g, row g + 8
        const __half2 ws2 = __float2half2_rn(ws[h]), nwm2 = __float2half2_rn(-wm[h]);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            a[q][h] = dequant2<kSigned>(lv[2 * q + h], 0, ws2, nwm2);
            a[q][2 + h] = dequant2<kSigned>(lv[2 * q + h], 2, ws2, nwm2);
        }
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

// The f16 product's parts for staged_block (the split kernel; f16_block takes its math). With two k
// groups, group kg takes half kg of each stage's blocks.
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

constexpr int kNb = 8, kKGroups = 2, kCols = 8 * kNb;  // tiles of 64 columns, two k groups of warps
constexpr int kPerGroup = staged_threads(1, 1), kThreads = staged_threads(1, kKGroups);
constexpr int kTileFloats = kMt * kNb * 4 * kPerGroup;  // a partial tile: every thread's accumulators

// Where thread block `blk`'s partial tile of row block rb goes: slot 0 if rb is the first row block of
// its range, else slot 1 (the last; rows in between are whole and need none).
__device__ __forceinline__ float* piece_of(const F16Args& a, int tile, int blk, int rb) {
    const int slot = rb == blk * a.per_block / a.stages ? 0 : 1;
    return a.part + ((int64_t(tile) * gridDim.y + blk) * 2 + slot) * kTileFloats;
}

// Row block rb's tile of accumulators, of n of its stages: stored when they are the whole row, else
// kept as a piece; the block that completes the row's last piece adds all of them in range order
// (ranges first to last, whichever finished last) and stores the sum. Group 0's warps hold the tile.
__device__ __forceinline__ void finish_row(const F16Args& a, int rb, int n, int kg,
                                           float (&acc)[kMt][kNb][4]) {
    const int tile = int(blockIdx.x), tid = int(threadIdx.x) % kPerGroup, warp = int(threadIdx.x / 32);
    const int r0 = rb * kBlockRows + warp % kWarps * kMt * 16, c0 = tile * kCols;
    float* v = &acc[0][0][0];
    constexpr int kN = kMt * kNb * 4;
    if (n < a.stages) {
        if (kg == 0) {
            float* mine = piece_of(a, tile, int(blockIdx.y), rb);
#pragma unroll
            for (int i = 0; i < kN; ++i) __stcg(mine + i * kPerGroup + tid, v[i]);
        }
        __threadfence();
        __syncthreads();
        __shared__ bool last;
        const int first = rb * a.stages / a.per_block, last_blk = ((rb + 1) * a.stages - 1) / a.per_block;
        unsigned* ticket = a.tickets + int64_t(rb) * gridDim.x + tile;
        if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == unsigned(last_blk - first);
        __syncthreads();
        if (!last) return;
        __threadfence();
        if (threadIdx.x == 0) *ticket = 0;
        if (kg != 0) return;
        for (int blk = first; blk <= last_blk; ++blk) {
            const float* p = piece_of(a, tile, blk, rb);
#pragma unroll
            for (int i = 0; i < kN; ++i) {
                const float piece = __ldcg(p + i * kPerGroup + tid);
                v[i] = blk == first ? piece : v[i] + piece;
            }
        }
    }
    if (kg == 0) store_tiles<kNb>(a, nullptr, r0, c0, acc);
}

// A thread block's range of the product's stages: row blocks' stages in order, cut into equal ranges
// (grid y) so that one wave of thread blocks covers the matrix whatever its row count (stream-K); grid x
// is the column tiles. Each row of the range runs through the shared-memory stages as staged_block does
// (two k groups summed in group order), then finish_row.
template <class W, int kStages>
__device__ __forceinline__ void f16_block(const F16Args& a) {
    using S = F16Stage<W>;
    constexpr int kStageBytes = S::bytes(kCols);
    extern __shared__ __align__(16) uint8_t smem[];
    release_next();
    const int c0 = int(blockIdx.x) * kCols, cols = min(kCols, a.nt8 - c0);
    const int warp = int(threadIdx.x / 32), rw = warp % kWarps, kg = warp / kWarps;
    const int end = min(a.row_blocks * a.stages, (int(blockIdx.y) + 1) * a.per_block);
    for (int u = int(blockIdx.y) * a.per_block; u < end;) {
        const int rb = u / a.stages, k0 = u % a.stages, n = min(end - u, a.stages - k0);
        float acc[kMt][kNb][4] = {};
        run_stages<kStages, kStageBytes>(
            smem, n, [&](int i, uint8_t* p) { stage_weights<W, kThreads>(a, rb * kBlockRows, k0 + i, p); },
            [&](int i, uint8_t* p) { stage_x16<W, kThreads>(a, c0, cols, k0 + i, p + S::kWBytes); },
            [&](const uint8_t* p) {
                F16Product::math<W, kNb, kCols, kKGroups>(p, p + S::kWBytes, rw, 0, cols, kg, acc);
            });
        sum_k_groups<kNb, kKGroups, kPerGroup>(smem, kg, acc);
        finish_row(a, rb, n, kg, acc);
        u += n;
    }
}

// Grid: column tiles, ranges (f16_block).
template <class W, int kStages, int kPerSm>
__global__ void __launch_bounds__(kThreads, kPerSm) f16_streamk_kernel(F16Args a) {
    f16_block<W, kStages>(a);
}

// Grid: column tiles, row blocks, splits (staged_block, as the int8 staged kernel).
template <class W, int kStages, int kPerSm>
__global__ void __launch_bounds__(kThreads, kPerSm) f16_split_kernel(F16Args a) {
    staged_column_tile<F16Product, W, kNb, 1, kKGroups, kStages>(a);
}

template <class W>
constexpr int kF16Stages = F16Stage<W>::stages(kCols);
template <class W>
constexpr int kF16PerSm = blocks_per_sm(kF16Stages<W>* F16Stage<W>::bytes(kCols));

// The stream-K ranges of a matrix's stages: one per thread block of a wave (kF16PerSm an SM), of
// equal length.
struct Ranges {
    int stages, row_blocks, per_block, count;
};

template <class W>
Ranges ranges_of(const QMatrix& w) {
    const Layout l = layout_of(w.type);
    const int stages = int(w.n_in / l.block_elems / l.stage_blocks);
    const int row_blocks = int((w.n_out + kBlockRows - 1) / kBlockRows);
    const int64_t units = int64_t(stages) * row_blocks, wave = int64_t(kF16PerSm<W>) * (gpu_warps() / 32);
    const int per_block = int((units + wave - 1) / wave);
    return {stages, row_blocks, per_block, int((units + per_block - 1) / per_block)};
}

Ranges ranges(const QMatrix& w) {
    Ranges r{};
    with_format(w.type, [&](auto fmt) { r = ranges_of<decltype(fmt)>(w); });
    return r;
}

// Stream-K when its ranges cut each row into at most three pieces (a range is at least half a row),
// else rows split evenly and the splits added by reduce_splits. On the H200 at 64 columns stream-K
// took 7b.gate from 69.7 to 56.0 us (rows split in two gave 296 thread blocks, 1.12 waves), but with
// 7 to 19 pieces a row, which one thread block adds, it was slower: 7b.down 52.9 -> 64.6, 7b.qkv
// 20.0 -> 26.2, 0.5b.down 14.3 -> 29.2 (git history of PERF-NOTES-GPU-BATCHED.md, twenty-fourth session).
bool stream_k(const Ranges& r) {
    return 2 * r.per_block >= r.stages;
}

int64_t column_tiles(int64_t nt) {
    return (cols8(nt) + kCols - 1) / kCols;
}

template <class W>
void launch_f16(const F16Args& a, const Ranges& r, int splits, Stream s) {
    constexpr int kStages = kF16Stages<W>, kBytes = kStages * F16Stage<W>::bytes(kCols);
    static_assert(kStages >= 2, "two stages of 64 columns must fit in shared memory");
    static_assert(kTileFloats <= kBytes / 4, "the k groups' sums must fit where the stages were");
    if (!stream_k(r))
        return launch_staged_block<f16_split_kernel<W, kStages, kF16PerSm<W>>, F16Stage<W>, kCols, kThreads,
                                   kStages>("mma f16 kernel", a, splits, s);
    constexpr auto kernel = f16_streamk_kernel<W, kStages, kF16PerSm<W>>;
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    MINFER_CUDA_CHECK(opt_in);
    const dim3 grid(unsigned(column_tiles(a.nt)), unsigned(r.count));
    launch("mma f16 stream-K kernel", kernel, grid, dim3(kThreads), size_t(kBytes), s, a);
}

}  // namespace

bool mma_f16_fits(const QMatrix& w) {
    if (!mma_fits(w)) return false;
    const Layout l = layout_of(w.type);  // rows of whole stages (split_of's `staged`, without the device)
    return w.n_in / l.block_elems % l.stage_blocks == 0;
}

MmaF16Division mma_f16_division(const QMatrix& w) {
    const Ranges r = ranges(w);
    return {stream_k(r), stream_k(r) && r.count > 1 && r.per_block % r.stages != 0};
}

size_t mma_f16_scratch_floats(const QMatrix& w, int64_t nt) {
    const Ranges r = ranges(w);
    if (stream_k(r)) return size_t(column_tiles(nt) * r.count) * 2 * kTileFloats;
    return mma_scratch_floats(w, nt);
}

size_t mma_f16_tickets(const QMatrix& w, int64_t nt) {
    const Ranges r = ranges(w);
    return stream_k(r) ? size_t(column_tiles(nt) * r.row_blocks) : 0;
}

void matmul_mma_f16(const QMatrix& w, const void* x16, int64_t nt, float* y, const float* bias,
                    const float* res, float* scratch, unsigned* tickets, Stream s) {
    if (!mma_f16_fits(w)) throw Error("CUDA matmul_mma_f16: matrix type or layout not supported");
    if (!aligned16(w.data) || !aligned16(x16))
        throw Error("CUDA matmul_mma_f16: weights and x must be 16-byte aligned");
    if (w.n_out == 0 || nt == 0) return;
    const Ranges r = ranges(w);
    const Split sp = split_of(w);
    const bool sk = stream_k(r), reduce = !sk && sp.splits > 1;
    if ((sk && (!scratch || !tickets)) || (reduce && !scratch))
        throw Error("CUDA matmul_mma_f16: a cut product without scratch or tickets");
    const Layout l = layout_of(w.type);
    const int64_t nb = w.n_in / l.block_elems;
    const F16Args a{static_cast<const uint8_t*>(w.data),
                    nb * l.block_bytes,
                    int(w.n_out),
                    int(nt),
                    int(cols8(nt)),
                    int(nb),
                    sp.per_split,
                    r.stages,
                    r.row_blocks,
                    r.per_block,
                    static_cast<const __half*>(x16),
                    w.n_in,
                    y,
                    bias,
                    res,
                    sk || reduce ? scratch : nullptr,
                    tickets};
    with_format(w.type, [&](auto fmt) { launch_f16<decltype(fmt)>(a, r, sp.splits, s); });
    if (reduce) reduce_splits(scratch, sp.splits, nt, w.n_out, bias, res, y, s);
}

}  // namespace minfer::cuda
