// Decode matrix-vector products straight from the GGUF block layouts: matvec (y = W x + bias + res) and
// matvec_swiglu (silu(gate x) * (up x)) for up to kMaxMatvecTokens tokens at once.
//
// A group of `split` warps (1 to 8) computes R weight rows (4, 2 or 1, see choose_layout); for swiglu,
// half gate rows and half the same rows of up. The warps split each row's
// blocks between them and the lanes of a warp split each block (see quant_blocks.cuh), so consecutive
// lanes read consecutive weight bytes. Every weight is read once, and each x load serves all R rows; per
// token, each lane accumulates in f32, then a warp shuffle and a shared-memory sum over the group's warps
// finish the dot products. Quantized weights are never turned into floats: each level multiplies x as a
// subnormal (see step_levels). For one token the thread block first copies x into shared memory, scaled
// and permuted so that each warp-wide x load reads consecutive 16-byte words, with the sums of x that each
// lane's affine runs need (see SharedX); more tokens read x from global memory (GlobalX). For some types
// the grid holds at most one wave of resident thread blocks, each looping over its tiles of row groups
// (kLoopTiles). The experts of a mixture run the same kernels over a second grid dimension, one routed
// (token, expert) pair per row of thread blocks (matvec_experts).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_blocks.cuh"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_dp4a.h"
#include "backend/cuda/quant_tiled.h"

