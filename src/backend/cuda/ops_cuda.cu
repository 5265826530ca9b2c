#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rope.cuh"

namespace minfer::cuda {

namespace {

constexpr int kElemThreads = 256;

unsigned blocks_for(int64_t n, int threads) {
    return unsigned(std::min<int64_t>((n + threads - 1) / threads, 65535LL * 8));
}

// y[i] = v, and its half (as split_f16's hi) where the GEMM reading y wants it.
__device__ __forceinline__ void put(float* y, __half* y_hi, int64_t i, float v) {
    y[i] = v;
    if (y_hi) y_hi[i] = __float2half_rn(v);
}

// One row per block. Rows of up to kNormRegs * blockDim.x elements stay in registers between the sum of
// squares and the scaling, with the gains loaded before the reduction's barriers; longer rows are read
// again.
constexpr int kNormRegs = 4;

// The weights do not depend on the previous kernel: their loads are issued before waiting for it.
__global__ void rms_norm_kernel(const float* x, const float* w, float* y, __half* y_hi, int64_t d,
                                float eps) {
    release_next();
    const float* xr = x + blockIdx.x * d;
    float* yr = y + blockIdx.x * d;
    __half* hr = y_hi ? y_hi + blockIdx.x * d : nullptr;
    float xv[kNormRegs], wv[kNormRegs], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
        const int64_t i = threadIdx.x + k * int64_t(blockDim.x);
        wv[k] = i < d ? w[i] : 0.0f;
    }
    wait_for_inputs();
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
        const int64_t i = threadIdx.x + k * int64_t(blockDim.x);
        xv[k] = i < d ? xr[i] : 0.0f;
        ss += xv[k] * xv[k];
    }
    for (int64_t i = threadIdx.x + kNormRegs * int64_t(blockDim.x); i < d; i += blockDim.x)
        ss += xr[i] * xr[i];
    const float scale = rsqrtf(block_sum(ss) / float(d) + eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
        const int64_t i = threadIdx.x + k * int64_t(blockDim.x);
        if (i < d) put(yr, hr, i, xv[k] * scale * wv[k]);
    }
    for (int64_t i = threadIdx.x + kNormRegs * int64_t(blockDim.x); i < d; i += blockDim.x)
        put(yr, hr, i, xr[i] * scale * w[i]);
}

__global__ void rope_kernel(const float* x, float* y, const int32_t* pos, RopeShape r) {
    begin_kernel();
    const int64_t t = blockIdx.x, half = r.n_rot / 2, row = r.n_head * r.head_dim;
    const float* xr = x + t * row;
    float* yr = y + t * row;
    for (int64_t k = threadIdx.x; k < r.n_head * half; k += blockDim.x) {
        const int64_t h = k / half, i = k % half;
        float c, s;
        rope_cos_sin(pos[t], i, r, c, s);
        const int64_t i0 = h * r.head_dim + (r.neox ? i : 2 * i), i1 = i0 + (r.neox ? half : 1);
        const float a = xr[i0], b = xr[i1];
        yr[i0] = a * c - b * s;
        yr[i1] = a * s + b * c;
    }
    const int64_t pass = r.head_dim - r.n_rot;  // dimensions past n_rot are copied unchanged
    if (x == y || pass == 0) return;
    for (int64_t k = threadIdx.x; k < r.n_head * pass; k += blockDim.x) {
        const int64_t j = (k / pass) * r.head_dim + r.n_rot + k % pass;
        yr[j] = xr[j];
    }
}

enum class Ew { Add, Mul, Silu, SwiGLU, GeGLU, SwiGLUOai };

__device__ float silu_f(float x) {
    return x / (1.0f + expf(-x));
}

// x e^(2z) / (e^(2z) + 1) = x / 2 (1 + tanh z), z = sqrt(2 / pi) (x + 0.044715 x^3): cpu::geglu's form, the
// exponent clamped as there.
__device__ float gelu_f(float x) {
    const float z = 0.7978845608028654f * fmaf(0.044715f, x * x * x, x);
    const float e = expf(fminf(fmaxf(2.0f * z, -87.0f), 88.0f));
    return x * (e / (e + 1.0f));
}

