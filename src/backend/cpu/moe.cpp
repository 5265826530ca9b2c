#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_ref.h"

namespace minfer::cpu {

namespace {

const uint8_t* expert_rows(const QuantTraits& q, const void* base, int64_t e, int64_t rows, int64_t n_in) {
    return static_cast<const uint8_t*>(base) + size_t(e * rows) * quant_row_bytes(q, n_in);
}

const float* expert_bias(const float* b, int64_t e, int64_t n) {
    return b ? b + e * n : nullptr;
}

// y = act(g, u) over n elements.
void activate(ExpertAct act, const float* g, const float* u, float* y, int64_t n, bool ref) {
    switch (act) {
        case ExpertAct::SwiGLU:
            return ref ? swiglu_ref(g, u, y, n) : swiglu(g, u, y, n);
        case ExpertAct::SwiGLUOai:
            return ref ? swiglu_oai_ref(g, u, y, n) : swiglu_oai(g, u, y, n);
    }
}

// The (t, j) slots (t * k + j) ordered by expert, tokens in order within an expert: order[i] is a slot,
// first[e] .. first[e + 1] the slots of expert e, where[slot] its index in order.
void group_by_expert(const std::vector<int32_t>& ids, int64_t n_expert, std::vector<int32_t>& order,
                     std::vector<int64_t>& first, std::vector<int32_t>& where) {
    first.assign(size_t(n_expert + 1), 0);
    for (const int32_t e : ids) ++first[size_t(e) + 1];
    for (int64_t e = 0; e < n_expert; ++e) first[size_t(e + 1)] += first[size_t(e)];
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    order.resize(ids.size());
    where.resize(ids.size());
    for (size_t slot = 0; slot < ids.size(); ++slot) {
        const int64_t i = next[size_t(ids[slot])]++;
        order[size_t(i)] = int32_t(slot);
        where[slot] = int32_t(i);
    }
}

// The pairs routed to expert e (group_by_expert).
int64_t pairs_of(const MoeScratch& s, int64_t e) {
    return s.first[size_t(e + 1)] - s.first[size_t(e)];
}

// Expert e's products through cpu::matmul, one after another: its tokens' rows gathered into s.x, then
// gate and up, the activation and down into its slots' rows of s.out. For experts whose three products do
// not all take the same one of the integer dots, the int16 GEMM and the f32 tiles (the f32 dots, mixed).
void expert_matmuls(const MoeExperts& w, const op::MoeFfn& o, const float* x, int64_t e, ThreadPool& pool,
                    DecodeDot decode, bool invariant, MoeScratch& s) {
    const int64_t k = o.n_used, d = w.n_embd, f = w.n_ff;
    const int64_t b = s.first[size_t(e)], n = s.first[size_t(e + 1)] - b;
    float *xe = s.x.data() + b * d, *ge = s.gate.data() + b * f, *ue = s.up.data() + b * f;
    for (int64_t i = 0; i < n; ++i)  // [n][d]: the rows of the tokens routed to e
        std::copy_n(x + s.order[size_t(b + i)] / k * d, d, xe + i * d);
    matmul(*w.q_gate, expert_rows(*w.q_gate, w.gate, e, f, d), d, f, xe, n, ge, expert_bias(w.b_gate, e, f),
           pool, decode, invariant);  // [n][f]
    matmul(*w.q_up, expert_rows(*w.q_up, w.up, e, f, d), d, f, xe, n, ue, expert_bias(w.b_up, e, f), pool,
           decode, invariant);
    for (int64_t i = 0; i < n; ++i) activate(o.act, ge + i * f, ue + i * f, ge + i * f, f, false);
    matmul(*w.q_down, expert_rows(*w.q_down, w.down, e, d, f), f, d, ge, n, s.out.data() + b * d,
           expert_bias(w.b_down, e, d), pool, decode, invariant);  // [n][d]
}

// One of the three products as the fused experts run it: expert e's matrix is rows e * n_out .. of the
// stacked w ([n_out * n_expert][n_in]); the outputs y [nt * k][n_out] in the grouped order (s.order).
struct Product {
    const QuantTraits* q;
    const void* w;
    const float* bias;  // [n_out * n_expert] or null
    int64_t n_in, n_out;
    IntDot dot;
    float* y;
};

// The experts whose three products take matmul's integer dots (int_dots_run: decode, and small batches
// where the int16 GEMM does not run), computed together: one pool dispatch for the gate and up rows of
// all of them, one for their down rows, instead of three matmuls (and quantizations of x) per expert.
// Each token's input is quantized once for all its experts. Every (row, column) is the dot cpu::matmul
// computes, so the bits are those of expert_matmuls.
struct Fused {
    const MoeExperts& w;
    const op::MoeFfn& o;
    MoeScratch& s;
    int64_t nt;
    Product gate, up, down;
};

Fused fused_products(const MoeExperts& w, const op::MoeFfn& o, MoeScratch& s, int64_t nt, DecodeDot decode) {
    const int64_t d = w.n_embd, f = w.n_ff;
    return {w,
            o,
            s,
            nt,
            {w.q_gate, w.gate, w.b_gate, d, f, int_dot(*w.q_gate, decode, d), s.gate.data()},
            {w.q_up, w.up, w.b_up, d, f, int_dot(*w.q_up, decode, d), s.up.data()},
            {w.q_down, w.down, w.b_down, f, d, int_dot(*w.q_down, decode, f), s.out.data()}};
}

// Rows [o0, o1) of expert e's product p for its tokens, their quantized inputs at xq, p.dot.bytes apart.
void product_rows(const Fused& c, const Product& p, int64_t e, const uint8_t* xq, int64_t o0, int64_t o1) {
    const int64_t b = c.s.first[size_t(e)], n = c.s.first[size_t(e + 1)] - b;
    int_dot_rows(p.dot,
                 {p.q, expert_rows(*p.q, p.w, e, p.n_out, p.n_in), p.n_in, p.n_out, xq, p.dot.bytes, n,
                  p.y + b * p.n_out, expert_bias(p.bias, e, p.n_out)},
                 o0, o1);
}

// `products` row ranges of `rows` rows each, end to end, split between the threads in chunks of about
// kDotChunkBytes: body(i, o0, o1) computes rows [o0, o1) of range i. Each thread streams whole matrices
// (a chunk spans two only at their seam), which the prefetcher keeps up with better than many short
// pieces of all the experts at once.
template <class F>
void rows_end_to_end(ThreadPool& pool, int64_t products, int64_t rows, size_t row_bytes, F&& body) {
    pool.parallel_for_stealing(products * rows, std::max<int64_t>(1, int64_t(kDotChunkBytes / row_bytes)),
                               [&](int64_t r0, int64_t r1) {
                                   for (int64_t r = r0; r < r1;) {
                                       const int64_t o0 = r % rows, o1 = std::min(rows, o0 + r1 - r);
                                       body(r / rows, o0, o1);
                                       r += o1 - o0;
                                   }
                               });
}

// xq [nt + nt * k][p.dot.bytes]: each token's input quantized once, then for the fused experts with more
// than one token their tokens' rows copied to rows nt + i (i their pairs' indices in the grouped order
// s.order), so that each expert's columns lie p.dot.bytes apart.
void quantize_inputs(const Fused& c, const Product& p, const float* x, std::vector<uint8_t>& xq,
                     ThreadPool& pool) {
    const int64_t d = c.w.n_embd, k = c.o.n_used;
    const size_t bytes = p.dot.bytes;
    xq.resize(size_t(c.nt * (1 + k)) * bytes);
    uint8_t* q = xq.data();
    if (c.nt == 1)
        p.dot.quantize(x, q, d);
    else
        pool.parallel_for(c.nt, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) p.dot.quantize(x + t * d, q + size_t(t) * bytes, d);
        });
    for (const int32_t e : c.s.fused) {
        const int64_t b = c.s.first[size_t(e)], n = c.s.first[size_t(e + 1)] - b;
        if (n == 1) continue;  // expert_inputs reads the token's own row
        for (int64_t i = b; i < b + n; ++i)
            std::copy_n(q + size_t(c.s.order[size_t(i)] / k) * bytes, bytes, q + size_t(c.nt + i) * bytes);
    }
}

