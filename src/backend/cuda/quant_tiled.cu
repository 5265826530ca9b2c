// Q4_K decode on the tensor cores. The block layout costs the CUDA-core matvec about two integer
// instructions per weight (ncu: ALU-bound, not DRAM-bound), so tile_matrix repacks a Q4_K matrix once,
// at upload, into the operand order of mma.sync m16n8k16 (f16 inputs, f32 accumulators): per 16 rows and
// one 256-column super-block, lane l's 32-bit word for k-step t holds the eight 4-bit levels it feeds
// the instruction. Two masks with the exponent of 1024 turn a word's nibbles into half pairs 1024 + q and
// 1024 + 16 q, one HSUB2 / HFMA2 makes them the exact levels. x enters as two halves (x * 2^e = hi + lo,
// the power of two chosen per call from max |x|), the B operand's columns 0 and 1, so the products keep
// 22 bits of x; each 32-column sub-block's sums are scaled by its 6-bit scale in f32, each super-block's
// by d, and the minimum terms come from precomputed sums of x, as the block-layout kernel does.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_blocks.cuh"
#include "backend/cuda/quant_tiled.h"
#include "util/error.h"

namespace minfer::cuda {
namespace {

constexpr int kQK = 256;                             // columns per super-block
constexpr int kBlockBytes = 144;                     // one row's super-block: d, dmin, scales[12], qs[128]
constexpr int kTileRows = 16;                        // rows per tile
constexpr int kLevelBytes = 2048;                    // a tile's levels of one super-block
constexpr int kTileBytes = kTileRows * kBlockBytes;  // 2304: levels, then the rows' 16-byte headers
constexpr int kSteps = kQK / 16;                     // k-steps of 16 columns per super-block
constexpr int64_t kMaxIn = 8192;                     // x of one token staged in shared memory: 33 KB
constexpr int kWarps = 8;

// The tiled layout, per 16 rows and one super-block (2304 bytes): 2048 bytes of levels, then the 16 rows'
// headers (d, dmin, scales[12]) as they were. Lane l = 4 g + q of a warp feeds rows g and g + 8, columns
// 2q, 2q + 1, 2q + 8, 2q + 9 of each k-step (the A fragment); its 32-bit word for k-step t is word t % 4
// of its 16-byte group at byte (t / 4) * 512 + l * 16. Nibbles 0..3 / 4..7 hold columns 2q / 2q + 1 of
// (row g, col), (row g + 8, col), (g, col + 8), (g + 8, col + 8), so masks 0x000f000f and 0x00f000f0
// (then the word shifted by 8) give the four operand pairs.

// The 4-bit level of column c in one row's super-block (block layout).
__device__ inline uint32_t raw_level(const uint8_t* block, int c) {
    const uint8_t b = block[16 + 32 * (c / 64) + c % 32];
    return (c % 64) < 32 ? b & 0xFu : b >> 4;
}

// One thread block per (tile, super-block): 128 threads write the 512 level words, 64 of them the headers.
__global__ void tile_kernel(const uint8_t* raw, int64_t row_bytes, int64_t nsb, uint8_t* dst) {
    begin_kernel();
    const int64_t tile = blockIdx.x / nsb, sb = blockIdx.x % nsb;
    const uint8_t* rows = raw + tile * kTileRows * row_bytes + sb * kBlockBytes;
    uint8_t* out = dst + (tile * nsb + sb) * kTileBytes;
    for (int w = int(threadIdx.x); w < kLevelBytes / 4; w += blockDim.x) {
        const int t = (w / 128) * 4 + w % 4, lane = (w % 128) / 4, g = lane / 4, q = lane % 4;
        uint32_t word = 0;
        for (int nib = 0; nib < 8; ++nib) {
            const int row = g + 8 * (nib % 2), c = 16 * t + 2 * q + 8 * ((nib / 2) % 2) + nib / 4;
            word |= raw_level(rows + row * row_bytes, c) << (4 * nib);
        }
        reinterpret_cast<uint32_t*>(out)[w] = word;
    }
    if (threadIdx.x < kTileRows * 4) {
        const int row = threadIdx.x / 4, k = threadIdx.x % 4;
        reinterpret_cast<uint32_t*>(out + kLevelBytes)[row * 4 + k] =
            reinterpret_cast<const uint32_t*>(rows + row * row_bytes)[k];
    }
}

// The 6-bit scales (s = true) or mins of the header's sub-blocks 0..3 and 4..7, a byte each.
__device__ __forceinline__ uint2 six_bit(const uint4& h, bool s) {
    const uint32_t a = s ? h.y : h.z, c = s ? h.w : h.w >> 4;
    return {a & 0x3F3F3F3Fu, (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)};
}

__device__ __forceinline__ uint32_t byte_of(const uint2& v, int j) {
    return ((j < 4 ? v.x : v.y) >> (8 * (j % 4))) & 0xFFu;
}

__device__ __forceinline__ float2 d_dmin(const uint4& h) {
    return __half22float2(*reinterpret_cast<const __half2*>(&h.x));
}

// Dequantization, one thread block of 128 per (tile, super-block): thread (lane l, group k) decodes the
// 32 levels of its 16-byte word group into a shared 16 x 256 tile as the block layout's kernels do,
// fma(d * sc, q, -(dmin * m)); then the rows go out in 16-byte stores.
template <class Out>
__global__ void dequant_tiled_kernel(const uint8_t* w, int64_t n_in, int64_t nsb, Out* out) {
    __shared__ __align__(16)
        Out tile_out[kTileRows][kQK + 16 / sizeof(Out) * 2];  // padded: no bank conflicts
    begin_kernel();
    const int64_t tile = blockIdx.x / nsb, sb = blockIdx.x % nsb;
    const uint8_t* p = w + (tile * nsb + sb) * kTileBytes;
    const int lane = threadIdx.x % 32, k = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const uint4 lv = *reinterpret_cast<const uint4*>(p + k * 512 + lane * 16);
    for (int half = 0; half < 2; ++half) {
        const int row = g + 8 * half;
        const uint4 h = *reinterpret_cast<const uint4*>(p + kLevelBytes + row * 16);
        const float2 dm = d_dmin(h);
        for (int i = 0; i < 4; ++i) {
            const int t = 4 * k + i, j = t / 2;
            const float d1 = dm.x * float(byte_of(six_bit(h, true), j));
            const float m1 = dm.y * float(byte_of(six_bit(h, false), j));
            const uint32_t word = qblocks::word(lv, i);
            for (int nib = half; nib < 8; nib += 2) {
                const int c = 16 * t + 2 * q + 8 * ((nib / 2) % 2) + nib / 4;
                tile_out[row][c] = Out(__fmaf_rn(d1, float((word >> (4 * nib)) & 0xFu), -m1));
            }
        }
    }
    __syncthreads();
    constexpr int kVec = 16 / sizeof(Out);  // elements per 16-byte store
    for (int v = threadIdx.x; v < kTileRows * kQK / kVec; v += blockDim.x) {
        const int row = v / (kQK / kVec), c = v % (kQK / kVec) * kVec;
        *reinterpret_cast<uint4*>(out + (tile * kTileRows + row) * n_in + sb * kQK + c) =
            *reinterpret_cast<const uint4*>(&tile_out[row][c]);
    }
}

// x staged for the B operand: frag[8 t + j] holds, for j < 4 (q = j), the hi halves of x * 2^e at columns
// 16t + 2q, +1 and 16t + 2q + 8, +9; j >= 4 the lo halves (x * 2^e - hi). Lane l loads frag[8 t + l % 8],
// so lanes 0-3 supply column 0 (hi), 4-7 column 1 (lo); the other lanes repeat them into columns 2..7,
// whose products nobody reads. xs[k] = sum of x over columns 32k..32k+31 (the minimum terms).
struct StagedX {
    const uint2* frag;
    const float* xs;
    float undo;  // 2^-e
};

__device__ __forceinline__ uint32_t half_pair(float a, float b, bool lo) {
    __half ha = __float2half_rn(a), hb = __float2half_rn(b);
    if (lo) ha = __float2half_rn(a - __half2float(ha)), hb = __float2half_rn(b - __half2float(hb));
    const __half2 h = __halves2half2(ha, hb);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// Thread k stages columns 32k..32k+31 (n_in <= 8192 = 256 threads x 32): one round of loads into
// registers, the block's max |x| (one barrier), then its 16 fragment words and its sum of x.
__device__ StagedX stage_x(const float* x, int64_t n_in, uint2* frag, float* xs, float* red) {
    const int64_t k = threadIdx.x;
    const bool mine = k < n_in / 32;
    float v[32];
#pragma unroll
    for (int i = 0; i < 32; i += 4) {
        const float4 u = mine ? *reinterpret_cast<const float4*>(x + 32 * k + i) : float4{};
        v[i] = u.x, v[i + 1] = u.y, v[i + 2] = u.z, v[i + 3] = u.w;
    }
    float amax = 0.0f, sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i])), sum += v[i];
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, red[w]);
    int e = 0;
    frexpf(amax, &e);  // amax < 2^e: x * 2^(14 - e) stays below 2^14, far from the half range's end
    const int shift = amax > 0.0f ? max(-100, min(100, 14 - e)) : 0;
    const float scale = ldexpf(1.0f, shift);
    if (mine) {
#pragma unroll
        for (int w = 0; w < 16; ++w) {  // k-step 2k + w / 8, word j = w % 8
            const int c = 16 * (w / 8) + 2 * (w % 4);
            const bool lo = w % 8 >= 4;
            frag[16 * k + w] = {half_pair(v[c] * scale, v[c + 1] * scale, lo),
                                half_pair(v[c + 8] * scale, v[c + 9] * scale, lo)};
        }
        xs[k] = sum;
    }
    __syncthreads();
    return {frag, xs, ldexpf(1.0f, -shift)};
}

