// Helpers of the CUDA op tests and the attention kernels' check against attention_ref, shared by
// test_ops_cuda.cpp (the decode kernel, cuda::attention), test_attn_prefill_cuda.cpp (the query-tiled
// prefill kernels, cuda::attention_prefill and cuda::attention_prefill_mma) and test_attn_paged_cuda.cpp:
// random data, budgeted comparisons, a random KV region, and each kernel's error budget, derived from its
// order of roundings (u = 2^-24).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_ref.h"
#include "backend/cuda/attn_prefill_mma.h"
#include "backend/cuda/ops_cuda.h"
#include "cuda/cuda_test_util.h"

namespace minfer::test {

using Vec = std::vector<float>;
using Tol = std::vector<double>;
using Pos = std::vector<int32_t>;

inline constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of f32

inline Vec uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng);
    return v;
}

// A device buffer of n floats, all NaN (0xffffffff), so that elements left unwritten fail.
inline void fill_nan(DeviceBuffer<float>& b, int64_t n) {
    MINFER_CUDA_CHECK(cudaMemset(b.get(), 0xff, size_t(n) * sizeof(float)));
}

inline void sync() {
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
}

// Expects |got[i] - want[i]| <= tol[i] for every i (NaN fails); reports the count and the worst ratio.
inline void expect_within(const Vec& got, const Vec& want, const Tol& tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    ASSERT_EQ(tol.size(), want.size()) << what;
    size_t bad = 0, worst = 0;
    double worst_badness = -1.0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(want[i]));
        if (!(err <= tol[i])) ++bad;
        const double badness = std::isnan(err) ? INFINITY
                               : tol[i] > 0.0  ? err / tol[i]
                               : err > 0.0     ? INFINITY
                                               : 0.0;
        if (badness > worst_badness) worst = i, worst_badness = badness;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " outside the budget; worst at "
                       << worst << ": got " << got[worst] << ", want " << want[worst] << ", budget "
                       << tol[worst];
}

// ---- attention

struct AttnCase {
    int64_t n_head, n_head_kv, head_dim;
};

// (40, 2, 64) has a group of 20 query heads per KV head (20 blocks read the same rows).
inline constexpr AttnCase kAttnShapes[] = {{14, 2, 64},  {4, 2, 128},  {8, 4, 8},  {32, 8, 128},
                                           {16, 16, 64}, {12, 2, 128}, {40, 2, 64}};

// A persistent KV region filled with random rows everywhere (rows past a query's limit included, so
// that reading one row too many changes the result), and its host copy.
struct TestRegion {
    int64_t n_embd, n_ctx;
    Vec k, v;
    DeviceBuffer<float> dk, dv;
    TestRegion(int64_t n_embd_, int64_t n_ctx_, std::mt19937& rng)
        : n_embd(n_embd_),
          n_ctx(n_ctx_),
          k(uniform(rng, n_embd_ * n_ctx_, -1.0f, 1.0f)),
          v(uniform(rng, n_embd_ * n_ctx_, -1.0f, 1.0f)),
          dk(k),
          dv(v) {}
    cuda::KvRegion view() const { return {dk.get(), dv.get(), n_embd, n_ctx}; }
};

// What a head's budget scales with: s_max = max_j sum_d |q_d k_jd| and v_max = max |v| over the head's
// first n_kv rows (at column offset off).
struct HeadBounds {
    double s_max = 0.0, v_max = 0.0;
    double q_abs = 0.0, k_abs = 0.0;  // sum_d |q_d|, max_j sum_d |k_jd| (attention_prefill_mma_tol)
};

inline HeadBounds head_bounds(const float* qh, const cpu::KvRows& rows, int64_t off, int64_t hd,
                              int64_t n_kv) {
    HeadBounds b;
    for (int64_t d = 0; d < hd; ++d) b.q_abs += std::fabs(double(qh[d]));
    for (int64_t j = 0; j < n_kv; ++j) {
        const float *kj = rows.k_row(j) + off, *vj = rows.v_row(j) + off;
        double s = 0.0, k = 0.0;
        for (int64_t d = 0; d < hd; ++d) {
            s += std::fabs(double(qh[d]) * double(kj[d]));
            k += std::fabs(double(kj[d]));
            b.v_max = std::max(b.v_max, std::fabs(double(vj[d])));
        }
        b.s_max = std::max(b.s_max, s);
        b.k_abs = std::max(b.k_abs, k);
    }
    return b;
}

