// Prefill attention (more than kMaxMatvecTokens query rows) as one query-tiled ("flash") kernel in plain
// f32: no score matrix in memory, no K/V copies for GQA. A thread block of 2 warps takes 32 consecutive
// query rows of one query head and walks the keys its rows see in tiles of 32: the tile's K and V rows
// are copied into shared memory with cp.async (V while the scores are computed, the next K while P V
// is accumulated: one buffer each), every lane holds a 4 x 4 register tile of scores (4 query rows by 4
// keys) and a 4 x hd/8 tile of the output (the same rows, 8 lanes across the head's elements). Each
// row's online softmax (running max, sum, rescale once per tile) is joined over the row's 8 lanes by
// shuffles; the probabilities go through shared memory to the lanes of the same warp that multiply
// them by V. The causal mask is applied only on the tiles that some row of the block does not see
// whole; the tiles a block walks end at the largest key count of its rows, from the positions on the
// device (any order; pos[t] = n_past + t in practice, where only the last tile or two are masked).
//
// Small grids split the keys (flash-decoding style): grid z holds up to 8 splits of each (head, query
// tile), one thread-block cluster, each walking a run of the tiles and merging its rows' partial
// softmaxes (max, sum, unnormalized output, the latter over its Q rows in shared memory) with the
// others' through distributed shared memory: no second kernel, no partials in global memory. The host
// sizes the splits (about kBlocksPerSm blocks per SM: Qwen2.5-0.5B's 14 heads x 16 query tiles at 512
// rows run 8 splits, Qwen2.5-7B's 28 x 16 run 4) from the grid and the region, as it does not know the
// positions; each block finds its run from its rows' key count, runs of at least kMinTiles tiles, so a
// short context has fewer active splits and the idle blocks exit at once (a cluster barrier waits only
// for threads that have not exited). One split per head of 224 blocks of 2 warps on 132 SMs was
// latency-bound: H200 pp512 at depth 3584, Qwen2.5-0.5B 22,258 tok/s against 37,331 with cuBLAS.
//
// One block per query head, not per KV head serving its group: the group's blocks for one query tile
// are adjacent in launch order (grid x is the head), so they read the same K and V rows from L2, and a
// block per KV head would leave Qwen2.5-0.5B (2 KV heads) with 32 blocks at 512 tokens, or need
// group-sized tiles. The heaviest query tiles (the last rows, which see the most keys) are launched
// first. Shared-memory traffic per FMA: a lane's score step over 4 elements of the head loads 4 float4
// of Q (the same for the row's 8 lanes) and 4 of K (a warp reads 8 rows, padded onto distinct banks)
// for 64 FMAs; its P V step per key loads one float4 of P and hd/32 of V for hd/2 FMAs. ptxas (sm_90):
// 156 registers at head_dim 64, 192 at 128, no spills; 30 and 55 KB of shared memory per block (6 and 4
// blocks per SM).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kv_slots.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/sinks.cuh"
#include "util/error.h"

