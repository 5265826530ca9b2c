// The mixture-of-experts kernel (backend/cpu/moe.h): the routing against a brute-force sort of the
// probabilities computed here in double, the grouped kernel against its scalar twin (each token alone,
// matmul_ref, double sums) within a stated budget, and batch invariance: with invariant products a
// token's row has the same bits alone and among others routed to the same and other experts; and the
// experts run together have the bits of cpu::matmul per expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_ref.h"
#include "cpu_test_util.h"

namespace minfer::test {
namespace {

using cpu::DecodeDot;

// Stacked experts of one type, written by the type's reference quantizer from N(0, 1/n_in) values.
struct Experts {
    std::vector<uint8_t> gate, up, down;
    cpu::MoeExperts w;

    Experts(GgmlType type, int64_t d, int64_t f, int64_t n_expert, std::mt19937& rng)
        : Experts(type, type, d, f, n_expert, rng) {}
    // Gate and up in `type`, down in `down_type` (the Q4_K_M files' Q6_K down projections).
    Experts(GgmlType type, GgmlType down_type, int64_t d, int64_t f, int64_t n_expert, std::mt19937& rng) {
        const QuantTraits *q = quant_traits(type), *qd = quant_traits(down_type);
        const auto fill = [&](const QuantTraits* qt, std::vector<uint8_t>& bytes, int64_t n_in,
                              int64_t rows) {
            const float s = float(1.0 / std::sqrt(double(n_in)));
            const std::vector<float> v = random_floats(rng, n_in * rows, -s * 1.7f, s * 1.7f);
            bytes.resize(quant_row_bytes(*qt, n_in) * size_t(rows));
            qt->from_float_ref(v.data(), bytes.data(), n_in * rows);
        };
        fill(q, gate, d, f * n_expert);
        fill(q, up, d, f * n_expert);
        fill(qd, down, f, d * n_expert);
        w = {q, q, qd, gate.data(), up.data(), down.data(), d, f, n_expert};
    }
    // Per-expert biases on all three products (gpt-oss).
    void add_biases(std::mt19937& rng) {
        b_gate = random_floats(rng, w.n_ff * w.n_expert, -0.5f, 0.5f);
        b_up = random_floats(rng, w.n_ff * w.n_expert, -0.5f, 0.5f);
        b_down = random_floats(rng, w.n_embd * w.n_expert, -0.5f, 0.5f);
        w.b_gate = b_gate.data(), w.b_up = b_up.data(), w.b_down = b_down.data();
    }
    std::vector<float> b_gate, b_up, b_down;
};

TEST(MoeRoute, TopKOfTheProbabilitiesRenormalised) {
    std::mt19937 rng(5);
    for (const ExpertGating g : {ExpertGating::Softmax, ExpertGating::Sigmoid})
        for (const bool norm : {false, true})
            for (int rep = 0; rep < 50; ++rep) {
                const int64_t n = 4 + rep % 61, k = 1 + rep % std::min<int64_t>(n, 8);
                std::vector<float> logits = random_floats(rng, n, -4, 4);
                logits[size_t(rep % n)] = logits[size_t((rep + 1) % n)];  // a tie: the lower id first
                std::vector<double> p(static_cast<size_t>(n));
                double denom = 0;
                for (const float l : logits) denom += std::exp(double(l));
                for (int64_t e = 0; e < n; ++e)
                    p[size_t(e)] = g == ExpertGating::Softmax
                                       ? std::exp(double(logits[size_t(e)])) / denom
                                       : 1 / (1 + std::exp(-double(logits[size_t(e)])));
                std::vector<int32_t> want(static_cast<size_t>(n));
                std::iota(want.begin(), want.end(), 0);
                std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
                double sum = 0;
                for (int64_t j = 0; j < k; ++j) sum += p[size_t(want[size_t(j)])];
                std::vector<int32_t> ids(static_cast<size_t>(k));
                std::vector<float> w(static_cast<size_t>(k));
                cpu::moe_route(logits.data(), n, k, g, norm, ids.data(), w.data());
                for (int64_t j = 0; j < k; ++j) {
                    ASSERT_EQ(ids[size_t(j)], want[size_t(j)]) << "rank " << j << " of " << n;
                    const double pw = p[size_t(want[size_t(j)])] / (norm ? sum : 1.0);
                    EXPECT_NEAR(w[size_t(j)], pw, 1e-6 * pw + 1e-12);
                }
            }
}

// gpt-oss's gating: the k experts of highest logit, weighted by the softmax of their k logits alone.
TEST(MoeRoute, SoftmaxOfTheChosenLogits) {
    const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.0f, 2.0f};
    std::vector<int32_t> ids(3);
    std::vector<float> w(3);
    cpu::moe_route(logits.data(), 5, 3, ExpertGating::SoftmaxWeight, false, ids.data(), w.data());
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4}));
    const double d = std::exp(3.0) + 2 * std::exp(2.0);
    EXPECT_NEAR(w[0], std::exp(3.0) / d, 1e-7);
    EXPECT_NEAR(w[1], std::exp(2.0) / d, 1e-7);
    EXPECT_NEAR(w[2], std::exp(2.0) / d, 1e-7);
}