inline HeadBounds head_bounds(const float* qh, const TestRegion& reg, int64_t off, int64_t hd, int64_t n_kv) {
    return head_bounds(qh, cpu::contiguous_rows(reg.k.data(), reg.v.data(), reg.n_embd, reg.n_ctx), off, hd,
                       n_kv);
}

// Budget of one head's output of cuda::attention, in units of u and max|v| over the keys it sees:
// - scores: (q * scale) . k split over 4 lanes, each four chains of hd/16 FMAs joined by two adds, then
//   two shuffle adds, plus the rounding of q * scale: hd/16 + 5 roundings, and s - m in the exponent:
//   |ds| <= (hd/16 + 9)u S with S = scale * max_j sum_d |q_d k_jd|; moving every score by at most ds
//   moves the softmax-weighted mean by at most 2 ds max|v|, i.e. (hd/8 + 18)u S ((hd/8 + 22)u S
//   budgeted);
// - weights and sums: expf (2 ulp), the running sums of p and p v along a warp's K keys (K + ~15
//   roundings with the once-per-tile rescales and the warp sum of l), the 8-warp merge (~10), the split
//   merge (<= 16 splits: ~20) and the division, for acc and l each: <= 2K + 110 roundings relative to
//   sum p|v| / l <= max|v|. K follows the kernel's key share: tiles of 8 keys, at least 8 tiles (one per
//   warp) per split, the warps of a split taking its tiles in turn.
// Worst case; the observed error is a random walk far below it. One key too many or too few (n_kv <=
// 2048) moves the output by ~1e-3 max|v|, wrong head mapping or a bad merge by O(max|v|).
inline double attention_tol(const HeadBounds& b, int64_t hd, int64_t n_kv, float scale, int splits) {
    const int64_t tiles = (n_kv + 7) / 8, per_split = std::max<int64_t>(8, (tiles + splits - 1) / splits);
    const double keys_per_warp = 8.0 * double((per_split + 7) / 8);
    return b.v_max * kU * (2.0 * keys_per_warp + 110.0 + (double(hd) / 8.0 + 22.0) * double(scale) * b.s_max);
}

// Budget of one head's output of cuda::attention_prefill (attn_prefill.cu's order), in units of u and
// max|v| over the K = n_kv keys it sees, in T = ceil(K / 32) tiles of 32 keys, which up to 8 splits walk
// in disjoint runs (split s: K_s keys in T_s tiles), merged as sum_s o_s f_s / sum_s l_s f_s with
// f_s = expf(m_s - m); without splits the same order less the merge's terms:
// - scores: q * scale rounded once, then one chain of hd FMAs: |ds| <= (hd + 1)u S with S = scale *
//   max_j sum_d |q_d k_jd|; s - m rounded in the exponent adds 2u S. A key's weight is then off by a
//   relative (hd + 3)u S at most either way; weights off by relative amounts in [a, b] move the
//   weighted mean by at most (b - a) max|v|: (2hd + 6)u S;
// - rescales: once per tile where a row's max grows (corr is exactly 1 elsewhere), acc and l are scaled
//   by the same corr = expf(m_old - m_new), so its error moves only the weights of earlier keys against
//   later ones: expf's 2 ulp (4u) per rescale, and the exponent's roundings, whose arguments sum to
//   m_last - m_first <= 2S within a split: a key's weight is off by at most 4T_s u + 2u S; f_s likewise
//   scales o_s and l_s together, off by 4u + 2u S (expf, and m_s - m rounded, |m_s - m| <= 2S). Two keys
//   of splits s and s' differ by at most 4(T_s + T_s')u + 8u + 8u S <= 4Tu + 8u + 8u S; expf of each p
//   (4u either way): 8u;
// - sums: p v enters its element's one accumulator by an FMA and rides along every later key's FMA and
//   every rescale of its split, then the merge's 8 FMAs at most: K + T + 8 roundings relative to
//   sum p|v| <= l max|v|; l is a lane's 4 keys added in pairs, one FMA per tile, 3 shuffle adds, then
//   the merge: T + 13; the division and the reference's rounding to f32: 2.
// Total K + 6T + 39 + (2hd + 14) S roundings of max|v| (K + 6T + 15 + (2hd + 8) S unsplit); budgeted
// K + 6T + 64 + (2hd + 22) S. Worst case: the observed error is a random walk far below it. One key too
// many or too few moves the output by ~max|v| / K (>= 6e-4 max|v| for K <= 1600; not resolved by the
// budget at K ~ 4096, where a tile of 32 keys too many or too few still is), wrong head mapping, a bad
// tile or a bad merge by O(max|v|).
inline double attention_prefill_tol(const HeadBounds& b, int64_t hd, int64_t n_kv, float scale) {
    const double keys = double(n_kv), tiles = double((n_kv + 31) / 32);
    return b.v_max * kU * (keys + 6.0 * tiles + 64.0 + (2.0 * double(hd) + 22.0) * double(scale) * b.s_max);
}

