// Attention over the persistent KV region and the fused QKV epilogue. One thread block serves up to
// kMaxGroup query heads that share a KV head (GQA), so each K/V row is read once for the whole group;
// its warps walk disjoint keys with an online softmax and combine at the end. Decode splits the keys
// over the blocks of a thread-block cluster (split-K), which merge their partial softmaxes through
// distributed shared memory: no second kernel and no partials in global memory.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/reduce.cuh"
#include "util/error.h"

namespace minfer::cuda {

namespace {

constexpr int kWarp = kWarpSize;
constexpr int kWarps = 8;      // warps per block
constexpr int kMaxGroup = 8;   // query heads per block
constexpr int kMaxSplits = 8;  // blocks per cluster: the portable cluster size

__device__ int64_t lmin(int64_t a, int64_t b) {
    return a < b ? a : b;
}

struct AttnArgs {
    const float* q;
    KvRegion r;
    const int32_t* pos;
    float* out;
    AttnShape a;
    int groups_per_kv;  // blocks per KV head along x (ceil(group / kMaxGroup))
    int splits;         // blocks along z, one cluster; each walks a share of the keys
};

// Online-softmax state of one warp for G heads; lane holds elements lane + 32 e of each head.
template <int kE>
struct WarpState {
    float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][kE];
};

template <int kE>
__device__ void walk_keys(const AttnArgs& p, const float (&q)[kMaxGroup][kE], int G, int64_t kvh, int64_t j0,
                          int64_t j1, WarpState<kE>& st) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t hd = p.a.head_dim;
    for (int64_t j = j0 + warp; j < j1; j += kWarps) {
        const float* kr = p.r.k + j * p.r.n_embd + kvh * hd;
        const float* vr = p.r.v + j * p.r.n_embd + kvh * hd;
        float kv[kE], vv[kE];
#pragma unroll
        for (int e = 0; e < kE; ++e) {
            const int64_t d = lane + kWarp * e;
            kv[e] = d < hd ? kr[d] : 0.0f;
            vv[e] = d < hd ? vr[d] : 0.0f;
        }
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
            if (g >= G) break;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < kE; ++e) s += q[g][e] * kv[e];
            s = warp_sum(s) * p.a.scale;
            const float m_new = fmaxf(st.m[g], s), corr = expf(st.m[g] - m_new), pr = expf(s - m_new);
            st.l[g] = st.l[g] * corr + pr;
#pragma unroll
            for (int e = 0; e < kE; ++e) st.acc[g][e] = st.acc[g][e] * corr + pr * vv[e];
            st.m[g] = m_new;
        }
    }
}

// A split's softmax state for its heads, kept in shared memory for the other blocks of its cluster: max
// and sum here, the unnormalized acc rows after the warps' in the dynamic shared memory.
struct SplitState {
    float m[kMaxGroup], l[kMaxGroup];
};

// Thread-block cluster of the splits: block r writes heads r, r + splits, ... of the output, merging the
// states of every split (read through distributed shared memory) in split order, as one kernel.
__device__ void merge_splits(const AttnArgs& p, SplitState& mine, float* my_acc, int G, int64_t h0,
                             int64_t t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's state is written
    const int64_t hd = p.a.head_dim;
    for (int64_t k = threadIdx.x; k < G * hd; k += blockDim.x) {
        const int g = int(k / hd);
        const int64_t d = k % hd;
        if (g % p.splits != int(cluster.block_rank())) continue;
        float m = -INFINITY;
        for (int sp = 0; sp < p.splits; ++sp) {
            const SplitState* o = cluster.map_shared_rank(&mine, sp);
            if (o->l[g] > 0.0f) m = fmaxf(m, o->m[g]);
        }
        float l = 0.0f, acc = 0.0f;
        for (int sp = 0; sp < p.splits; ++sp) {
            const SplitState* o = cluster.map_shared_rank(&mine, sp);
            if (o->l[g] == 0.0f) continue;
            const float f = expf(o->m[g] - m);
            l += o->l[g] * f;
            acc += cluster.map_shared_rank(my_acc, sp)[g * hd + d] * f;
        }
        p.out[(t * p.a.n_head + h0 + g) * hd + d] = l > 0.0f ? acc / l : 0.0f;
    }
    cluster.sync();  // no block leaves while another still reads its state
#endif
}