// The clamped SwiGLU against its formula in double: g and u clamped at 7 (u also at -7), then
// g * sigmoid(1.702 g) * (u + 1). Budget: z = -1.702 g in f32 is off by 2 u |z| (1.702's rounding and the
// product), which moves e^z by that relative; expf within 2 ulp, the add, division and two products:
// (8 + 2 |z|) u relative.
TEST(MoeAct, SwigluOaiMatchesItsFormula) {
    std::mt19937 rng(19);
    std::vector<float> g = random_floats(rng, 4096, -12, 12), u = random_floats(rng, 4096, -12, 12);
    g.insert(g.end(), {7.0f, 7.5f, -30.0f, 0.0f}), u.insert(u.end(), {8.0f, -9.0f, 1.0f, 3.0f});
    std::vector<float> y(g.size()), r(g.size());
    cpu::swiglu_oai(g.data(), u.data(), y.data(), int64_t(g.size()));
    cpu::swiglu_oai_ref(g.data(), u.data(), r.data(), int64_t(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
        const double a = std::min(double(g[i]), 7.0), b = std::clamp(double(u[i]), -7.0, 7.0);
        const double want = a / (1 + std::exp(-1.702 * a)) * (b + 1);
        EXPECT_NEAR(r[i], want, 1e-7 * std::fabs(want) + 1e-30) << g[i] << " " << u[i];
        EXPECT_NEAR(y[i], want, (8 + 2 * 1.702 * std::fabs(a)) * 0x1p-24 * std::fabs(want) + 1e-30)
            << g[i] << " " << u[i];
    }
    EXPECT_NEAR(y[g.size() - 4], 7.0 / (1 + std::exp(-1.702 * 7)) * 8, 1e-5) << "both clamped";
}

// Budget: each expert's three products as the matmul tests allow them (f32 dots: a few roundings of
// sum |w x|; int8x2 activations: 1/64516 of each block's max |x|, twice), then k weighted sums: 2e-4 of
// the largest |y| covers both with a margin of ten.
TEST(MoeFfn, EqualsItsScalarTwin) {
    std::mt19937 rng(11);
    ThreadPool pool(2);
    const int64_t d = 256, f = 96, n_expert = 8;
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K})
        for (const DecodeDot dot : {DecodeDot::F32, DecodeDot::Int8x2})
            for (const int64_t nt : {1, 3, 17}) {
                SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + std::to_string(nt) + " tokens");
                Experts ex(type, d, type == GgmlType::Q4_K ? 256 : f, n_expert, rng);
                const bool oai = nt == 3;  // gpt-oss's gating, activation and biases
                if (oai) ex.add_biases(rng);
                const op::MoeFfn o{n_expert, 3, oai ? ExpertGating::SoftmaxWeight : ExpertGating::Softmax,
                                   true, oai ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
                const std::vector<float> x = random_floats(rng, nt * d, -1, 1);
                const std::vector<float> logits = random_floats(rng, nt * n_expert, -2, 2);
                std::vector<float> got(static_cast<size_t>(nt * d)), want(got.size());
                cpu::MoeScratch s;
                cpu::moe_ffn(ex.w, o, x.data(), logits.data(), nt, got.data(), pool, dot, false, s);
                cpu::moe_ffn_ref(ex.w, o, x.data(), logits.data(), nt, want.data());
                double scale = 0, err = 0;
                for (size_t i = 0; i < got.size(); ++i) {
                    scale = std::max(scale, std::fabs(double(want[i])));
                    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
                }
                ASSERT_GT(scale, 0.0);
                EXPECT_LE(err, 2e-4 * scale);
            }
}

