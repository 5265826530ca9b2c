// The mixture of experts on the GPU (backend/cuda/moe_cuda.h, matvec_experts, matmul_mma_experts): the
// routing against cpu::moe_route (the same experts, the same weights) and its columns layout, the whole
// FFN (routing, grouped expert products one per pair or one per expert, activation, weighted sum) against
// the scalar twin cpu::moe_ffn_ref within a stated budget, and a token's row with the same bits alone and
// in a batch. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cuda/moe_cuda.h"
#include "backend/cuda/ops_cuda.h"
#include "cuda/cuda_test_util.h"
#include "cuda/quant_ref_util.h"

namespace minfer::test {
namespace {

// The kernels' name of each gating (the backend's own mapping is private to it).
cuda::Gating gating_of(ExpertGating g) {
    constexpr std::pair<ExpertGating, cuda::Gating> kNames[] = {
        {ExpertGating::Softmax, cuda::Gating::kSoftmax},
        {ExpertGating::Sigmoid, cuda::Gating::kSigmoid},
        {ExpertGating::SoftmaxWeight, cuda::Gating::kSoftmaxChosen}};
    return std::find_if(std::begin(kNames), std::end(kNames), [&](const auto& n) { return n.first == g; })
        ->second;
}

// Router logits with ties: every third row repeats a few values, so the lower-id rule decides.
std::vector<float> router_logits(std::mt19937& rng, int64_t nt, int64_t n_expert) {
    std::vector<float> l = gaussian(rng, nt * n_expert);
    for (int64_t t = 0; t < nt; t += 3)
        for (int64_t e = 0; e < n_expert; ++e) l[size_t(t * n_expert + e)] = float(e % 5) * 0.25f;
    return l;
}

// The routing buffers on the device and their host copies.
struct Routed {
    DeviceBuffer<int32_t> ids, order, where;
    DeviceBuffer<float> weights;
    explicit Routed(int64_t pairs)
        : ids(size_t(pairs)), order(size_t(pairs)), where(size_t(pairs)), weights(size_t(pairs)) {}
    cuda::MoeSlots slots() const { return {ids.get(), weights.get(), order.get(), where.get()}; }
};

// The columns layout's buffers on the device for `pairs` pairs of n_expert experts.
struct Columns {
    DeviceBuffer<int32_t> col, token;
    DeviceBuffer<cuda::ExpertTile> tiles;
    cuda::MoeColumns c;
    Columns(int64_t pairs, int64_t n_expert, int tile_cols)
        : col(size_t(pairs)),
          token(size_t(cuda::moe_max_columns(pairs, n_expert))),
          tiles(size_t(cuda::moe_max_tiles(pairs, n_expert, tile_cols))),
          c{col.get(),
            token.get(),
            tiles.get(),
            cuda::moe_max_columns(pairs, n_expert),
            cuda::moe_max_tiles(pairs, n_expert, tile_cols),
            tile_cols} {}
};

// Budget: the weights are computed in double on both sides and rounded to f32 once; the GPU's exp and
// sum order may move the double by a few ulp, which can flip the f32 rounding: 1 f32 ulp.
void check_route(int64_t nt, int64_t n_expert, int64_t k, ExpertGating gating, bool norm, std::mt19937& rng) {
    SCOPED_TRACE(std::to_string(nt) + " tokens, " + std::to_string(k) + " of " + std::to_string(n_expert) +
                 ", " + expert_gating_name(gating) + (norm ? ", norm" : ""));
    const std::vector<float> logits = router_logits(rng, nt, n_expert);
    const int64_t pairs = nt * k;
    DeviceBuffer<float> dl(logits);
    Routed r(pairs);
    cuda::moe_route(dl.get(), nt, {n_expert, k, gating_of(gating), norm}, r.slots(), nullptr);
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ids = r.ids.download(), order = r.order.download(), where = r.where.download();
    const auto w = r.weights.download();
    std::vector<int32_t> want_ids(static_cast<size_t>(k));
    std::vector<float> want_w(static_cast<size_t>(k));
    for (int64_t t = 0; t < nt; ++t) {
        cpu::moe_route(logits.data() + t * n_expert, n_expert, k, gating, norm, want_ids.data(),
                       want_w.data());
        for (int64_t j = 0; j < k; ++j) {
            const size_t p = size_t(t * k + j);
            ASSERT_EQ(ids[p], want_ids[size_t(j)]) << "token " << t << ", choice " << j;
            EXPECT_NEAR(w[p], want_w[size_t(j)], std::fabs(want_w[size_t(j)]) * 0x1p-23) << "token " << t;
        }
    }
    std::vector<bool> seen(size_t(pairs), false);
    for (int64_t i = 0; i < pairs; ++i) {
        const int32_t p = order[size_t(i)];
        ASSERT_TRUE(p >= 0 && p < pairs && !seen[size_t(p)]) << "order is not a permutation at " << i;
        seen[size_t(p)] = true;
        EXPECT_EQ(where[size_t(p)], i);
        if (i > 0) {
            EXPECT_LE(ids[size_t(order[size_t(i - 1)])], ids[size_t(p)]) << "not grouped at " << i;
        }
    }
}

TEST(CudaMoe, RouteChoosesAsTheCpu) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(5);
    for (const ExpertGating g : {ExpertGating::Softmax, ExpertGating::Sigmoid, ExpertGating::SoftmaxWeight})
        for (const bool norm : {true, false}) {
            check_route(1, 8, 2, g, norm, rng);
            check_route(37, 128, 8, g, norm, rng);
        }
    check_route(600, 32, 4, ExpertGating::SoftmaxWeight, false, rng);  // gpt-oss's shape, a prefill chunk
    check_route(3, cuda::kMaxExperts, 16, ExpertGating::Softmax, true, rng);
    check_route(5, 6, 6, ExpertGating::Softmax, true, rng);  // every expert chosen
}

// The columns layout of a routing: each pair's column holds its token, within a tile of its expert;
// an expert's tiles start at a multiple of 8 and cover its pairs and fewer than 8 padding columns (-1);
// every other column is -1 and every other tile empty.
void check_columns(int64_t nt, int64_t n_expert, int64_t k, int tile_cols, std::mt19937& rng) {
    SCOPED_TRACE(std::to_string(nt) + " tokens, " + std::to_string(k) + " of " + std::to_string(n_expert) +
                 ", tiles of " + std::to_string(tile_cols));
    const std::vector<float> logits = router_logits(rng, nt, n_expert);
    const int64_t pairs = nt * k;
    DeviceBuffer<float> dl(logits);
    Routed r(pairs);
    const Columns c(pairs, n_expert, tile_cols);
    cuda::moe_route(dl.get(), nt, {n_expert, k, cuda::Gating::kSoftmax, true}, r.slots(), nullptr, &c.c);
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ids = r.ids.download(), col = c.col.download(), token = c.token.download();
    const auto tiles = c.tiles.download();
    std::vector<int32_t> pair_at(token.size(), -1), expert_at(token.size(), -1);
    for (int64_t p = 0; p < pairs; ++p) {
        const int32_t at = col[size_t(p)];
        ASSERT_TRUE(at >= 0 && at < int32_t(token.size()) && pair_at[size_t(at)] < 0) << "pair " << p;
        pair_at[size_t(at)] = int32_t(p);
        EXPECT_EQ(token[size_t(at)], p / k) << "pair " << p;
    }
    std::vector<int64_t> covered(size_t(n_expert), 0), first(size_t(n_expert), -1);
    bool ended = false;
    for (const cuda::ExpertTile& t : tiles) {
        ended = ended || t.expert < 0;
        if (t.expert < 0) continue;
        ASSERT_FALSE(ended) << "a tile after an empty one";
        ASSERT_TRUE(t.expert < n_expert && t.col % 8 == 0 && t.cols % 8 == 0 && t.cols > 0 &&
                    t.cols <= tile_cols);
        auto& f = first[size_t(t.expert)];
        if (f < 0) f = t.col;
        ASSERT_EQ(t.col, f + covered[size_t(t.expert)]) << "expert " << t.expert << "'s tiles not contiguous";
        covered[size_t(t.expert)] += t.cols;
        for (int32_t i = t.col; i < t.col + t.cols; ++i) {
            ASSERT_LT(expert_at[size_t(i)], 0) << "column " << i << " in two tiles";
            expert_at[size_t(i)] = t.expert;
            const int32_t p = pair_at[size_t(i)];
            if (p >= 0) {
                EXPECT_EQ(ids[size_t(p)], t.expert) << "column " << i;
            }
        }
    }
    int64_t padding = 0;
    for (size_t i = 0; i < token.size(); ++i) {
        ASSERT_EQ(pair_at[i] >= 0, token[i] >= 0) << "column " << i;
        if (pair_at[i] >= 0) {
            ASSERT_GE(expert_at[i], 0) << "pair " << pair_at[i] << " in no tile";
        }
        padding += expert_at[i] >= 0 && pair_at[i] < 0;
    }
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t n = std::count(ids.begin(), ids.end(), int32_t(e));
        EXPECT_EQ(covered[size_t(e)], (n + 7) / 8 * 8) << "expert " << e;
    }
    EXPECT_LT(padding, 8 * n_expert);
}