namespace minfer::cuda {
namespace {

using namespace qblocks;

constexpr int kWarps = 8;
constexpr int kMaxRows = 4;  // weight rows per warp group

struct MatvecArgs {
    ExpertPairs ex;       // matvec_experts: thread-block row blockIdx.y is position blockIdx.y of ex
    const uint8_t* w[2];  // W, or gate and up
    int64_t n_in, n_out, row_bytes;
    const float* x;
    int nt;
    int split;  // warps sharing each row group (1, 2, 4 or 8): they split its blocks
    float* y;
    const float* bias;
    const float* res;
    int prefetch;   // steps of its weights each thread prefetches into L2 before waiting for x
    int64_t tiles;  // thread blocks' worth of row groups (tiles); block b takes tiles b, b + gridDim.x, ...
};

// The product of position i of a.ex as a plain one: its expert's rows of the stack (w.n_out = n_out
// rows per expert), its x row, its y row and its expert's bias. Waits for the previous kernel first,
// which wrote the routing.
__device__ MatvecArgs expert_pair(MatvecArgs a, int64_t i) {
    wait_for_inputs();
    const int32_t p = a.ex.order[i], e = a.ex.ids[p];
    const int64_t off = int64_t(e) * a.n_out * a.row_bytes;
    a.w[0] += off, a.w[1] += off;
    a.x += (a.ex.k > 0 ? p / a.ex.k : i) * a.n_in;
    a.y += i * a.n_out;
    if (a.bias) a.bias += int64_t(e) * a.n_out;
    return a;
}

// x[0..W) of one token (16-byte aligned when W == 4).
template <int W>
__device__ __forceinline__ void load_x(const float* x, float (&v)[W]) {
    if constexpr (W == 4) {
        const float4 u = __ldg(reinterpret_cast<const float4*>(x));
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    } else {
        v[0] = __ldg(x);
    }
}

// One step of a dense type: acc[m][t] += the lane's values of block b of row m times x_t.
template <class D, int NT, int R>
__device__ __forceinline__ void step_dense(const typename D::Raw (&raw)[R], int sub, int64_t b,
                                           const float* const (&xt)[NT], float (&acc)[R][NT]) {
    float w[R][D::kWidth];
#pragma unroll
    for (int m = 0; m < R; ++m) D::group(raw[m], {}, sub, 0, w[m]);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float xv[D::kWidth];
        load_x<D::kWidth>(xt[t] + b * D::kElems, xv);
#pragma unroll
        for (int m = 0; m < R; ++m)
#pragma unroll
            for (int i = 0; i < D::kWidth; ++i) acc[m][t] = fmaf(w[m][i], xv[i], acc[m][t]);
    }
}

// One step of a quantized type, one run (groups sharing an affine map value = a * level + b) at a time:
// s = sum level * x (subnormal levels times x * kTinyX: one FMA per weight) and sx = sum x, then
// acc += a * s + b * sx. The x work is shared by the R rows; X supplies x * kTinyX and sx (GlobalX,
// SharedX).
template <class D, int NT, int R, class X>
__device__ __forceinline__ void step_levels(const typename D::Raw (&raw)[R], int sub, int64_t b, const X& x,
                                            float (&acc)[R][NT]) {
    constexpr int kPerRun = D::kGroups / D::kRuns;
    typename D::Scales sc[R];
#pragma unroll
    for (int m = 0; m < R; ++m) sc[m] = D::scales(raw[m], sub);
#pragma unroll
    for (int run = 0; run < D::kRuns; ++run) {
        float s[R][NT] = {}, sx[NT] = {};
#pragma unroll
        for (int g = run * kPerRun; g < (run + 1) * kPerRun; ++g) {
            uint32_t q[R];
#pragma unroll
            for (int m = 0; m < R; ++m) q[m] = D::levels(raw[m], sub, g);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                float xs[4];
                x.scaled(t, b, sub, g, xs, sx[t]);
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int m = 0; m < R; ++m) s[m][t] = fmaf(level_tiny(q[m], i), xs[i], s[m][t]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) x.run_sum(t, b, sub, run, sx[t]);
#pragma unroll
        for (int m = 0; m < R; ++m) {
            const float2 ab = D::affine(raw[m], sc[m], sub, run);
            const float a = ab.x * kTinyUndo;
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[m][t] = fmaf(a, s[m][t], fmaf(ab.y, sx[t], acc[m][t]));
        }
    }
}

// x of NT tokens read from global memory: each group's four values, summed into sx as they arrive.
template <class D, int NT>
struct GlobalX {
    static constexpr bool kPrologue = false;
    const float* xt[NT];  // token t's x; tokens past nt repeat the last one (computed, never written)
    __device__ explicit GlobalX(const MatvecArgs& a) {
#pragma unroll
        for (int t = 0; t < NT; ++t) xt[t] = a.x + (t < a.nt ? t : a.nt - 1) * a.n_in;
    }
    __device__ void prepare(const MatvecArgs&) const {}
    __device__ void scaled(int t, int64_t b, int sub, int g, float (&xs)[4], float& sx) const {
        float v[4];
        load_x<4>(xt[t] + b * D::kElems + D::offset(sub, g), v);
#pragma unroll
        for (int i = 0; i < 4; ++i) sx += v[i], xs[i] = v[i] * kTinyX;
    }
    __device__ void run_sum(int, int64_t, int, int, float&) const {}
};

// x of one token in shared memory, laid out per warp step: the kChunk elements of the kBlocks blocks that
// one warp step covers are stored group by group, lane by lane, so that lane l's group g of the step is
// the 16-byte word g * 32 + l, already times kTinyX; after them, each lane's sum of x over each run.
template <class D>
struct SharedX {
    static constexpr bool kPrologue = true;
    static constexpr int kBlocks = 32 / D::kLanes, kChunk = kBlocks * D::kElems;
    float* words;  // [steps * kChunk] scaled x, then [steps * kRuns * 32] run sums
    int64_t steps;
    __device__ SharedX(const MatvecArgs& a, float* smem) : words(smem), steps(chunks(a.n_in)) {}
    __host__ __device__ static int64_t chunks(int64_t n_in) {
        return (n_in / D::kElems + kBlocks - 1) / kBlocks;
    }
    __host__ __device__ static size_t bytes(int64_t n_in) {
        return size_t(chunks(n_in)) * (kChunk + D::kRuns * 32) * sizeof(float);
    }
    // Fills the layout from x (the whole thread block, then a barrier); GlobalX scales each group.
    __device__ void prepare(const MatvecArgs& a) const {
        const GlobalX<D, 1> global(a);
        const int64_t nb = a.n_in / D::kElems, items = steps * D::kRuns * 32;
        for (int64_t k = threadIdx.x; k < items; k += blockDim.x) {
            const int64_t step = k / (D::kRuns * 32);
            const int run = int(k / 32 % D::kRuns), lane = int(k % 32), sub = lane % D::kLanes;
            const int64_t b = step * kBlocks + lane / D::kLanes;
            if (b >= nb) continue;
            float sx = 0.0f;
            for (int g = run * (D::kGroups / D::kRuns); g < (run + 1) * (D::kGroups / D::kRuns); ++g) {
                float v[4];
                global.scaled(0, b, sub, g, v, sx);
                reinterpret_cast<float4*>(words)[step * kChunk / 4 + g * 32 + lane] =
                    make_float4(v[0], v[1], v[2], v[3]);
            }
            words[steps * kChunk + k] = sx;
        }
        __syncthreads();
    }
    // Block b's step in the layout; b's lane of the step is the thread's lane (each thread's blocks are
    // kBlocks * split apart and its first is its lane / kLanes).
    __device__ static uint32_t step_of(int64_t b) { return uint32_t(b) / kBlocks; }
    __device__ void scaled(int, int64_t b, int, int g, float (&xs)[4], float&) const {
        const float4 v =
            reinterpret_cast<const float4*>(words)[step_of(b) * (kChunk / 4) + g * 32 + threadIdx.x % 32];
        xs[0] = v.x, xs[1] = v.y, xs[2] = v.z, xs[3] = v.w;
    }
    __device__ void run_sum(int, int64_t b, int, int run, float& sx) const {
        sx = words[steps * kChunk + (step_of(b) * D::kRuns + run) * 32 + threadIdx.x % 32];
    }
};

// Longest x that goes through shared memory (SharedX), for one token of a quantized type: 34 KB with
// the run sums. Longer rows (7B's down projection) read x from global memory, where its L1 hits beat
// each thread block copying the whole row out of L2 (32 vs 21 us per down projection of Qwen2.5-7B).
constexpr int64_t kSharedXMaxIn = 8192;

template <class D, int NT>
constexpr bool kSharedXType = NT == 1 && D::kRuns > 0;

// This thread's share of each row: blocks first, first + step, ... < nb; its part `sub` of each.
template <class D>
struct Share {
    int sub;
    int64_t nb, step, first;  // blocks per row, blocks per step, this thread's first block
    __device__ explicit Share(const MatvecArgs& a)
        : sub(int(threadIdx.x) % D::kLanes),
          nb(a.n_in / D::kElems),
          step(a.split * 32 / D::kLanes),
          first((threadIdx.x % (a.split * 32)) / D::kLanes) {}
};

// Starts the L2 fetch of the first a.prefetch steps of this thread's weights: they do not depend on the
// previous kernel, so this runs while it finishes (see launch.cuh). Each lane touches the line of its
// part of a block; the lanes of a step cover every line of the step's blocks.
template <class D, int R>
__device__ void prefetch_weights(const MatvecArgs& a, const uint8_t* const (&rows)[R]) {
    const Share<D> sh(a);
    int64_t b = sh.first;
    for (int k = 0; k < a.prefetch && b < sh.nb; ++k, b += sh.step)
#pragma unroll
        for (int m = 0; m < R; ++m) prefetch_l2(rows[m] + b * D::kBytes + sh.sub * D::kBytes / D::kLanes);
}

// Loads the weights of kUnroll steps from block b0 on.
template <class D, int R, int kUnroll>
__device__ __forceinline__ void load_steps(const uint8_t* const (&rows)[R], const Share<D>& sh, int64_t b0,
                                           typename D::Raw (&raw)[kUnroll][R]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (b0 + u * sh.step < sh.nb)
                raw[u][m] = D::load(rows[m] + (b0 + u * sh.step) * D::kBytes, sh.sub);
}

// acc[m][t] += row m . x_t over this thread's share of the blocks of the R rows. When x needs a prologue
// (SharedX), the first weights are loaded before it, and before waiting for the previous kernel (they do
// not depend on it); GlobalX loads each step's weights right before using them. Only a thread block's
// first tile (`first`) waits for the previous kernel and stages x; later tiles reuse it.
template <class D, int NT, int R, class X>
__device__ void accumulate(const MatvecArgs& a, const uint8_t* const (&rows)[R], const X& x,
                           float (&acc)[R][NT], bool first) {
    constexpr int kUnroll = R * sizeof(typename D::Raw) <= 64 ? 2 : 1;  // steps loaded ahead
    constexpr bool kEarly = X::kPrologue;  // loading early measured slower for GlobalX (7B down: 24 vs 22 us)
    const Share<D> sh(a);
    typename D::Raw raw[kUnroll][R];
    if constexpr (kEarly) load_steps<D, R, kUnroll>(rows, sh, sh.first, raw);
    if (first) {
        wait_for_inputs();
        release_next();
        x.prepare(a);
    }
    for (int64_t b0 = sh.first; b0 < sh.nb; b0 += sh.step * kUnroll) {
        if constexpr (!kEarly) load_steps<D, R, kUnroll>(rows, sh, b0, raw);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int64_t b = b0 + u * sh.step;
            if (b >= sh.nb) break;
            if constexpr (D::kRuns == 0)
                step_dense<D, NT, R>(raw[u], sh.sub, b, x.xt, acc);
            else
                step_levels<D, NT, R>(raw[u], sh.sub, b, x, acc);
        }
        if constexpr (kEarly) load_steps<D, R, kUnroll>(rows, sh, b0 + sh.step * kUnroll, raw);
    }
}