// y computed here from the kernel's parts: each expert's tokens (in token order) through cpu::matmul
// with the kernel's flags, the activation, then each token's k outputs added in selection order.
std::vector<float> moe_by_matmuls(const cpu::MoeExperts& w, const op::MoeFfn& o, const std::vector<float>& x,
                                  const std::vector<float>& logits, int64_t nt, ThreadPool& pool,
                                  DecodeDot dot, bool invariant) {
    const int64_t d = w.n_embd, f = w.n_ff, k = o.n_used;
    std::vector<int32_t> ids(size_t(nt * k));
    std::vector<float> p(ids.size()), out(ids.size() * size_t(d)), y(size_t(nt * d), 0.0f);
    for (int64_t t = 0; t < nt; ++t)
        cpu::moe_route(logits.data() + t * o.n_expert, o.n_expert, k, o.gating, o.norm, ids.data() + t * k,
                       p.data() + t * k);
    const auto rows = [](const QuantTraits& q, const void* base, int64_t e, int64_t n_out, int64_t n_in) {
        return static_cast<const uint8_t*>(base) + quant_row_bytes(q, n_in) * size_t(e * n_out);
    };
    for (int64_t e = 0; e < o.n_expert; ++e) {
        std::vector<int64_t> slots;
        for (int64_t i = 0; i < nt * k; ++i)
            if (ids[size_t(i)] == e) slots.push_back(i);
        const auto n = int64_t(slots.size());
        std::vector<float> xe, g(size_t(n * f)), u(g.size()), oe(size_t(n * d));
        for (const int64_t i : slots) xe.insert(xe.end(), x.begin() + i / k * d, x.begin() + (i / k + 1) * d);
        if (n == 0) continue;
        cpu::matmul(*w.q_gate, rows(*w.q_gate, w.gate, e, f, d), d, f, xe.data(), n, g.data(),
                    w.b_gate ? w.b_gate + e * f : nullptr, pool, dot, invariant);
        cpu::matmul(*w.q_up, rows(*w.q_up, w.up, e, f, d), d, f, xe.data(), n, u.data(),
                    w.b_up ? w.b_up + e * f : nullptr, pool, dot, invariant);
        for (int64_t i = 0; i < n; ++i)
            (o.act == ExpertAct::SwiGLU ? cpu::swiglu : cpu::swiglu_oai)(g.data() + i * f, u.data() + i * f,
                                                                         g.data() + i * f, f);
        cpu::matmul(*w.q_down, rows(*w.q_down, w.down, e, d, f), f, d, g.data(), n, oe.data(),
                    w.b_down ? w.b_down + e * d : nullptr, pool, dot, invariant);
        for (int64_t i = 0; i < n; ++i) std::copy_n(oe.data() + i * d, d, out.data() + slots[size_t(i)] * d);
    }
    for (int64_t t = 0; t < nt; ++t)
        for (int64_t j = 0; j < k; ++j)
            for (int64_t i = 0; i < d; ++i)
                y[size_t(t * d + i)] += p[size_t(t * k + j)] * out[size_t((t * k + j) * d + i)];
    return y;
}