TEST(CudaMoe, ColumnsHoldEachExpertsPairsInTiles) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(13);
    for (const int tile_cols : {8, 16, 32, 64}) {
        check_columns(1, 8, 2, tile_cols, rng);
        check_columns(64, 128, 8, tile_cols, rng);
        check_columns(600, 32, 4, tile_cols, rng);
    }
    check_columns(5, 6, 6, 8, rng);  // every expert chosen by every token
}

// Stacked experts of one type (cpu::MoeExperts on the host, the same bytes on the device).
struct Stack {
    HostMatrix gate, up, down;
    std::vector<float> b_gate, b_up, b_down;
    cpu::MoeExperts host;

    Stack(GgmlType t, int64_t d, int64_t f, int64_t n_expert, bool biases, std::mt19937& rng)
        : gate(quantized_matrix(t, f * n_expert, d, rng)),
          up(quantized_matrix(t, f * n_expert, d, rng)),
          down(quantized_matrix(t, d * n_expert, f, rng)) {
        const QuantTraits* q = &traits(t);
        host = {q, q, q, gate.bytes.data(), up.bytes.data(), down.bytes.data(), d, f, n_expert};
        if (!biases) return;
        b_gate = gaussian(rng, f * n_expert), b_up = gaussian(rng, f * n_expert);
        b_down = gaussian(rng, d * n_expert);
        host.b_gate = b_gate.data(), host.b_up = b_up.data(), host.b_down = b_down.data();
    }
};