// Sums acc over each group of `split` warps; afterwards red[w][m][t] holds the sums of the group whose
// first warp is w.
template <int NT, int R>
__device__ void reduce(float (&acc)[R][NT], float (&red)[kWarps][R][NT], int split) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            float v = acc[m][t];
#pragma unroll
            for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) red[warp][m][t] = v;
        }
    if (split == 1) return __syncwarp();  // each warp reads back only what its own lane 0 wrote
    __syncthreads();
    if (lane < R * NT && warp % split == 0) {
        const int m = lane / NT, t = lane % NT;
        float v = red[warp][m][t];
        for (int k = 1; k < split; ++k) v += red[warp + k][m][t];
        red[warp][m][t] = v;
    }
    __syncthreads();
}

// Thread blocks per SM the register allocation must allow: R = 4 serves large matrices, whose loads
// need more warps in flight (3 blocks: <= 80 registers; 7B Q4_K_M decode 378 vs 354 tok/s without a
// bound, at 115 registers); fewer rows serve small matrices, which gain from 4 (<= 64 registers; 64 for
// all costs 7B's large matrices 10%, 3 for all costs the 0.5B's small ones 3%).
template <int R>
constexpr int kMinBlocks = R == 4 ? 3 : 4;

// Rows of one group of `split` warps: matvec takes R consecutive rows of W; swiglu R / 2 rows of gate
// and the same rows of up. Rows past n_out repeat the last row (computed, never written). A tile is one
// thread block's worth of groups; the thread block computes tiles blockIdx.x, + gridDim.x, ...
template <class D, int NT, int R, bool kSwiglu, bool kShared>
__device__ __forceinline__ void run_tile(const MatvecArgs& a, int64_t tile, bool first,
                                         float (&red)[kWarps][R][NT], float* x_words) {
    constexpr int kOut = kSwiglu ? R / 2 : R;  // output rows per warp group
    const int warp = threadIdx.x / 32, lead = warp - warp % a.split;
    const int64_t r0 = (tile * (kWarps / a.split) + warp / a.split) * kOut;
    const uint8_t* rows[R];
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int64_t r = r0 + m % kOut;
        rows[m] = a.w[m / kOut] + (r < a.n_out ? r : a.n_out - 1) * a.row_bytes;
    }
    if (first) prefetch_weights<D, R>(a, rows);
    float acc[R][NT] = {};
    if constexpr (kShared)
        accumulate<D, NT, R>(a, rows, SharedX<D>(a, x_words), acc, first);
    else
        accumulate<D, NT, R>(a, rows, GlobalX<D, NT>(a), acc, first);
    reduce<NT, R>(acc, red, a.split);
    const int lane = threadIdx.x % 32, t = lane % NT, m = lane / NT;
    const int64_t r = r0 + m;
    if (warp != lead || lane >= kOut * NT || t >= a.nt || r >= a.n_out) return;
    float v = red[warp][m][t];
    if (kSwiglu) {
        const float u = red[warp][kOut + m][t];
        v = v / (1.0f + expf(-v)) * u;
    } else {
        if (a.bias) v += a.bias[r];
        if (a.res) v += a.res[t * a.n_out + r];
    }
    a.y[t * a.n_out + r] = v;
}