// Expert e's quantized input columns in xq (quantize_inputs): one token's own row, or its tokens' copies.
const uint8_t* expert_inputs(const Fused& c, const std::vector<uint8_t>& xq, size_t bytes, int64_t e) {
    const int64_t b = c.s.first[size_t(e)], n = c.s.first[size_t(e + 1)] - b;
    return xq.data() + size_t(n == 1 ? c.s.order[size_t(b)] / c.o.n_used : c.nt + b) * bytes;
}

// The gate and up rows of every fused expert (gate then up, expert after expert).
void gate_up_pass(const Fused& c, const float* x, ThreadPool& pool) {
    MoeScratch& s = c.s;
    quantize_inputs(c, c.gate, x, s.xq_gate, pool);
    const bool shared = c.up.dot.quantize == c.gate.dot.quantize;
    if (!shared) quantize_inputs(c, c.up, x, s.xq_up, pool);
    const size_t row_bytes =
        (quant_row_bytes(*c.gate.q, c.w.n_embd) + quant_row_bytes(*c.up.q, c.w.n_embd)) / 2;
    rows_end_to_end(
        pool, 2 * int64_t(s.fused.size()), c.w.n_ff, row_bytes, [&](int64_t i, int64_t o0, int64_t o1) {
            const int64_t e = s.fused[size_t(i / 2)];
            const Product& p = i % 2 ? c.up : c.gate;
            product_rows(c, p, e, expert_inputs(c, i % 2 && !shared ? s.xq_up : s.xq_gate, p.dot.bytes, e),
                         o0, o1);
        });
}

