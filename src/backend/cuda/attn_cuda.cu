// Attention over the persistent KV region and the fused QKV epilogue. One thread block serves one query
// head (with GQA the heads of a KV head read its rows from L2 each): its warps take tiles of 8 keys in
// turn, four lanes scoring each key, the warp updating its online softmax once per tile, then
// accumulating p * v with the lanes along the head's elements; the warps combine at the end. Decode
// splits long contexts over the blocks of a thread-block cluster (split-K), which merge their partial
// softmaxes through distributed shared memory: no second kernel and no partials in global memory.
//
// For one sequence, one head per block measured faster than one block per KV head serving its whole group
// (which reads each row once): a short context had only n_head_kv blocks on the GPU. H200, tg128:
// Qwen2.5-0.5B Q4_K_M 1,355-1,364 -> 1,544-1,553 tok/s, at depth 3968 747 -> 1,115; Qwen2.5-1.5B 716 ->
// 794-797 (git history of bench/PERF-NOTES-GPU.md). A batch of decode rows fills the GPU either way, and
// there a block per KV head and row (each warp scoring a tile's keys for all the group's heads, the same
// arithmetic per head) wins: Qwen2.5-7B at 64 rows 72.6 -> 44.2 us a layer, S_TG 4,661 -> 5,074 tok/s.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/sinks.cuh"
#include "util/error.h"