template <Ew kOp>
__global__ void elementwise_kernel(const float* a, const float* b, float* y, __half* y_hi, int64_t n) {
    begin_kernel();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        if constexpr (kOp == Ew::Add) put(y, y_hi, i, a[i] + b[i]);
        if constexpr (kOp == Ew::Mul) put(y, y_hi, i, a[i] * b[i]);
        if constexpr (kOp == Ew::Silu) put(y, y_hi, i, silu_f(a[i]));
        if constexpr (kOp == Ew::SwiGLU) put(y, y_hi, i, silu_f(a[i]) * b[i]);
        if constexpr (kOp == Ew::GeGLU) put(y, y_hi, i, gelu_f(a[i]) * b[i]);
        if constexpr (kOp == Ew::SwiGLUOai) {  // cpu::swiglu_oai: gate clamped above, up both ways
            const float g = fminf(a[i], 7.0f), u = fminf(fmaxf(b[i], -7.0f), 7.0f);
            put(y, y_hi, i, g / (1.0f + expf(-1.702f * g)) * (u + 1.0f));
        }
    }
}

__global__ void scale_kernel(const float* x, float factor, float* y, int64_t n) {
    begin_kernel();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = x[i] * factor;
}

template <Ew kOp>
void elementwise(const float* a, const float* b, float* y, int64_t n, Stream s, void* y_hi = nullptr) {
    if (n <= 0) return;
    launch("elementwise kernel", elementwise_kernel<kOp>, blocks_for(n, kElemThreads), kElemThreads, 0, s, a,
           b, y, static_cast<__half*>(y_hi), n);
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t d, int64_t n) {
    begin_kernel();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] += b[i % d];
}

__global__ void split_f16_kernel(const float* x, __half* hi, __half* lo, int64_t n) {
    begin_kernel();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const __half h = __float2half_rn(x[i]);
        hi[i] = h;
        if (lo) lo[i] = __float2half_rn(x[i] - __half2float(h));
    }
}

// The larger of two (value, index) candidates, the lower index on equal values; index n is "none yet".
struct Best {
    float v;
    int64_t i;
};
__device__ __forceinline__ Best better(Best a, Best b) {
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
}

constexpr int kArgmaxThreads = 1024;

// One row per block: each thread the first maximum of its stride, then the block's by value and index.
// A thread's first value (NaN aside) starts its candidate, so a row of -inf gives its first index.
__global__ void argmax_kernel(const float* x, int64_t n, int32_t* ids) {
    begin_kernel();
    const float* row = x + int64_t(blockIdx.x) * n;
    Best b{-INFINITY, n};
    for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
        const float v = row[i];
        if (v > b.v || (b.i == n && v == v)) b = {v, i};
    }
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o >>= 1)
        b = better(b, {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)});
    __shared__ Best part[kArgmaxThreads / kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    if (lane == 0) part[warp] = b;
    __syncthreads();
    if (warp != 0) return;
    b = part[lane];
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o >>= 1)
        b = better(b, {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)});
    if (lane == 0) ids[blockIdx.x] = int32_t(b.i < n ? b.i : 0);
}

__global__ void get_rows_f32_kernel(const float* src, int64_t d, const int32_t* ids, float* out) {
    begin_kernel();
    const float* row = src + int64_t(ids[blockIdx.x]) * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[blockIdx.x * d + i] = row[i];
}

__global__ void interleave_ranks_kernel(const float* src, int64_t n, int64_t rows, float* out) {
    begin_kernel();
    const int64_t t = blockIdx.x, k = blockIdx.y;
    const float* from = src + (k * rows + t) * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[(t * gridDim.y + k) * n + i] = from[i];
}

