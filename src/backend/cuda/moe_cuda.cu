// Routing and combination of a mixture of experts (moe_cuda.h): one thread block routes every token, a
// warp per token, and then groups the pairs by expert with a counting sort in shared memory.
#include "backend/cuda/moe_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/reduce.cuh"
#include "util/error.h"

namespace minfer::cuda {
namespace {

constexpr int kRouteThreads = 1024, kRouteWarps = kRouteThreads / kWarpSize;
constexpr int kMaskWords = int(kMaxExperts / 32);

struct Best {
    float v;
    int e;  // -1: none yet
};

// The larger of two candidates, the lower id on ties (cpu::moe_route's strict comparison in id order).
__device__ Best better(Best a, Best b) {
    if (a.e < 0) return b;
    if (b.e < 0) return a;
    return b.v > a.v || (b.v == a.v && b.e < a.e) ? b : a;
}

__device__ double warp_sum_d(double v) {
    for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Token t's k experts and weights, by one warp; `taken` is the warp's bitmap of chosen experts.
__device__ void route_token(const float* l, const MoeRouting& r, int32_t* ids, float* w, uint32_t* taken) {
    const int lane = int(threadIdx.x % kWarpSize);
    for (int i = lane; i < kMaskWords; i += kWarpSize) taken[i] = 0;
    __syncwarp();
    for (int64_t j = 0; j < r.k; ++j) {
        Best b{0.0f, -1};
        for (int e = lane; e < r.n_expert; e += kWarpSize)
            if (!(taken[e / 32] >> (e % 32) & 1u)) b = better(b, {l[e], e});
        for (int o = kWarpSize / 2; o > 0; o >>= 1)
            b = better(b, {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.e, o)});
        if (lane == 0) {
            ids[j] = b.e;
            taken[b.e / 32] |= 1u << (b.e % 32);
        }
        __syncwarp();
    }
    const double top = l[ids[0]];
    double denom = 0.0;
    if (r.gating == Gating::kSoftmax)
        for (int e = lane; e < r.n_expert; e += kWarpSize) denom += exp(double(l[e]) - top);
    denom = warp_sum_d(denom);
    if (lane != 0) return;
    if (r.gating == Gating::kSoftmaxChosen)
        for (int64_t j = 0; j < r.k; ++j) denom += exp(double(l[ids[j]]) - top);
    const auto prob = [&](int64_t j) {
        const double x = l[ids[j]];
        return r.gating == Gating::kSigmoid ? 1.0 / (1.0 + exp(-x)) : exp(x - top) / denom;
    };
    double sum = 0.0;
    for (int64_t j = 0; j < r.k; ++j) sum += prob(j);
    for (int64_t j = 0; j < r.k; ++j) w[j] = float(r.norm ? prob(j) / sum : prob(j));  // one rounding
}

// Each thread's exclusive prefix sums of the block's `own` values (two counters at once), in thread order.
__device__ int2 block_exclusive(int2 own) {
    __shared__ int2 warp_total[kRouteWarps];
    const int lane = int(threadIdx.x % kWarpSize), warp = int(threadIdx.x / kWarpSize);
    int2 incl = own;
    for (int o = 1; o < kWarpSize; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, incl.x, o), y = __shfl_up_sync(0xffffffffu, incl.y, o);
        if (lane >= o) incl.x += x, incl.y += y;
    }
    if (lane == kWarpSize - 1) warp_total[warp] = incl;
    __syncthreads();
    int2 before{incl.x - own.x, incl.y - own.y};
    for (int w = 0; w < warp; ++w) before.x += warp_total[w].x, before.y += warp_total[w].y;
    __syncthreads();  // every thread has read warp_total before a next call writes it
    return before;
}

// The experts [first, last) of this thread when n are shared out in consecutive chunks.
struct Chunk {
    int first, last;
};
__device__ Chunk chunk_of(int n) {
    const int per = (n + kRouteThreads - 1) / kRouteThreads, first = int(threadIdx.x) * per;
    return {min(first, n), min(first + per, n)};
}

// Exclusive prefix sums of c[0, n) in place, n <= kMaxExperts, by the whole block.
__device__ void exclusive_scan(int32_t* c, int n) {
    const Chunk ch = chunk_of(n);
    int32_t own = 0;
    for (int i = ch.first; i < ch.last; ++i) own += c[i];
    int32_t before = block_exclusive({own, 0}).x;
    for (int i = ch.first; i < ch.last; ++i) {
        const int32_t v = c[i];
        c[i] = before;
        before += v;
    }
    __syncthreads();
}

// The columns layout (MoeColumns) of the grouped pairs, expert e's at positions [end[e - 1], end[e]) of
// m.order: its columns from first_col[e] (shared scratch of n), padded to a multiple of 8, and its tiles.
__device__ void lay_out_columns(const int32_t* end, int n, int64_t pairs, int64_t k, const MoeSlots& m,
                                const MoeColumns& c, int32_t* first_col) {
    for (int64_t i = threadIdx.x; i < c.n_cols; i += kRouteThreads) c.token[i] = -1;
    for (int64_t i = threadIdx.x; i < c.n_tiles; i += kRouteThreads) c.tiles[i].expert = -1;
    const auto begin = [&](int e) { return e > 0 ? end[e - 1] : 0; };
    const auto padded = [&](int e) { return (end[e] - begin(e) + 7) / 8 * 8; };
    const Chunk ch = chunk_of(n);
    int2 own{0, 0};
    for (int e = ch.first; e < ch.last; ++e)
        own.x += padded(e), own.y += (padded(e) + c.tile_cols - 1) / c.tile_cols;
    int2 at = block_exclusive(own);  // after the fills above: the tiles written below come later
    for (int e = ch.first; e < ch.last; ++e) {
        first_col[e] = at.x;
        for (int c0 = 0; c0 < padded(e); c0 += c.tile_cols)
            c.tiles[at.y++] = {e, at.x + c0, min(c.tile_cols, padded(e) - c0), 0};
        at.x += padded(e);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < pairs; i += kRouteThreads) {
        const int32_t p = m.order[i], e = m.ids[p], col = first_col[e] + int32_t(i) - begin(e);
        c.col[p] = col;
        c.token[col] = int32_t(p / k);
    }
}

__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* logits, int64_t nt, MoeRouting r, MoeSlots m, MoeColumns c) {
    __shared__ uint32_t taken[kRouteWarps][kMaskWords];
    __shared__ int32_t cursor[kMaxExperts];
    begin_kernel();
    const int warp = int(threadIdx.x / kWarpSize);
    for (int64_t t = warp; t < nt; t += kRouteWarps)
        route_token(logits + t * r.n_expert, r, m.ids + t * r.k, m.weights + t * r.k, taken[warp]);
    const int n = int(r.n_expert);
    const int64_t pairs = nt * r.k;
    for (int e = int(threadIdx.x); e < n; e += kRouteThreads) cursor[e] = 0;
    __syncthreads();  // the ids are written (global memory, visible within the block) and the counts zero
    for (int64_t p = threadIdx.x; p < pairs; p += kRouteThreads) atomicAdd(&cursor[m.ids[p]], 1);
    __syncthreads();
    exclusive_scan(cursor, n);
    for (int64_t p = threadIdx.x; p < pairs; p += kRouteThreads) {
        const int32_t at = atomicAdd(&cursor[m.ids[p]], 1);
        m.order[at] = int32_t(p);
        m.where[p] = at;
    }
    if (!c.col) return;
    __syncthreads();  // cursor[e] is the end of expert e's positions, and order is written
    static_assert(sizeof(taken) >= kMaxExperts * sizeof(int32_t), "the first columns reuse taken");
    lay_out_columns(cursor, n, pairs, r.k, m, c, reinterpret_cast<int32_t*>(&taken[0][0]));
}