// One tile's super-block as lane l loads it: its four 16-byte groups of level words and the headers of
// its rows g = l / 4 and g + 8.
struct SbRegs {
    uint4 lv[4];
    uint4 hg, h8;
};

__device__ __forceinline__ void load_sb(const uint8_t* p, int lane, SbRegs& r) {
#pragma unroll
    for (int k = 0; k < 4; ++k) r.lv[k] = __ldg(reinterpret_cast<const uint4*>(p + k * 512 + lane * 16));
    r.hg = __ldg(reinterpret_cast<const uint4*>(p + kLevelBytes + (lane / 4) * 16));
    r.h8 = __ldg(reinterpret_cast<const uint4*>(p + kLevelBytes + (lane / 4 + 8) * 16));
}

// A word's eight levels as the A fragment's four half pairs: (1024 + q) - 1024 and (1024 + 16 q) / 16 - 64.
__device__ __forceinline__ void operand_a(uint32_t w, uint32_t (&a)[4]) {
    const __half2 k1024 = __half2half2(__ushort_as_half(0x6400)),
                  k16th = __half2half2(__ushort_as_half(0x2C00)),
                  km64 = __half2half2(__ushort_as_half(0xD400));
    const uint32_t v[4] = {(w & 0x000F000Fu) | 0x64006400u, (w & 0x00F000F0u) | 0x64006400u,
                           ((w >> 8) & 0x000F000Fu) | 0x64006400u, ((w >> 8) & 0x00F000F0u) | 0x64006400u};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __half2 h = *reinterpret_cast<const __half2*>(&v[k]);
        const __half2 r = k % 2 == 0 ? __hsub2(h, k1024) : __hfma2(h, k16th, km64);
        a[k] = *reinterpret_cast<const uint32_t*>(&r);
    }
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