namespace minfer::cuda {

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kWarps = 8;      // warps per block
constexpr int kMaxSplits = 8;  // blocks per cluster: the portable cluster size

__device__ int64_t lmin(int64_t a, int64_t b) {
    return a < b ? a : b;
}
__device__ int64_t lmax(int64_t a, int64_t b) {
    return a > b ? a : b;
}

struct AttnArgs {
    const float* q;
    KvRegion r;
    KvSlots at;
    float* out;
    AttnShape a;
    int64_t nt;
    int splits;  // blocks along z, one cluster; each walks a share of the keys
    AttnRows rows;
};

// Keys a warp takes at once (a tile): kLanesPerKey lanes score each, every lane's loads in flight
// together, then the warp updates the softmax once and adds the tile's p * v.
constexpr int kTile = 8;
constexpr int kLanesPerKey = kWarp / kTile;

// The keys are cut into tiles. A split gets at least kWarps tiles (one per warp) before the next split
// gets any, so a short context runs in one block per head and skips the cluster merge.
struct KeyShare {
    int64_t tiles, per_split;
    int active;  // splits with keys (at least 1)
    __device__ KeyShare(int64_t n_kv, int splits)
        : tiles((n_kv + kTile - 1) / kTile),
          per_split(lmax(int64_t(kWarps), (tiles + splits - 1) / splits)),
          active(int(lmax(int64_t(1), (tiles + per_split - 1) / per_split))) {}
};

// The first key a query at position pos sees: 0, or with a sliding window pos - window + 1.
__device__ int64_t first_key(const AttnShape& a, int64_t pos) {
    return a.window > 0 ? lmax(0, pos - a.window + 1) : 0;
}

// Online-softmax state of one warp: the running max m (the same in every lane), this lane's share of
// the running sum l, and the lane's elements lane + 32 e of the unnormalized output.
template <int kE>
struct WarpState {
    float m = -INFINITY, l = 0.0f, acc[kE] = {};
};

// The lane's part of its key's row: the key's kLanesPerKey lanes take interleaved 16-byte words of the
// row (kC = 2 kE words each at most), all loaded before any is used.
template <int kE>
__device__ void load_key(const float* kr, int64_t hd, float4 (&k)[2 * kE]) {
    const int part = threadIdx.x % kLanesPerKey;
#pragma unroll
    for (int c = 0; c < 2 * kE; ++c) {
        const int64_t d = (c * kLanesPerKey + part) * 4;
        k[c] = d < hd ? __ldg(reinterpret_cast<const float4*>(kr + d)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// (q * scale) . k for the lane's key from its loaded words; q comes from shared memory. Each lane's part
// is a chain of hd / 16 FMA groups, then two shuffles join the key's lanes.
template <int kE>
__device__ float dot_key(const float4 (&k)[2 * kE], const float* sq, int64_t hd) {
    const int part = threadIdx.x % kLanesPerKey;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int c = 0; c < 2 * kE; ++c) {
        const int64_t d = (c * kLanesPerKey + part) * 4;
        if (d >= hd) break;
        const float4 q = reinterpret_cast<const float4*>(sq + d)[0];
        a.x = fmaf(q.x, k[c].x, a.x), a.y = fmaf(q.y, k[c].y, a.y);
        a.z = fmaf(q.z, k[c].z, a.z), a.w = fmaf(q.w, k[c].w, a.w);
    }
    float v = (a.x + a.y) + (a.z + a.w);
#pragma unroll
    for (int o = 1; o < kLanesPerKey; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One tile of keys [j0, j0 + kTile) ∩ [lo, n_kv) of the sequence whose block-table row is `blocks`, for
// one warp and the block's g query heads (sq: their q rows, sp: their tile probabilities): lanes
// 4i..4i+3 load key j0 + i once and score it for every head; per head the warp updates the max once, then
// the lanes run along the head's elements and add p_j * v_j over the tile's keys (the tile's v rows
// loaded together, once for all heads; p read back from the head's sp).
template <int kE, int kG>
__device__ void walk_tile(const AttnArgs& p, const int32_t* blocks, const float* sq, float (&sp)[kG][kTile],
                          int64_t kvh, int64_t j0, int64_t lo, int64_t n_kv, int g, WarpState<kE> (&st)[kG]) {
    const int lane = threadIdx.x % kWarp, key = lane / kLanesPerKey;
    const int64_t hd = p.a.head_dim, j = j0 + key;
    const int32_t shift = p.at.block_shift;
    float sg[kG];
    {
        float4 k[2 * kE];
        load_key<kE>(p.r.k + row_slot(blocks, shift, lmin(j, n_kv - 1)) * p.r.n_embd + kvh * hd, hd, k);
#pragma unroll
        for (int h = 0; h < kG; ++h)
            if (h < g) {
                const float dot = dot_key<kE>(k, sq + h * hd, hd);  // every lane: the shuffles need them all
                sg[h] = j >= lo && j < n_kv ? dot : -INFINITY;
            }
    }
    float vv[kTile][kE];
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
        const float* vr = p.r.v + row_slot(blocks, shift, lmin(j0 + i, n_kv - 1)) * p.r.n_embd + kvh * hd;
#pragma unroll
        for (int e = 0; e < kE; ++e) vv[i][e] = lane + kWarp * e < hd ? __ldg(vr + lane + kWarp * e) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        if (h >= g) break;  // uniform across the block
        const float m_new = fmaxf(st[h].m, warp_max(sg[h])), corr = expf(st[h].m - m_new);
        const float pr = expf(sg[h] - m_new);
        st[h].l = fmaf(st[h].l, corr, lane % kLanesPerKey == 0 ? pr : 0.0f);
#pragma unroll
        for (int e = 0; e < kE; ++e) st[h].acc[e] *= corr;
        st[h].m = m_new;
        if (lane % kLanesPerKey == 0) sp[h][key] = pr;
    }
    __syncwarp();
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        if (h >= g) break;
        const float4 p0 = reinterpret_cast<const float4*>(sp[h])[0],
                     p1 = reinterpret_cast<const float4*>(sp[h])[1];
        const float pk[kTile] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int i = 0; i < kTile; ++i)
#pragma unroll
            for (int e = 0; e < kE; ++e) st[h].acc[e] = fmaf(pk[i], vv[i][e], st[h].acc[e]);
    }
    __syncwarp();  // sp is rewritten by the next tile
}

// A split's softmax state, kept in shared memory for the other blocks of its cluster: max and sum here,
// the unnormalized acc row after the warps' in the dynamic shared memory.
struct SplitState {
    float m, l;
};

// Thread-block cluster of the splits: block r writes the head's elements r, r + splits, ..., merging the
// states of every split (read through distributed shared memory) in split order, as one kernel.
__device__ void merge_splits(const AttnArgs& p, SplitState& mine, float* my_acc, int64_t h, int64_t t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's state is written
    const int64_t hd = p.a.head_dim;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        if (d % p.splits != int64_t(cluster.block_rank())) continue;
        float ms[kMaxSplits], ls[kMaxSplits], as[kMaxSplits];  // every split's state, loaded together
#pragma unroll
        for (int sp = 0; sp < kMaxSplits; ++sp) {
            if (sp >= p.splits) break;
            const SplitState* o = cluster.map_shared_rank(&mine, sp);
            ms[sp] = o->m, ls[sp] = o->l, as[sp] = cluster.map_shared_rank(my_acc, sp)[d];
        }
        float m = -INFINITY, l = 0.0f, acc = 0.0f;
#pragma unroll
        for (int sp = 0; sp < kMaxSplits; ++sp)
            if (sp < p.splits && ls[sp] > 0.0f) m = fmaxf(m, ms[sp]);
#pragma unroll
        for (int sp = 0; sp < kMaxSplits; ++sp) {
            if (sp >= p.splits || ls[sp] == 0.0f) continue;
            const float f = expf(ms[sp] - m);
            l += ls[sp] * f;
            acc += as[sp] * f;
        }
        const SinkJoin j = join_sink(m, l, p.a.sinks, h);
        p.out[(t * p.a.n_head + h) * hd + d] = j.sum > 0.0f ? acc * j.scale / j.sum : 0.0f;
    }
    cluster.sync();  // no block leaves while another still reads its state
#endif
}

// Starts the L2 fetch of the K and V rows [j0, j1) of one head (hd floats at `off` in each row). The rows
// before the query's own were written by earlier steps and the positions by the host before this step's
// first kernel, so this runs before waiting for the previous kernel (which writes the query's row: a line
// fetched early is updated in L2 by that write).
__device__ void prefetch_keys(const KvRegion& r, const int32_t* blocks, int32_t shift, int64_t off,
                              int64_t hd, int64_t j0, int64_t j1) {
    const int64_t lines = (hd * int64_t(sizeof(float)) + 127) / 128, per_row = 2 * lines;
    for (int64_t k = threadIdx.x; k < (j1 - j0) * per_row; k += blockDim.x) {
        const int64_t j = row_slot(blocks, shift, j0 + k / per_row), line = k % per_row % lines;
        const float* row = (k % per_row < lines ? r.k : r.v) + j * r.n_embd + off;
        prefetch_l2(reinterpret_cast<const char*>(row) + line * 128);
    }
}

// The warps' states merged in shared memory, per head of the block (sh_acc: [kG][kWarps + 1][hd]): the
// output itself when this split holds every key, else the split's state for merge_splits (kG = 1, the
// head's row kWarps).
template <int kE, int kG>
__device__ void merge_warps(const AttnArgs& p, const WarpState<kE> (&st)[kG], float (&sh_m)[kG][kWarps],
                            float (&sh_l)[kG][kWarps], float* sh_acc, SplitState& split, int64_t h0, int g,
                            int64_t t, int active) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t hd = p.a.head_dim;
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        if (h >= g) break;
        const float l = warp_sum(st[h].l);
        if (lane == 0) sh_m[h][warp] = st[h].m, sh_l[h][warp] = l;
#pragma unroll
        for (int e = 0; e < kE; ++e)
            if (lane + kWarp * e < hd)
                sh_acc[(h * (kWarps + 1) + warp) * hd + lane + kWarp * e] = st[h].acc[e];
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < g * hd; k += blockDim.x) {
        const int64_t h = k / hd, d = k % hd;
        const float* acc_h = sh_acc + h * (kWarps + 1) * hd;
        float m = -INFINITY, sum = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh_m[h][w]);
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float f = sh_l[h][w] == 0.0f ? 0.0f : expf(sh_m[h][w] - m);
            sum += sh_l[h][w] * f;
            acc += acc_h[w * hd + d] * f;
        }
        if (active == 1) {
            const SinkJoin j = join_sink(m, sum, p.a.sinks, h0 + h);
            p.out[(t * p.a.n_head + h0 + h) * hd + d] = j.sum > 0.0f ? acc * j.scale / j.sum : 0.0f;
            continue;
        }
        if (d == 0) split.m = m, split.l = sum;
        sh_acc[kWarps * hd + d] = acc;
    }
}

