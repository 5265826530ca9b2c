// The mixture of experts on the GPU (backend/cuda/moe_cuda.h, matvec_experts): the routing against
// cpu::moe_route (the same experts, the same weights), the whole FFN (routing, grouped expert products,
// activation, weighted sum) against the scalar twin cpu::moe_ffn_ref within a stated budget, and a
// token's row with the same bits alone and in a batch. Skipped without a GPU.
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

// The backend's sequence (cuda_backend_moe.cpp) on device copies of the stack: y [nt][d].
std::vector<float> gpu_moe(const Stack& s, const op::MoeFfn& o, const std::vector<float>& x,
                           const std::vector<float>& logits, int64_t nt) {
    const int64_t d = s.host.n_embd, f = s.host.n_ff, pairs = nt * o.n_used;
    const auto matrix = [](const HostMatrix& m, const DeviceBuffer<uint8_t>& b) {
        return cuda::QMatrix{m.type, b.get(), m.n_in, m.n_out};
    };
    DeviceBuffer<uint8_t> dg(s.gate.bytes), du(s.up.bytes), dd(s.down.bytes);
    DeviceBuffer<float> dx(x), dl(logits), h(size_t(pairs * f)), g(size_t(pairs * f)), u(size_t(pairs * f));
    DeviceBuffer<float> out(size_t(pairs * d)), y(size_t(nt * d));
    const bool biases = !s.b_gate.empty();
    DeviceBuffer<float> bg(biases ? s.b_gate : std::vector<float>(1)),
        bu(biases ? s.b_up : std::vector<float>(1));
    DeviceBuffer<float> bd(biases ? s.b_down : std::vector<float>(1));
    Routed r(pairs);
    cuda::moe_route(dl.get(), nt, {o.n_expert, o.n_used, gating_of(o.gating), o.norm}, r.slots(), nullptr);
    const cuda::ExpertPairs tokens{r.order.get(), r.ids.get(), pairs, o.n_used};
    const cuda::ExpertPairs rows{r.order.get(), r.ids.get(), pairs, 0};
    if (o.act == ExpertAct::SwiGLU && !biases) {
        cuda::matvec_swiglu_experts(matrix(s.gate, dg), matrix(s.up, du), f, dx.get(), tokens, h.get(),
                                    nullptr);
    } else {
        cuda::matvec_experts(matrix(s.gate, dg), f, dx.get(), tokens, g.get(), biases ? bg.get() : nullptr,
                             nullptr);
        cuda::matvec_experts(matrix(s.up, du), f, dx.get(), tokens, u.get(), biases ? bu.get() : nullptr,
                             nullptr);
        if (o.act == ExpertAct::SwiGLUOai)
            cuda::swiglu_oai(g.get(), u.get(), h.get(), pairs * f, nullptr);
        else
            cuda::swiglu(g.get(), u.get(), h.get(), pairs * f, nullptr);
    }
    cuda::matvec_experts(matrix(s.down, dd), d, h.get(), rows, out.get(), biases ? bd.get() : nullptr,
                         nullptr);
    cuda::moe_combine(out.get(), r.slots(), nt, o.n_used, d, y.get(), nullptr);
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
            SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + std::to_string(nt) + " tokens" +
                         (oai ? ", gpt-oss" : ""));
            const Stack s(type, d, f, n_expert, oai, rng);
            const op::MoeFfn o{n_expert, 3, oai ? ExpertGating::SoftmaxWeight : ExpertGating::Softmax, true,
                               oai ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
            const std::vector<float> x = gaussian(rng, nt * d), logits = router_logits(rng, nt, n_expert);
            const std::vector<float> got = gpu_moe(s, o, x, logits, nt);
            std::vector<float> want(got.size());
            cpu::moe_ffn_ref(s.host, o, x.data(), logits.data(), nt, want.data());
            double scale = 0, err = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                scale = std::max(scale, std::fabs(double(want[i])));
                err = std::max(err, std::fabs(double(got[i]) - double(want[i])));  // NaN fails below
            }
            ASSERT_GT(scale, 0.0);
            EXPECT_LE(err, 2e-4 * scale);
        }
}

// A token's output does not depend on the other tokens of its step: each pair's products have one
// layout whatever the number of pairs, and its row of the sum adds its own k outputs in order.
TEST(CudaMoe, ATokensRowIsTheSameAloneAndInABatch) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(29);
    const int64_t d = 512, f = 256, n_expert = 16, nt = 40;
    for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
        SCOPED_TRACE(ggml_type_name(type));
        const Stack s(type, d, f, n_expert, type == GgmlType::MXFP4, rng);
        const op::MoeFfn o{n_expert, 4, ExpertGating::Softmax, true,
                           type == GgmlType::MXFP4 ? ExpertAct::SwiGLUOai : ExpertAct::SwiGLU};
        const std::vector<float> x = gaussian(rng, nt * d), logits = router_logits(rng, nt, n_expert);
        const std::vector<float> batch = gpu_moe(s, o, x, logits, nt);
        for (const int64_t t : {int64_t(0), int64_t(17), nt - 1}) {
            const std::vector<float> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
            const std::vector<float> lt(logits.begin() + t * n_expert, logits.begin() + (t + 1) * n_expert);
            const std::vector<float> alone = gpu_moe(s, o, xt, lt, 1);
            EXPECT_EQ(std::memcmp(alone.data(), batch.data() + t * d, size_t(d) * sizeof(float)), 0)
                << "token " << t;
        }
    }
}

}  // namespace
}  // namespace minfer::test