namespace minfer::cuda {

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kRowWarps = 2;  // warps per block, 16 query rows each
constexpr int kThreads = kRowWarps * kWarp;
constexpr int kTy = 4, kTx = 8;             // a warp's lanes: 4 row groups by 8 key (or column) groups
constexpr int kRm = 4, kCk = 4;             // a lane's rows (ty + 4 r) and keys per tile (tx + 8 c)
constexpr int kWarpRows = kTy * kRm;        // 16
constexpr int kBq = kRowWarps * kWarpRows;  // query rows per block
constexpr int kBk = kTx * kCk;              // keys per tile
constexpr int kPad = 4;                     // floats after each Q and K row: rows start on distinct banks
constexpr int kPStride = kBq + 4;           // P is [kBk][kPStride]
static_assert(kBq == kWarp, "block_keys gives each lane one row of the block");
constexpr int kMaxSplits = 8;     // blocks per cluster: the portable cluster size
constexpr int kMinTiles = 2;      // key tiles a split gets before the next split gets any
constexpr int kBlocksPerSm = 12;  // the grid is split until it has about this many blocks per SM

struct PrefillArgs {
    const float* q;
    KvRegion r;
    KvSlots at;
    float* out;
    AttnShape a;
    int64_t nt;
    int splits;  // blocks along z, one cluster; each walks a share of the key tiles
    bool q_vec;  // q and q_stride on 16-byte boundaries
    AttnRows rows;
};

// Shared memory of a block, in floats: Q [kBq][hd + kPad], K [kBk][hd + kPad], V [kBk][hd], P.
constexpr int64_t smem_floats(int64_t hd) {
    return (kBq + kBk) * (hd + kPad) + kBk * hd + kBk * kPStride;
}

__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// Online-softmax state of a lane's kRm rows: running max (the same in the row's 8 lanes), this lane's
// share of the running sum, and the unnormalized output at the lane's elements 32 c + 4 tx + e.
template <int kC>
struct RowState {
    float m[kRm], l[kRm], o[kRm][kC][4];
};

// The keys the block's rows see of one sequence (the rows' segment; the unpaged layout has one): every
// row sees [0, lo), none sees a key at or past hi; lim[r] is the count of the lane's row r (0 for a row
// past nt or of another sequence); blocks is the sequence's block-table row (null when unpaged). With a
// sliding window, row r sees only keys from[r] and on: none sees a key before from_lo, every one those
// from from_hi.
struct BlockKeys {
    int lo, hi, lim[kRm];
    int from_lo, from_hi, from[kRm];
    unsigned rows;  // the rows of the sequence, a bit per row of the block
    const int32_t* blocks;
};

// The rows of the block to serve: a bit per row (lane) below nt that the launch serves.
__device__ unsigned block_rows(const PrefillArgs& p, int64_t t0) {
    const int64_t t = t0 + threadIdx.x % kWarp;
    return __ballot_sync(0xffffffffu, t < p.nt && serves_row(p.rows, p.at, t, p.nt));
}

// The keys of the sequence of the first row in `todo`, whose rows it then removes from todo.
__device__ BlockKeys block_keys(const PrefillArgs& p, int64_t t0, unsigned& todo) {
    const int lane = threadIdx.x % kWarp;
    const int64_t t = t0 + lane, first = t0 + __ffs(todo) - 1;
    const bool member = (todo >> lane & 1u) && (!p.at.table || p.at.slot[t] == p.at.slot[first]);
    todo &= ~__ballot_sync(0xffffffffu, member);
    const int n = member ? keys_seen(p.at, p.r, t) : 0;
    const int from = member && p.a.window > 0 ? int(max(int64_t(0), p.at.pos[t] - p.a.window + 1)) : 0;
    BlockKeys k;
    k.rows = __ballot_sync(0xffffffffu, member);
    k.blocks = seq_blocks(p.at, first);
    k.lo = __reduce_min_sync(0xffffffffu, t < p.nt ? n : INT_MAX);
    k.hi = __reduce_max_sync(0xffffffffu, n);
    k.from_lo = __reduce_min_sync(0xffffffffu, member ? from : INT_MAX);
    k.from_hi = __reduce_max_sync(0xffffffffu, from);
    const int row0 = threadIdx.x / kWarp * kWarpRows + lane / kTx;
#pragma unroll
    for (int r = 0; r < kRm; ++r) {
        k.lim[r] = __shfl_sync(0xffffffffu, n, row0 + kTy * r);
        k.from[r] = __shfl_sync(0xffffffffu, from, row0 + kTy * r);
    }
    return k;
}

// The key tiles [first, last) of this block's split: the block's tiles from the one holding from_lo (0
// without a window) to ceil(hi / kBk) cut into runs of `per` (at least kMinTiles), split z taking run z;
// `active` splits get a run (1 when there is no key). Every block of the cluster sees the same rows,
// hence the same share.
struct KeyShare {
    int first, last, active;
};

__device__ KeyShare key_share(int from_lo, int hi, int splits) {
    const int end = (hi + kBk - 1) / kBk, begin = min(from_lo / kBk, end), tiles = end - begin;
    const int per = max(kMinTiles, (tiles + splits - 1) / splits);
    const int first = begin + int(blockIdx.z) * per;
    return {min(first, end), min(first + per, end), max(1, (tiles + per - 1) / per)};
}

// q * scale of the block's rows into qs; rows past nt are zero. Rows on 16-byte boundaries (q_vec) are
// copied 16 bytes at a time with cp.async, which also waits for the copies already in flight (the first
// K tile), then each thread scales what it copied; other rows are read one float at a time.
__device__ void stage_q(const PrefillArgs& p, int64_t t0, int64_t h, int hd, float* qs) {
    const float* src = p.q + h * hd;
    if (!p.q_vec) {
        for (int k = threadIdx.x; k < kBq * hd; k += kThreads) {
            const int i = k / hd, d = k % hd;
            const int64_t t = t0 + i;
            qs[i * (hd + kPad) + d] = t < p.nt ? src[t * p.a.q_stride + d] * p.a.scale : 0.0f;
        }
        return;
    }
    const int q4 = hd / 4;
    for (int k = threadIdx.x; k < kBq * q4; k += kThreads) {
        const int i = k / q4, c = k % q4;
        float* dst = qs + i * (hd + kPad) + 4 * c;
        if (t0 + i < p.nt)
            cp_async16(dst, src + (t0 + i) * p.a.q_stride + 4 * c);
        else
            *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    cp_async_commit();
    cp_async_wait();
    for (int k = threadIdx.x; k < kBq * q4; k += kThreads) {
        float4& v = *reinterpret_cast<float4*>(qs + k / q4 * (hd + kPad) + 4 * (k % q4));
        v.x *= p.a.scale, v.y *= p.a.scale, v.z *= p.a.scale, v.w *= p.a.scale;
    }
}

// Starts copying the sequence's rows [j0, j0 + kBk) of one head (hd floats at `col`) into dst, rows
// `stride` floats apart; rows at or past `end` repeat row end - 1 (finite, and masked out of every row).
__device__ void load_tile(const float* src, const PrefillArgs& p, const BlockKeys& keys, int64_t col, int j0,
                          int hd, float* dst, int stride) {
    const int q4 = hd / 4, end = keys.hi;
    for (int k = threadIdx.x; k < kBk * q4; k += kThreads) {
        const int i = k / q4, c = k % q4;
        const int64_t j = row_slot(keys.blocks, p.at.block_shift, j0 + i < end ? j0 + i : end - 1);
        cp_async16(dst + i * stride + 4 * c, src + j * p.r.n_embd + col + 4 * c);
    }
    cp_async_commit();
}

// s[r][c] = (q * scale) . k for the lane's rows and keys: one chain of hd FMAs each.
template <int kC, bool kExact>
__device__ void score_tile(const float* qs, const float* ks, int hd, float (&s)[kRm][kCk]) {
    const int lane = threadIdx.x % kWarp;
    const float* qb = qs + (threadIdx.x / kWarp * kWarpRows + lane / kTx) * (hd + kPad);
    const float* kb = ks + (lane % kTx) * (hd + kPad);
#pragma unroll
    for (int r = 0; r < kRm; ++r)
#pragma unroll
        for (int c = 0; c < kCk; ++c) s[r][c] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < (kExact ? 32 * kC : hd); d += 4) {
        float4 qf[kRm], kf[kCk];
#pragma unroll
        for (int r = 0; r < kRm; ++r)
            qf[r] = *reinterpret_cast<const float4*>(qb + r * kTy * (hd + kPad) + d);
#pragma unroll
        for (int c = 0; c < kCk; ++c)
            kf[c] = *reinterpret_cast<const float4*>(kb + c * kTx * (hd + kPad) + d);
#pragma unroll
        for (int r = 0; r < kRm; ++r)
#pragma unroll
            for (int c = 0; c < kCk; ++c) {
                s[r][c] = fmaf(qf[r].x, kf[c].x, s[r][c]);
                s[r][c] = fmaf(qf[r].y, kf[c].y, s[r][c]);
                s[r][c] = fmaf(qf[r].z, kf[c].z, s[r][c]);
                s[r][c] = fmaf(qf[r].w, kf[c].w, s[r][c]);
            }
    }
}

// One tile's online-softmax step for the lane's rows: on a masked tile, keys j >= lim[r] (or, in a sliding
// window, j < from[r]) get -inf; the
// row max is joined over the row's 8 lanes; output and sum are rescaled by expf(m_old - m_new) (a row
// without a key yet keeps p = 0); p goes to ps as one float4 of the lane's rows per key.
template <int kC>
__device__ void softmax_tile(float (&s)[kRm][kCk], RowState<kC>& st, const BlockKeys& keys, int j0,
                             float* ps) {
    const int lane = threadIdx.x % kWarp, tx = lane % kTx;
    const bool masked = j0 + kBk > keys.lo || j0 < keys.from_hi;
#pragma unroll
    for (int r = 0; r < kRm; ++r) {
        float mt = -INFINITY;
#pragma unroll
        for (int c = 0; c < kCk; ++c) {
            const int j = j0 + tx + kTx * c;
            if (masked && (j >= keys.lim[r] || j < keys.from[r])) s[r][c] = -INFINITY;
            mt = fmaxf(mt, s[r][c]);
        }
#pragma unroll
        for (int o = 1; o < kTx; o *= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
        const float m_new = fmaxf(st.m[r], mt), base = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = expf(st.m[r] - base);
        st.m[r] = m_new;
#pragma unroll
        for (int c = 0; c < kCk; ++c) s[r][c] = expf(s[r][c] - base);
        st.l[r] = fmaf(st.l[r], corr, (s[r][0] + s[r][1]) + (s[r][2] + s[r][3]));
#pragma unroll
        for (int c = 0; c < kC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[r][c][e] *= corr;
    }
    float* slot = ps + threadIdx.x / kWarp * kWarpRows + lane / kTx * kRm;
#pragma unroll
    for (int c = 0; c < kCk; ++c)
        *reinterpret_cast<float4*>(slot + (tx + kTx * c) * kPStride) =
            make_float4(s[0][c], s[1][c], s[2][c], s[3][c]);
}

// o[r] += p[r][k] v[k] over the tile's keys, in key order: p of the lane's rows as one float4 from ps,
// v at the lane's elements 32 c + 4 tx.. from vs.
template <int kC, bool kExact>
__device__ void accumulate_tile(const float* ps, const float* vs, int hd, RowState<kC>& st) {
    const int lane = threadIdx.x % kWarp, tx = lane % kTx;
    const float* slot = ps + threadIdx.x / kWarp * kWarpRows + lane / kTx * kRm;
#pragma unroll 4
    for (int k = 0; k < kBk; ++k) {
        const float4 pv = *reinterpret_cast<const float4*>(slot + k * kPStride);
        const float pr[kRm] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
        for (int c = 0; c < kC; ++c) {
            if (!kExact && 32 * c + 4 * tx >= hd) continue;
            const float4 v = *reinterpret_cast<const float4*>(vs + k * hd + 32 * c + 4 * tx);
#pragma unroll
            for (int r = 0; r < kRm; ++r) {
                st.o[r][c][0] = fmaf(pr[r], v.x, st.o[r][c][0]);
                st.o[r][c][1] = fmaf(pr[r], v.y, st.o[r][c][1]);
                st.o[r][c][2] = fmaf(pr[r], v.z, st.o[r][c][2]);
                st.o[r][c][3] = fmaf(pr[r], v.w, st.o[r][c][3]);
            }
        }
    }
}

// A row's sum: the lane's share joined over the row's kTx lanes, in the same order in every lane.
__device__ float row_sum(float l) {
#pragma unroll
    for (int o = 1; o < kTx; o *= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    return l;
}

// out = o / l for the lane's rows of the sequence (0 for a row that saw no key): the block held every key.
template <int kC, bool kExact>
__device__ void write_rows(const PrefillArgs& p, const RowState<kC>& st, const BlockKeys& keys, int64_t t0,
                           int64_t h, int hd) {
    const int lane = threadIdx.x % kWarp, tx = lane % kTx;
    const int64_t row0 = t0 + threadIdx.x / kWarp * kWarpRows + lane / kTx;
#pragma unroll
    for (int r = 0; r < kRm; ++r) {
        const SinkJoin j = join_sink(st.m[r], row_sum(st.l[r]), p.a.sinks, h);
        const int64_t t = row0 + kTy * r;
        if (!(keys.rows >> (t - t0) & 1u)) continue;
        float* out = p.out + (t * p.a.n_head + h) * hd;
#pragma unroll
        for (int c = 0; c < kC; ++c) {
            if (!kExact && 32 * c + 4 * tx >= hd) continue;
#pragma unroll
            for (int e = 0; e < 4; ++e)
                out[32 * c + 4 * tx + e] = j.sum > 0.0f ? st.o[r][c][e] * j.scale / j.sum : 0.0f;
        }
    }
}

// A split's state for merge_splits: the unnormalized output of the lane's rows over their Q rows in qs
// (row stride hd + kPad; Q is no longer read, and only this warp read its rows), each row's max and sum
// into ml.
template <int kC, bool kExact>
__device__ void store_split(const RowState<kC>& st, int hd, float* qs, float2* ml) {
    const int lane = threadIdx.x % kWarp, tx = lane % kTx;
    const int row0 = threadIdx.x / kWarp * kWarpRows + lane / kTx;
#pragma unroll
    for (int r = 0; r < kRm; ++r) {
        const float l = row_sum(st.l[r]);
        const int row = row0 + kTy * r;
        if (tx == 0) ml[row] = make_float2(st.m[r], l);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
            if (!kExact && 32 * c + 4 * tx >= hd) continue;
            *reinterpret_cast<float4*>(qs + row * (hd + kPad) + 32 * c + 4 * tx) =
                make_float4(st.o[r][c][0], st.o[r][c][1], st.o[r][c][2], st.o[r][c][3]);
        }
    }
}

// The active splits of a cluster merge their states through distributed shared memory: split z < active
// writes the sequence's rows among z, z + active, ... of the block's rows, 4 elements a thread (splits
// past `active` only join the barriers), every split's state loaded before
// any is used, then merged in split order (splits where the row saw no key skipped): out = sum_s o_s f_s /
// sum_s l_s f_s with f_s = expf(m_s - m), m the largest m_s. Splits past `active` have exited: a cluster
// barrier waits only for the threads that have not.
__device__ void merge_splits(const PrefillArgs& p, const float* qs, const float2* ml, const BlockKeys& keys,
                             int64_t t0, int64_t h, int hd, int active) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every active split's state is written
    const int z = int(cluster.block_rank()), q4 = hd / 4;
    const int rows = z < active ? (kBq - z + active - 1) / active : 0;
    for (int k = threadIdx.x; k < rows * q4; k += kThreads) {
        const int i = z + active * (k / q4), c = k % q4;
        const int64_t t = t0 + i;
        if (!(keys.rows >> i & 1u)) continue;
        float2 ms[kMaxSplits];
        float4 os[kMaxSplits];
#pragma unroll
        for (int s = 0; s < kMaxSplits; ++s) {
            if (s >= active) break;
            ms[s] = cluster.map_shared_rank(ml, s)[i];
            os[s] = reinterpret_cast<const float4*>(cluster.map_shared_rank(qs, s) + i * (hd + kPad))[c];
        }
        float m = -INFINITY, l = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int s = 0; s < kMaxSplits; ++s)
            if (s < active && ms[s].y > 0.0f) m = fmaxf(m, ms[s].x);
#pragma unroll
        for (int s = 0; s < kMaxSplits; ++s) {
            if (s >= active || ms[s].y == 0.0f) continue;
            const float f = expf(ms[s].x - m);
            l = fmaf(ms[s].y, f, l);
            acc.x = fmaf(os[s].x, f, acc.x), acc.y = fmaf(os[s].y, f, acc.y);
            acc.z = fmaf(os[s].z, f, acc.z), acc.w = fmaf(os[s].w, f, acc.w);
        }
        const SinkJoin j = join_sink(m, l, p.a.sinks, h);
        const float f = j.sum > 0.0f ? j.scale / j.sum : 0.0f;
        float* out = p.out + (t * p.a.n_head + h) * hd + 4 * c;
        out[0] = acc.x * f, out[1] = acc.y * f, out[2] = acc.z * f, out[3] = acc.w * f;
    }
    cluster.sync();  // no block leaves while another still reads its state
#endif
}

template <int kC>
__device__ void init_state(RowState<kC>& st) {
#pragma unroll
    for (int r = 0; r < kRm; ++r) {
        st.m[r] = -INFINITY, st.l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < kC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[r][c][e] = 0.0f;
    }
}

// The block's rows of one sequence (keys), its split's key tiles [first, last) of [0, ceil(hi / kBk)).
// K(i) is in flight from the previous iteration (or before the loop); V(i) is copied during the scores,
// K(i + 1) during P V. A split without keys only joins the merge's barriers, or exits when this is the
// block's last sequence (a cluster barrier waits only for the threads that have not exited).
template <int kC, bool kExact>
__device__ void serve_rows(const PrefillArgs& p, const BlockKeys& keys, bool last_seq, int64_t t0, int64_t h,
                           int hd, float* sh, float2* ml) {
    const int64_t col = h / (p.a.n_head / p.a.n_head_kv) * hd;
    float* qs = sh;
    float* ks = qs + kBq * (hd + kPad);
    float* vs = ks + kBk * (hd + kPad);
    float* ps = vs + kBk * hd;
    const KeyShare share = key_share(keys.from_lo, keys.hi, p.splits);
    if (int(blockIdx.z) >= share.active) {
        if (!last_seq && share.active > 1) merge_splits(p, qs, ml, keys, t0, h, hd, share.active);
        return;
    }
    if (share.first < share.last) load_tile(p.r.k, p, keys, col, share.first * kBk, hd, ks, hd + kPad);
    stage_q(p, t0, h, hd, qs);
    RowState<kC> st;
    init_state<kC>(st);
    for (int i = share.first; i < share.last; ++i) {
        const int j0 = i * kBk;
        cp_async_wait();
        __syncthreads();  // K(i) and q are in; every warp is done with V(i - 1) and P(i - 1)
        load_tile(p.r.v, p, keys, col, j0, hd, vs, hd);
        float s[kRm][kCk];
        score_tile<kC, kExact>(qs, ks, hd, s);
        softmax_tile<kC>(s, st, keys, j0, ps);
        cp_async_wait();
        __syncthreads();  // V(i) and P(i) are in; every warp is done with K(i)
        if (i + 1 < share.last) load_tile(p.r.k, p, keys, col, j0 + kBk, hd, ks, hd + kPad);
        accumulate_tile<kC, kExact>(ps, vs, hd, st);
    }
    if (share.active == 1) return write_rows<kC, kExact>(p, st, keys, t0, h, hd);
    store_split<kC, kExact>(st, hd, qs, ml);
    merge_splits(p, qs, ml, keys, t0, h, hd, share.active);
}

// One block: query rows [t0, t0 + kBq) of head blockIdx.x, served one sequence after another (one pass
// in the unpaged layout). kC: 32-element column groups a lane may hold (head_dim <= 32 kC); kExact:
// head_dim == 32 kC. (A minimum of 1 block per SM in the launch bounds: without it ptxas held the
// head_dim-64 instance to 128 registers and spilled.)
template <int kC, bool kExact>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_kernel(PrefillArgs p) {
    begin_kernel();
    extern __shared__ __align__(16) float sh[];
    __shared__ float2 ml[kBq];  // each row's max and sum when the splits merge
    const int hd = kExact ? 32 * kC : int(p.a.head_dim);
    const int64_t h = blockIdx.x, t0 = int64_t(gridDim.y - 1 - blockIdx.y) * kBq;  // heaviest tiles first
    for (unsigned todo = block_rows(p, t0); todo != 0;) {
        const BlockKeys keys = block_keys(p, t0, todo);
        serve_rows<kC, kExact>(p, keys, todo == 0, t0, h, hd, sh, ml);
        __syncthreads();  // the next sequence's tiles and Q overwrite shared memory
    }
}

// Launches one instance, its dynamic shared-memory limit raised once to what its largest head needs.
template <int kC, bool kExact>
void launch_prefill(const PrefillArgs& p, Stream s) {
    auto* kernel = attention_prefill_kernel<kC, kExact>;
    static const bool raised = [&] {
        check(int(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem_floats(32 * kC) * int64_t(sizeof(float))))),
              "attention_prefill shared memory limit");
        return true;
    }();
    (void)raised;
    const dim3 grid(unsigned(p.a.n_head), unsigned((p.nt + kBq - 1) / kBq), unsigned(p.splits));
    launch_clustered("attention_prefill kernel", kernel, grid, dim3(1, 1, unsigned(p.splits)), kThreads,
                     size_t(smem_floats(p.a.head_dim)) * sizeof(float), s, p);
}