// Each fused expert's activation act(gate, up), quantized for its down rows: hq [nt * k][down bytes] in
// the grouped order.
void activate_hidden(const Fused& c, ThreadPool& pool) {
    MoeScratch& s = c.s;
    const int64_t f = c.w.n_ff;
    const size_t bytes = c.down.dot.bytes;
    s.hq.resize(size_t(c.nt * c.o.n_used) * bytes);
    pool.parallel_for(int64_t(s.fused.size()), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int32_t e = s.fused[size_t(i)];
            for (int64_t j = s.first[size_t(e)]; j < s.first[size_t(e + 1)]; ++j) {
                float* g = s.gate.data() + j * f;
                activate(c.o.act, g, s.up.data() + j * f, g, f, false);
                c.down.dot.quantize(g, s.hq.data() + size_t(j) * bytes, f);
            }
        }
    });
}

// The down rows of every fused expert, expert after expert.
void down_pass(const Fused& c, ThreadPool& pool) {
    const MoeScratch& s = c.s;
    const size_t bytes = c.down.dot.bytes;
    rows_end_to_end(pool, int64_t(s.fused.size()), c.w.n_embd, quant_row_bytes(*c.down.q, c.w.n_ff),
                    [&](int64_t i, int64_t o0, int64_t o1) {
                        const int64_t e = s.fused[size_t(i)];
                        product_rows(c, c.down, e, s.hq.data() + size_t(s.first[size_t(e)]) * bytes, o0, o1);
                    });
}

// The gate and up panels (`rows` rows each) of every expert of `group` into s.gate and s.up ([nt * k][n_ff],
// grouped order), expert after expert, its gate and up panels alternating, each claimed by whichever
// thread is free: panel(q, weights, i, p, y, bias) computes panel p of the i-th expert of the group.
template <class Panel>
void gate_up_panels(const MoeExperts& w, const std::vector<int32_t>& group, int64_t rows, ThreadPool& pool,
                    MoeScratch& s, Panel&& panel) {
    const int64_t d = w.n_embd, f = w.n_ff, panels = (f + rows - 1) / rows;
    pool.for_each_dynamic(int64_t(group.size()) * 2 * panels, [&](int64_t item, int) {
        const int64_t i = item / (2 * panels), p = item % (2 * panels) / 2, e = group[size_t(i)];
        const bool up = item % 2;
        const QuantTraits& q = up ? *w.q_up : *w.q_gate;
        panel(q, expert_rows(q, up ? w.up : w.gate, e, f, d), i, p,
              (up ? s.up : s.gate).data() + s.first[size_t(e)] * f,
              expert_bias(up ? w.b_up : w.b_gate, e, f));
    });
}

// The down panels of every expert of `group` into s.out ([nt * k][n_embd], grouped order), likewise.
template <class Panel>
void down_panels(const MoeExperts& w, const std::vector<int32_t>& group, int64_t rows, ThreadPool& pool,
                 MoeScratch& s, Panel&& panel) {
    const int64_t d = w.n_embd, f = w.n_ff, panels = (d + rows - 1) / rows;
    pool.for_each_dynamic(int64_t(group.size()) * panels, [&](int64_t item, int) {
        const int64_t i = item / panels, e = group[size_t(i)];
        panel(*w.q_down, expert_rows(*w.q_down, w.down, e, d, f), i, item % panels,
              s.out.data() + s.first[size_t(e)] * d, expert_bias(w.b_down, e, d));
    });
}