// A stack on the device: its bytes, padded for the products per expert when Q6_K (pad_matrix).
struct DeviceStack {
    DeviceBuffer<uint8_t> raw, padded;
    cuda::QMatrix m;
    DeviceStack(const HostMatrix& h, bool pad)
        : raw(h.bytes),
          padded(pad ? size_t(cuda::padded_row_bytes(h.type, h.n_in) * h.n_out) : 0),
          m{h.type, raw.get(), h.n_in, h.n_out} {
        if (!pad) return;
        cuda::pad_matrix(m, padded.get(), nullptr);
        m = {h.type, padded.get(), h.n_in, h.n_out, false, true};
    }
};

// The experts' products of the backend's two sequences (cuda_backend_moe.cpp): h = act(gate x, up x) and
// out = down h, a row per pair (one-token products) or per column (tile_cols > 0: the products per
// expert, the pairs' rows of out then at their columns, slots.where).
struct Products {
    const Stack& s;
    const op::MoeFfn& o;
    const DeviceBuffer<float>& x;
    int64_t pairs;
    DeviceBuffer<float> b_gate, b_up, b_down;

    Products(const Stack& st, const op::MoeFfn& op, const DeviceBuffer<float>& dx, int64_t n_pairs)
        : s(st),
          o(op),
          x(dx),
          pairs(n_pairs),
          b_gate(or_one(s.b_gate)),
          b_up(or_one(s.b_up)),
          b_down(or_one(s.b_down)) {}
    static std::vector<float> or_one(const std::vector<float>& v) {
        return v.empty() ? std::vector<float>(1) : v;
    }
    bool biases() const { return !s.b_gate.empty(); }
    void act(const float* g, const float* u, float* h, int64_t n) const {
        if (o.act == ExpertAct::SwiGLUOai) return cuda::swiglu_oai(g, u, h, n, nullptr);
        cuda::swiglu(g, u, h, n, nullptr);
    }