// One block: kG query heads of one KV head (1, or the whole group when the keys are not split), one
// query row, one split of the keys (KeyShare); its warps take the split's tiles in turn, each tile's K
// and V rows read once for all the block's heads, then merge their states in shared memory. Each head's
// arithmetic is the same whatever kG, so the outputs are the same bits. The block's K and V rows are
// fetched into L2 before it waits for the previous kernel.
template <int kE, int kG>
__device__ __forceinline__ void attention_body(const AttnArgs& p) {
    release_next();
    __shared__ float sh_m[kG][kWarps], sh_l[kG][kWarps];
    __shared__ __align__(16) float sh_p[kWarps][kG][kTile];  // each warp's tile probabilities, as float4
    __shared__ SplitState split;
    extern __shared__ float sh_acc[];  // [kG][kWarps + 1][hd]: the warps', the split's; then q [kG][hd]
    const int warp = threadIdx.x / kWarp;
    const int64_t hd = p.a.head_dim, t = blockIdx.y, group = p.a.n_head / p.a.n_head_kv;
    const int64_t per_kv = (group + kG - 1) / kG, kvh = blockIdx.x / per_kv;
    const int64_t first_head = blockIdx.x % per_kv * kG, h0 = kvh * group + first_head;
    const int g = int(lmin(kG, group - first_head));
    if (!serves_row(p.rows, p.at, t, p.nt)) return;
    const int64_t n_kv = lmin(int64_t(p.at.pos[t]) + 1, seq_capacity(p.at, p.r));
    const int64_t lo = first_key(p.a, p.at.pos[t]), tile0 = lo / kTile;  // a window's first key and tile
    const int32_t* blocks = seq_blocks(p.at, t);
    const KeyShare share(n_kv - tile0 * kTile, p.splits);
    if (share.active == 1 && blockIdx.z > 0) return;  // split 0 holds every key: no merge
    const int64_t first = tile0 + blockIdx.z * share.per_split;
    const int64_t last = lmin(tile0 + share.tiles, first + share.per_split);
    prefetch_keys(p.r, blocks, p.at.block_shift, kvh * hd, hd, first * kTile, lmin(n_kv, last * kTile));
    wait_for_inputs();

    float* sq = sh_acc + kG * (kWarps + 1) * hd;  // q * scale
    const float* qt = p.q + t * p.a.q_stride + h0 * hd;
    for (int64_t d = threadIdx.x; d < g * hd; d += blockDim.x) sq[d] = qt[d] * p.a.scale;
    __syncthreads();
    WarpState<kE> st[kG];
    for (int64_t tile = first + warp; tile < last; tile += kWarps)
        walk_tile<kE, kG>(p, blocks, sq, sh_p[warp], kvh, tile * kTile, lo, n_kv, g, st);
    merge_warps<kE, kG>(p, st, sh_m, sh_l, sh_acc, split, h0, g, t, share.active);
    if (kG == 1 && share.active > 1) merge_splits(p, split, sh_acc + kWarps * hd, h0, t);
}