// The experts the kernel runs together (the integer dots: decode, small batches) give each row the bits
// of cpu::matmul on that expert's tokens, as the experts it runs one by one do: for every flag, alone and
// in batches where some experts get one token and others several.
TEST(MoeFfn, EqualsMatmulsPerExpert) {
    std::mt19937 rng(23);
    ThreadPool pool(2);
    const int64_t d = 512, f = 256, n_expert = 16;
    for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_0}) {
        Experts ex(type, d, f, n_expert, rng);
        const bool oai = type == GgmlType::Q8_0;
        if (oai) ex.add_biases(rng);
        const op::MoeFfn o{n_expert, 4, oai ? ExpertGating::SoftmaxWeight : ExpertGating::Softmax, true,
                           oai ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
        for (const DecodeDot dot : {DecodeDot::Int8, DecodeDot::Int8x2})
            for (const bool invariant : {false, true})
                for (const int64_t nt : {1, 2, 5, 17}) {
                    SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + std::to_string(nt) + " tokens, " +
                                 (dot == DecodeDot::Int8 ? "int8" : "int8x2") +
                                 (invariant ? ", invariant" : ""));
                    const std::vector<float> x = random_floats(rng, nt * d, -1, 1);
                    const std::vector<float> logits = random_floats(rng, nt * n_expert, -2, 2);
                    std::vector<float> got(size_t(nt * d));
                    cpu::MoeScratch s;
                    cpu::moe_ffn(ex.w, o, x.data(), logits.data(), nt, got.data(), pool, dot, invariant, s);
                    const std::vector<float> want =
                        moe_by_matmuls(ex.w, o, x, logits, nt, pool, dot, invariant);
                    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
                }
    }
}

