// Quantized matrix times a few to a few hundred columns on the int8 tensor cores (mma.sync m16n8k32,
// s8 x s8 -> s32). The dequantize-then-cuBLAS path wrote and read every weight as a half each step (7B
// at B = 32: ~12 ms); here the weights' integer levels go straight into the tensor cores.
//
// x is quantized per 32 elements to two int8 levels, x ~ d * (254 hi + lo) (quantize_x_mma, the same
// arithmetic as quantize_x8), and each output sums, over its row's 32-element blocks in order,
//   acc += (float(254 * (W . hi) + W . lo) * d) * ws  (+ one such term per 16-element half for Q6_K)
//   acc -= wm * s                                      (Q4_K's minimums; s = d * sum(254 hi + lo))
// with ws, wm the block's weight scale and minimum. The integer sums are exact; the f32 order is the
// row's block order, split (for small matrices) into a fixed number of contiguous ranges added in order
// afterwards. Nothing depends on the column count: the product is batch invariant.
//
// A warp computes 32 rows (two m16 tiles) by 8 kNb columns. Within a k32 step, lane (g, t) (g = lane / 4,
// t = lane % 4) supplies the levels of elements 8t..8t+7 of the block for rows g and g + 8 (A) and column
// g (B): the tensor core pairs A's and B's k indices lane by lane, so any assignment of elements to lanes
// works when A and B share it; this one makes each lane's share eight consecutive elements (one 8-byte
// load of the weights, one 16-byte load of x's two level planes).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_common.cuh"
#include "backend/cuda/x_levels.cuh"
#include "util/error.h"