// One block: up to kMaxGroup heads of one KV head, one query row, one split of the keys.
template <int kE>
__global__ void attention_kernel(AttnArgs p) {
    begin_kernel();
    __shared__ float sh_m[kWarps][kMaxGroup], sh_l[kWarps][kMaxGroup];
    __shared__ SplitState split;
    extern __shared__ float sh_acc[];  // [kWarps + 1][kMaxGroup][head_dim]: the warps', then the split's
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t hd = p.a.head_dim, group = p.a.n_head / p.a.n_head_kv, t = blockIdx.y;
    const int64_t kvh = blockIdx.x / p.groups_per_kv,
                  h0 = kvh * group + (blockIdx.x % p.groups_per_kv) * kMaxGroup;
    const int G = int(lmin(int64_t(kMaxGroup), kvh * group + group - h0));
    const int64_t n_kv = lmin(int64_t(p.pos[t]) + 1, p.r.n_ctx);
    const int64_t chunk = (n_kv + p.splits - 1) / p.splits, j0 = blockIdx.z * chunk;
    const int64_t j1 = lmin(n_kv, j0 + chunk);

    float q[kMaxGroup][kE];
    WarpState<kE> st;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
        st.m[g] = -INFINITY;
        st.l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < kE; ++e) {
            const int64_t d = lane + kWarp * e;
            q[g][e] = g < G && d < hd ? p.q[t * p.a.q_stride + (h0 + g) * hd + d] : 0.0f;
            st.acc[g][e] = 0.0f;
        }
    }
    walk_keys<kE>(p, q, G, kvh, j0, j1, st);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
        if (lane == 0) sh_m[warp][g] = st.m[g], sh_l[warp][g] = st.l[g];
#pragma unroll
        for (int e = 0; e < kE; ++e)
            if (lane + kWarp * e < hd) sh_acc[(warp * kMaxGroup + g) * hd + lane + kWarp * e] = st.acc[g][e];
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < G * hd; k += blockDim.x) {
        const int g = int(k / hd);
        const int64_t d = k % hd;
        float m = -INFINITY;
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh_m[w][g]);
        float l = 0.0f, acc = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
            if (sh_l[w][g] == 0.0f) continue;
            const float f = expf(sh_m[w][g] - m);
            l += sh_l[w][g] * f;
            acc += sh_acc[(w * kMaxGroup + g) * hd + d] * f;
        }
        const int64_t h = h0 + g;
        if (p.splits == 1) {
            p.out[(t * p.a.n_head + h) * hd + d] = l > 0.0f ? acc / l : 0.0f;
            continue;
        }
        if (d == 0) split.m[g] = m, split.l[g] = l;
        sh_acc[(kWarps * kMaxGroup + g) * hd + d] = acc;
    }
    if (p.splits > 1) merge_splits(p, split, sh_acc + kWarps * kMaxGroup * hd, G, h0, t);
}

__global__ void causal_softmax_kernel(float* scores, const int32_t* pos, int64_t nt, int64_t n_kv) {
    begin_kernel();
    const int64_t t = blockIdx.x, h = blockIdx.y;
    float* row = scores + (h * nt + t) * n_kv;
    const int64_t limit = lmin(int64_t(pos[t]) + 1, n_kv);
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) mx = fmaxf(mx, row[j]);
    __shared__ float red[kWarp];
    for (int o = kWarp / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < int(blockDim.x / kWarp); ++w) mx = fmaxf(mx, red[w]);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) sum += (row[j] = expf(row[j] - mx));
    const float inv = 1.0f / block_sum(sum);
    for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) row[j] = j < limit ? row[j] * inv : 0.0f;
}

struct EpilogueArgs {
    const float *q, *k, *v;
    const int32_t* pos;
    QkvEpilogue e;
    float* q_out;
    KvRegion r;
};

// RoPE of element d of a head held in `sh` (all threads of the block call it; x is sh[d]).
__device__ float rope_element(const float* sh, int64_t d, float x, int32_t p, const RopeShape& r) {
    const int64_t half = r.n_rot / 2;
    if (d >= r.n_rot) return x;
    const int64_t i = r.neox ? d % half : d / 2;
    const bool first = r.neox ? d < half : d % 2 == 0;
    const int64_t partner = r.neox ? (first ? d + half : d - half) : (first ? d + 1 : d - 1);
    const double theta = double(p) * pow(double(r.freq_base), -2.0 * double(i) / double(r.n_rot));
    double sd, cd;
    sincos(theta, &sd, &cd);
    const float c = float(cd), s = float(sd);
    return first ? x * c - sh[partner] * s : sh[partner] * s + x * c;
}

