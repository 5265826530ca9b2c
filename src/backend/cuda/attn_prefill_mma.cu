// Prefill attention on the f16 tensor cores (mma.sync m16n8k16, f32 accumulators) at f32 accuracy: every
// f32 operand x is carried as two halves, hi = half(x) and lo = half(x - hi), which hold x to 2^-22
// relative, and each product takes three tensor-core products, lo * hi + hi * lo + hi * hi (lo * lo is
// below the f32 rounding). So the scores q . k and the sums p v keep the f32 kernel's accuracy
// (attention_prefill_mma_tol in the tests) at a fraction of its instructions.
//
// A thread block of 4 warps takes 64 consecutive query rows of one query head (16 a warp, the m16 tile)
// and walks the keys its rows see in tiles of 64. The rows' q * scale * log2(e) (scores in base 2, for
// exp2f) go to shared memory once as hi and lo halves; each tile's K rows are converted into hi and lo
// halves as [key][element], its V rows transposed as [element][key]. Every fragment is then one
// ldmatrix.x4 (hi and lo of an A fragment's or two B fragments' halves); rows are padded by 8 halves, so
// the 8 rows of a matrix hit distinct banks. The score accumulators of a tile (16 rows x 64 keys) become
// the A fragments of the P V product in place (FlashAttention-2's layout), so the probabilities never
// leave registers; each row's online softmax (running max, sum, rescale when a max grows) is joined over
// the row's four lanes by shuffles, masks applied only on tiles some row of the warp sees in part. A warp
// skips a tile none of its rows sees (above the diagonal). A block whose rows belong to several
// sequences (a paged batch) walks each sequence's keys in turn; a row of another sequence sees no key of
// the pass, so its state is unchanged (its max stays, its rescale is exactly 1, its p exactly 0).
//
// Every row's arithmetic depends only on its own query, its keys and the fixed 64-key tiling from key 0,
// not on the other rows of its block or the grid: no split of the keys. Values beyond half's range
// (|x| >= 65520) would overflow; llama.cpp's default f16 KV cache has the same limit on K and V.
// ptxas (sm_90): 255 registers at head_dim 128 (36 bytes of spill), 189 at 64; 106.5 and 55 KB of shared
// memory, two blocks an SM. H200, Qwen2.5-7B Q4_K_M pp4096: ncu puts the first version (fragments as
// 32-bit loads, q in registers) at 1.3 instructions a cycle per SM, 1.7 warps per scheduler, 94% L2
// hits: latency-bound at this occupancy; this one is 6% faster at model level (bench/STANDING-GPU.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backend/cuda/attn_prefill_mma.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_sync.cuh"
#include "util/error.h"

namespace minfer::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // query rows of a block
constexpr int kKeys = 64;           // keys of a tile
constexpr int kPadH = 8;            // halves after each shared row
constexpr int kVStride = kKeys + kPadH;

template <int kHd>
struct Smem {
    static constexpr int kKStride = kHd + kPadH;
    static constexpr int kKHalves = kKeys * kKStride, kVHalves = kHd * kVStride, kQHalves = kRows * kKStride;
    // K hi, K lo, V hi, V lo (each tile), then Q hi, Q lo (once): 106.5 KB at head_dim 128, two blocks an SM
    static constexpr int kBytes = 2 * (kKHalves + kVHalves + kQHalves) * int(sizeof(__half));
};

struct MmaArgs {
    const float* q;
    KvRegion r;
    KvSlots at;
    float* out;
    AttnShape a;
    int64_t nt;
    AttnRows rows;
};

// Four 8 x 8 matrices of halves from shared memory: lanes 8i..8i+7 give the row addresses of matrix i
// (16-byte aligned), and lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of each, in r[i]:
// an m16n8k16 B fragment's b0 and b1 from two matrices of rows = n, columns = k.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* row) {
    const auto a = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// This lane's row address for ldmatrix_x4 of the B fragments (hi: b0, b1; lo: b0, b1) of an n8 x k16