// Running sums of one lane for its rows g and g + 8: dot holds sum d * sc * (levels . x * 2^e), valid on
// lanes with l % 4 == 0 (columns 0 and 1 of the product); mins holds sum dmin * m * sum(x) over the
// sub-blocks 2q and 2q + 1 of each super-block, valid on every lane.
struct RowSums {
    float dot[2] = {0.0f, 0.0f}, mins[2] = {0.0f, 0.0f};
};

__device__ __forceinline__ void sb_dot(const SbRegs& r, const StagedX& x, int64_t sb, int lane, RowSums& s) {
    const uint2 sc[2] = {six_bit(r.hg, true), six_bit(r.h8, true)};
    const uint2* frag = x.frag + sb * kSteps * 8 + lane % 8;
    float part[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int t = 2 * j + h;
            uint32_t a[4];
            operand_a(qblocks::word(r.lv[t / 4], t % 4), a);
            mma_16816(c, a, frag[t * 8]);
        }
        part[0] = fmaf(float(byte_of(sc[0], j)), c[0] + c[1], part[0]);
        part[1] = fmaf(float(byte_of(sc[1], j)), c[2] + c[3], part[1]);
    }
    const float2 dm[2] = {d_dmin(r.hg), d_dmin(r.h8)};
    const int q = lane % 4;
    const float x0 = x.xs[sb * 8 + 2 * q], x1 = x.xs[sb * 8 + 2 * q + 1];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const uint2 m = six_bit(k == 0 ? r.hg : r.h8, false);
        s.dot[k] = fmaf(dm[k].x, part[k], s.dot[k]);
        s.mins[k] =
            fmaf(dm[k].y, fmaf(float(byte_of(m, 2 * q)), x0, float(byte_of(m, 2 * q + 1)) * x1), s.mins[k]);
    }
}

struct TiledArgs {
    const uint8_t* w[2];  // the tiled matrix, or gate and up
    int64_t n_in, n_out;
    const float* x;
    float* y;
    const float* bias;
    const float* res;
    int split;     // warps per tile; they take its super-blocks in turn
    int prefetch;  // super-blocks each warp prefetches into L2 before waiting for x
};