// One query head a block (its keys split over a cluster when long); a KV head's query heads a block. At
// head_dim 128 the latter is held to 128 registers, two blocks an SM (no spills): 7B at 64 rows S_TG
// 5,074 -> 5,284 tok/s. At head_dim 64 a wide grid has fewer blocks than SMs, and 0.5B measured best as
// the compiler allocates (S_TG at 64 rows 19,549 against 19,030 held).
template <int kE>
__global__ void attention_kernel(AttnArgs p) {
    attention_body<kE, 1>(p);
}
template <int kE>
__global__ void attention_group_kernel(AttnArgs p) {
    attention_body<kE, 8>(p);
}
__global__ void __launch_bounds__(kWarps* kWarp, 2) attention_group128_kernel(AttnArgs p) {
    attention_body<4, 8>(p);
}

__global__ void causal_softmax_kernel(float* scores, const int32_t* pos, int64_t nt, int64_t n_kv,
                                      int64_t window, const float* sinks) {
    begin_kernel();
    const int64_t t = blockIdx.x, h = blockIdx.y;
    float* row = scores + (h * nt + t) * n_kv;
    const int64_t limit = lmin(int64_t(pos[t]) + 1, n_kv);
    const int64_t lo = window > 0 ? lmax(0, int64_t(pos[t]) - window + 1) : 0;
    float mx = -INFINITY;
    for (int64_t j = lo + threadIdx.x; j < limit; j += blockDim.x) mx = fmaxf(mx, row[j]);
    __shared__ float red[kWarp];
    for (int o = kWarp / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = mx;
    __syncthreads();
    mx = sinks ? sinks[h] : -INFINITY;
    for (int w = 0; w < int(blockDim.x / kWarp); ++w) mx = fmaxf(mx, red[w]);
    float sum = 0.0f;
    for (int64_t j = lo + threadIdx.x; j < limit; j += blockDim.x) sum += (row[j] = expf(row[j] - mx));
    const float inv = 1.0f / (block_sum(sum) + (sinks ? expf(sinks[h] - mx) : 0.0f));
    for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x)
        row[j] = j >= lo && j < limit ? row[j] * inv : 0.0f;
}