// moe_ffn of nt random tokens against one cpu::matmul per expert (memcmp), with routing skewed so that
// one call mixes experts of one token, a few, and many: experts 0 and 1 favoured, the last one shunned.
void expect_prefill_equals_matmuls(const cpu::MoeExperts& w, const op::MoeFfn& o, int64_t nt, DecodeDot dot,
                                   bool invariant, std::mt19937& rng, ThreadPool& pool) {
    const int64_t d = w.n_embd, n_expert = o.n_expert;
    const std::vector<float> x = random_floats(rng, nt * d, -1, 1);
    std::vector<float> logits = random_floats(rng, nt * n_expert, -2, 2);
    for (int64_t t = 0; t < nt; ++t)
        logits[size_t(t * n_expert)] += 2, logits[size_t(t * n_expert + 1)] += 1,
            logits[size_t(t * n_expert + n_expert - 1)] -= 3;
    std::vector<float> got(size_t(nt * d));
    cpu::MoeScratch s;
    cpu::moe_ffn(w, o, x.data(), logits.data(), nt, got.data(), pool, dot, invariant, s);
    const std::vector<float> want = moe_by_matmuls(w, o, x, logits, nt, pool, dot, invariant);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// Prefill batches, where on AVX-512 VNNI the experts of several tokens take the int16 GEMM together
// (gemv's layout up to gemv_max_tokens tokens, gemm's groups of 12 beyond): each row has the bits of
// cpu::matmul on that expert's tokens, with and without invariance.
TEST(MoeFfn, PrefillEqualsMatmulsPerExpert) {
    std::mt19937 rng(29);
    ThreadPool pool(2);
    const int64_t d = 512, f = 256, n_expert = 16;
    const op::MoeFfn o{n_expert, 4, ExpertGating::Softmax, true};
    for (const auto& [type, down] : {std::pair{GgmlType::Q4_K, GgmlType::Q6_K},
                                     {GgmlType::Q5_0, GgmlType::Q8_0},
                                     {GgmlType::Q5_K, GgmlType::Q5_K}}) {
        const Experts ex(type, down, d, f, n_expert, rng);
        for (const bool invariant : {false, true})
            for (const int64_t nt : {6, 24, 64, 200}) {
                SCOPED_TRACE(std::string(ggml_type_name(type)) + "/" + ggml_type_name(down) + ", " +
                             std::to_string(nt) + " tokens" + (invariant ? ", invariant" : ""));
                expect_prefill_equals_matmuls(ex.w, o, nt, DecodeDot::Int8x2, invariant, rng, pool);
            }
    }
}

// Prefill batches where the experts take the f32 tiles together: DecodeDot::F32 on every CPU with AVX2,
// and int8x2 where the int16 GEMM does not run (AVX2 alone, or MINFER_NO_AVX512=1) for experts of more
// than kIntDotMaxTokens tokens. Each row has the bits of cpu::matmul on that expert's tokens; the F32
// experts of 200 x 72 end in partial panels, and with int8x2 take the f32 dots for one token.
TEST(MoeFfn, TiledPrefillEqualsMatmulsPerExpert) {
    std::mt19937 rng(31);
    ThreadPool pool(2);
    const int64_t n_expert = 16;
    struct Case {
        GgmlType type, down;
        int64_t d, f;
        bool oai;  // biases and gpt-oss's gating and activation
    };
    for (const Case& c : {Case{GgmlType::Q4_K, GgmlType::Q6_K, 512, 256, false},
                          Case{GgmlType::Q8_0, GgmlType::Q5_0, 256, 128, true},
                          Case{GgmlType::F32, GgmlType::F32, 200, 72, false}}) {
        Experts ex(c.type, c.down, c.d, c.f, n_expert, rng);
        if (c.oai) ex.add_biases(rng);
        const op::MoeFfn o{n_expert, 4, c.oai ? ExpertGating::SoftmaxWeight : ExpertGating::Softmax, true,
                           c.oai ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
        for (const DecodeDot dot : {DecodeDot::F32, DecodeDot::Int8x2})
            for (const bool invariant : {false, true})
                for (const int64_t nt : {6, 64, 200}) {
                    SCOPED_TRACE(std::string(ggml_type_name(c.type)) + "/" + ggml_type_name(c.down) + ", " +
                                 std::to_string(nt) + " tokens, " +
                                 (dot == DecodeDot::F32 ? "f32" : "int8x2") +
                                 (invariant ? ", invariant" : ""));
                    expect_prefill_equals_matmuls(ex.w, o, nt, dot, invariant, rng, pool);
                }
    }
}

TEST(MoeFfn, ATokensRowIsTheSameAloneAndInABatch) {
    std::mt19937 rng(17);
    ThreadPool pool(2);
    const int64_t d = 256, f = 256, n_expert = 16, nt = 24;
    for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::IQ4_XS}) {
        SCOPED_TRACE(ggml_type_name(type));
        const Experts ex(type, d, f, n_expert, rng);
        const op::MoeFfn o{n_expert, 4, ExpertGating::Softmax, true};
        const std::vector<float> x = random_floats(rng, nt * d, -1, 1);
        const std::vector<float> logits = random_floats(rng, nt * n_expert, -2, 2);
        std::vector<float> batch(static_cast<size_t>(nt * d)), alone(static_cast<size_t>(d));
        cpu::MoeScratch s;
        cpu::moe_ffn(ex.w, o, x.data(), logits.data(), nt, batch.data(), pool, DecodeDot::Int8x2, true, s);
        for (int64_t t = 0; t < nt; ++t) {
            cpu::moe_ffn(ex.w, o, x.data() + t * d, logits.data() + t * n_expert, 1, alone.data(), pool,
                         DecodeDot::Int8x2, true, s);
            ASSERT_EQ(std::memcmp(alone.data(), batch.data() + t * d, size_t(d) * sizeof(float)), 0)
                << "token " << t;
        }
    }
}

}  // namespace
}  // namespace minfer::test