// While a warp computes super-block sb and loads sb + split into registers, it prefetches sb + kAhead *
// split into L2, so that more of each warp's weights are in flight than its registers hold. By
// measurement (bench_cuda_matvec, us, distance 0 / 2 / 3 / 5): 7b.gate_up 37.6 / 35.3 / 36.4 / 37.4,
// 7b.lm_head 116.0 / 109.5 / 110.0 / 113.6; the 7B Q4_K_M decodes at 361-362 / 369-372 / 364-365 tok/s.
// The same prefetch in the block-layout kernels changed nothing (7b.down, o, qkv within 1%).
constexpr int kAhead = 2;

// Which tile, matrix and share of super-blocks warp w of the thread block takes: kMats matrices (W, or
// gate and up) of each output tile, each split between `split` warps, which take its super-blocks
// part, part + split, ...; a thread block holds kWarps / (kMats * split) output tiles.
template <int kMats>
struct WarpJob {
    int64_t tile;
    int part;
    const uint8_t* base;  // the tile's first super-block in its matrix
    __device__ WarpJob(const TiledArgs& a, int warp)
        : tile(int64_t(blockIdx.x) * (kWarps / (kMats * a.split)) + warp / (kMats * a.split)),
          part(warp % a.split),
          base((warp / a.split % kMats == 0 ? a.w[0] : a.w[1]) + tile * (a.n_in / kQK) * kTileBytes) {}
    __device__ const uint8_t* at(int64_t sb) const { return base + sb * kTileBytes; }
};

// The finished dot products of the warp's rows g and g + 8 over its share, on lanes l % 4 == 0. cur
// holds its first super-block (loaded before x was ready); the next one loads while one is computed.
template <int kMats>
__device__ void warp_dots(const TiledArgs& a, const WarpJob<kMats>& job, const StagedX& x, SbRegs& cur,
                          float (&out)[2]) {
    const int lane = threadIdx.x % 32;
    const int64_t nsb = a.n_in / kQK;
    RowSums s;
    SbRegs nxt;
    for (int64_t sb = job.part; sb < nsb; sb += a.split) {
        if (const int64_t f = sb + kAhead * a.split; f < nsb && lane < kTileBytes / 128)
            prefetch_l2(job.at(f) + lane * 128);
        if (sb + a.split < nsb) load_sb(job.at(sb + a.split), lane, nxt);
        sb_dot(cur, x, sb, lane, s);
        cur = nxt;
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        float v = (lane % 4 == 0 ? s.dot[k] * x.undo : 0.0f) - s.mins[k];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        out[k] = v;
    }
}

// kMats = 1: y = W x (+ bias) (+ res); kMats = 2: y = silu(gate x) * (up x). See WarpJob.
// Two thread blocks per SM (<= 128 registers); three (<= 80, a few spills) measured slower on every shape
// (7b.gate_up 33.0 vs 31.4 us, lm_head 106 vs 94).
template <int kMats>
__global__ void __launch_bounds__(kWarps * 32, 2) matvec_tiled_kernel(TiledArgs a) {
    __shared__ float red[kWarps][kTileRows];
    __shared__ float amax[kWarps];
    extern __shared__ uint2 smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, per_block = kWarps / (kMats * a.split);
    const int64_t tiles = a.n_out / kTileRows, nsb = a.n_in / kQK;
    const WarpJob<kMats> job(a, warp);
    const bool busy = job.tile < tiles && job.part < nsb;
    SbRegs first;
    if (busy) {
        for (int64_t sb = job.part, k = 0; k < a.prefetch && sb < nsb; ++k, sb += a.split)
            if (lane < kTileBytes / 128) prefetch_l2(job.at(sb) + lane * 128);
        load_sb(job.at(job.part), lane, first);
    }
    wait_for_inputs();
    release_next();
    const StagedX x = stage_x(a.x, a.n_in, smem, reinterpret_cast<float*>(smem + a.n_in / 2), amax);
    float dots[2] = {0.0f, 0.0f};
    if (busy) warp_dots<kMats>(a, job, x, first, dots);
    if (lane % 4 == 0) red[warp][lane / 4] = dots[0], red[warp][lane / 4 + 8] = dots[1];
    __syncthreads();
    const int local = threadIdx.x / kTileRows, row = threadIdx.x % kTileRows;
    const int64_t r = (int64_t(blockIdx.x) * per_block + local) * kTileRows + row;
    if (local >= per_block || r >= a.n_out) return;
    float v[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
        v[m] = 0.0f;
        for (int k = 0; k < a.split; ++k) v[m] += red[(local * kMats + m) * a.split + k][row];
    }
    if constexpr (kMats == 2) {
        a.y[r] = v[0] / (1.0f + expf(-v[0])) * v[1];
    } else {
        a.y[r] = v[0] + (a.bias ? a.bias[r] : 0.0f) + (a.res ? a.res[r] : 0.0f);
    }
}

