// Q4_K decode products on the int8 dot-product instruction (dp4a). The f32 kernels of quant_matvec.cu
// spend about five instructions per weight turning 4-bit levels into floats (ncu: ALU-bound at half of
// the DRAM bandwidth); here one 32-bit word of levels becomes two words of bytes (one AND, one shift and
// AND) and two dp4a multiply them with eight int8 values of x at once, so a weight costs well under one
// instruction.
//
// x is quantized to int8 by every thread block as it stages x in shared memory, per 32 consecutive
// elements (one Q4_K sub-block): d = max|x| / 127, q = rint(x * 127 / max|x|), and the sum of its 16-element
// halves d * sum(q) for the minimum terms. Eight lanes share a super-block (256 weights, 144 bytes): lane k
// loads the 16-byte header (d, dmin, scales) and the 16 bytes of levels 16k.. of the super-block, whose
// low nibbles are elements 16 (k % 2).. of sub-block 2 (k / 2) and whose high nibbles the same elements of
// the next sub-block, and x is laid out in shared memory so that its 16 + 16 bytes of x sit at 16k and
// 128 + 16k of the super-block's 256 (conflict-free 16-byte loads), with a float4 of the two sub-blocks'
// d and half sums after all levels. A warp thus walks four super-blocks of a row per step.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_dp4a.h"
#include "util/error.h"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kQK = 256;           // elements per super-block
constexpr int64_t kMaxIn = 28672;  // staged x: 112 super-blocks * 384 bytes = 42 KB of shared memory

struct Dp4aArgs {
    const uint8_t* w[2];  // W, or gate and up
    int64_t n_in, n_out, row_bytes;
    const float* x;
    const int8_t* x8;  // x quantized by quantize_x8 (kStaged false), in the staged layout
    float* y;
    const float* bias;
    const float* res;
    int split;      // warps sharing each row group: they split its super-blocks
    int64_t tiles;  // row groups of a thread block; block b takes tiles b, b + gridDim.x, ...
};

// Staged x (shared memory, or global from quantize_x8): [nb][256] int8 x in the lanes' order, then
// [nb][8] float4 {d_lo, d_hi, s_lo, s_hi}.
__host__ __device__ size_t staged_bytes(int64_t n_in) {
    return size_t(n_in / kQK) * (kQK + 8 * sizeof(float4));
}

// Quantizes elements 4i..4i+3 of x into the staged layout: eight consecutive threads take one sub-block.
// Every lane of the warp must take part (the shuffles).
__device__ __forceinline__ void quantize_quad(const float* x, int64_t i, int8_t* sq, float4* meta) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id);
    const int q2 = __float2int_rn(v.z * id), q3 = __float2int_rn(v.w * id);
    int sum = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 1; o < 4; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int64_t b = i / 64;
    const int e = int(i % 64) * 4, j = e / 64, hi = e % 64 / 32, k = 2 * j + e % 32 / 16;
    const uint32_t packed =
        (uint32_t(q0) & 0xFF) | (uint32_t(q1) & 0xFF) << 8 | (uint32_t(q2) & 0xFF) << 16 | uint32_t(q3) << 24;
    *reinterpret_cast<uint32_t*>(sq + b * kQK + hi * 128 + k * 16 + e % 16) = packed;
    if (e % 16 == 0) {
        float* m = reinterpret_cast<float*>(meta + b * 8 + k);
        const float d = amax / 127.0f;
        m[hi] = d;
        m[2 + hi] = d * float(sum);
    }
}

// Quantizes x into shared memory, the whole thread block. The element count is a multiple of 256, so
// every warp's loop runs whole.
__device__ void stage_x(const float* x, int64_t n_in, int8_t* sq, float4* meta) {
    for (int64_t i = threadIdx.x; i < n_in / 4; i += blockDim.x) quantize_quad(x, i, sq, meta);
}

// quantize_x8: one thread block of 64 threads per super-block.
__global__ void quantize_kernel(const float* x, int64_t nb, int8_t* x8) {
    begin_kernel();
    quantize_quad(x, blockIdx.x * int64_t(64) + threadIdx.x, x8, reinterpret_cast<float4*>(x8 + nb * kQK));
}