// Block b < n_head: Q head b; then the K heads; then the V heads. One thread per element.
__global__ void qkv_epilogue_kernel(EpilogueArgs p) {
    begin_kernel();
    extern __shared__ float sh[];  // [head_dim]
    const QkvEpilogue& e = p.e;
    const int64_t hd = e.rope.head_dim, t = blockIdx.y, d = threadIdx.x, n_q = e.rope.n_head;
    const int64_t b = blockIdx.x, pos = p.pos[t];
    const int kind = b < n_q ? 0 : b < n_q + e.n_head_kv ? 1 : 2;  // Q, K, V
    const int64_t h = kind == 0 ? b : kind == 1 ? b - n_q : b - n_q - e.n_head_kv;
    const float* src = kind == 0   ? p.q + t * e.q_stride
                       : kind == 1 ? p.k + t * e.k_stride
                                   : p.v + t * e.v_stride;
    const float* bias = kind == 0 ? e.bq : kind == 1 ? e.bk : e.bv;
    const float* norm = kind == 0 ? e.q_norm : kind == 1 ? e.k_norm : nullptr;
    float x = d < hd ? src[h * hd + d] + (bias ? bias[h * hd + d] : 0.0f) : 0.0f;
    if (norm) {
        const float ss = block_sum(x * x);
        x = d < hd ? x * rsqrtf(ss / float(hd) + e.eps) * norm[d] : 0.0f;
    }
    if (kind != 2) {
        if (d < hd) sh[d] = x;
        __syncthreads();
        if (d < hd) x = rope_element(sh, d, x, int32_t(pos), e.rope);
    }
    if (d >= hd) return;
    if (kind == 0) {
        p.q_out[t * n_q * hd + h * hd + d] = x;
    } else if (pos >= 0 && pos < p.r.n_ctx) {
        (kind == 1 ? p.r.k : p.r.v)[pos * p.r.n_embd + h * hd + d] = x;
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
    if (nt > 1 || !block_clusters()) return 1;  // prefill has nt * n_head blocks already
    const int64_t blocks = a.n_head_kv * ((a.n_head / a.n_head_kv + kMaxGroup - 1) / kMaxGroup);
    return int(
        std::clamp<int64_t>(264 / std::max<int64_t>(blocks, 1), 1, std::min<int64_t>(kMaxSplits, n_ctx)));
}

void attention(const float* q, const KvRegion& r, const int32_t* pos, int64_t nt, const AttnShape& a,
               float* out, Stream s) {
    if (nt <= 0) return;
    if (a.head_dim > 256 || a.n_head % a.n_head_kv != 0)
        throw Error("CUDA attention: unsupported head layout (head_dim " + std::to_string(a.head_dim) + ")");
    const int64_t group = a.n_head / a.n_head_kv;
    const AttnArgs p{
        q, r, pos, out, a, int((group + kMaxGroup - 1) / kMaxGroup), attention_splits(a, nt, r.n_ctx)};
    const dim3 grid(unsigned(a.n_head_kv * p.groups_per_kv), unsigned(nt), unsigned(p.splits));
    const size_t shmem = size_t((kWarps + 1) * kMaxGroup * a.head_dim) * sizeof(float);
    const int e = int((a.head_dim + kWarp - 1) / kWarp);
    auto* kernel = e == 1   ? attention_kernel<1>
                   : e == 2 ? attention_kernel<2>
                   : e <= 4 ? attention_kernel<4>
                            : attention_kernel<8>;
    static const bool wide_smem = [] {  // head_dim 256 takes 72 KB, over the default 48 KB
        constexpr int kMaxBytes = (kWarps + 1) * kMaxGroup * 256 * int(sizeof(float));
        for (auto* k : {attention_kernel<1>, attention_kernel<2>, attention_kernel<4>, attention_kernel<8>})
            MINFER_CUDA_CHECK(
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxBytes));
        return true;
    }();
    static_cast<void>(wide_smem);
    launch_clustered("attention kernel", kernel, grid, dim3(1, 1, unsigned(p.splits)), kWarps * kWarp, shmem,
                     s, p);
}

void causal_softmax(float* scores, const int32_t* pos, int64_t nt, int64_t n_head, int64_t n_kv, Stream s) {
    if (nt <= 0 || n_kv <= 0) return;
    launch("causal_softmax kernel", causal_softmax_kernel, dim3(unsigned(nt), unsigned(n_head)), 256, 0, s,
           scores, pos, nt, n_kv);
}

void expand_kv_heads(const KvRegion& r, int64_t n_kv, int64_t n_head, int64_t group, int64_t head_dim,
                     float* k_out, float* v_out, Stream s) {
    if (head_dim % 4 != 0 || r.n_embd % 4 != 0)
        throw Error("CUDA expand_kv_heads: head_dim not a multiple of 4");
    if (n_kv <= 0) return;
    launch("expand_kv kernel", expand_kv_kernel, unsigned(n_kv), 256, 0, s, r, n_head, group, head_dim, k_out,
           v_out);
}

void qkv_epilogue(const float* q, const float* k, const float* v, const int32_t* pos, int64_t nt,
                  const QkvEpilogue& e, float* q_out, const KvRegion& r, Stream s) {
    if (nt <= 0) return;
    const int64_t hd = e.rope.head_dim;
    if (hd > 1024) throw Error("CUDA QKV epilogue: head_dim " + std::to_string(hd) + " is over 1024");
    const dim3 grid(unsigned(e.rope.n_head + 2 * e.n_head_kv), unsigned(nt));
    const unsigned threads = unsigned((hd + kWarp - 1) / kWarp * kWarp);
    launch("qkv_epilogue kernel", qkv_epilogue_kernel, grid, threads, size_t(hd) * sizeof(float), s,
           EpilogueArgs{q, k, v, pos, e, q_out, r});
}

}  // namespace minfer::cuda