// Decoders whose matvec grid holds one wave of resident thread blocks, each looping over its tiles (x
// staged and the previous kernel awaited once per thread block); the others run one tile per block. By
// measurement (bench_cuda_matvec, same device call): looping is faster for Q6_K and Q8_0 (7b.lm_head Q6_K
// 229 -> 192 us, 7b.o Q8_0 9.3 -> 8.0, 0.5b.down Q8_0 7.9 -> 6.5) and slower for Q4_K and Q5_0 (0.5b.down
// Q4_K 4.8 -> 6.6, 7b.down Q4_K 19.9 -> 22.1, 7b.lm_head Q5_0 162 -> 181). Only with x in shared memory:
// reading x from global memory, the looping Q6_K kernel lost (7b.down 37.0 vs 33.1 us one tile per block).
template <class D, bool kShared>
constexpr bool kLoopTiles = kShared && (kIsQ6K<D> || std::is_same_v<D, DecQ8_0>);

template <class D, int NT, int R, bool kSwiglu, bool kShared, bool kExperts>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks<R>) matvec_kernel(MatvecArgs a) {
    __shared__ float red[kWarps][R][NT];
    extern __shared__ float4 x_words[];  // SharedX's layout, for one token of a quantized type
    float* xw = reinterpret_cast<float*>(x_words);
    if constexpr (kExperts) a = expert_pair(a, blockIdx.y);
    if constexpr (kLoopTiles<D, kShared> && !kExperts)
        for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x)
            run_tile<D, NT, R, kSwiglu, kShared>(a, tile, tile == blockIdx.x, red, xw);
    else
        run_tile<D, NT, R, kSwiglu, kShared>(a, blockIdx.x, true, red, xw);
}