// block of a matrix stored as rows of n, `stride` halves apart, hi at `hi` and lo at `lo`: matrix i of
// the four is (hi, hi, lo, lo)[i] at columns 8 (i % 2) on; the block's own offset is added by the caller.
__device__ __forceinline__ const __half* fragment_row(const __half* hi, const __half* lo, int stride) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    return (m < 2 ? hi : lo) + (lane % 8) * stride + 8 * (m % 2);
}

// x0 and x1 as two halves each: hi (x0 in the low 16 bits) and lo, the rests x - hi rounded again.
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
}

// c += a * b for operands carried as hi and lo halves: the two small products first.
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                     uint32_t b0h, uint32_t b1h, uint32_t b0l, uint32_t b1l) {
    mma_f16(c, al, b0h, b1h);
    mma_f16(c, ah, b0l, b1l);
    mma_f16(c, ah, b0h, b1h);
}

// The block's rows: for each of its kRows rows the sequence slot (-1: not served; 0 for every row when
// unpaged) and the count of keys it sees.
struct RowTable {
    int slot[kRows], n[kRows];
    int seq, hi;  // the pass's sequence (-1: done) and the largest key count of its rows
};

__device__ void fill_rows(const MmaArgs& p, int64_t t0, RowTable& rt) {
    for (int i = threadIdx.x; i < kRows; i += kThreads) {
        const int64_t t = t0 + i;
        const bool served = t < p.nt && serves_row(p.rows, p.at, t, p.nt);
        rt.slot[i] = served ? (p.at.table ? p.at.slot[t] : 0) : -1;
        rt.n[i] = served ? keys_seen(p.at, p.r, t) : 0;
    }
}

// The next pass: the sequence of the first row still pending, and its rows' largest key count; those
// rows are then no longer pending (slot -2 - slot keeps the sequence for the pass's masks).
__device__ void next_pass(RowTable& rt) {
    __syncthreads();
    if (threadIdx.x == 0) {
        int seq = -1, hi = 0;
        for (int i = 0; i < kRows; ++i) {
            if (rt.slot[i] < 0) continue;
            if (seq < 0) seq = rt.slot[i];
            if (rt.slot[i] != seq) continue;
            hi = max(hi, rt.n[i]);
            rt.slot[i] = -2 - seq;
        }
        rt.seq = seq, rt.hi = hi;
    }
    __syncthreads();
}

// Keys [j0, j0 + kKeys) of the pass's sequence (rows at or past hi repeat row hi - 1: finite, masked) into
// shared memory as hi and lo halves: K as [key][element], V as [element][key]. Each thread issues half its
// loads of K (then of V) before converting any: four round trips to L2 a tile, not one per few rows (all
// at once would spill at head_dim 128).
template <int kHd>
__device__ void load_tile(const MmaArgs& p, const int32_t* blocks, int64_t col, int j0, int hi, __half* sh) {
    using S = Smem<kHd>;
    constexpr int kC4 = kHd / 4;                     // float4 of a row
    constexpr int kKLoads = kKeys * kC4 / kThreads;  // K float4 a thread: a warp takes whole rows
    constexpr int kVCols = kC4 / kWarps;             // V float4 columns a warp takes, two keys a lane
    uint32_t* kh = reinterpret_cast<uint32_t*>(sh);
    uint32_t* kl = kh + S::kKHalves / 2;
    uint32_t* vh = kl + S::kKHalves / 2;
    uint32_t* vl = vh + S::kVHalves / 2;
    const auto row = [&](const float* base, int j) {
        return reinterpret_cast<const float4*>(
            base + row_slot(blocks, p.at.block_shift, j < hi ? j : hi - 1) * p.r.n_embd + col);
    };
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        constexpr int kN = kKLoads / 2;
        float4 x[kN];
#pragma unroll
        for (int u = 0; u < kN; ++u) {
            const int k = threadIdx.x + (half * kN + u) * kThreads;
            x[u] = __ldg(row(p.r.k, j0 + k / kC4) + k % kC4);
        }
#pragma unroll
        for (int u = 0; u < kN; ++u) {
            const int k = threadIdx.x + (half * kN + u) * kThreads, i = k / kC4, c = k % kC4;
            uint2 h, l;
            split2(x[u].x, x[u].y, h.x, l.x);
            split2(x[u].z, x[u].w, h.y, l.y);
            const int w = (i * S::kKStride + 4 * c) / 2;  // even: 8-byte stores, a warp's row contiguous
            *reinterpret_cast<uint2*>(kh + w) = h, *reinterpret_cast<uint2*>(kl + w) = l;
        }
    }
    const int lane = threadIdx.x % 32, c0 = threadIdx.x / 32 * kVCols;
    const float4 *r0 = row(p.r.v, j0 + 2 * lane), *r1 = row(p.r.v, j0 + 2 * lane + 1);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        constexpr int kN = kVCols / 2;
        float4 a[kN], b[kN];
