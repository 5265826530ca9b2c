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
    const std::vector<int64_t>& first = s.first;
    s.x.resize(size_t(slots * d));
    s.gate.resize(size_t(slots * f));
    s.up.resize(size_t(slots * f));
    s.out.resize(size_t(slots * d));
    for (int64_t e = 0; e < o.n_expert; ++e) {
        const int64_t b = first[size_t(e)], n = first[size_t(e + 1)] - b;
        if (n == 0) continue;
        float *xe = s.x.data() + b * d, *ge = s.gate.data() + b * f, *ue = s.up.data() + b * f;
        for (int64_t i = 0; i < n; ++i)  // [n][d]: the rows of the tokens routed to e
            std::copy_n(x + s.order[size_t(b + i)] / k * d, d, xe + i * d);
        matmul(*w.q_gate, expert_rows(*w.q_gate, w.gate, e, f, d), d, f, xe, n, ge,
               expert_bias(w.b_gate, e, f), pool, decode, invariant);  // [n][f]
        matmul(*w.q_up, expert_rows(*w.q_up, w.up, e, f, d), d, f, xe, n, ue, expert_bias(w.b_up, e, f), pool,
               decode, invariant);
        for (int64_t i = 0; i < n; ++i) activate(o.act, ge + i * f, ue + i * f, ge + i * f, f, false);
        matmul(*w.q_down, expert_rows(*w.q_down, w.down, e, d, f), f, d, ge, n, s.out.data() + b * d,
               expert_bias(w.b_down, e, d), pool, decode, invariant);  // [n][d]
    }
    pool.parallel_for(nt, [&](int64_t tb, int64_t te) {
        for (int64_t t = tb; t < te; ++t) {
            float* yt = y + t * d;
            std::fill_n(yt, d, 0.0f);
            for (int64_t j = 0; j < k; ++j) {
                const float p = s.weights[size_t(t * k + j)];
                const float* r = s.out.data() + int64_t(s.where[size_t(t * k + j)]) * d;
                for (int64_t i = 0; i < d; ++i) yt[i] += p * r[i];
            }
        }
    });
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
