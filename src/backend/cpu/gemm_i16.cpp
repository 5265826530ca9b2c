// The int16 prefill GEMM's driver (threads, operand buffers) and its scalar twin; the packing and
// micro-kernels are in gemm_i16_avx512.cpp.
#include "backend/cpu/gemm_i16.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/quants_impl.h"

namespace minfer::cpu::i16 {

namespace {

using quants::BlockQ8X2;
using quants::kQK0;

// One token's int8x2 blocks (quantize_x2_ref) as int16 levels 254 hi + lo (|level| <= 32385), with the
// blocks' steps d and represented sums s.
struct TokenLevels {
    std::vector<uint8_t> x2;
    std::vector<int16_t> q;   // [n_in]
    std::vector<float> d, s;  // [n_in / 32]

    void fill(const QuantTraits& qt, const float* x, int64_t n_in) {
        x2.resize(act_x2_row_bytes(n_in));
        q.resize(size_t(n_in)), d.resize(size_t(n_in / kQK0)), s.resize(size_t(n_in / kQK0));
        qt.quantize_x2_ref(x, x2.data(), n_in);
        const auto* b = reinterpret_cast<const BlockQ8X2*>(x2.data());
        for (int64_t j = 0; j < n_in / kQK0; ++j) {
            for (int l = 0; l < kQK0; ++l) q[size_t(j * kQK0 + l)] = int16_t(254 * b[j].hi[l] + b[j].lo[l]);
            d[size_t(j)] = b[j].d, s[size_t(j)] = b[j].s;
        }
    }
};

// A row's weights as to_levels gives them.
struct RowLevels {
    std::vector<int8_t> q;          // [n_in]
    std::vector<float> scale, min;  // [n_in / level_block]

    void fill(const QuantTraits& qt, const uint8_t* row, int64_t n_in) {
        const auto nb = size_t(n_in / qt.level_block);
        q.resize(size_t(n_in)), scale.resize(nb), min.resize(nb);
        qt.to_levels_ref(row, q.data(), scale.data(), min.data(), n_in);
    }
};

// Sizes of one group's or one panel's packed operands.
struct Sizes {
    size_t pairs, group_blocks, panel_blocks;
    Sizes(const QuantTraits& q, int64_t n_in)
        : pairs(size_t(n_in / 2)),
          group_blocks(size_t(n_in / kQK0)),
          panel_blocks(size_t(n_in / q.level_block)) {}
};

// Rows [o, o + nr) (nr <= kRows) packed as a Panel; rows past nr zero.
void pack_panel(const QuantTraits& q, const uint8_t* w, size_t row_bytes, int64_t o, int64_t nr, int64_t n_in,
                int32_t* pq, float* ps, float* pm) {
    thread_local std::vector<int8_t> levels;
    thread_local std::vector<float> scale, min;
    const int64_t nb = n_in / q.level_block;
    levels.resize(size_t(kRows * n_in)), scale.resize(size_t(kRows * nb)), min.resize(size_t(kRows * nb));
    std::fill(levels.begin() + nr * n_in, levels.end(), int8_t(0));
    std::fill(scale.begin() + nr * nb, scale.end(), 0.0f), std::fill(min.begin() + nr * nb, min.end(), 0.0f);
    for (int64_t r = 0; r < nr; ++r)
        q.to_levels(w + size_t(o + r) * row_bytes, &levels[size_t(r * n_in)], &scale[size_t(r * nb)],
                    &min[size_t(r * nb)], n_in);
    avx512::pack_rows(levels.data(), n_in, pq);
    for (int64_t j = 0; j < nb; ++j)
        for (int64_t r = 0; r < kRows; ++r)
            ps[j * kRows + r] = scale[size_t(r * nb + j)], pm[j * kRows + r] = min[size_t(r * nb + j)];
}

}  // namespace

void gemm(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool) {
    const Sizes sz(q, n_in);
    const size_t row_bytes = quant_row_bytes(q, n_in);
    const int64_t groups = (nt + kTokens - 1) / kTokens;
    // Every group packed once (in the calling thread's grow-only buffers), then read by every worker.
    // (Workers get plain pointers: a thread_local named inside the lambdas would be their own.)
    thread_local std::vector<int32_t> xq_buf;
    thread_local std::vector<float> xd_buf, xs_buf;
    const size_t gq = sz.pairs * kTokens, gb = sz.group_blocks * kTokens;
    if (xq_buf.size() < size_t(groups) * gq) xq_buf.resize(size_t(groups) * gq);
    if (xd_buf.size() < size_t(groups) * gb)
        xd_buf.resize(size_t(groups) * gb), xs_buf.resize(size_t(groups) * gb);
    int32_t* xq = xq_buf.data();
    float *xd = xd_buf.data(), *xs = xs_buf.data();
    pool.parallel_for(nt, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const auto g = size_t(t / kTokens);
            avx512::pack_token(x + t * n_in, n_in, t % kTokens, xq + g * gq, xd + g * gb, xs + g * gb);
        }
    });
    const MicroFn* micros = avx512::micros(q.level_block, q.level_min);
    pool.for_each_dynamic((n_out + kRows - 1) / kRows, [&](int64_t p, int) {
        thread_local std::vector<int32_t> pq;
        thread_local std::vector<float> ps, pm;
        pq.resize(sz.pairs * kRows), ps.resize(sz.panel_blocks * kRows), pm.resize(sz.panel_blocks * kRows);
        const int64_t o = p * kRows, nr = std::min(kRows, n_out - o);
        pack_panel(q, w, row_bytes, o, nr, n_in, pq.data(), ps.data(), pm.data());
        const Panel panel{pq.data(), ps.data(), pm.data()};
        for (int64_t g = 0; g < groups; ++g) {
            const Group grp{xq + size_t(g) * gq, xd + size_t(g) * gb, xs + size_t(g) * gb};
            const int64_t tn = std::min(kTokens, nt - g * kTokens);
            micros[tn - 1](panel, grp, n_in, y + g * kTokens * n_out + o, n_out, nr,
                           bias ? bias + o : nullptr);
        }
    });
}