#pragma unroll
        for (int u = 0; u < kN; ++u)
            a[u] = __ldg(r0 + c0 + half * kN + u), b[u] = __ldg(r1 + c0 + half * kN + u);
#pragma unroll
        for (int u = 0; u < kN; ++u) {
            const float av[4] = {a[u].x, a[u].y, a[u].z, a[u].w}, bv[4] = {b[u].x, b[u].y, b[u].z, b[u].w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                uint32_t h, l;
                split2(av[e], bv[e], h, l);
                const int w =
                    ((4 * (c0 + half * kN + u) + e) * kVStride + 2 * lane) / 2;  // consecutive words
                vh[w] = h, vl[w] = l;
            }
        }
    }
}

// A warp's state: each of its lane's two rows' (g, g + 8) running max and share of the sum, and the
// output accumulators (kHd / 8 n8 tiles).
template <int kHd>
struct WarpRows {
    float m[2], l[2], o[kHd / 8][4];
};

// The warp's 16 rows of q * scale * log2(e) (scores in base 2: the softmax takes exp2f) into shared
// memory as hi and lo halves, rows past nt zero; its state reset.
template <int kHd>
__device__ void load_q(const MmaArgs& p, int64_t t0, int64_t h, __half* qs, WarpRows<kHd>& w) {
    using S = Smem<kHd>;
    const int lane = threadIdx.x % 32, first = threadIdx.x / 32 * 16;
    const float scale = p.a.scale * 1.44269504088896341f;
    uint32_t* qh = reinterpret_cast<uint32_t*>(qs);
    uint32_t* ql = qh + S::kQHalves / 2;
    for (int i = lane; i < 16 * kHd / 2; i += 32) {
        const int r = first + i / (kHd / 2), c = i % (kHd / 2);
        const int64_t row = t0 + r;
        float2 x = make_float2(0.0f, 0.0f);
        if (row < p.nt) {
            const float* src = p.q + row * p.a.q_stride + h * kHd + 2 * c;
            x = make_float2(src[0] * scale, src[1] * scale);
        }
        split2(x.x, x.y, qh[(r * S::kKStride) / 2 + c], ql[(r * S::kKStride) / 2 + c]);
    }
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r) w.m[r] = -INFINITY, w.l[r] = 0.0f;
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) w.o[n][e] = 0.0f;
}

// This lane's row address for ldmatrix_x4 of the warp's A fragment (a0..a3) of k16 block 0 of the Q halves
// at `q`: matrix i is rows 8 (i % 2).., columns 8 (i / 2)..
template <int kHd>
__device__ __forceinline__ const __half* q_row(const __half* q) {
    const int lane = threadIdx.x % 32;
    return q + (threadIdx.x / 32 * 16 + lane % 8 + 8 * (lane / 8 % 2)) * Smem<kHd>::kKStride +
           8 * (lane / 16);
}