// This lane's staged x of super-block b: from shared memory (loaded right before use), or from global
// memory through the read-only cache (loaded with the weights: an L1 or L2 round trip).
template <bool kStaged>
__device__ __forceinline__ void load_x(const int8_t* sq, const float4* meta, int64_t b, int4& xl, int4& xh,
                                       float4& xm) {
    const int k = threadIdx.x % 8;
    const auto* q = reinterpret_cast<const int4*>(sq + b * kQK);
    if constexpr (kStaged) {
        xl = q[k], xh = q[8 + k], xm = meta[b * 8 + k];
    } else {
        xl = __ldg(q + k), xh = __ldg(q + 8 + k), xm = __ldg(meta + b * 8 + k);
    }
}

__device__ __forceinline__ uint4 ld128(const uint8_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// Q4_K (144-byte blocks): lane k loads the header (d, dmin, 12 bytes of 6-bit scales and minimums) and
// qs[16k, 16k + 16), whose low nibbles are its x's low part (sub-block 2j, j = k / 2) and high nibbles
// its high part (sub-block 2j + 1). w = d * scale * q - dmin * min.
struct Q4K {
    static constexpr int kBytes = 144;
    struct Raw {
        uint4 h, qs;
    };
    __device__ static Raw load(const uint8_t* b, int k) { return {ld128(b), ld128(b + 16 + 16 * k)}; }
    // The scales (low byte: sub-block 2j, high byte: 2j + 1) and minimums from h.y, h.z, h.w: ggml's
    // get_scale_min_k4 for two sub-blocks at once.
    __device__ static uint2 scales_mins(const uint4& h, int j) {
        const int t = (j % 2) * 16;
        if (j < 2) return make_uint2((h.y >> t) & 0x3F3Fu, (h.z >> t) & 0x3F3Fu);
        return make_uint2(((h.w >> t) & 0x0F0Fu) | ((h.y >> (t + 2)) & 0x3030u),
                          ((h.w >> (t + 4)) & 0x0F0Fu) | ((h.z >> (t + 2)) & 0x3030u));
    }
    __device__ static float dot(const Raw& r, const int4& xl, const int4& xh, const float4& xm, int k) {
        const uint32_t m4 = 0x0F0F0F0Fu;
        const uint4& qs = r.qs;
        int lo = __dp4a(int(qs.x & m4), xl.x, 0), hi = __dp4a(int((qs.x >> 4) & m4), xh.x, 0);
        lo = __dp4a(int(qs.y & m4), xl.y, lo), hi = __dp4a(int((qs.y >> 4) & m4), xh.y, hi);
        lo = __dp4a(int(qs.z & m4), xl.z, lo), hi = __dp4a(int((qs.z >> 4) & m4), xh.z, hi);
        lo = __dp4a(int(qs.w & m4), xl.w, lo), hi = __dp4a(int((qs.w >> 4) & m4), xh.w, hi);
        const uint2 sm = scales_mins(r.h, k / 2);
        const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&r.h.x));
        const float s = float(int(sm.x & 0xFF) * lo) * xm.x + float(int(sm.x >> 8) * hi) * xm.y;
        const float m = float(sm.y & 0xFF) * xm.z + float(sm.y >> 8) * xm.w;
        return dm.x * s - dm.y * m;
    }
};

