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

// Panel p against every group of x (gemm's layout): the panel's rows unpacked to levels and packed k-major
// (in the calling thread's buffers), then the micro-kernel of each group's size.
void groups_panel(const QuantTraits& q, const uint8_t* w, int64_t n_out, const Tokens& x, int64_t p, float* y,
                  const float* bias) {
    const Sizes sz(q, x.n_in);
    thread_local std::vector<int32_t> pq;
    thread_local std::vector<float> ps, pm;
    pq.resize(sz.pairs * kRows), ps.resize(sz.panel_blocks * kRows), pm.resize(sz.panel_blocks * kRows);
    const int64_t o = p * kRows, nr = std::min(kRows, n_out - o);
    pack_panel(q, w, quant_row_bytes(q, x.n_in), o, nr, x.n_in, pq.data(), ps.data(), pm.data());
    const Panel pan{pq.data(), ps.data(), pm.data()};
    const MicroFn* micros = avx512::micros(q.level_block, q.level_min);
    const size_t gq = sz.pairs * kTokens, gb = sz.group_blocks * kTokens;
    for (int64_t g = 0; g * kTokens < x.nt; ++g) {
        const Group grp{x.pairs.data() + size_t(g) * gq, x.d.data() + size_t(g) * gb,
                        x.s.data() + size_t(g) * gb};
        const int64_t tn = std::min(kTokens, x.nt - g * kTokens);
        micros[tn - 1](pan, grp, x.n_in, y + g * kTokens * n_out + o, n_out, nr, bias ? bias + o : nullptr);
    }
}

// Panel p against every token of x (gemv's layout): for Q8_0, Q4_0, Q5_0, Q4_K and Q6_K the blocks read
// in place, kGemvGroup tokens at a time (later groups find the panel in cache; the last prefetches the
// next panel), else the rows' levels unpacked once and dotted with each token.
void rows_panel(const QuantTraits& q, const uint8_t* w, int64_t n_out, const Tokens& x, int64_t p, float* y,
                const float* bias) {
    const int64_t n_in = x.n_in, o = p * kRows, nr = std::min(kRows, n_out - o);
    const size_t row_bytes = quant_row_bytes(q, n_in), nb32 = size_t(n_in / kQK0),
                 nb = size_t(n_in / q.level_block);
    const float* pb = bias ? bias + o : nullptr;
    if (avx512::blocks_dot(q.type, 1)) {
        const size_t next_rows = size_t(std::clamp<int64_t>(n_out - o - kRows, 0, kRows));
        for (int64_t t0 = 0; t0 < x.nt; t0 += kGemvGroup) {
            const int tn = int(std::min<int64_t>(kGemvGroup, x.nt - t0));
            const bool last = t0 + tn == x.nt;
            avx512::blocks_dot(q.type, tn)(w + size_t(o) * row_bytes, row_bytes, &x.levels[size_t(t0 * n_in)],
                                           &x.d[size_t(t0) * nb32], &x.s[size_t(t0) * nb32], n_in,
                                           y + t0 * n_out + o, n_out, nr, pb,
                                           last && next_rows ? w + size_t(o + kRows) * row_bytes : nullptr,
                                           last ? next_rows * row_bytes : 0);
        }
        return;
    }
    thread_local std::vector<int8_t> levels;
    thread_local std::vector<float> scale, min;
    levels.resize(size_t(kRows * n_in)), scale.resize(kRows * nb), min.resize(kRows * nb);
    for (int64_t r = 0; r < nr; ++r) {
        // The next row on its way while this one is read: the hardware prefetcher alone leaves one core's
        // stream short (simd_avx2.h's prefetch_ahead).
        if (o + r + 1 < n_out)
            for (size_t b = 0; b < row_bytes; b += 64)
                __builtin_prefetch(w + size_t(o + r + 1) * row_bytes + b);
        q.to_levels(w + size_t(o + r) * row_bytes, &levels[size_t(r * n_in)], &scale[size_t(r) * nb],
                    &min[size_t(r) * nb], n_in);
    }
    const RowsFn dot = avx512::rows_dot(q.level_block, q.level_min);
    for (int64_t t = 0; t < x.nt; ++t)
        dot(levels.data(), scale.data(), min.data(), &x.levels[size_t(t * n_in)], &x.d[size_t(t) * nb32],
            &x.s[size_t(t) * nb32], n_in, y + t * n_out + o, nr, pb);
}

}  // namespace

void Tokens::reset(int64_t n_tokens, int64_t n, bool as_rows) {
    nt = n_tokens, n_in = n, rows = as_rows;
    const int64_t padded = rows ? nt : (nt + kTokens - 1) / kTokens * kTokens;  // groups hold kTokens
    if (rows && levels.size() < size_t(nt * n_in)) levels.resize(size_t(nt * n_in));
    if (!rows && pairs.size() < size_t(padded * n_in / 2)) pairs.resize(size_t(padded * n_in / 2));
    if (d.size() < size_t(padded * n_in / kQK0)) d.resize(size_t(padded * n_in / kQK0)), s.resize(d.size());
}

void Tokens::pack(int64_t t, const float* x) {
    const size_t nb32 = size_t(n_in / kQK0);
    if (rows)
        return avx512::token_row(x, n_in, &levels[size_t(t * n_in)], &d[size_t(t) * nb32],
                                 &s[size_t(t) * nb32]);
    const auto g = size_t(t / kTokens);
    avx512::pack_token(x, n_in, t % kTokens, &pairs[g * size_t(n_in / 2) * kTokens], &d[g * nb32 * kTokens],
                       &s[g * nb32 * kTokens]);
}

void panel(const QuantTraits& q, const uint8_t* w, int64_t n_out, const Tokens& x, int64_t p, float* y,
           const float* bias) {
    if (x.rows)
        rows_panel(q, w, n_out, x, p, y, bias);
    else
        groups_panel(q, w, n_out, x, p, y, bias);
}

void gemm(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool) {
    // Every group packed once (in the calling thread's grow-only buffers), then read by every worker.
    // (Workers get a plain pointer: a thread_local named inside the lambdas would be their own.)
    thread_local Tokens tokens;
    Tokens* xt = &tokens;
    xt->reset(nt, n_in, false);
    pool.parallel_for(nt, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) xt->pack(t, x + t * n_in);
    });
    pool.for_each_dynamic((n_out + kRows - 1) / kRows,
                          [&](int64_t p, int) { panel(q, w, n_out, *xt, p, y, bias); });
}

void gemv(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool) {
    // Panels a thread claims at a time: about 32 KB of weights, as matmul's decode paths claim rows.
    constexpr size_t kChunkBytes = 32 << 10;
    thread_local Tokens tokens;  // the calling thread's; workers get a plain pointer
    Tokens* xt = &tokens;
    xt->reset(nt, n_in, true);
    for (int64_t t = 0; t < nt; ++t) xt->pack(t, x + t * n_in);
    const size_t panel_bytes = quant_row_bytes(q, n_in) * size_t(kRows);
    pool.parallel_for_stealing((n_out + kRows - 1) / kRows,
                               std::max<int64_t>(1, int64_t(kChunkBytes / panel_bytes)),
                               [&](int64_t p0, int64_t p1) {
                                   for (int64_t p = p0; p < p1; ++p) panel(q, w, n_out, *xt, p, y, bias);
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