// Each wide expert's packed inputs: x's rows of its tokens, in s.xt[i], an expert per task.
void wide_inputs(const MoeExperts& w, const op::MoeFfn& o, const float* x, ThreadPool& pool, MoeScratch& s) {
    const int64_t d = w.n_embd;
    pool.for_each_dynamic(int64_t(s.wide.size()), [&](int64_t i, int) {
        const int64_t e = s.wide[size_t(i)], b = s.first[size_t(e)], n = pairs_of(s, e);
        i16::Tokens& xt = s.xt[size_t(i)];
        xt.reset(n, d, n <= gemv_max_tokens(*w.q_gate));
        for (int64_t j = 0; j < n; ++j) xt.pack(j, x + s.order[size_t(b + j)] / o.n_used * d);
    });
}

// Each wide expert's hidden rows act(gate, up), packed for its down panels in s.ht[i], an expert per task.
void wide_hidden(const MoeExperts& w, const op::MoeFfn& o, ThreadPool& pool, MoeScratch& s) {
    const int64_t f = w.n_ff;
    pool.for_each_dynamic(int64_t(s.wide.size()), [&](int64_t i, int) {
        const int64_t e = s.wide[size_t(i)], b = s.first[size_t(e)], n = pairs_of(s, e);
        i16::Tokens& ht = s.ht[size_t(i)];
        ht.reset(n, f, n <= gemv_max_tokens(*w.q_down));
        for (int64_t j = 0; j < n; ++j) {
            float* g = s.gate.data() + (b + j) * f;
            activate(o.act, g, s.up.data() + (b + j) * f, g, f, false);
            ht.pack(j, g);
        }
    });
}

// The experts whose three products take the int16 GEMM's arithmetic (int16_runs: prefill on AVX-512 VNNI,
// and there every expert with `invariant`; the wide experts, s.wide), computed together: each expert's
// tokens packed once for its gate and up rows (i16::Tokens: gemv's layout up to gemv_max_tokens tokens,
// else gemm's), then one pool dispatch for the gate and up panels of all of them, one to activate and pack
// the hidden rows and one for the down panels, each panel claimed by whichever thread is free. One matmul
// per expert and product (expert_matmuls) packed x twice and left the threads idle at the end of each of
// its dispatches. Each panel is i16::panel's arithmetic, as i16::gemm and i16::gemv compute it, so the
// bits are those of expert_matmuls.
void wide_products(const MoeExperts& w, const op::MoeFfn& o, const float* x, ThreadPool& pool,
                   MoeScratch& s) {
    if (s.xt.size() < s.wide.size()) s.xt.resize(s.wide.size()), s.ht.resize(s.wide.size());
    const int64_t d = w.n_embd, f = w.n_ff;
    wide_inputs(w, o, x, pool, s);
    gate_up_panels(w, s.wide, i16::kRows, pool, s,
                   [&](const QuantTraits& q, const uint8_t* rows, int64_t i, int64_t p, float* y,
                       const float* b) { i16::panel(q, rows, f, s.xt[size_t(i)], p, y, b); });
    wide_hidden(w, o, pool, s);
    down_panels(w, s.wide, i16::kRows, pool, s,
                [&](const QuantTraits& q, const uint8_t* rows, int64_t i, int64_t p, float* y,
                    const float* b) { i16::panel(q, rows, d, s.ht[size_t(i)], p, y, b); });
}

// Where each tiled expert's packed columns begin in s.xp and s.hp, in columns (tile_pack's groups rounded
// up), and those buffers sized to match.
void tiled_layout(const MoeExperts& w, MoeScratch& s) {
    s.packed_at.assign(1, 0);
    for (const int32_t e : s.tiled)
        s.packed_at.push_back(s.packed_at.back() + int64_t(tile_pack_floats(pairs_of(s, e), 1)));
    s.xp.resize(size_t(s.packed_at.back() * w.n_embd));
    s.hp.resize(size_t(s.packed_at.back() * w.n_ff));
}