// s = (q * scale * log2(e)) . k for the warp's 16 rows and the tile's 64 keys (n8 tile n: keys 8n..8n + 7).
template <int kHd>
__device__ void score_tile(const __half* sh, float (&s)[kKeys / 8][4]) {
    using S = Smem<kHd>;
    const __half* row = fragment_row(sh, sh + S::kKHalves, S::kKStride);
    const __half* qrow = q_row<kHd>(sh + 2 * (S::kKHalves + S::kVHalves));
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
        uint32_t qh[4], ql[4];
        ldmatrix_x4(qh, qrow + 16 * kk);
        ldmatrix_x4(ql, qrow + S::kQHalves + 16 * kk);
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
            uint32_t b[4];
            ldmatrix_x4(b, row + 8 * n * S::kKStride + 16 * kk);
            mma3(s[n], qh, ql, b[0], b[1], b[2], b[3]);
        }
    }
}

// The tile's online-softmax step for the lane's rows (keys j >= lim[r] masked to -inf where the warp's
// rows see only part of the tile): s becomes p = exp2(s - m) in place; sums and outputs are rescaled by
// exp2(m_old - m_new) when some row's max grew (a row without a key yet keeps p = 0).
template <int kHd>
__device__ void softmax_tile(float (&s)[kKeys / 8][4], WarpRows<kHd>& w, const int (&lim)[2], int lo,
                             int j0) {
    const int t = threadIdx.x % 4;
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mt = -INFINITY;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[n][2 * r + e];
                if (j0 + kKeys > lo && j0 + 8 * n + 2 * t + e >= lim[r]) x = -INFINITY;
                mt = fmaxf(mt, x);
            }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float m_new = fmaxf(w.m[r], mt), base = m_new == -INFINITY ? 0.0f : m_new;
        corr[r] = exp2f(w.m[r] - base);
        w.m[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[n][2 * r + e];
                x = exp2f(x - base);
                sum += x;
            }
        w.l[r] = fmaf(w.l[r], corr[r], sum);
    }
    if (!__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) return;  // o * 1 is o
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) w.o[n][e] *= corr[e / 2];
}

// o += p v over the tile's keys: the score tiles 2kk and 2kk + 1 are the A fragment of keys 16kk..16kk+15.
template <int kHd>
__device__ void accumulate_tile(const float (&s)[kKeys / 8][4], const __half* sh, WarpRows<kHd>& w) {
    using S = Smem<kHd>;
    const __half* vt = sh + 2 * S::kKHalves;
    const __half* row = fragment_row(vt, vt + S::kVHalves, kVStride);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t ah[4], al[4];
        split2(s[2 * kk][0], s[2 * kk][1], ah[0], al[0]);
        split2(s[2 * kk][2], s[2 * kk][3], ah[1], al[1]);
        split2(s[2 * kk + 1][0], s[2 * kk + 1][1], ah[2], al[2]);
        split2(s[2 * kk + 1][2], s[2 * kk + 1][3], ah[3], al[3]);
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            uint32_t b[4];
            ldmatrix_x4(b, row + 8 * n * kVStride + 16 * kk);
            mma3(w.o[n], ah, al, b[0], b[1], b[2], b[3]);
        }
    }
}

// out = o / l for the warp's rows that the launch serves (0 for a row that saw no key).
template <int kHd>
__device__ void write_rows(const MmaArgs& p, const WarpRows<kHd>& w, const bool (&served)[2], int64_t t0,
                           int64_t h) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = w.l[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (!served[r]) continue;
        const int64_t row = t0 + threadIdx.x / 32 * 16 + g + 8 * r;
        float* out = p.out + (row * p.a.n_head + h) * kHd + 2 * t;
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            out[8 * n] = l > 0.0f ? w.o[n][2 * r] / l : 0.0f;
            out[8 * n + 1] = l > 0.0f ? w.o[n][2 * r + 1] / l : 0.0f;
        }
    }
}