// Q6_K padded to 224 bytes (pad_matrix: ql[128], qh[64], scales[16], d, zeros). With j = k / 2, n = j / 2
// and l = 16 (k % 2), lane k's x covers elements 64 j + l.. (low) and 64 j + 32 + l.. (high): quarters
// c = 2 (j % 2) and c + 1 of half n, whose levels are nibble j % 2 of ql[64 n + l..] and ql[64 n + 32 +
// l..] with bits 2c, 2c + 2 of qh[32 n + l..] on top; each part is one 16-element sub-block with scale
// scales[8 n + l / 16 + 2c] (+ 2). w = d * scale * (q - 32).
struct Q6K {
    static constexpr int kBytes = 224;
    struct Raw {
        uint4 qa, qb, qh;
        int s_lo, s_hi;
        uint32_t d;
    };
    __device__ static Raw load(const uint8_t* b, int k) {
        const int n = k / 4, l = 16 * (k % 2), c = 2 * (k / 2 % 2);
        const auto* sc = reinterpret_cast<const signed char*>(b + 192 + 8 * n + l / 16 + 2 * c);
        return {ld128(b + 64 * n + l),
                ld128(b + 64 * n + 32 + l),
                ld128(b + 128 + 32 * n + l),
                __ldg(sc),
                __ldg(sc + 2),
                __ldg(reinterpret_cast<const unsigned short*>(b + 208))};
    }
    // Four levels of quarter c (q + 32): nibble shift s4 of ql, bits 2c of qh.
    __device__ static int levels(uint32_t ql, uint32_t qh, int s4, int c) {
        return int(((ql >> s4) & 0x0F0F0F0Fu) | (((qh >> (2 * c)) & 0x03030303u) << 4));
    }
    __device__ static float dot(const Raw& r, const int4& xl, const int4& xh, const float4& xm, int k) {
        const int s4 = 4 * (k / 2 % 2), c = 2 * (k / 2 % 2);
        int lo = __dp4a(levels(r.qa.x, r.qh.x, s4, c), xl.x, 0);
        int hi = __dp4a(levels(r.qb.x, r.qh.x, s4, c + 1), xh.x, 0);
        lo = __dp4a(levels(r.qa.y, r.qh.y, s4, c), xl.y, lo);
        hi = __dp4a(levels(r.qb.y, r.qh.y, s4, c + 1), xh.y, hi);
        lo = __dp4a(levels(r.qa.z, r.qh.z, s4, c), xl.z, lo);
        hi = __dp4a(levels(r.qb.z, r.qh.z, s4, c + 1), xh.z, hi);
        lo = __dp4a(levels(r.qa.w, r.qh.w, s4, c), xl.w, lo);
        hi = __dp4a(levels(r.qb.w, r.qh.w, s4, c + 1), xh.w, hi);
        const float d = __half2float(__ushort_as_half(uint16_t(r.d)));
        const float s = float(r.s_lo) * fmaf(float(lo), xm.x, -32.0f * xm.z) +
                        float(r.s_hi) * fmaf(float(hi), xm.y, -32.0f * xm.w);
        return d * s;
    }
};

// acc[m] += row m . x over this lane's super-blocks (first, first + step, ...), two steps loaded at once.
template <class F, int R, bool kStaged>
__device__ void dot_rows(const uint8_t* const (&rows)[R], int64_t nb, int64_t first, int64_t step,
                         const int8_t* sq, const float4* meta, float (&acc)[R]) {
    const int k = threadIdx.x % 8;
    constexpr int kU = 2;
    for (int64_t b0 = first; b0 < nb; b0 += kU * step) {
        typename F::Raw raw[kU][R];
        int4 xl[kU], xh[kU];
        float4 xm[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int64_t b = b0 + u * step;
            if (b >= nb) continue;
#pragma unroll
            for (int m = 0; m < R; ++m) raw[u][m] = F::load(rows[m] + b * F::kBytes, k);
            if (!kStaged) load_x<false>(sq, meta, b, xl[u], xh[u], xm[u]);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int64_t b = b0 + u * step;
            if (b >= nb) break;
            if (kStaged) load_x<true>(sq, meta, b, xl[u], xh[u], xm[u]);
#pragma unroll
            for (int m = 0; m < R; ++m) acc[m] += F::dot(raw[u][m], xl[u], xh[u], xm[u], k);
        }
    }
}

// Starts the L2 fetch of this lane's lines of its first tile's rows (before the previous kernel ends):
// the 8 lanes of a super-block touch every line of its bytes.
template <class F, int R>
__device__ void prefetch_rows(const uint8_t* const (&rows)[R], int64_t nb, int64_t first, int64_t step) {
    for (int64_t b = first; b < nb; b += step)
#pragma unroll
        for (int m = 0; m < R; ++m) prefetch_l2(rows[m] + b * F::kBytes + F::kBytes * (threadIdx.x % 8) / 8);
}