// Each tiled expert's inputs: x's rows of its tokens gathered into s.x (grouped order), packed into s.xp.
void tiled_inputs(const MoeExperts& w, const op::MoeFfn& o, const float* x, ThreadPool& pool, MoeScratch& s) {
    const int64_t d = w.n_embd;
    pool.for_each_dynamic(int64_t(s.tiled.size()), [&](int64_t i, int) {
        const int64_t e = s.tiled[size_t(i)], b = s.first[size_t(e)], n = pairs_of(s, e);
        float* xe = s.x.data() + b * d;
        for (int64_t j = 0; j < n; ++j) std::copy_n(x + s.order[size_t(b + j)] / o.n_used * d, d, xe + j * d);
        tile_pack(xe, n, d, s.xp.data() + s.packed_at[size_t(i)] * d);
    });
}

// Each tiled expert's hidden rows act(gate, up) in s.gate, packed for its down panels into s.hp.
void tiled_hidden(const MoeExperts& w, const op::MoeFfn& o, ThreadPool& pool, MoeScratch& s) {
    const int64_t f = w.n_ff;
    pool.for_each_dynamic(int64_t(s.tiled.size()), [&](int64_t i, int) {
        const int64_t e = s.tiled[size_t(i)], b = s.first[size_t(e)], n = pairs_of(s, e);
        float* g = s.gate.data() + b * f;
        for (int64_t j = 0; j < n; ++j)
            activate(o.act, g + j * f, s.up.data() + (b + j) * f, g + j * f, f, false);
        tile_pack(g, n, f, s.hp.data() + s.packed_at[size_t(i)] * f);
    });
}

// The experts whose three products take the f32 tiles (tiles_run: prefill without the int16 GEMM, e.g.
// AVX2, beyond the integer dots' kIntDotMaxTokens tokens; the tiled experts, s.tiled), computed together
// as wide_products does for the int16 GEMM: each expert's tokens packed once for its gate and up panels,
// one pool dispatch for the gate and up panels of all of them, one to activate and pack the hidden rows
// and one for the down panels, each panel claimed by whichever thread is free. Each panel is
// tile_panel's arithmetic, as matmul computes it, so the bits are those of expert_matmuls.
void tiled_products(const MoeExperts& w, const op::MoeFfn& o, const float* x, ThreadPool& pool,
                    MoeScratch& s) {
    const int64_t d = w.n_embd, f = w.n_ff;
    tiled_layout(w, s);
    tiled_inputs(w, o, x, pool, s);
    gate_up_panels(
        w, s.tiled, kTileRows, pool, s,
        [&](const QuantTraits& q, const uint8_t* rows, int64_t i, int64_t p, float* y, const float* b) {
            tile_panel(q, rows, d, f, s.xp.data() + s.packed_at[size_t(i)] * d,
                       pairs_of(s, s.tiled[size_t(i)]), p, y, b);
        });
    tiled_hidden(w, o, pool, s);
    down_panels(
        w, s.tiled, kTileRows, pool, s,
        [&](const QuantTraits& q, const uint8_t* rows, int64_t i, int64_t p, float* y, const float* b) {
            tile_panel(q, rows, f, d, s.hp.data() + s.packed_at[size_t(i)] * f,
                       pairs_of(s, s.tiled[size_t(i)]), p, y, b);
        });
}

// y rows [r0, r1) of every token: sum_j p_j * out[its slot j], added in selection order.
void combine_rows(const MoeScratch& s, int64_t nt, int64_t k, int64_t d, float* y, int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < nt; ++t) {
        float* yt = y + t * d;
        std::fill(yt + r0, yt + r1, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
            const float p = s.weights[size_t(t * k + j)];
            const float* r = s.out.data() + int64_t(s.where[size_t(t * k + j)]) * d;
            for (int64_t i = r0; i < r1; ++i) yt[i] += p * r[i];
        }
    }
}

}  // namespace

void moe_route(const float* logits, int64_t n_expert, int64_t k, ExpertGating gating, bool norm, int32_t* ids,
               float* w) {
    // Both gatings are monotonic, so the experts of highest probability are those of highest logit.
    std::vector<bool> taken(size_t(n_expert), false);
    for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < n_expert; ++e)
            if (!taken[size_t(e)] && (best < 0 || logits[e] > logits[best])) best = e;
        taken[size_t(best)] = true;
        ids[j] = int32_t(best);
    }
    std::vector<double> p(static_cast<size_t>(k));
    double sum = 0, denom = 0, top = logits[ids[0]];
    if (gating == ExpertGating::Softmax)
        for (int64_t e = 0; e < n_expert; ++e) denom += std::exp(double(logits[e]) - top);
    if (gating == ExpertGating::SoftmaxWeight)
        for (int64_t j = 0; j < k; ++j) denom += std::exp(double(logits[ids[j]]) - top);
    for (int64_t j = 0; j < k; ++j) {
        const double l = logits[ids[j]];
        p[size_t(j)] =
            gating == ExpertGating::Sigmoid ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l - top) / denom;
        sum += p[size_t(j)];
    }
    for (int64_t j = 0; j < k; ++j) w[j] = float(norm ? p[size_t(j)] / sum : p[size_t(j)]);
}

