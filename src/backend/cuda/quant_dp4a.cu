// Q4_K and Q6_K decode products on the int8 dot-product instruction (dp4a). The f32 kernels of
// quant_matvec.cu spend about five instructions per weight turning 4-bit levels into floats (ncu:
// ALU-bound at half of the DRAM bandwidth); here one 32-bit word of levels becomes a word of bytes in one
// or two logic operations and one dp4a multiplies it with four int8 values of x, so a weight costs about
// one instruction.
//
// x is quantized per 32 consecutive elements (one Q4_K sub-block, two Q6_K sub-blocks), either to one
// int8 level (XQuant::kInt8, llama.cpp's arithmetic: d = max|x| / 127, q = rint(x / d)) or to two
// (kInt8x2, the CPU's default decode arithmetic: d = max|x| / (127 * 254), x ~ d * (254 hi + lo), error at
// most max|x| / 64516), whose two dp4a sums merge exactly in integers as 254 * hi-sum + lo-sum. With the
// level planes go the sums d * (254 sum hi + sum lo) of each 16-element half, for the minimum and offset
// terms. Eight lanes share a super-block (256 weights): lane k takes the levels of elements 16 (k % 2)..
// of sub-blocks 2j and 2j + 1 (j = k / 2), and x is laid out so that those 16 + 16 bytes of each plane
// sit at 16k and 128 + 16k of the super-block's 256 (conflict-free 16-byte loads), with a float4 of the
// two sub-blocks' d and half sums after all levels. A warp thus walks four super-blocks of a row per step.
// x is quantized either by every thread block as it stages x in shared memory (matvec, matvec_swiglu) or
// once by its own kernel into global memory (quantize_x8, then matvec_x8).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_dp4a.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/x_levels.cuh"
#include "util/error.h"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kQK = 256;           // elements per super-block
constexpr int64_t kMaxIn = 18944;  // staged x: 74 super-blocks * 640 bytes (two levels) = 46 KB

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

// Staged x (shared memory, or global from quantize_x8) with kL levels per element: [nb][kL][256] int8 in
// the lanes' order, then [nb][8] float4 {d_lo, d_hi, s_lo, s_hi}.
__host__ __device__ constexpr int64_t level_bytes(int kL) {
    return int64_t(kL) * kQK;
}
__host__ __device__ size_t staged_bytes(int kL, int64_t n_in) {
    return size_t(n_in / kQK) * size_t(level_bytes(kL) + 8 * int64_t(sizeof(float4)));
}

// Quantizes elements 4i..4i+3 of x into the staged layout: eight consecutive threads take one block of
// 32. Every lane of the warp must take part (the shuffles).
template <int kL>
__device__ __forceinline__ void quantize_quad(const float* x, int64_t i, int8_t* sq, float4* meta) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    uint32_t w[kL];
    float d;
    int sum;
    levels4<kL>(v, amax, w, d, sum);
#pragma unroll
    for (int o = 1; o < 4; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int64_t b = i / 64;
    const int e = int(i % 64) * 4, j = e / 64, hi = e % 64 / 32, k = 2 * j + e % 32 / 16;
#pragma unroll
    for (int l = 0; l < kL; ++l)
        *reinterpret_cast<uint32_t*>(sq + b * level_bytes(kL) + l * kQK + hi * 128 + k * 16 + e % 16) = w[l];
    if (e % 16 == 0) {
        float* m = reinterpret_cast<float*>(meta + b * 8 + k);
        m[hi] = d;
        m[2 + hi] = d * float(sum);
    }
}

// Quantizes x into shared memory, the whole thread block. The element count is a multiple of 256, so
// every warp's loop runs whole.
template <int kL>
__device__ void stage_x(const float* x, int64_t n_in, int8_t* sq, float4* meta) {
    for (int64_t i = threadIdx.x; i < n_in / 4; i += blockDim.x) quantize_quad<kL>(x, i, sq, meta);
}

// quantize_x8: one thread block of 64 threads per super-block.
template <int kL>
__global__ void quantize_kernel(const float* x, int64_t nb, int8_t* x8) {
    begin_kernel();
    quantize_quad<kL>(x, blockIdx.x * int64_t(64) + threadIdx.x, x8,
                      reinterpret_cast<float4*>(x8 + nb * level_bytes(kL)));
}

// This lane's staged x of one super-block: per level plane its low and high 16 bytes, and the block's
// steps and half sums.
template <int kL>
struct XLane {
    int4 l[kL], h[kL];
    float4 m;
};

// Loads XLane of super-block b from shared memory (right before use), or from global memory through the
// read-only cache (with the weights: an L1 or L2 round trip).
template <int kL, bool kStaged>
__device__ __forceinline__ void load_x(const int8_t* sq, const float4* meta, int64_t b, XLane<kL>& x) {
    const int k = threadIdx.x % 8;
    const auto* q = reinterpret_cast<const int4*>(sq + b * level_bytes(kL));
#pragma unroll
    for (int l = 0; l < kL; ++l) {
        x.l[l] = kStaged ? q[16 * l + k] : __ldg(q + 16 * l + k);
        x.h[l] = kStaged ? q[16 * l + 8 + k] : __ldg(q + 16 * l + 8 + k);
    }
    x.m = kStaged ? meta[b * 8 + k] : __ldg(meta + b * 8 + k);
}