namespace minfer::cuda {
namespace {

using namespace mma;

constexpr int kXBlock = 64;  // bytes of one column's 32-element block: per lane t, 8 hi then 8 lo levels
// Products of at least this many columns take the staged kernel when its stages fit the rows (Auto).
constexpr int64_t kStagedFrom = 2;

// Quantized x: levels [nt8][nb32][64] int8, then steps [nb32][nt8] float2 {d, d * sum(254 hi + lo)};
// columns nt..nt8-1 are zero.
size_t levels_bytes(int64_t n_in, int64_t nt) {
    return size_t(cols8(nt) * (n_in / 32) * kXBlock);
}

struct MmaArgs {
    const uint8_t* w;
    int64_t row_bytes;
    int n_out, nt, nt8;
    int nb;         // weight blocks per row
    int per_split;  // weight blocks of one split (grid z)
    const int8_t* xq;
    const float2* xm;
    float* y;
    const float* bias;
    const float* res;
    float* part;  // [splits][nt][n_out], or null when unsplit
};

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

// The exact integer sums 254 (A . hi) + A . lo of one m16n8 tile, Q6_K's halves apart: half h takes
// the levels of lanes t / 2 == h (elements 16 h..16 h + 15) and zeros elsewhere.
template <class W>
__device__ __forceinline__ void tile_sums(const uint32_t (&a)[4], const int4& xb, int t,
                                          int (&sum)[W::kHalves][4]) {
#pragma unroll
    for (int h = 0; h < W::kHalves; ++h) {
        uint32_t ah[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) ah[i] = W::kHalves == 1 || t / 2 == h ? a[i] : 0u;
        int hi[4], lo[4];
        mma_s8(hi, ah, uint32_t(xb.x), uint32_t(xb.y));
        mma_s8(lo, ah, uint32_t(xb.z), uint32_t(xb.w));
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[h][e] = 254 * hi[e] + lo[e];
    }
}

// acc += one m16n8 tile's block: its exact integer sums times x's step and the weights' scales, minus
// the minimum term (e: row g + 8 (e / 2), column 2t + e % 2). Both kernels add a block through this one
// function, so their f32 arithmetic is the same instruction for instruction.
template <class W>
__device__ __forceinline__ void scaled_tile(const uint32_t (&aw)[4], const int4& xb, const float4& st,
                                            const float (&ws)[2][W::kHalves], const float (&wm)[2], int t,
                                            float (&acc)[4]) {
    int sum[W::kHalves][4];
    tile_sums<W>(aw, xb, t, sum);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float dx = e % 2 ? st.z : st.x, sx = e % 2 ? st.w : st.y;
        float v = acc[e];
#pragma unroll
        for (int h = 0; h < W::kHalves; ++h) v = fmaf(float(sum[h][e]) * dx, ws[e / 2][h], v);
        if constexpr (W::kMin) v = fmaf(-wm[e / 2], sx, v);
        acc[e] = v;
    }
}

// One 32-element block j of weight block b: every tile of the warp's rows and columns.
template <class W, int kNb>
__device__ __forceinline__ void block_step(const MmaArgs& a, const uint8_t* const (&rows)[kMt][2],
                                           const typename W::Head (&hd)[kMt][2], int b, int j, int c0,
                                           float (&acc)[kMt][kNb][4]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t kb = int64_t(b) * W::kSub + j, nb32 = int64_t(a.nb) * W::kSub;
    uint32_t aw[kMt][4];
    float ws[kMt][2][W::kHalves], wm[kMt][2];
#pragma unroll
    for (int m = 0; m < kMt; ++m) {
        W::levels(rows[m][0] + int64_t(b) * W::kBytes, j, t, aw[m][0], aw[m][2]);
        W::levels(rows[m][1] + int64_t(b) * W::kBytes, j, t, aw[m][1], aw[m][3]);
#pragma unroll
        for (int h = 0; h < 2; ++h) W::scales(hd[m][h], j, ws[m][h], wm[m][h]);
    }
#pragma unroll
    for (int n = 0; n < kNb; ++n) {
        const int col = c0 + 8 * n;
        if (col >= a.nt8) break;  // uniform across the warp
        const int4 xb = __ldg(reinterpret_cast<const int4*>(a.xq + ((col + g) * nb32 + kb) * kXBlock) + t);
        const float4 st = __ldg(reinterpret_cast<const float4*>(a.xm + kb * a.nt8 + col + 2 * t));
#pragma unroll
        for (int m = 0; m < kMt; ++m) scaled_tile<W>(aw[m], xb, st, ws[m], wm[m], t, acc[m][n]);
    }
}

template <class W, int kNb>
__global__ void __launch_bounds__(kWarps * 32) mma_kernel(MmaArgs a) {
    begin_kernel();
    const int g = threadIdx.x % 32 / 4;
    const int r0 = int(blockIdx.x) * kBlockRows + int(threadIdx.x / 32) * kMt * 16;
    if (r0 >= a.n_out) return;
    const int c0 = int(blockIdx.y) * 8 * kNb;
    const int b_begin = int(blockIdx.z) * a.per_split, b_end = min(a.nb, b_begin + a.per_split);
    const uint8_t* rows[kMt][2];
#pragma unroll
    for (int m = 0; m < kMt; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            rows[m][h] = a.w + min(r0 + 16 * m + 8 * h + g, a.n_out - 1) * a.row_bytes;
    float acc[kMt][kNb][4] = {};
    for (int b = b_begin; b < b_end; ++b) {
        typename W::Head hd[kMt][2];
#pragma unroll
        for (int m = 0; m < kMt; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) hd[m][h] = W::head(rows[m][h] + int64_t(b) * W::kBytes);
#pragma unroll
        for (int j = 0; j < W::kSub; ++j) block_step<W, kNb>(a, rows, hd, b, j, c0, acc);
    }
    store_tiles<kNb>(a, a.part, r0, c0, acc);
}

// The staged kernel: a thread block's weights and x for one stage (256 elements of each row for the
// K-quants, four 32-element blocks for the others) are copied into shared memory with cp.async, kStages
// - 1 stages ahead of the tensor cores, so the loads of later stages overlap the products of this one
// (the direct kernel waits on each load). Same warp tiles, same block order, same scaled_tile: for equal
// splits its outputs are bit for bit the direct kernel's.
template <class W>
struct StageOf : WeightStage<W> {
    using WeightStage<W>::kSub;
    using WeightStage<W>::kWBytes;
    // Columns 64 mod 128 bytes apart: a quarter warp's 16-byte loads of two columns hit distinct banks.
    static constexpr int kXStride = kSub * kXBlock + 64;
    __host__ __device__ static constexpr int bytes(int cols) {
        return kWBytes + cols * (kXStride + kSub * 8);
    }
    __host__ __device__ static constexpr int stages(int cols) { return stages_for(bytes(cols)); }
};

// Stage k of x's columns c0..c0 + cols into dst: levels [kCols][kXStride], then steps [kSub][kCols].
template <class W, int kCols, int kThreads>
__device__ __forceinline__ void stage_x(const MmaArgs& a, int c0, int cols, int k, uint8_t* dst) {
    using S = StageOf<W>;
    constexpr int kPerCol = S::kSub * kXBlock / 16;
    const int64_t nb32 = int64_t(a.nb) * W::kSub, kb = int64_t(k) * S::kSub;
    for (int i = int(threadIdx.x); i < cols * kPerCol; i += kThreads) {
        const int c = i / kPerCol, q = i % kPerCol;
        cp_async<16>(dst + c * S::kXStride + q * 16, a.xq + ((c0 + c) * nb32 + kb) * kXBlock + q * 16);
    }
    uint8_t* steps = dst + kCols * S::kXStride;
    const int per_row = cols / 2;  // 16-byte pieces of a row of cols float2
    for (int i = int(threadIdx.x); i < S::kSub * per_row; i += kThreads) {
        const int j = i / per_row, q = i % per_row;
        cp_async<16>(steps + (j * kCols + 2 * q) * 8, a.xm + (kb + j) * a.nt8 + c0 + 2 * q);
    }
}

// Every block of a staged stage: the warp's two m16 tiles (row group rw) by its 8 kNb of the stage's
// kCols columns from cb on, those below cols (a multiple of 8).
template <class W, int kNb, int kCols>
__device__ __forceinline__ void stage_math(const uint8_t* wst, const uint8_t* xst, int rw, int cb, int cols,
                                           float (&acc)[kMt][kNb][4]) {
    using S = StageOf<W>;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint8_t* rows[kMt][2];
#pragma unroll
    for (int m = 0; m < kMt; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) rows[m][h] = wst + (rw * kMt * 16 + 16 * m + 8 * h + g) * S::kRowStride;
    const auto* steps = reinterpret_cast<const float2*>(xst + kCols * S::kXStride);
    typename W::Head hd[kMt][2];
#pragma unroll
    for (int j = 0; j < S::kSub; ++j) {
        const int blk = j / W::kSub * W::kBytes, sub = j % W::kSub;
        uint32_t aw[kMt][4];
        float ws[kMt][2][W::kHalves], wm[kMt][2];
#pragma unroll
        for (int m = 0; m < kMt; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (sub == 0) hd[m][h] = W::head(rows[m][h] + blk);
                W::scales(hd[m][h], sub, ws[m][h], wm[m][h]);
            }
            W::levels(rows[m][0] + blk, sub, t, aw[m][0], aw[m][2]);
            W::levels(rows[m][1] + blk, sub, t, aw[m][1], aw[m][3]);
        }
#pragma unroll
        for (int n = 0; n < kNb; ++n) {
            const int col = cb + 8 * n;
            if (col >= cols) break;  // uniform across the warp
            const int4 xb =
                *reinterpret_cast<const int4*>(xst + (col + g) * S::kXStride + j * kXBlock + 16 * t);
            const float4 st = *reinterpret_cast<const float4*>(steps + j * kCols + col + 2 * t);
#pragma unroll
            for (int m = 0; m < kMt; ++m) scaled_tile<W>(aw[m], xb, st, ws[m], wm[m], t, acc[m][n]);
        }
    }
}

// The int8 product's parts for staged_block.
struct Int8Product {
    template <class W>
    using Stage = StageOf<W>;
    template <class W, int kCols, int kThreads>
    __device__ static void load_x(const MmaArgs& a, int c0, int cols, int k, uint8_t* dst) {
        stage_x<W, kCols, kThreads>(a, c0, cols, k, dst);
    }
    template <class W, int kNb, int kCols, int kKGroups>
    __device__ static void math(const uint8_t* wst, const uint8_t* xst, int rw, int cb, int cols, int,
                                float (&acc)[kMt][kNb][4]) {
        static_assert(kKGroups == 1, "the int8 product keeps the direct kernel's order: one k group");
        stage_math<W, kNb, kCols>(wst, xst, rw, cb, cols, acc);
    }
};

// Grid: x column tiles of 8 kNb kGroups, y row blocks, z splits (staged_block). Several column groups let
// a wide tile keep its stage's bytes and registers per warp small enough for more warps per SM. The
// weights of the first stages are requested before waiting for the previous kernel (they do not depend
// on it); x after.
template <class W, int kNb, int kGroups, int kStages>
__global__ void __launch_bounds__(staged_threads(kGroups, 1)) staged_kernel(MmaArgs a) {
    staged_column_tile<Int8Product, W, kNb, kGroups, 1, kStages>(a);
}

// Grid: x the tiles of a mixture's columns (MoeColumns; those past the routing's are empty), y one
// expert's row blocks (a.n_out its rows; never split). The tile's expert, which the routing wrote, picks
// the weights: it is read after the wait for the previous kernel.
template <class W, int kNb, int kGroups, int kStages>
__global__ void __launch_bounds__(staged_threads(kGroups, 1))
    experts_kernel(MmaArgs a, const ExpertTile* tiles) {
    wait_for_inputs();
    const ExpertTile t = tiles[blockIdx.x];
    if (t.expert < 0) return;
    MmaArgs e = a;
    e.w += int64_t(t.expert) * a.n_out * a.row_bytes;
    if (a.bias) e.bias += int64_t(t.expert) * a.n_out;
    staged_block<Int8Product, W, kNb, kGroups, 1, kStages>(e, t.col, t.cols);
}

// y = the splits' partial sums added in split order (+ bias) (+ res).
__global__ void reduce_kernel(const float* part, int splits, int64_t n, int n_out, const float* bias,
                              const float* res, float* y) {
    begin_kernel();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = part[i];
    for (int s = 1; s < splits; ++s) v += part[s * n + i];
    if (bias) v += bias[i % n_out];
    if (res) v += res[i];
    y[i] = v;
}

// Which row of x each column of a quantized x takes: column c itself below nt, or as `token` says
// (quantize_x_mma_columns); -1: none, zeros.
struct ColumnRows {
    int nt;
    const int32_t* token;
    bool gather;
    __device__ int row(int c) const {
        if (!token) return c < nt ? c : -1;
        const int32_t t = token[c];
        return t < 0 ? -1 : gather ? t : c;
    }
};

// Eight consecutive threads quantize one column's 32-element block, four elements each (levels4, as
// quantize_x8); columns without a row become zeros.
__global__ void quantize_kernel(const float* x, int64_t n_in, ColumnRows rows, int nt8, int8_t* xq,
                                float2* xm) {
    begin_kernel();
    const int64_t quads = n_in / 4, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= quads * nt8) return;  // whole groups of eight: quads is a multiple of 8
    const int c = int(i / quads), row = rows.row(c);
    const int64_t q = i % quads, kb = q / 8;
    const int e = int(q % 8) * 4;
    const float4 v =
        row >= 0 ? __ldg(reinterpret_cast<const float4*>(x + row * n_in) + q) : float4{0, 0, 0, 0};
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    uint32_t w[2];
    float d;
    int sum;
    levels4<2>(v, amax, w, d, sum);
#pragma unroll
    for (int o = 1; o < 8; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    int8_t* blk = xq + (c * (n_in / 32) + kb) * kXBlock + 16 * (e / 8) + e % 8;
    *reinterpret_cast<uint32_t*>(blk) = w[0];
    *reinterpret_cast<uint32_t*>(blk + 8) = w[1];
    if (e == 0) xm[kb * nt8 + c] = make_float2(d, d * float(sum));
}

template <class W>
void launch_direct(const MmaArgs& a, int nb8, int splits, Stream s) {
    const int cols = nb8 >= 8 ? 8 : nb8 >= 4 ? 4 : nb8 >= 2 ? 2 : 1;
    const dim3 grid(unsigned((a.n_out + kBlockRows - 1) / kBlockRows), unsigned((nb8 + cols - 1) / cols),
                    unsigned(splits)),
        block(kWarps * 32);
    if (cols == 8) return launch("mma matmul kernel", mma_kernel<W, 8>, grid, block, 0, s, a);
    if (cols == 4) return launch("mma matmul kernel", mma_kernel<W, 4>, grid, block, 0, s, a);
    if (cols == 2) return launch("mma matmul kernel", mma_kernel<W, 2>, grid, block, 0, s, a);
    launch("mma matmul kernel", mma_kernel<W, 1>, grid, block, 0, s, a);
}

template <class W, int kNb, int kGroups>
void launch_staged_tile(const MmaArgs& a, int splits, Stream s) {
    constexpr int kCols = 8 * kNb * kGroups, kStages = StageOf<W>::stages(kCols);
    launch_staged_block<staged_kernel<W, kNb, kGroups, kStages>, StageOf<W>, kCols,
                        staged_threads(kGroups, 1), kStages>("mma staged kernel", a, splits, s);
}

// Tiles of 64 columns take two column groups of warps (8 warps per SM where one thread block fits).
template <class W>
void launch_staged(const MmaArgs& a, int nb8, int splits, Stream s) {
    if (nb8 > 4) return launch_staged_tile<W, 4, 2>(a, splits, s);
    if (nb8 > 2) return launch_staged_tile<W, 4, 1>(a, splits, s);
    if (nb8 > 1) return launch_staged_tile<W, 2, 1>(a, splits, s);
    launch_staged_tile<W, 1, 1>(a, splits, s);
}

template <class W>
void launch_type(const MmaArgs& a, int nb8, const Split& sp, bool staged, Stream s) {
    if (staged) return launch_staged<W>(a, nb8, sp.splits, s);
    launch_direct<W>(a, nb8, sp.splits, s);
}

template <class W, int kNb, int kGroups>
void launch_experts_tile(const MmaArgs& a, const MoeColumns& c, Stream s) {
    constexpr int kCols = 8 * kNb * kGroups, kStages = StageOf<W>::stages(kCols);
    const dim3 grid(unsigned(c.n_tiles), unsigned((a.n_out + kBlockRows - 1) / kBlockRows));
    launch_staged_grid<experts_kernel<W, kNb, kGroups, kStages>, StageOf<W>, kCols,
                       staged_threads(kGroups, 1), kStages>("mma experts kernel", grid, s, a, c.tiles);
}

template <class W>
void launch_experts(const MmaArgs& a, const MoeColumns& c, Stream s) {
    switch (c.tile_cols) {
        case 64:
            return launch_experts_tile<W, 4, 2>(a, c, s);
        case 32:
            return launch_experts_tile<W, 4, 1>(a, c, s);
        case 16:
            return launch_experts_tile<W, 2, 1>(a, c, s);
        case 8:
            return launch_experts_tile<W, 1, 1>(a, c, s);
        default:
            throw Error("CUDA matmul_mma_experts: tiles of " + std::to_string(c.tile_cols) + " columns");
    }
}

void launch_quantize(const float* x, int64_t n_in, const ColumnRows& rows, int64_t nt8, void* xq, Stream s) {
    if (n_in % 32 != 0) throw Error("CUDA quantize_x_mma: length not a multiple of 32");
    if (!aligned16(x) || !aligned16(xq)) throw Error("CUDA quantize_x_mma: pointers not 16-byte aligned");
    if (n_in == 0 || nt8 == 0) return;
    auto* q = static_cast<int8_t*>(xq);
    const int64_t threads = n_in / 4 * nt8;
    launch("mma quantize kernel", quantize_kernel, unsigned((threads + 255) / 256), 256, 0, s, x, n_in, rows,
           int(nt8), q, reinterpret_cast<float2*>(q + levels_bytes(n_in, nt8)));
}

// The arguments of a product of w with nt8 columns of xq (nt of them real), its rows' blocks in ranges
// of per_split.
MmaArgs args_of(const QMatrix& w, const void* xq, int64_t nt, int64_t nt8, int per_split, float* y,
                const float* bias, const float* res, float* part) {
    const Layout l = layout_of(w.type);
    const int64_t nb = w.n_in / l.block_elems;
    const auto* q = static_cast<const int8_t*>(xq);
    return {static_cast<const uint8_t*>(w.data),
            nb * l.block_bytes,
            int(w.n_out),
            int(nt),
            int(nt8),
            int(nb),
            per_split,
            q,
            reinterpret_cast<const float2*>(q + levels_bytes(w.n_in, nt8)),
            y,
            bias,
            res,
            part};
}

// Whether a reader (quant_mma_common.cuh) takes w's blocks.
bool readable(const QMatrix& w) {
    switch (w.type) {
        case GgmlType::Q4_K:
            return !w.tiled && !w.padded && w.n_in % 256 == 0;
        case GgmlType::Q6_K:
            return w.padded && w.n_in % 256 == 0;
        case GgmlType::Q8_0:
        case GgmlType::Q5_0:
        case GgmlType::Q4_0:
        case GgmlType::IQ4_NL:
        case GgmlType::MXFP4:
            return !w.tiled && !w.padded && w.n_in % 32 == 0;
        case GgmlType::Q2_K:  // no tensor-core reader: the matvec and dequant_f16 + cuBLAS take them
        case GgmlType::Q3_K:
        case GgmlType::IQ4_XS:
            return false;
        default:
            return false;
    }
}

}  // namespace