void moe_ffn(const MoeExperts& w, const op::MoeFfn& o, const float* x, const float* logits, int64_t nt,
             float* y, ThreadPool& pool, DecodeDot decode, bool invariant, MoeScratch& s) {
    const int64_t k = o.n_used, d = w.n_embd, f = w.n_ff, slots = nt * k;
    s.ids.resize(size_t(slots));
    s.weights.resize(size_t(slots));
    for (int64_t t = 0; t < nt; ++t)
        moe_route(logits + t * o.n_expert, o.n_expert, k, o.gating, o.norm, s.ids.data() + t * k,
                  s.weights.data() + t * k);
    group_by_expert(s.ids, o.n_expert, s.order, s.first, s.where);
    s.x.resize(size_t(slots * d));
    s.gate.resize(size_t(slots * f));
    s.up.resize(size_t(slots * f));
    s.out.resize(size_t(slots * d));
    s.fused.clear(), s.wide.clear(), s.tiled.clear();
    const auto all = [&](auto runs, int64_t n) {
        return runs(*w.q_gate, n, decode, invariant) && runs(*w.q_up, n, decode, invariant) &&
               runs(*w.q_down, n, decode, invariant);
    };
    for (int64_t e = 0; e < o.n_expert; ++e) {
        const int64_t n = pairs_of(s, e);
        if (n == 0) continue;
        if (all(int_dots_run, n)) {
            s.fused.push_back(int32_t(e));
        } else if (all(int16_runs, n)) {
            s.wide.push_back(int32_t(e));
        } else if (all(tiles_run, n)) {
            s.tiled.push_back(int32_t(e));
        } else {
            expert_matmuls(w, o, x, e, pool, decode, invariant, s);
        }
    }
    if (!s.wide.empty()) wide_products(w, o, x, pool, s);
    if (!s.tiled.empty()) tiled_products(w, o, x, pool, s);
    if (!s.fused.empty()) {
        const Fused c = fused_products(w, o, s, nt, decode);
        gate_up_pass(c, x, pool);
        activate_hidden(c, pool);
        down_pass(c, pool);
    }
    pool.parallel_for(d, [&](int64_t r0, int64_t r1) { combine_rows(s, nt, k, d, y, r0, r1); });
}

void moe_ffn_ref(const MoeExperts& w, const op::MoeFfn& o, const float* x, const float* logits, int64_t nt,
                 float* y) {
    const int64_t k = o.n_used, d = w.n_embd, f = w.n_ff;
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> p(static_cast<size_t>(k)), gate(static_cast<size_t>(f)), up(static_cast<size_t>(f)),
        out(static_cast<size_t>(d));
    std::vector<double> acc(static_cast<size_t>(d));
    for (int64_t t = 0; t < nt; ++t) {
        moe_route(logits + t * o.n_expert, o.n_expert, k, o.gating, o.norm, ids.data(), p.data());
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < k; ++j) {
            const int64_t e = ids[size_t(j)];
            matmul_ref(*w.q_gate, expert_rows(*w.q_gate, w.gate, e, f, d), d, f, x + t * d, 1, gate.data(),
                       expert_bias(w.b_gate, e, f));
            matmul_ref(*w.q_up, expert_rows(*w.q_up, w.up, e, f, d), d, f, x + t * d, 1, up.data(),
                       expert_bias(w.b_up, e, f));
            activate(o.act, gate.data(), up.data(), gate.data(), f, true);
            matmul_ref(*w.q_down, expert_rows(*w.q_down, w.down, e, d, f), f, d, gate.data(), 1, out.data(),
                       expert_bias(w.b_down, e, d));
            for (int64_t i = 0; i < d; ++i) acc[size_t(i)] += double(p[size_t(j)]) * double(out[size_t(i)]);
        }
        for (int64_t i = 0; i < d; ++i) y[t * d + i] = float(acc[size_t(i)]);
    }
}

}  // namespace minfer::cpu
