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

// Expert e's products through cpu::matmul, one after another: its tokens' rows gathered into s.x, then
// gate and up, the activation and down into its slots' rows of s.out. For experts whose products take
// other arithmetic than the integer dots (the int16 GEMM, the f32 tiles and dots).
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
    s.fused.clear();
    for (int64_t e = 0; e < o.n_expert; ++e) {
        const int64_t n = s.first[size_t(e + 1)] - s.first[size_t(e)];
        if (n == 0) continue;
        if (int_dots_run(*w.q_gate, n, decode, invariant) && int_dots_run(*w.q_up, n, decode, invariant) &&
            int_dots_run(*w.q_down, n, decode, invariant))
            s.fused.push_back(int32_t(e));
        else
            expert_matmuls(w, o, x, e, pool, decode, invariant, s);
    }
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