// Steps of one warp along a row of n_in elements of D (D::kLanes lanes share each block).
template <class D>
int64_t row_steps(int64_t n_in) {
    return (n_in / D::kElems * D::kLanes + 31) / 32;
}

// The most warps (up to 8) that split a row while every warp keeps two steps.
int widest_split(int64_t steps_per_row) {
    int split = 1;
    while (split < kWarps && steps_per_row >= 2 * split) split *= 2;
    return split;
}

// Rows per warp group (R) and warps per group (split).
struct Layout {
    int rows, split;
};

// More than two tokens: R = 2 and as many warps as have a step of work each, so that the warps of a
// thread block walk through x together (x of 8 tokens outgrows the L1 cache).
//
// One token with x in shared memory and one tile per thread block (`shared_x`): two rows per group (four
// for swiglu: two of gate, the same two of up), each split between the fewest warps that still give the
// GPU two thread blocks per SM, while every warp keeps two steps. By measurement against the rule below
// (bench_cuda_matvec, us, two rounds): 7b.o Q4_K 7.04 -> 5.73, 0.5b.down Q5_0 7.90 -> 4.6, Q4_K 4.65 ->
// 3.85-4.35, 0.5b.gate_up Q5_0 6.26 -> 4.67, but 7b.qkv 7.80 -> 8.5; tg128 0.5B Q4_K_M 1,613-1,628 ->
// 1,640-1,649, 7B 372-373 -> 376-378, 1.5B unchanged. The looping kernels (kLoopTiles) lost with it
// (7b.lm_head Q6_K 152 -> 165 us) and keep the rule below.
//
// Otherwise (one or two tokens): the most rows per group that still fill the GPU (each x load serves all
// of them), each row split between up to 8 warps while every warp keeps two steps. A small matrix thus
// gets one row per group (one token; swiglu needs two) and many short warps, which wait on their first
// loads together instead of a few warps walking long chains of dependent steps.
Layout choose_layout(int64_t n_out, int64_t steps_per_row, int nt, bool swiglu, bool shared_x) {
    const auto fill = [&](int rows, int64_t warps) {
        const int out = swiglu ? rows / 2 : rows;  // output rows per group
        const int64_t groups = (n_out + out - 1) / out;
        int split = 1;
        while (split < kWarps && groups * split < warps && steps_per_row >= 2 * split) split *= 2;
        return std::pair{groups * split >= warps, Layout{rows, split}};
    };
    if (nt > 2) return {2, widest_split(steps_per_row)};
    if (shared_x) return fill(swiglu ? 4 : 2, gpu_warps() / 2).second;
    const int smallest = nt == 2 ? kMaxRows : swiglu ? 2 : 1;
    for (int rows = kMaxRows; rows > smallest; rows /= 2)
        if (auto [full, layout] = fill(rows, gpu_warps()); full) return layout;
    return fill(smallest, gpu_warps()).second;
}