struct EpilogueArgs {
    const float *q, *k, *v;
    KvSlots at;
    QkvEpilogue e;
    float* q_out;
    KvRegion r;
};

// RoPE of element d of a head at position p: its partner element and the rotation's cosine and sine,
// from the table when it covers p, else evaluated (rope_cos_sin). Elements past n_rot keep their value
// (c = 1, s = 0).
struct RopeTerm {
    int64_t partner;
    float c, s;
};
__device__ RopeTerm rope_term(int64_t d, int32_t p, const RopeShape& r, const RopeTable& t) {
    const int64_t half = r.n_rot / 2;
    if (d >= r.n_rot) return {d, 1.0f, 0.0f};
    const int64_t i = r.neox ? d % half : d / 2;
    const bool first = r.neox ? d < half : d % 2 == 0;
    const int64_t partner = r.neox ? (first ? d + half : d - half) : (first ? d + 1 : d - 1);
    float c, s;
    if (t.cs && p < t.n_pos) {
        const float2 cs = reinterpret_cast<const float2*>(t.cs)[p * half + i];
        c = cs.x, s = cs.y;
    } else {
        rope_cos_sin(p, i, r, c, s);
    }
    return {partner, c, first ? -s : s};
}

__global__ void rope_table_kernel(RopeShape r, int64_t n_pos, float2* cs) {
    begin_kernel();
    const int64_t half = r.n_rot / 2;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n_pos * half;
         k += int64_t(gridDim.x) * blockDim.x) {
        float c, s;
        rope_cos_sin(int32_t(k / half), k % half, r, c, s);
        cs[k] = make_float2(c, s);
    }
}