// One block: query rows [t0, t0 + kRows) of head blockIdx.x, one pass per sequence among them.
template <int kHd>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill_mma_kernel(MmaArgs p) {
    begin_kernel();
    extern __shared__ __align__(16) __half sh[];
    __shared__ RowTable rt;
    const int lane = threadIdx.x % 32, g = lane / 4;
    const int64_t h = blockIdx.x, t0 = int64_t(gridDim.y - 1 - blockIdx.y) * kRows;  // heaviest tiles first
    const int64_t col = h / (p.a.n_head / p.a.n_head_kv) * kHd;
    const int row0 = threadIdx.x / 32 * 16 + g;
    fill_rows(p, t0, rt);
    __syncthreads();
    const bool served[2] = {rt.slot[row0] >= 0, rt.slot[row0 + 8] >= 0};
    WarpRows<kHd> w;
    load_q<kHd>(p, t0, h, sh + 2 * (Smem<kHd>::kKHalves + Smem<kHd>::kVHalves), w);
    for (next_pass(rt); rt.seq >= 0; next_pass(rt)) {
        const int seq = rt.seq, hi = rt.hi;
        const int lim[2] = {rt.slot[row0] == -2 - seq ? rt.n[row0] : 0,
                            rt.slot[row0 + 8] == -2 - seq ? rt.n[row0 + 8] : 0};
        const int32_t* blocks = p.at.table ? p.at.table + int64_t(seq) * p.at.max_blocks : nullptr;
        const int lo = __reduce_min_sync(0xffffffffu, min(lim[0], lim[1]));  // every row sees keys [0, lo)
        for (int j0 = 0; j0 < hi; j0 += kKeys) {
            __syncthreads();  // every warp is done with the previous tile
            load_tile<kHd>(p, blocks, col, j0, hi, sh);
            __syncthreads();
            if (!__any_sync(0xffffffffu, lim[0] > j0 || lim[1] > j0)) continue;  // none of the warp's rows
            float s[kKeys / 8][4];
            score_tile<kHd>(sh, s);
            softmax_tile<kHd>(s, w, lim, lo, j0);
            accumulate_tile<kHd>(s, sh, w);
        }
    }
    write_rows<kHd>(p, w, served, t0, h);
}

template <int kHd>
void launch_mma(const MmaArgs& p, Stream s) {
    auto* kernel = attention_prefill_mma_kernel<kHd>;
    static const bool raised = [&] {
        check(
            int(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<kHd>::kBytes)),
            "attention_prefill_mma shared memory limit");
        return true;
    }();
    (void)raised;
    const dim3 grid(unsigned(p.a.n_head), unsigned((p.nt + kRows - 1) / kRows));
    launch("attention_prefill_mma kernel", kernel, grid, kThreads, size_t(Smem<kHd>::kBytes), s, p);
}

}  // namespace

bool attention_prefill_mma_fills(const AttnShape& a, int64_t nt) {
    return a.n_head * ((nt + kRows - 1) / kRows) >= gpu_warps() / 32;
}

bool attention_prefill_mma_fits(const AttnShape& a, int64_t nt) {
    return a.window == 0 && !a.sinks && (a.head_dim == 64 || a.head_dim == 128) && a.n_head_kv > 0 &&
           a.n_head % a.n_head_kv == 0 && nt > 0 && (nt + kRows - 1) / kRows <= 65535;
}

void attention_prefill_mma(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt,
                           const AttnShape& a, float* out, Stream s, AttnRows rows) {
    if (nt <= 0) return;
    if (!attention_prefill_mma_fits(a, nt))
        throw Error("CUDA attention_prefill_mma: unsupported head layout (head_dim " +
                    std::to_string(a.head_dim) + ", " + std::to_string(nt) + " rows)");
    if (r.n_embd % 4 != 0 || !aligned16(r.k) || !aligned16(r.v) || r.n_ctx > INT32_MAX)
        throw Error("CUDA attention_prefill_mma: KV rows not 16-byte aligned or region too long");
    const MmaArgs p{q, r, at, out, a, nt, rows};
    if (a.head_dim == 64) return launch_mma<64>(p, s);
    launch_mma<128>(p, s);
}

}  // namespace minfer::cuda