// sum_i levels_i . x_i over 16 bytes: one level plane, or two merged as 254 * hi-sum + lo-sum.
template <int kL>
__device__ __forceinline__ int dot16(const int (&w)[4], const int4 (&x)[kL]) {
    int s = __dp4a(w[0], x[0].x, __dp4a(w[1], x[0].y, __dp4a(w[2], x[0].z, __dp4a(w[3], x[0].w, 0))));
    if constexpr (kL == 2)
        s = 254 * s +
            __dp4a(w[0], x[1].x, __dp4a(w[1], x[1].y, __dp4a(w[2], x[1].z, __dp4a(w[3], x[1].w, 0))));
    return s;
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
    template <int kL>
    __device__ static float dot(const Raw& r, const XLane<kL>& x, int k) {
        const uint32_t m4 = 0x0F0F0F0Fu;
        const uint4& qs = r.qs;
        const int wl[4] = {int(qs.x & m4), int(qs.y & m4), int(qs.z & m4), int(qs.w & m4)};
        const int wh[4] = {int((qs.x >> 4) & m4), int((qs.y >> 4) & m4), int((qs.z >> 4) & m4),
                           int((qs.w >> 4) & m4)};
        const int lo = dot16<kL>(wl, x.l), hi = dot16<kL>(wh, x.h);
        const uint2 sm = scales_mins(r.h, k / 2);
        const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&r.h.x));
        const float s = float(int(sm.x & 0xFF) * lo) * x.m.x + float(int(sm.x >> 8) * hi) * x.m.y;
        const float m = float(sm.y & 0xFF) * x.m.z + float(sm.y >> 8) * x.m.w;
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
    template <int kL>
    __device__ static float dot(const Raw& r, const XLane<kL>& x, int k) {
        const int s4 = 4 * (k / 2 % 2), c = 2 * (k / 2 % 2);
        const int wl[4] = {levels(r.qa.x, r.qh.x, s4, c), levels(r.qa.y, r.qh.y, s4, c),
                           levels(r.qa.z, r.qh.z, s4, c), levels(r.qa.w, r.qh.w, s4, c)};
        const int wh[4] = {levels(r.qb.x, r.qh.x, s4, c + 1), levels(r.qb.y, r.qh.y, s4, c + 1),
                           levels(r.qb.z, r.qh.z, s4, c + 1), levels(r.qb.w, r.qh.w, s4, c + 1)};
        const int lo = dot16<kL>(wl, x.l), hi = dot16<kL>(wh, x.h);
        const float d = __half2float(__ushort_as_half(uint16_t(r.d)));
        const float s = float(r.s_lo) * fmaf(float(lo), x.m.x, -32.0f * x.m.z) +
                        float(r.s_hi) * fmaf(float(hi), x.m.y, -32.0f * x.m.w);
        return d * s;
    }
};