// Row group of this warp in `tile`: R rows of W, or R / 2 rows of gate and the same rows of up. Rows past
// n_out repeat the last one (computed, never written).
template <int R, bool kSwiglu>
__device__ void tile_rows(const Dp4aArgs& a, int64_t tile, const uint8_t* (&rows)[R], int64_t& r0) {
    constexpr int kOut = kSwiglu ? R / 2 : R;
    const int warp = threadIdx.x / 32;
    r0 = (tile * (kWarps / a.split) + warp / a.split) * kOut;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int64_t r = r0 + m % kOut < a.n_out ? r0 + m % kOut : a.n_out - 1;
        rows[m] = a.w[m / kOut] + r * a.row_bytes;
    }
}

// Sums acc over the warp, then over the group's `split` warps (red), and writes the group's outputs.
template <int R, bool kSwiglu>
__device__ void finish_tile(const Dp4aArgs& a, float (&acc)[R], int64_t r0, float (&red)[kWarps][R]) {
    constexpr int kOut = kSwiglu ? R / 2 : R;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        float v = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[m] = v;
    }
    if (a.split > 1) {
        if (lane == 0)
            for (int m = 0; m < R; ++m) red[warp][m] = acc[m];
        __syncthreads();
        const int lead = warp - warp % a.split;
        for (int m = 0; m < R; ++m) {
            acc[m] = red[lead][m];
            for (int w = 1; w < a.split; ++w) acc[m] += red[lead + w][m];
        }
        __syncthreads();  // red is rewritten by the next tile
        if (warp != lead) return;
    }
    if (lane >= kOut || r0 + lane >= a.n_out) return;
    const int64_t r = r0 + lane;
    float v = 0.0f, u = 0.0f;
#pragma unroll
    for (int m = 0; m < kOut; ++m)
        if (m == lane) v = acc[m], u = kSwiglu ? acc[kOut + m] : 0.0f;
    if (kSwiglu) {
        v = v / (1.0f + expf(-v)) * u;
    } else {
        if (a.bias) v += a.bias[r];
        if (a.res) v += a.res[r];
    }
    a.y[r] = v;
}

// kStaged: x quantized into shared memory by every thread block; else read from a.x8 (quantize_x8).
template <class F, int R, bool kSwiglu, bool kStaged>
__global__ void __launch_bounds__(kWarps * 32) dp4a_kernel(Dp4aArgs a) {
    __shared__ float red[kWarps][R];
    extern __shared__ float4 staged[];
    const int64_t nb = a.n_in / kQK, step = int64_t(a.split) * 4;
    const int64_t first = (threadIdx.x / 32 % a.split) * 4 + threadIdx.x % 32 / 8;
    const uint8_t* rows[R];
    int64_t r0 = 0;
    tile_rows<R, kSwiglu>(a, blockIdx.x, rows, r0);
    prefetch_rows<F, R>(rows, nb, first, step);
    wait_for_inputs();
    release_next();
    const int8_t* sq = a.x8;
    if constexpr (kStaged) {
        auto* q = reinterpret_cast<int8_t*>(staged);
        stage_x(a.x, a.n_in, q, reinterpret_cast<float4*>(q + nb * kQK));
        __syncthreads();
        sq = q;
    }
    const auto* meta = reinterpret_cast<const float4*>(sq + nb * kQK);
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        tile_rows<R, kSwiglu>(a, tile, rows, r0);
        float acc[R] = {};
        dot_rows<F, R, kStaged>(rows, nb, first, step, sq, meta, acc);
        finish_tile<R, kSwiglu>(a, acc, r0, red);
    }
}

// Warps per row group: the fewest that give every SM's warps a group at least twice over, while each
// warp keeps two steps of four super-blocks.
int choose_split(int64_t groups, int64_t nb) {
    int split = 1;
    while (split < kWarps && groups * split < gpu_warps() && nb >= 8 * split * 2) split *= 2;
    return split;
}