    void per_pair(const Routed& r, DeviceBuffer<float>& out) const {
        const int64_t d = s.host.n_embd, f = s.host.n_ff;
        const DeviceStack gate(s.gate, false), up(s.up, false), down(s.down, false);
        DeviceBuffer<float> h(size_t(pairs * f)), g(size_t(pairs * f)), u(size_t(pairs * f));
        const cuda::ExpertPairs tokens{r.order.get(), r.ids.get(), pairs, o.n_used};
        const cuda::ExpertPairs rows{r.order.get(), r.ids.get(), pairs, 0};
        if (o.act == ExpertAct::SwiGLU && !biases()) {
            cuda::matvec_swiglu_experts(gate.m, up.m, f, x.get(), tokens, h.get(), nullptr);
        } else {
            cuda::matvec_experts(gate.m, f, x.get(), tokens, g.get(), biases() ? b_gate.get() : nullptr,
                                 nullptr);
            cuda::matvec_experts(up.m, f, x.get(), tokens, u.get(), biases() ? b_up.get() : nullptr, nullptr);
            act(g.get(), u.get(), h.get(), pairs * f);
        }
        cuda::matvec_experts(down.m, d, h.get(), rows, out.get(), biases() ? b_down.get() : nullptr, nullptr);
    }

    void per_expert(const cuda::MoeColumns& c, DeviceBuffer<float>& out) const {
        const int64_t d = s.host.n_embd, f = s.host.n_ff, n = c.n_cols;
        const bool pad = s.gate.type == GgmlType::Q6_K;
        const DeviceStack gate(s.gate, pad), up(s.up, pad), down(s.down, pad);
        DeviceBuffer<float> h(size_t(n * f)), g(size_t(n * f)), u(size_t(n * f));
        DeviceBuffer<uint8_t> xq(cuda::mma_x_bytes(std::max(d, f), n));
        cuda::quantize_x_mma_columns(x.get(), d, c.token, true, n, xq.get(), nullptr);
        cuda::matmul_mma_experts(gate.m, f, xq.get(), c, g.get(), biases() ? b_gate.get() : nullptr, nullptr);
        cuda::matmul_mma_experts(up.m, f, xq.get(), c, u.get(), biases() ? b_up.get() : nullptr, nullptr);
        act(g.get(), u.get(), h.get(), n * f);
        cuda::quantize_x_mma_columns(h.get(), f, c.token, false, n, xq.get(), nullptr);
        cuda::matmul_mma_experts(down.m, d, xq.get(), c, out.get(), biases() ? b_down.get() : nullptr,
                                 nullptr);
    }
};

// The backend's sequence on device copies of the stack: y [nt][d]; tile_cols > 0: the products per
// expert over tiles of that many columns, else one per pair.
std::vector<float> gpu_moe(const Stack& s, const op::MoeFfn& o, const std::vector<float>& x,
                           const std::vector<float>& logits, int64_t nt, int tile_cols = 0) {
    const int64_t d = s.host.n_embd, pairs = nt * o.n_used;
    DeviceBuffer<float> dx(x), dl(logits), y(size_t(nt * d));
    Routed r(pairs);
    const Products p(s, o, dx, pairs);
    cuda::MoeSlots slots = r.slots();
    const cuda::MoeRouting routing{o.n_expert, o.n_used, gating_of(o.gating), o.norm};
    if (tile_cols > 0) {
        const Columns c(pairs, o.n_expert, tile_cols);
        DeviceBuffer<float> out(size_t(c.c.n_cols * d));
        cuda::moe_route(dl.get(), nt, routing, slots, nullptr, &c.c);
        p.per_expert(c.c, out);
        slots.where = c.c.col;
        cuda::moe_combine(out.get(), slots, nt, o.n_used, d, y.get(), nullptr);
        MINFER_CUDA_CHECK(cudaDeviceSynchronize());
        return y.download();
    }
    DeviceBuffer<float> out(size_t(pairs * d));
    cuda::moe_route(dl.get(), nt, routing, slots, nullptr);
    p.per_pair(r, out);
    cuda::moe_combine(out.get(), slots, nt, o.n_used, d, y.get(), nullptr);
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
    return y.download();
}