bool mma_fits(const QMatrix& w) {
    return readable(w) && w.type != GgmlType::IQ4_NL && w.type != GgmlType::MXFP4;
}

bool experts_mma_fits(const QMatrix& w) {
    if (!readable(w)) return false;
    const Layout l = layout_of(w.type);  // rows of whole stages (split_of's `staged`, without the device)
    return w.n_in / l.block_elems % l.stage_blocks == 0;
}

size_t mma_x_bytes(int64_t n_in, int64_t nt) {
    return levels_bytes(n_in, nt) + size_t(cols8(nt) * (n_in / 32)) * sizeof(float2);
}

size_t mma_scratch_floats(const QMatrix& w, int64_t nt) {
    const Split sp = split_of(w);
    return sp.splits > 1 ? size_t(sp.splits) * size_t(nt * w.n_out) : 0;
}

void quantize_x_mma(const float* x, int64_t n_in, int64_t nt, void* xq, Stream s) {
    launch_quantize(x, n_in, {int(nt), nullptr, false}, cols8(nt), xq, s);
}

void quantize_x_mma_columns(const float* x, int64_t n_in, const int32_t* token, bool gather, int64_t n_cols,
                            void* xq, Stream s) {
    if (n_cols % 8 != 0) throw Error("CUDA quantize_x_mma_columns: columns not a multiple of 8");
    launch_quantize(x, n_in, {int(n_cols), token, gather}, n_cols, xq, s);
}