template <class F, int R, bool kSwiglu, bool kStaged>
void launch_dp4a(Dp4aArgs a, Stream s) {
    constexpr int kOut = kSwiglu ? R / 2 : R;
    const int64_t groups = (a.n_out + kOut - 1) / kOut;
    a.split = choose_split(groups, a.n_in / kQK);
    a.tiles = (groups + kWarps / a.split - 1) / (kWarps / a.split);
    const size_t smem = kStaged ? staged_bytes(a.n_in) : 0;
    auto* kernel = dp4a_kernel<F, R, kSwiglu, kStaged>;
    int per_sm = 0;
    MINFER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
    const int64_t wave = int64_t(std::max(per_sm, 1)) * gpu_warps() / 32;
    launch("dp4a matvec kernel", kernel, unsigned(std::min(a.tiles, wave)), kWarps * 32, smem, s, a);
}

Dp4aArgs args(const QMatrix& w, const void* w2, const float* x, float* y) {
    const int64_t block_bytes = w.type == GgmlType::Q4_K ? Q4K::kBytes : Q6K::kBytes;
    return {{static_cast<const uint8_t*>(w.data), static_cast<const uint8_t*>(w2)},
            w.n_in,
            w.n_out,
            w.n_in / kQK * block_bytes,
            x,
            nullptr,
            y,
            nullptr,
            nullptr,
            1,
            0};
}

template <bool kSwiglu, bool kStaged>
void launch_type(GgmlType t, const Dp4aArgs& a, Stream s) {
    if (t == GgmlType::Q4_K) return launch_dp4a<Q4K, 2, kSwiglu, kStaged>(a, s);
    launch_dp4a<Q6K, 2, kSwiglu, kStaged>(a, s);
}

// Throws unless w may take x as int8: dp4a_fits, Q4_K in the block layout, Q6_K padded.
void check_fits(const QMatrix& w) {
    const bool layout = w.type == GgmlType::Q4_K ? !w.tiled && !w.padded : w.padded;
    if (!dp4a_fits(w.type, w.n_in) || !layout)
        throw Error(
            "CUDA matvec: int8 products need rows of at most 28672 of Q4_K in the block layout or padded "
            "Q6_K");
}

}  // namespace

void matvec_dp4a(const QMatrix& w, const float* x, float* y, const float* bias, const float* res, Stream s) {
    check_fits(w);
    if (w.n_out == 0) return;
    Dp4aArgs a = args(w, nullptr, x, y);
    a.bias = bias, a.res = res;
    launch_type<false, true>(w.type, a, s);
}

void matvec_swiglu_dp4a(const QMatrix& gate, const QMatrix& up, const float* x, float* y, Stream s) {
    check_fits(gate);
    check_fits(up);
    if (gate.n_out == 0) return;
    launch_type<true, true>(gate.type, args(gate, up.data, x, y), s);
}

size_t int8_x_bytes(int64_t n_in) {
    return staged_bytes(n_in);
}

void quantize_x8(const float* x, int64_t n_in, void* x8, Stream s) {
    if (n_in % kQK != 0) throw Error("CUDA quantize_x8: length not a multiple of 256");
    if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(x8) % 16 != 0)
        throw Error("CUDA quantize_x8: pointers not 16-byte aligned");
    if (n_in == 0) return;
    launch("quantize_x8 kernel", quantize_kernel, unsigned(n_in / kQK), 64, 0, s, x, n_in / kQK,
           static_cast<int8_t*>(x8));
}

void matvec_x8(const QMatrix& w, const void* x8, float* y, const float* bias, const float* res, Stream s) {
    check_fits(w);
    if (reinterpret_cast<uintptr_t>(x8) % 16 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
        throw Error("CUDA matvec_x8: pointers not 16-byte aligned");
    if (w.n_out == 0) return;
    Dp4aArgs a = args(w, nullptr, nullptr, y);
    a.x8 = static_cast<const int8_t*>(x8);
    a.bias = bias, a.res = res;
    launch_type<false, false>(w.type, a, s);
}

bool matvec_int8_x(const QMatrix& w, int64_t nt) {
    return w.int8_x && nt == 1;
}

bool dp4a_fits(GgmlType t, int64_t n_in) {
    return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && n_in % kQK == 0 && n_in <= kMaxIn;
}

}  // namespace minfer::cuda