const GgmlType kExpertTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,   GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,
                                 GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS, GgmlType::MXFP4};

// Budget: as cpu's MoeFfn.EqualsItsScalarTwin: each product is an f32 dot of at most 512 terms (a few
// roundings of sum |w x|), then the activation and k weighted sums: 2e-4 of the largest |y|, with a
// margin of ten. A wrong expert, weight, bias or row moves y by the order of |y| itself.
TEST(CudaMoe, FfnEqualsTheScalarTwin) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(23);
    const int64_t d = 256, f = 512, n_expert = 8;
    for (const GgmlType type : kExpertTypes)
        for (const int64_t nt : {1, 5, 70}) {
            const bool oai = nt == 5;  // gpt-oss: its gating, activation and biases
            const Stack s(type, d, f, n_expert, oai, rng);
            const op::MoeFfn o{n_expert, 3, oai ? ExpertGating::SoftmaxWeight : ExpertGating::Softmax, true,
                               oai ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
            const std::vector<float> x = gaussian(rng, nt * d), logits = router_logits(rng, nt, n_expert);
            std::vector<float> want(size_t(nt * d));
            cpu::moe_ffn_ref(s.host, o, x.data(), logits.data(), nt, want.data());
            const bool mma = cuda::experts_mma_fits({type, nullptr, d, f, false, type == GgmlType::Q6_K});
            for (const int tile_cols : {0, 8, 32}) {
                if (tile_cols > 0 && !mma) continue;
                SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + std::to_string(nt) + " tokens" +
                             (oai ? ", gpt-oss" : "") +
                             (tile_cols ? ", tiles of " + std::to_string(tile_cols) : ", per pair"));
                const std::vector<float> got = gpu_moe(s, o, x, logits, nt, tile_cols);
                double scale = 0, err = 0;
                for (size_t i = 0; i < got.size(); ++i) {
                    scale = std::max(scale, std::fabs(double(want[i])));
                    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));  // NaN fails below
                }
                ASSERT_GT(scale, 0.0);
                EXPECT_LE(err, 2e-4 * scale);
            }
        }
}

// A token's output does not depend on the other tokens of its step: each pair's products have one
// layout whatever the number of pairs, and its row of the sum adds its own k outputs in order.
TEST(CudaMoe, ATokensRowIsTheSameAloneAndInABatch) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(29);
    const int64_t d = 512, f = 256, n_expert = 16, nt = 40;
    for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4})
        for (const int tile_cols : {0, 16}) {
            SCOPED_TRACE(std::string(ggml_type_name(type)) + (tile_cols ? ", per expert" : ", per pair"));
            const Stack s(type, d, f, n_expert, type == GgmlType::MXFP4, rng);
            const op::MoeFfn o{n_expert, 4, ExpertGating::Softmax, true,
                               type == GgmlType::MXFP4 ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
            const std::vector<float> x = gaussian(rng, nt * d), logits = router_logits(rng, nt, n_expert);
            const std::vector<float> batch = gpu_moe(s, o, x, logits, nt, tile_cols);
            for (const int64_t t : {int64_t(0), int64_t(17), nt - 1}) {
                const std::vector<float> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
                const std::vector<float> lt(logits.begin() + t * n_expert,
                                            logits.begin() + (t + 1) * n_expert);
                const std::vector<float> alone = gpu_moe(s, o, xt, lt, 1, tile_cols);
                EXPECT_EQ(std::memcmp(alone.data(), batch.data() + t * d, size_t(d) * sizeof(float)), 0)
                    << "token " << t;
            }
        }
}

}  // namespace
}  // namespace minfer::test