// Budget of one head's output of cuda::attention_prefill_mma (attn_prefill_mma.cu: f32 operands as hi + lo
// halves, three f16 tensor-core products each, f32 accumulators), in units of u and max|v| over the K =
// n_kv keys, in T = ceil(K / 64) tiles, with S = scale * max_j sum_d |q_d k_jd| as above:
// - the halves: x = hi + lo + e with |e| <= 2^-22 |x| = 4u|x| while lo is normal, and |e| <= 2^-25 when
//   lo is subnormal; lo * lo (<= 4u |x y|) is left out. A score is off by (4 + 4 + 4)u S, plus
//   0.5u (K1 + scale Q1) from subnormal rests (K1 = max_j sum_d |k_jd|, Q1 = sum_d |q_d|);
// - the tensor cores (Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores"): the exact products
//   of an m16n8k16 step and its accumulator are added aligned to the largest exponent and truncated, so
//   each of the <= 17 addends loses less than 2u of the largest, whose size is at most the sum of
//   magnitudes: 34u S per step, 3 hd / 16 steps a score; s - m rounded in the exponent (base 2: log2(e)
//   folded into the scale, one more rounding, and exp2f's 2 ulp as expf's): 2u S. A score off
//   by ds moves the weighted mean by 2 ds max|v|: 2 (14 + 102 hd / 16) S + K1 + scale Q1;
// - rescales and expf as attention_prefill_tol's: 4T + 2S + 8;
// - p as hi + lo: 4u relative either way (8), or 2^-25 absolute (subnormal rest), K/2 over l >= 1;
// - the sums p v: 34u of sum p|v| <= l max|v| per step, 3 K / 16 steps (6.375 K), T rescales; l: a lane's
//   16 keys a tile added in order, one FMA a tile, two shuffle adds (K/4 + T + 2); the division and the
//   reference's rounding: 2.
// Total 7.125 K + 6T + 20 + (30 + 12.75 hd) S + K1 + scale Q1 roundings of max|v|; budgeted 7.5 K + 6T +
// 64 + (40 + 13 hd) S + K1 + scale Q1. Worst case: the observed error is a random walk far below it.
inline double attention_prefill_mma_tol(const HeadBounds& b, int64_t hd, int64_t n_kv, float scale) {
    const double keys = double(n_kv), tiles = double((n_kv + 63) / 64), s = double(scale) * b.s_max;
    return b.v_max * kU *
           (7.5 * keys + 6.0 * tiles + 64.0 + (40.0 + 13.0 * double(hd)) * s + b.k_abs +
            double(scale) * b.q_abs);
}

// Runs fn(t) for every t in [0, n) over up to 16 threads (references for long prefills are slow).
template <class Fn>
void parallel_rows(int64_t n, const Fn& fn) {
    const int64_t workers = std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, 16);
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < std::min(workers, n); ++w)
        pool.emplace_back([&fn, w, n, workers] {
            for (int64_t t = w; t < n; t += workers) fn(t);
        });
    for (std::thread& th : pool) th.join();
}

// cuda::attention, cuda::attention_prefill, cuda::attention_prefill_mma
enum class AttnKernel { Decode, Prefill, PrefillMma };

// The kernel's budget for one head (splits: attention_splits, for the decode kernel).
inline double attention_kernel_tol(AttnKernel kernel, const HeadBounds& b, int64_t hd, int64_t n_kv,
                                   float scale, int splits) {
    switch (kernel) {
        case AttnKernel::Decode:
            return attention_tol(b, hd, n_kv, scale, splits);
        case AttnKernel::Prefill:
            return attention_prefill_tol(b, hd, n_kv, scale);
        case AttnKernel::PrefillMma:
            return attention_prefill_mma_tol(b, hd, n_kv, scale);
    }
    return 0.0;
}