__global__ void kv_store_kernel(const float* k, const float* v, KvSlots at, KvRegion r) {
    begin_kernel();
    const int64_t t = blockIdx.x, p = own_slot(at, r, t);
    if (p < 0) return;
    for (int64_t i = threadIdx.x; i < r.n_embd; i += blockDim.x) {
        r.k[p * r.n_embd + i] = k[t * r.n_embd + i];
        r.v[p * r.n_embd + i] = v[t * r.n_embd + i];
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t d, int64_t rows, float eps, Stream s,
              void* y_hi) {
    if (rows <= 0) return;
    const int threads = d >= 1024 ? 1024 : d >= 256 ? 256 : 128;
    launch("rms_norm kernel", rms_norm_kernel, unsigned(rows), threads, 0, s, x, w, y,
           static_cast<__half*>(y_hi), d, eps);
}

void rope(const float* x, float* y, const int32_t* pos, int64_t nt, const RopeShape& r, Stream s) {
    if (nt <= 0) return;
    launch("rope kernel", rope_kernel, unsigned(nt), 256, 0, s, x, y, pos, r);
}

void add(const float* a, const float* b, float* y, int64_t n, Stream s) {
    elementwise<Ew::Add>(a, b, y, n, s);
}
void mul(const float* a, const float* b, float* y, int64_t n, Stream s) {
    elementwise<Ew::Mul>(a, b, y, n, s);
}
void silu(const float* x, float* y, int64_t n, Stream s) {
    elementwise<Ew::Silu>(x, nullptr, y, n, s);
}
void swiglu(const float* g, const float* u, float* y, int64_t n, Stream s, void* y_hi) {
    elementwise<Ew::SwiGLU>(g, u, y, n, s, y_hi);
}
void geglu(const float* g, const float* u, float* y, int64_t n, Stream s) {
    elementwise<Ew::GeGLU>(g, u, y, n, s);
}
void swiglu_oai(const float* g, const float* u, float* y, int64_t n, Stream s) {
    elementwise<Ew::SwiGLUOai>(g, u, y, n, s);
}
void scale(const float* x, float factor, float* y, int64_t n, Stream s) {
    if (n <= 0) return;
    launch("scale kernel", scale_kernel, blocks_for(n, kElemThreads), kElemThreads, 0, s, x, factor, y, n);
}

void add_bias(float* y, const float* b, int64_t d, int64_t nt, Stream s) {
    if (d * nt <= 0) return;
    launch("add_bias kernel", add_bias_kernel, blocks_for(d * nt, kElemThreads), kElemThreads, 0, s, y, b, d,
           d * nt);
}

void split_f16(const float* x, void* hi, void* lo, int64_t n, Stream s) {
    if (n <= 0) return;
    launch("split_f16 kernel", split_f16_kernel, blocks_for(n, kElemThreads), kElemThreads, 0, s, x,
           static_cast<__half*>(hi), static_cast<__half*>(lo), n);
}

void argmax_rows(const float* x, int64_t n, int64_t rows, int32_t* ids, Stream s) {
    if (rows <= 0 || n <= 0) return;
    launch("argmax kernel", argmax_kernel, unsigned(rows), kArgmaxThreads, 0, s, x, n, ids);
}

void get_rows_f32(const float* src, int64_t d, const int32_t* ids, int64_t nt, float* out, Stream s) {
    if (nt <= 0) return;
    launch("get_rows_f32 kernel", get_rows_f32_kernel, unsigned(nt), 256, 0, s, src, d, ids, out);
}

void interleave_ranks(const float* src, int64_t n, int64_t rows, int ranks, float* out, Stream s) {
    if (rows <= 0 || n <= 0) return;
    launch("interleave_ranks kernel", interleave_ranks_kernel, dim3(unsigned(rows), unsigned(ranks)), 256, 0,
           s, src, n, rows, out);
}

void kv_store(const float* k, const float* v, const KvSlots& at, int64_t nt, const KvRegion& r, Stream s) {
    if (nt <= 0) return;
    launch("kv_store kernel", kv_store_kernel, unsigned(nt), 256, 0, s, k, v, at, r);
}

}  // namespace minfer::cuda