template <int kMats>
void launch_tiled(TiledArgs a, Stream s) {
    const int64_t tiles = a.n_out / kTileRows, nsb = a.n_in / kQK;
    a.split = 1;  // more warps per tile until the GPU is full, each keeping two super-blocks
    while (kMats * a.split < kWarps && tiles * kMats * a.split < gpu_warps() && nsb >= 2 * a.split)
        a.split *= 2;
    a.prefetch = prefetch_steps((nsb + a.split - 1) / a.split, double(tiles * nsb * kTileBytes) * kMats);
    const int64_t per_block = kWarps / (kMats * a.split), grid = (tiles + per_block - 1) / per_block;
    const size_t smem = size_t(a.n_in / 2) * sizeof(uint2) + size_t(a.n_in / 32) * sizeof(float);
    if (grid > 0)
        launch("tiled matvec kernel", matvec_tiled_kernel<kMats>, unsigned(grid), kWarps * 32, smem, s, a);
}

void check_tiled(const QMatrix& w, const char* what) {
    if (!w.tiled || !tiles_fit(w.type, w.n_in, w.n_out))
        throw Error(std::string(what) + ": not a tiled Q4_K matrix of a supported shape");
    if (!aligned16(w.data)) throw Error(std::string(what) + ": misaligned weights");
}

void check_x(const float* x, const char* what) {
    if (!aligned16(x)) throw Error(std::string(what) + ": misaligned input");
}

template <class Out>
void dequant_tiled(const QMatrix& w, Out* out, Stream s) {
    check_tiled(w, "tiled dequant");
    const int64_t nsb = w.n_in / kQK, blocks = w.n_out / kTileRows * nsb;
    if (blocks > 0)
        launch("tiled dequant kernel", dequant_tiled_kernel<Out>, unsigned(blocks), 128, 0, s,
               static_cast<const uint8_t*>(w.data), w.n_in, nsb, out);
}

}  // namespace

bool tiles_fit(GgmlType t, int64_t n_in, int64_t n_out) {
    return t == GgmlType::Q4_K && n_in > 0 && n_in % kQK == 0 && n_in <= kMaxIn && n_out % kTileRows == 0;
}

void tile_matrix(const QMatrix& raw, void* dst, Stream s) {
    if (raw.tiled || !tiles_fit(raw.type, raw.n_in, raw.n_out))
        throw Error("tile_matrix: not a Q4_K matrix in the block layout of a supported shape");
    const int64_t nsb = raw.n_in / kQK, blocks = raw.n_out / kTileRows * nsb;
    if (blocks > 0)
        launch("tile kernel", tile_kernel, unsigned(blocks), 128, 0, s, static_cast<const uint8_t*>(raw.data),
               nsb * kBlockBytes, nsb, static_cast<uint8_t*>(dst));
}

void matvec_tiled(const QMatrix& w, const float* x, float* y, const float* bias, const float* res, Stream s) {
    check_tiled(w, "tiled matvec");
    check_x(x, "tiled matvec");
    const auto* p = static_cast<const uint8_t*>(w.data);
    launch_tiled<1>(TiledArgs{{p, nullptr}, w.n_in, w.n_out, x, y, bias, res, 1, 0}, s);
}

void matvec_swiglu_tiled(const QMatrix& gate, const QMatrix& up, const float* x, float* y, Stream s) {
    check_tiled(gate, "tiled matvec_swiglu");
    check_tiled(up, "tiled matvec_swiglu");
    check_x(x, "tiled matvec_swiglu");
    const auto* g = static_cast<const uint8_t*>(gate.data);
    const auto* u = static_cast<const uint8_t*>(up.data);
    launch_tiled<2>(TiledArgs{{g, u}, gate.n_in, gate.n_out, x, y, nullptr, nullptr, 1, 0}, s);
}

void dequant_tiled_f32(const QMatrix& w, float* out, Stream s) {
    dequant_tiled(w, out, s);
}

void dequant_tiled_f16(const QMatrix& w, void* out, Stream s) {
    dequant_tiled(w, static_cast<__half*>(out), s);
}

}  // namespace minfer::cuda