void matmul_mma(const QMatrix& w, const void* xq, int64_t nt, float* y, const float* bias, const float* res,
                float* scratch, Stream s, MmaKernel kernel) {
    if (!mma_fits(w)) throw Error("CUDA matmul_mma: matrix type or layout not supported");
    if (!aligned16(w.data) || !aligned16(xq))
        throw Error("CUDA matmul_mma: weights and x must be 16-byte aligned");
    if (w.n_out == 0 || nt == 0) return;
    const Split sp = split_of(w);
    if (sp.splits > 1 && !scratch) throw Error("CUDA matmul_mma: split product without scratch");
    const bool staged =
        sp.staged && (kernel == MmaKernel::Staged || (kernel == MmaKernel::Auto && nt >= kStagedFrom));
    const MmaArgs a =
        args_of(w, xq, nt, cols8(nt), sp.per_split, y, bias, res, sp.splits > 1 ? scratch : nullptr);
    const int nb8 = int(cols8(nt) / 8);
    with_format(w.type, [&](auto fmt) { launch_type<decltype(fmt)>(a, nb8, sp, staged, s); });
    if (sp.splits > 1) reduce_splits(scratch, sp.splits, nt, w.n_out, bias, res, y, s);
}

bool experts_tile_fits(int tile_cols) {
    return tile_cols == 8 || tile_cols == 16 || tile_cols == 32 || tile_cols == 64;
}