__global__ void combine_kernel(const float* out, MoeSlots m, int64_t k, int64_t d, float* y) {
    begin_kernel();
    const int64_t t = blockIdx.y, i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i >= d) return;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j)
        acc = fmaf(m.weights[t * k + j], out[int64_t(m.where[t * k + j]) * d + i], acc);
    y[t * d + i] = acc;
}

}  // namespace

int64_t moe_max_columns(int64_t pairs, int64_t n_expert) {
    return (pairs + 7 * std::min(pairs, n_expert) + 7) / 8 * 8;
}

int64_t moe_max_tiles(int64_t pairs, int64_t n_expert, int tile_cols) {
    return (pairs + tile_cols - 1) / tile_cols + std::min(pairs, n_expert);
}

void moe_route(const float* logits, int64_t nt, const MoeRouting& r, const MoeSlots& slots, Stream s,
               const MoeColumns* cols) {
    if (r.n_expert < 1 || r.n_expert > kMaxExperts || r.k < 1 || r.k > r.n_expert)
        throw Error("CUDA moe_route: " + std::to_string(r.k) + " of " + std::to_string(r.n_expert) +
                    " experts is out of range");
    if (nt * r.k > INT32_MAX / 2) throw Error("CUDA moe_route: too many tokens");
    const int64_t pairs = nt * r.k;
    if (cols && (cols->tile_cols < 8 || cols->tile_cols % 8 != 0 ||
                 cols->n_cols < moe_max_columns(pairs, r.n_expert) ||
                 cols->n_tiles < moe_max_tiles(pairs, r.n_expert, cols->tile_cols)))
        throw Error("CUDA moe_route: the columns layout has too little room for " + std::to_string(pairs) +
                    " pairs");
    if (nt < 1) return;
    launch("moe route kernel", route_kernel, 1, kRouteThreads, 0, s, logits, nt, r, slots,
           cols ? *cols : MoeColumns{});
}

void moe_combine(const float* out, const MoeSlots& slots, int64_t nt, int64_t k, int64_t d, float* y,
                 Stream s) {
    constexpr int kThreads = 256;
    if (nt < 1 || d < 1) return;
    if (nt > 65535) throw Error("CUDA moe_combine: too many tokens");
    launch("moe combine kernel", combine_kernel, dim3(unsigned((d + kThreads - 1) / kThreads), unsigned(nt)),
           kThreads, 0, s, out, slots, k, d, y);
}

}  // namespace minfer::cuda