void gemv(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool) {
    // Panels a thread claims at a time: about 32 KB of weights, as matmul's decode paths claim rows.
    constexpr size_t kChunkBytes = 32 << 10;
    const size_t row_bytes = quant_row_bytes(q, n_in);
    const auto nb32 = size_t(n_in / kQK0), nb = size_t(n_in / q.level_block);
    thread_local std::vector<int16_t> xq_buf;  // the calling thread's; workers get plain pointers
    thread_local std::vector<float> xd_buf, xs_buf;
    xq_buf.resize(size_t(nt * n_in)), xd_buf.resize(size_t(nt) * nb32), xs_buf.resize(size_t(nt) * nb32);
    for (int64_t t = 0; t < nt; ++t)
        avx512::token_row(x + t * n_in, n_in, &xq_buf[size_t(t * n_in)], &xd_buf[size_t(t) * nb32],
                          &xs_buf[size_t(t) * nb32]);
    const int16_t* xq = xq_buf.data();
    const float *xd = xd_buf.data(), *xs = xs_buf.data();
    const RowsFn dot = avx512::rows_dot(q.level_block, q.level_min);
    const bool from_blocks = avx512::blocks_dot(q.type, 1) != nullptr;
    const int64_t panels = (n_out + kRows - 1) / kRows;
    const int64_t per_task = std::max<int64_t>(1, int64_t(kChunkBytes / (row_bytes * size_t(kRows))));
    pool.parallel_for_stealing(panels, per_task, [&](int64_t p0, int64_t p1) {
        thread_local std::vector<int8_t> levels;
        thread_local std::vector<float> scale, min;
        levels.resize(size_t(kRows * n_in)), scale.resize(kRows * nb), min.resize(kRows * nb);
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t o = p * kRows, nr = std::min(kRows, n_out - o);
            const float* pb = bias ? bias + o : nullptr;
            if (from_blocks) {
                const size_t next_rows = size_t(std::clamp<int64_t>(n_out - o - kRows, 0, kRows));
                for (int64_t t0 = 0; t0 < nt; t0 += kGemvGroup) {  // later groups find the panel in cache
                    const int tn = int(std::min<int64_t>(kGemvGroup, nt - t0));
                    const bool last = t0 + tn == nt;
                    avx512::blocks_dot(q.type, tn)(
                        w + size_t(o) * row_bytes, row_bytes, xq + t0 * n_in, xd + size_t(t0) * nb32,
                        xs + size_t(t0) * nb32, n_in, y + t0 * n_out + o, n_out, nr, pb,
                        last && next_rows ? w + size_t(o + kRows) * row_bytes : nullptr,
                        last ? next_rows * row_bytes : 0);
                }
                continue;
            }
            for (int64_t r = 0; r < nr; ++r) {
                // The next row on its way while this one is read: the hardware prefetcher alone leaves
                // one core's stream short (simd_avx2.h's prefetch_ahead).
                if (o + r + 1 < n_out)
                    for (size_t b = 0; b < row_bytes; b += 64)
                        __builtin_prefetch(w + size_t(o + r + 1) * row_bytes + b);
                q.to_levels(w + size_t(o + r) * row_bytes, &levels[size_t(r * n_in)], &scale[size_t(r) * nb],
                            &min[size_t(r) * nb], n_in);
            }
            for (int64_t t = 0; t < nt; ++t)
                dot(levels.data(), scale.data(), min.data(), xq + t * n_in, xd + size_t(t) * nb32,
                    xs + size_t(t) * nb32, n_in, y + t * n_out + o, nr, pb);
        }
    });
}

void gemm_ref(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
              float* y, const float* bias) {
    const size_t row_bytes = quant_row_bytes(q, n_in);
    const int64_t lb = q.level_block;
    TokenLevels tok;
    RowLevels row;
    for (int64_t t = 0; t < nt; ++t) {
        tok.fill(q, x + t * n_in, n_in);
        for (int64_t o = 0; o < n_out; ++o) {
            row.fill(q, w + size_t(o) * row_bytes, n_in);
            float acc = 0.0f;
            for (int64_t j = 0; j < n_in / lb; ++j) {
                int32_t s = 0;
                for (int64_t i = j * lb; i < (j + 1) * lb; ++i)
                    s += int32_t(row.q[size_t(i)]) * tok.q[size_t(i)];
                const auto b = size_t(j * lb / kQK0);
                acc = std::fma(float(s), row.scale[size_t(j)] * tok.d[b], acc);
                if (q.level_min) acc = std::fma(-row.min[size_t(j)], tok.s[b], acc);
            }
            y[t * n_out + o] = bias ? acc + bias[o] : acc;
        }
    }
}

}  // namespace minfer::cpu::i16
