// The executor's segments and cross-backend transfers, without a GPU: a fake device backend with its
// own (pretend) memory runs every node except the FFN down projections, which fall back to the CPU.
// Each buffer must cross once per backend that reads it, inputs go up once, logits come down once, and
// the numbers must equal a CPU-only run (the fake device computes with the CPU kernels).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "gguf/gguf_test_util.h"
#include "models/model.h"
#include "models/synth.h"
#include "sched/executor.h"
#include "sched/passes.h"

namespace minfer::test {
namespace {

// Claims to be a GPU with its own memory; computes in the host arena with the CPU backend and counts
// the transfers the executor asks for.
class FakeDevice final : public Backend {
  public:
    explicit FakeDevice(CpuBackend& cpu) : cpu_(cpu) {}
    BackendKind kind() const override { return BackendKind::Cuda; }
    bool supports(const CNode& n) const override {
        const auto* mm = std::get_if<meta::MatMul>(&n.meta);
        return !mm || mm->weight.name.find("ffn_down") == std::string::npos;
    }
    void prepare(const ComputeGraph& g) override { cpu_.prepare(g); }
    void compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) override {
        cpu_.compute(g, n, bufs);
    }
    bool has_own_memory() const override { return true; }
    void upload(const NodeBuffers&, NodeId id, int64_t) override { uploads.push_back(id); }
    void download(const NodeBuffers&, NodeId id, int64_t) override { downloads.push_back(id); }

    std::vector<NodeId> uploads, downloads;

  private:
    CpuBackend& cpu_;
};

// Prefill of `tokens` through the production passes on `backends`; returns the logits.
std::vector<float> run(const Model& m, const std::vector<Backend*>& backends,
                       const std::vector<int32_t>& tokens, Schedule* schedule = nullptr) {
    CParams c;
    c.n_ctx = 64;
    const auto nt = int64_t(tokens.size());
    ComputeGraph g = m.build_graph(m, GraphParams::make(nt, 1, c));
    assign_backends(g, backends);
    fuse_swiglu(g, backends);
    for (Backend* b : backends) b->prepare(g);
    KvCache kv;
    kv.reserve(g);
    Executor exec(kv);
    exec.bind(g, plan_buffers(g), backends);
    std::vector<int32_t> pos(tokens.size()), out_ids{int32_t(nt - 1)};
    std::iota(pos.begin(), pos.end(), 0);
    exec.fill_input(g.find_input("token_ids"), tokens);
    exec.fill_input(g.find_input("positions"), pos);
    exec.fill_input(g.find_input("out_ids"), out_ids);
    exec.run(g);
    if (schedule) *schedule = exec.schedule();
    const float* out = exec.data(g.outputs.front());
    return {out, out + m.hp.n_vocab};
}

TEST(Schedule, fallback_nodes_split_segments_with_minimal_transfers) {
    static TempDir dir;
    SynthSpec s;
    s.n_layer = 3;
    write_synth_model(s, dir.file("m.gguf"));
    const auto m = Model::load(dir.file("m.gguf"));
    const std::vector<int32_t> tokens{5, 17, 3, 99};

    CpuBackend cpu(*m->file, 2);
    const std::vector<float> want = run(*m, {&cpu}, tokens);
    FakeDevice dev(cpu);
    Schedule sched;
    const std::vector<float> got = run(*m, {&dev, &cpu}, tokens, &sched);
    EXPECT_EQ(got, want) << "the same kernels in the same order";

    // Per layer: device (norms .. SwiGLU), CPU (ffn_down), then the device again; one trailing segment
    // per layer boundary merges with the next layer's device segment.
    ASSERT_EQ(sched.segments.size(), size_t(2 * s.n_layer + 1));
    for (size_t i = 0; i < sched.segments.size(); ++i)
        EXPECT_EQ(sched.segments[i].backend, i % 2 == 0 ? static_cast<Backend*>(&dev) : &cpu) << i;
    // Up: the three inputs of an unpaged graph (token ids, positions, out ids) once each, then each down
    // projection's output. Down: each SwiGLU output for the CPU's matmul, and the logits at the end.
    EXPECT_EQ(dev.uploads.size(), size_t(3 + s.n_layer));
    EXPECT_EQ(dev.downloads.size(), size_t(s.n_layer + 1));
    ASSERT_EQ(sched.outputs.size(), 1u);
    EXPECT_EQ(dev.downloads.back(), sched.outputs.front().node);
}

}  // namespace
}  // namespace minfer::test