// Splits of the keys: enough for about kBlocksPerSm blocks per SM, at most kMaxSplits, and no more than
// the region's tiles feed with kMinTiles each (the blocks find their own share from the positions, on
// the device); 1 without clusters.
int prefill_splits(const AttnShape& a, int64_t nt, int64_t n_ctx) {
    if (!block_clusters()) return 1;
    const int64_t blocks = a.n_head * ((nt + kBq - 1) / kBq), want = kBlocksPerSm * (gpu_warps() / kWarp);
    const int64_t fed = ((n_ctx + kBk - 1) / kBk + kMinTiles - 1) / kMinTiles;
    return int(std::clamp<int64_t>((want + blocks - 1) / blocks, 1,
                                   std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, fed))));
}

}  // namespace

void attention_prefill(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt, const AttnShape& a,
                       float* out, Stream s, AttnRows rows) {
    if (nt <= 0) return;
    if (a.head_dim > 256 || a.head_dim <= 0 || a.head_dim % 4 != 0 || a.n_head_kv <= 0 ||
        a.n_head % a.n_head_kv != 0)
        throw Error("CUDA attention_prefill: unsupported head layout (head_dim " +
                    std::to_string(a.head_dim) + ")");
    if (r.n_embd % 4 != 0 || !aligned16(r.k) || !aligned16(r.v) || r.n_ctx > INT_MAX)
        throw Error("CUDA attention_prefill: KV rows not 16-byte aligned or region too long");
    if ((nt + kBq - 1) / kBq > 65535) throw Error("CUDA attention_prefill: too many query rows");
    const PrefillArgs p{
        q, r, at, out, a, nt, prefill_splits(a, nt, r.n_ctx), aligned16(q) && a.q_stride % 4 == 0, rows};
    if (a.head_dim == 64) return launch_prefill<2, true>(p, s);
    if (a.head_dim == 128) return launch_prefill<4, true>(p, s);
    if (a.head_dim <= 128) return launch_prefill<4, false>(p, s);
    launch_prefill<8, false>(p, s);
}

}  // namespace minfer::cuda