// Block b < n_head: Q head b; then the K heads; then the V heads. One thread per element. The bias, the
// norm weight and the RoPE angle do not depend on the previous kernel: they are ready before waiting.
__global__ void qkv_epilogue_kernel(EpilogueArgs p) {
    release_next();
    extern __shared__ float sh[];  // [head_dim]
    const QkvEpilogue& e = p.e;
    const int64_t hd = e.rope.head_dim, t = blockIdx.y, d = threadIdx.x, n_q = e.rope.n_head;
    const int64_t b = blockIdx.x, pos = p.at.pos[t];
    const int kind = b < n_q ? 0 : b < n_q + e.n_head_kv ? 1 : 2;  // Q, K, V
    const int64_t h = kind == 0 ? b : kind == 1 ? b - n_q : b - n_q - e.n_head_kv;
    const float* src = kind == 0   ? p.q + t * e.q_stride
                       : kind == 1 ? p.k + t * e.k_stride
                                   : p.v + t * e.v_stride;
    const float* bias = kind == 0 ? e.bq : kind == 1 ? e.bk : e.bv;
    const float* norm = kind == 0 ? e.q_norm : kind == 1 ? e.k_norm : nullptr;
    const float b_d = d < hd && bias ? bias[h * hd + d] : 0.0f, w_d = d < hd && norm ? norm[d] : 0.0f;
    const RopeTerm rt = rope_term(d, int32_t(pos), e.rope, e.table);
    wait_for_inputs();
    float x = d < hd ? src[h * hd + d] + b_d : 0.0f;
    if (norm) {
        const float ss = block_sum(x * x);
        x = d < hd ? x * rsqrtf(ss / float(hd) + e.eps) * w_d : 0.0f;
    }
    if (kind != 2) {
        if (d < hd) sh[d] = x;
        __syncthreads();
        if (d < hd) x = x * rt.c + sh[rt.partner] * rt.s;
    }
    if (d >= hd) return;
    if (kind == 0) {
        p.q_out[t * n_q * hd + h * hd + d] = x;
    } else if (const int64_t slot = own_slot(p.at, p.r, t); slot >= 0) {
        (kind == 1 ? p.r.k : p.r.v)[slot * p.r.n_embd + h * hd + d] = x;
    }
}

__global__ void expand_kv_kernel(KvRegion r, int64_t n_head, int64_t group, int64_t hd, float* k_out,
                                 float* v_out) {
    begin_kernel();
    const int64_t j = blockIdx.x, q4 = hd / 4, n4 = n_head * q4;
    const float4* k = reinterpret_cast<const float4*>(r.k + j * r.n_embd);
    const float4* v = reinterpret_cast<const float4*>(r.v + j * r.n_embd);
    float4* ko = reinterpret_cast<float4*>(k_out) + j * n4;
    float4* vo = reinterpret_cast<float4*>(v_out) + j * n4;
    for (int64_t c = threadIdx.x; c < n4; c += blockDim.x) {
        const int64_t src = c / q4 / group * q4 + c % q4;  // head c / q4 reads KV head (c / q4) / group
        ko[c] = k[src];
        vo[c] = v[src];
    }
}

}  // namespace

int attention_splits(const AttnShape& a, int64_t nt, int64_t n_ctx) {
    if ((nt > 1 && !a.one_token_splits) || !block_clusters()) return 1;  // nt * n_head blocks already
    return int(
        std::clamp<int64_t>(264 / std::max<int64_t>(a.n_head, 1), 1, std::min<int64_t>(kMaxSplits, n_ctx)));
}

namespace {

// kG query heads a block (1, or 8: blocks per KV head, head_dim <= 4 kWarp), e = head_dim / 32 rounded up.
template <int kG>
void launch_attention(const AttnArgs& p, int e, int64_t blocks_x, Stream s) {
    const dim3 grid(unsigned(blocks_x), unsigned(p.nt), unsigned(p.splits));
    const size_t shmem = size_t(kG * (kWarps + 2) * p.a.head_dim) * sizeof(float);
    auto* kernel = kG == 1 ? (e == 1   ? attention_kernel<1>
                              : e == 2 ? attention_kernel<2>
                              : e <= 4 ? attention_kernel<4>
                                       : attention_kernel<8>)
                           : (e == 1   ? attention_group_kernel<1>
                              : e == 2 ? attention_group_kernel<2>
                                       : attention_group128_kernel);
    launch_clustered("attention kernel", kernel, grid, dim3(1, 1, unsigned(p.splits)), kWarps * kWarp, shmem,
                     s, p);
}

}  // namespace