// choose_layout for D's kernels, except one token of Q6_K rows too long for shared memory (x read from
// global memory): two rows and two warps per group. By measurement (7b.down Q6_K, us): 34.1 with the
// rule's four rows and eight warps, 29.5 / 30.6 / 31.0 with two rows and two / four / eight warps; tg128
// 7B Q4_K_M 376-379 -> 386-390, 1.5B 828-839 -> 853-859 tok/s (three rounds, same call).
template <class D, int NT, bool kSwiglu>
Layout pick_layout(const MatvecArgs& a) {
    const bool long_rows = a.n_in > kSharedXMaxIn;
    if (kIsQ6K<D> && NT == 1 && long_rows) return {2, 2};
    const bool shared_x = kSharedXType<D, NT> && !long_rows && !kLoopTiles<D, true>;
    return choose_layout(a.n_out, row_steps<D>(a.n_in), NT, kSwiglu, shared_x);
}

// Steps each thread prefetches into L2 before x is ready (launch.cuh's prefetch_steps).
template <class D, bool kSwiglu>
int thread_prefetch(const MatvecArgs& a) {
    const int64_t step = a.split * 32 / D::kLanes, steps = (a.n_in / D::kElems + step - 1) / step;
    return prefetch_steps(steps, double(a.n_out) * double(a.row_bytes) * (kSwiglu ? 2 : 1));
}