// acc[m] += row m . x over this lane's super-blocks (first, first + step, ...), two steps loaded at once.
template <class F, int kL, int R, bool kStaged>
__device__ void dot_rows(const uint8_t* const (&rows)[R], int64_t nb, int64_t first, int64_t step,
                         const int8_t* sq, const float4* meta, float (&acc)[R]) {
    const int k = threadIdx.x % 8;
    constexpr int kU = 2;
    for (int64_t b0 = first; b0 < nb; b0 += kU * step) {
        typename F::Raw raw[kU][R];
        XLane<kL> x[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int64_t b = b0 + u * step;
            if (b >= nb) continue;
#pragma unroll
            for (int m = 0; m < R; ++m) raw[u][m] = F::load(rows[m] + b * F::kBytes, k);
            if (!kStaged) load_x<kL, false>(sq, meta, b, x[u]);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int64_t b = b0 + u * step;
            if (b >= nb) break;
            if (kStaged) load_x<kL, true>(sq, meta, b, x[u]);
#pragma unroll
            for (int m = 0; m < R; ++m) acc[m] += F::template dot<kL>(raw[u][m], x[u], k);
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
    for (int m = 0; m < R; ++m) acc[m] = warp_sum(acc[m]);
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
template <class F, int kL, int R, bool kSwiglu, bool kStaged>
__global__ void __launch_bounds__(kWarps * 32, 2) dp4a_kernel(Dp4aArgs a) {
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
        stage_x<kL>(a.x, a.n_in, q, reinterpret_cast<float4*>(q + nb * level_bytes(kL)));
        __syncthreads();
        sq = q;
    }
    const auto* meta = reinterpret_cast<const float4*>(sq + nb * level_bytes(kL));
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        tile_rows<R, kSwiglu>(a, tile, rows, r0);
        float acc[R] = {};
        dot_rows<F, kL, R, kStaged>(rows, nb, first, step, sq, meta, acc);
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

template <class F, int kL, int R, bool kSwiglu, bool kStaged>
void launch_dp4a(Dp4aArgs a, Stream s) {
    constexpr int kOut = kSwiglu ? R / 2 : R;
    const int64_t groups = (a.n_out + kOut - 1) / kOut;
    a.split = choose_split(groups, a.n_in / kQK);
    a.tiles = (groups + kWarps / a.split - 1) / (kWarps / a.split);
    const size_t smem = kStaged ? staged_bytes(kL, a.n_in) : 0;
    auto* kernel = dp4a_kernel<F, kL, R, kSwiglu, kStaged>;
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

// Two rows a warp, but four (two gate/up pairs) for Q4_K gate/up against int8x2 x: that kernel alone
// holds them without spilling, and it measured 7B single-stream 428.5/429.0 -> 432.7/433.8 tok/s on the
// H200 (bench/STANDING-GPU.md, twenty-third session); four rows spill in the other variants.
template <bool kSwiglu, bool kStaged>
void launch_type(const QMatrix& w, const Dp4aArgs& a, Stream s) {
    const bool two = w.xq == XQuant::kInt8x2;
    if constexpr (kSwiglu)
        if (two && w.type == GgmlType::Q4_K) return launch_dp4a<Q4K, 2, 4, kSwiglu, kStaged>(a, s);
    if (w.type == GgmlType::Q4_K)
        return two ? launch_dp4a<Q4K, 2, 2, kSwiglu, kStaged>(a, s)
                   : launch_dp4a<Q4K, 1, 2, kSwiglu, kStaged>(a, s);
    two ? launch_dp4a<Q6K, 2, 2, kSwiglu, kStaged>(a, s) : launch_dp4a<Q6K, 1, 2, kSwiglu, kStaged>(a, s);
}

// Throws unless w takes x as int8 (dp4a_fits, Q4_K in the block layout, Q6_K padded) and its rows and x
// (f32, or quantize_x8's) are 16-byte aligned.
void check_fits(const QMatrix& w, const void* x) {
    const bool layout = w.type == GgmlType::Q4_K ? !w.tiled && !w.padded : w.padded;
    if (!dp4a_fits(w.type, w.n_in) || !layout || w.xq == XQuant::kF32)
        throw Error(
            "CUDA matvec: int8 products need rows of at most 18944 of Q4_K in the block layout or padded "
            "Q6_K");
    if (!aligned16(x) || !aligned16(w.data))
        throw Error("CUDA matvec: int8 products need 16-byte aligned weights and input");
}

}  // namespace

void matvec_dp4a(const QMatrix& w, const float* x, float* y, const float* bias, const float* res, Stream s) {
    check_fits(w, x);
    if (w.n_out == 0) return;
    Dp4aArgs a = args(w, nullptr, x, y);
    a.bias = bias, a.res = res;
    launch_type<false, true>(w, a, s);
}

void matvec_swiglu_dp4a(const QMatrix& gate, const QMatrix& up, const float* x, float* y, Stream s) {
    check_fits(gate, x);
    check_fits(up, x);
    if (gate.n_out == 0) return;
    if (gate.xq != up.xq) throw Error("CUDA matvec_swiglu: gate and up take x differently");
    launch_type<true, true>(gate, args(gate, up.data, x, y), s);
}

size_t int8_x_bytes(XQuant xq, int64_t n_in) {
    return staged_bytes(xq == XQuant::kInt8x2 ? 2 : 1, n_in);
}

void quantize_x8(const float* x, int64_t n_in, XQuant xq, void* x8, Stream s) {
    if (n_in % kQK != 0) throw Error("CUDA quantize_x8: length not a multiple of 256");
    if (xq == XQuant::kF32) throw Error("CUDA quantize_x8: no int8 format given");
    if (!aligned16(x) || !aligned16(x8)) throw Error("CUDA quantize_x8: pointers not 16-byte aligned");
    if (n_in == 0) return;
    auto* kernel = xq == XQuant::kInt8x2 ? quantize_kernel<2> : quantize_kernel<1>;
    launch("quantize_x8 kernel", kernel, unsigned(n_in / kQK), 64, 0, s, x, n_in / kQK,
           static_cast<int8_t*>(x8));
}

void matvec_x8(const QMatrix& w, const void* x8, float* y, const float* bias, const float* res, Stream s) {
    check_fits(w, x8);
    if (w.n_out == 0) return;
    Dp4aArgs a = args(w, nullptr, nullptr, y);
    a.x8 = static_cast<const int8_t*>(x8);
    a.bias = bias, a.res = res;
    launch_type<false, false>(w, a, s);
}

bool matvec_int8_x(const QMatrix& w, int64_t nt) {
    return w.xq != XQuant::kF32 && nt == 1;
}

bool dp4a_fits(GgmlType t, int64_t n_in) {
    return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && n_in % kQK == 0 && n_in <= kMaxIn;
}

}  // namespace minfer::cuda