bool attention_blocks_per_kv_head(const AttnShape& a, int64_t nt, int64_t n_ctx) {
    return attention_splits(a, nt, n_ctx) == 1 && a.n_head > a.n_head_kv && a.n_head / a.n_head_kv <= 8 &&
           a.head_dim <= 4 * kWarp;
}

void attention(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt, const AttnShape& a,
               float* out, Stream s, AttnRows rows, AttnBlocks blocks) {
    if (nt <= 0) return;
    if (a.head_dim > 256 || a.head_dim % 4 != 0 || a.n_head % a.n_head_kv != 0)
        throw Error("CUDA attention: unsupported head layout (head_dim " + std::to_string(a.head_dim) + ")");
    const bool per_kv = attention_blocks_per_kv_head(a, nt, r.n_ctx);
    if (blocks == AttnBlocks::PerKvHead && !per_kv)
        throw Error(
            "CUDA attention: blocks per KV head need unsplit keys, groups of at most 8, head_dim <= 128");
    const AttnArgs p{q, r, at, out, a, nt, attention_splits(a, nt, r.n_ctx), rows};
    const int e = int((a.head_dim + kWarp - 1) / kWarp);
    // Blocks per KV head once there are at least kPerKvRows of them (nt * n_head_kv); fewer would leave
    // SMs idle that per-head blocks fill. Not tuned: 7B and 0.5B take them at 32 and 64 rows (measured
    // faster), not at 8 (not measured).
    constexpr int64_t kPerKvRows = 64;
    const bool grouped = blocks == AttnBlocks::PerKvHead ||
                         (blocks == AttnBlocks::Auto && per_kv && nt * a.n_head_kv >= kPerKvRows);
    if (grouped) return launch_attention<8>(p, e, a.n_head_kv, s);
    launch_attention<1>(p, e, a.n_head, s);
}

void causal_softmax(float* scores, const int32_t* pos, int64_t nt, int64_t n_head, int64_t n_kv, Stream s,
                    int64_t window, const float* sinks) {
    if (nt <= 0 || n_kv <= 0) return;
    launch("causal_softmax kernel", causal_softmax_kernel, dim3(unsigned(nt), unsigned(n_head)), 256, 0, s,
           scores, pos, nt, n_kv, window, sinks);
}

void expand_kv_heads(const KvRegion& r, int64_t n_kv, int64_t n_head, int64_t group, int64_t head_dim,
                     float* k_out, float* v_out, Stream s) {
    if (head_dim % 4 != 0 || r.n_embd % 4 != 0)
        throw Error("CUDA expand_kv_heads: head_dim not a multiple of 4");
    if (n_kv <= 0) return;
    launch("expand_kv kernel", expand_kv_kernel, unsigned(n_kv), 256, 0, s, r, n_head, group, head_dim, k_out,
           v_out);
}

void rope_table(const RopeShape& r, int64_t n_pos, float* cs, Stream s) {
    const int64_t n = n_pos * (r.n_rot / 2);
    if (n <= 0) return;
    launch("rope_table kernel", rope_table_kernel, unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0,
           s, r, n_pos, reinterpret_cast<float2*>(cs));
}

void qkv_epilogue(const float* q, const float* k, const float* v, const KvSlots& at, int64_t nt,
                  const QkvEpilogue& e, float* q_out, const KvRegion& r, Stream s) {
    if (nt <= 0) return;
    const int64_t hd = e.rope.head_dim;
    if (hd > 1024) throw Error("CUDA QKV epilogue: head_dim " + std::to_string(hd) + " is over 1024");
    const dim3 grid(unsigned(e.rope.n_head + 2 * e.n_head_kv), unsigned(nt));
    const unsigned threads = unsigned((hd + kWarp - 1) / kWarp * kWarp);
    launch("qkv_epilogue kernel", qkv_epilogue_kernel, grid, threads, size_t(hd) * sizeof(float), s,
           EpilogueArgs{q, k, v, at, e, q_out, r});
}

}  // namespace minfer::cuda