void matmul_mma_experts(const QMatrix& w, int64_t rows, const void* xq, const MoeColumns& cols, float* y,
                        const float* bias, Stream s) {
    if (!experts_mma_fits(w)) throw Error("CUDA matmul_mma_experts: matrix type or layout not supported");
    if (!aligned16(w.data) || !aligned16(xq))
        throw Error("CUDA matmul_mma_experts: weights and x must be 16-byte aligned");
    if (rows < 1 || w.n_out % rows != 0 || cols.n_cols % 8 != 0 || !experts_tile_fits(cols.tile_cols))
        throw Error("CUDA matmul_mma_experts: bad stack or columns layout");
    if (cols.n_tiles == 0) return;
    const QMatrix expert{w.type, w.data, w.n_in, rows, w.tiled, w.padded};
    const int nb = int(w.n_in / layout_of(w.type).block_elems);
    const MmaArgs a = args_of(expert, xq, cols.n_cols, cols.n_cols, nb, y, bias, nullptr, nullptr);
    with_format(w.type, [&](auto fmt) { launch_experts<decltype(fmt)>(a, cols, s); });
}

void mma::reduce_splits(const float* part, int splits, int64_t nt, int64_t n_out, const float* bias,
                        const float* res, float* y, Stream s) {
    const int64_t n = nt * n_out;
    launch("mma reduce kernel", reduce_kernel, unsigned((n + 255) / 256), 256, 0, s, part, splits, n,
           int(n_out), bias, res, y);
}

}  // namespace minfer::cuda