// Launches the kernel over a.tiles thread blocks (one wave at most for kLoopTiles), times a.ex.n rows of
// them for the experts.
template <class D, int NT, int R, bool kSwiglu, bool kExperts = false>
void launch_rows(MatvecArgs a, Stream s) {
    constexpr int kOut = kSwiglu ? R / 2 : R;
    a.prefetch = kExperts ? 0 : thread_prefetch<D, kSwiglu>(a);  // experts wait for their routing first
    const int64_t groups = (a.n_out + kOut - 1) / kOut;
    a.tiles = (groups + kWarps / a.split - 1) / (kWarps / a.split);
    const auto go = [&](auto kernel, size_t smem, auto shared) {
        int64_t grid = a.tiles;
        if constexpr (kLoopTiles<D, decltype(shared)::value> && !kExperts) {  // one wave at most
            int per_sm = 0;
            MINFER_CUDA_CHECK(
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
            grid = std::min<int64_t>(grid, int64_t(std::max(per_sm, 1)) * gpu_warps() / 32);
        }
        launch("matvec kernel", kernel, dim3(unsigned(grid), kExperts ? unsigned(a.ex.n) : 1u), kWarps * 32,
               smem, s, a);
    };
    if constexpr (kSharedXType<D, NT>)
        if (a.n_in <= kSharedXMaxIn)
            return go(matvec_kernel<D, NT, R, kSwiglu, true, kExperts>, SharedX<D>::bytes(a.n_in),
                      std::true_type{});
    go(matvec_kernel<D, NT, R, kSwiglu, false, kExperts>, 0, std::false_type{});
}

template <class D, int NT, bool kSwiglu>
void launch_nt(MatvecArgs a, Stream s) {
    const Layout l = pick_layout<D, NT, kSwiglu>(a);
    a.split = l.split;
    if constexpr (NT > 2) return launch_rows<D, NT, 2, kSwiglu>(a, s);
    if constexpr (NT == 1) {
        if (l.rows == 2) return launch_rows<D, NT, 2, kSwiglu>(a, s);
        if constexpr (!kSwiglu)
            if (l.rows == 1) return launch_rows<D, NT, 1, kSwiglu>(a, s);
    }
    launch_rows<D, NT, kMaxRows, kSwiglu>(a, s);
}

template <class D, bool kSwiglu>
void launch_tokens(const MatvecArgs& a, Stream s) {
    if (a.nt <= 1) return launch_nt<D, 1, kSwiglu>(a, s);
    if (a.nt <= 2) return launch_nt<D, 2, kSwiglu>(a, s);
    if (a.nt <= 4) return launch_nt<D, 4, kSwiglu>(a, s);
    return launch_nt<D, 8, kSwiglu>(a, s);
}

void check_tokens(int64_t nt, const char* what) {
    if (nt < 1 || nt > kMaxMatvecTokens) throw Error(std::string(what) + ": token count out of range");
}

// The experts' products: one token per pair, so one layout whatever the number of pairs (a pair's bits
// do not depend on what else is routed): two rows per warp group (swiglu: two of gate, the same two of
// up), each split between up to 8 warps while every warp keeps two steps. Grids of at most 65535 rows
// of pairs each.
template <class D, bool kSwiglu>
void launch_experts(MatvecArgs a, Stream s) {
    constexpr int64_t kMaxPairs = 65535;
    a.split = widest_split(row_steps<D>(a.n_in));
    for (int64_t i0 = 0, n = a.ex.n; i0 < n; i0 += kMaxPairs) {
        MatvecArgs part = a;
        part.ex.order += i0;
        part.ex.n = std::min(kMaxPairs, n - i0);
        part.y += i0 * a.n_out;
        if (a.ex.k == 0) part.x += i0 * a.n_in;
        launch_rows<D, 1, kSwiglu ? 4 : 2, kSwiglu, true>(part, s);
    }
}

template <bool kSwiglu>
void run(const QMatrix& w, const uint8_t* w2, const float* x, int64_t nt, float* y, const float* bias,
         const float* res, Stream s, const ExpertPairs* ex = nullptr, int64_t rows = 0) {
    with_decoder(w.type, w.n_in, w.padded, [&](auto d) {
        using D = decltype(d);
        check_layout(w.type, w.n_in, w.data, 16, "matvec weights");
        if (kSwiglu) check_layout(w.type, w.n_in, w2, 16, "matvec weights");
        if (D::kWidth == 4) check_layout(w.type, w.n_in, x, 16, "matvec input");
        if (w.n_out == 0) return;
        const auto* p = static_cast<const uint8_t*>(w.data);
        MatvecArgs a{{}, {p, w2}, w.n_in, w.n_out, row_bytes<D>(w.n_in), x, int(nt), 1, y, bias, res, 0};
        if (!ex) return launch_tokens<D, kSwiglu>(a, s);
        a.ex = *ex, a.n_out = rows;
        if (a.ex.n > 0) launch_experts<D, kSwiglu>(a, s);
    });
}

// The stack's layout for the expert kernels: the block layout (padded Q6_K too), rows a multiple of
// `rows`.
void check_experts(const QMatrix& w, int64_t rows, const char* what) {
    if (w.tiled) throw Error(std::string(what) + ": expert stacks are not tiled");
    if (rows <= 0 || w.n_out % rows != 0)
        throw Error(std::string(what) + ": the stack's rows are not whole experts");
}

}  // namespace

