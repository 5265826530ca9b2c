// Routing and combination of a mixture of experts (moe_cuda.h): one thread block routes every token, a
// warp per token, and then groups the pairs by expert with a counting sort in shared memory.
#include "backend/cuda/moe_cuda.h"

#include <cuda_runtime.h>

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

// Exclusive prefix sums of c[0, n) in place, n <= kMaxExperts, by the whole block.
__device__ void exclusive_scan(int32_t* c, int n) {
    __shared__ int32_t warp_total[kRouteWarps];
    const int per = (n + kRouteThreads - 1) / kRouteThreads, first = int(threadIdx.x) * per;
    int32_t own = 0;
    for (int i = first; i < first + per && i < n; ++i) own += c[i];
    const int lane = int(threadIdx.x % kWarpSize), warp = int(threadIdx.x / kWarpSize);
    int32_t incl = own;
    for (int o = 1; o < kWarpSize; o <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == kWarpSize - 1) warp_total[warp] = incl;
    __syncthreads();
    int32_t before = incl - own;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
    __syncthreads();  // every thread has read c's chunk sums before they are overwritten
    for (int i = first; i < first + per && i < n; ++i) {
        const int32_t v = c[i];
        c[i] = before;
        before += v;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* logits, int64_t nt, MoeRouting r, MoeSlots m) {
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

void moe_route(const float* logits, int64_t nt, const MoeRouting& r, const MoeSlots& slots, Stream s) {
    if (r.n_expert < 1 || r.n_expert > kMaxExperts || r.k < 1 || r.k > r.n_expert)
        throw Error("CUDA moe_route: " + std::to_string(r.k) + " of " + std::to_string(r.n_expert) +
                    " experts is out of range");
    if (nt * r.k > INT32_MAX) throw Error("CUDA moe_route: too many tokens");
    if (nt < 1) return;
    launch("moe route kernel", route_kernel, 1, kRouteThreads, 0, s, logits, nt, r, slots);
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