inline const char* attention_kernel_name(AttnKernel kernel) {
    switch (kernel) {
        case AttnKernel::Decode:
            return "attention";
        case AttnKernel::Prefill:
            return "attention_prefill";
        case AttnKernel::PrefillMma:
            return "attention_prefill_mma";
    }
    return "";
}

// Runs attention for queries at `pos` over a fresh random region of n_ctx rows and checks every token
// and head against attention_ref over the region's rows [0, min(pos[t] + 1, n_ctx)) (with a sliding
// window, from pos[t] - window + 1; the budget's bounds still range over all the rows before).
inline void check_attention(const AttnCase& c, const Pos& pos, int64_t n_ctx, bool wide_q, float q_amp,
                            std::mt19937& rng, AttnKernel kernel = AttnKernel::Decode, int64_t window = 0,
                            bool sinks = false) {
    const int64_t nt = int64_t(pos.size()), hd = c.head_dim, row = c.n_head * hd, n_embd = c.n_head_kv * hd;
    const int64_t q_stride = wide_q ? row + 2 * n_embd : row;  // Q inside a fused QKV buffer
    SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + ", head_dim " +
                 std::to_string(hd) + ", nt " + std::to_string(nt) + ", pos[0] " + std::to_string(pos[0]) +
                 ", n_ctx " + std::to_string(n_ctx) + ", q_stride " + std::to_string(q_stride) + ", window " +
                 std::to_string(window));
    const TestRegion reg(n_embd, n_ctx, rng);
    const Vec q = uniform(rng, nt * q_stride, -q_amp, q_amp);
    cuda::AttnShape a{c.n_head, c.n_head_kv, hd, q_stride, float(1.0 / std::sqrt(double(hd)))};
    a.window = window;
    const Vec sink = sinks ? uniform(rng, c.n_head, -2.0f, 4.0f) : Vec{};
    DeviceBuffer<float> dsink(sinks ? sink : Vec(1));
    if (sinks) a.sinks = dsink.get();
    const int splits = cuda::attention_splits(a, nt, n_ctx);
    DeviceBuffer<float> dq(q), dout(size_t(nt * row));
    DeviceBuffer<int32_t> dpos(pos);
    fill_nan(dout, nt * row);
    switch (kernel) {
        case AttnKernel::Decode:
            cuda::attention(dq.get(), reg.view(), dpos.get(), nt, a, dout.get(), nullptr);
            break;
        case AttnKernel::Prefill:
            cuda::attention_prefill(dq.get(), reg.view(), dpos.get(), nt, a, dout.get(), nullptr);
            break;
        case AttnKernel::PrefillMma:
            cuda::attention_prefill_mma(dq.get(), reg.view(), dpos.get(), nt, a, dout.get(), nullptr);
            break;
    }
    sync();
    Vec want(size_t(nt * row));
    Tol tol(want.size());
    const int64_t group = c.n_head / c.n_head_kv;
    parallel_rows(nt, [&](int64_t t) {
        const int64_t n_kv = std::min<int64_t>(int64_t(pos[size_t(t)]) + 1, n_ctx);
        const int64_t first = window > 0 ? std::max<int64_t>(0, pos[size_t(t)] - window + 1) : 0;
        const float* qt = q.data() + t * q_stride;
        const cpu::KvRows rows = cpu::contiguous_rows(reg.k.data(), reg.v.data(), n_embd, n_ctx);
        cpu::attention_ref(qt, rows, want.data() + t * row, c.n_head, c.n_head_kv, hd, first, n_kv, a.scale,
                           sinks ? sink.data() : nullptr);
        for (int64_t h = 0; h < c.n_head; ++h) {
            const float* qh = qt + h * hd;
            const int64_t off = (h / group) * hd;
            const HeadBounds b = head_bounds(qh, reg, off, hd, n_kv);
            std::fill_n(tol.begin() + t * row + h * hd, hd,
                        attention_kernel_tol(kernel, b, hd, n_kv, a.scale, splits));
        }
    });
    expect_within(dout.download(), want, tol, attention_kernel_name(kernel));
}

}  // namespace minfer::test