void matvec(const QMatrix& w, const float* x, int64_t nt, float* y, const float* bias, const float* res,
            Stream s) {
    check_tokens(nt, "CUDA matvec");
    if (w.tiled) {  // token by token (decode has one; the prefill GEMM takes more than kMaxMatvecTokens)
        for (int64_t t = 0; t < nt; ++t)
            matvec_tiled(w, x + t * w.n_in, y + t * w.n_out, bias, res ? res + t * w.n_out : nullptr, s);
        return;
    }
    if (matvec_int8_x(w, nt)) return matvec_dp4a(w, x, y, bias, res, s);
    run<false>(w, static_cast<const uint8_t*>(w.data), x, nt, y, bias, res, s);
}

void matvec_swiglu(const QMatrix& gate, const QMatrix& up, const float* x, int64_t nt, float* y, Stream s) {
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out)
        throw Error("CUDA matvec_swiglu: gate and up differ in type or shape");
    if (gate.tiled != up.tiled || gate.padded != up.padded)
        throw Error("CUDA matvec_swiglu: gate and up differ in layout");
    check_tokens(nt, "CUDA matvec_swiglu");
    if (gate.tiled) {
        for (int64_t t = 0; t < nt; ++t)
            matvec_swiglu_tiled(gate, up, x + t * gate.n_in, y + t * gate.n_out, s);
        return;
    }
    if (gate.xq != up.xq) throw Error("CUDA matvec_swiglu: gate and up differ in layout");
    if (matvec_int8_x(gate, nt)) return matvec_swiglu_dp4a(gate, up, x, y, s);
    run<true>(gate, static_cast<const uint8_t*>(up.data), x, nt, y, nullptr, nullptr, s);
}

void matvec_experts(const QMatrix& w, int64_t rows, const float* x, const ExpertPairs& p, float* y,
                    const float* bias, Stream s) {
    check_experts(w, rows, "CUDA matvec_experts");
    run<false>(w, static_cast<const uint8_t*>(w.data), x, 1, y, bias, nullptr, s, &p, rows);
}

void matvec_swiglu_experts(const QMatrix& gate, const QMatrix& up, int64_t rows, const float* x,
                           const ExpertPairs& p, float* y, Stream s) {
    if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out || gate.padded != up.padded)
        throw Error("CUDA matvec_swiglu_experts: gate and up differ in type, shape or layout");
    check_experts(gate, rows, "CUDA matvec_swiglu_experts");
    check_experts(up, rows, "CUDA matvec_swiglu_experts");
    run<true>(gate, static_cast<const uint8_t*>(up.data), x, 1, y, nullptr, nullptr, s, &p, rows);
}

}  // namespace minfer::cuda
