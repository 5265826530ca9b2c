// Graph invariants observed through execution (design seed 05, §2.6–2.8, 3.4): KV nodes carry only
// their layer, KV regions survive rebuilds, the n_out tail equals the full graph's last rows, one
// build per distinct GraphParams, and fused decode graphs compute what the unfused ones do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "gguf/gguf_test_util.h"
#include "graph/builder.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "sched/alloc.h"
#include "sched/executor.h"
#include "sched/passes.h"
#include "test_data.h"
#include "util/error.h"

namespace minfer::test {
namespace {

// A tiny synthetic model of `arch`, written to a scratch directory that outlives every test.
std::unique_ptr<Model> synth(const std::string& arch, int n_layer, int64_t n_swa = 0) {
    static TempDir dir;
    static int count = 0;
    SynthSpec s;
    s.arch = arch;
    s.n_layer = n_layer;
    s.n_swa = n_swa;
    const std::string path = dir.file(arch + "-" + std::to_string(count++) + ".gguf");
    write_synth_model(s, path);
    return Model::load(path);
}

// Token ids spread over the vocabulary.
std::vector<int32_t> prompt(int64_t n, int64_t n_vocab, int64_t salt = 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7919 + 13 + salt * 104729) % n_vocab);
    return ids;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

const KvCache::Region& kv_region(const Session& s, int il) {
    return s.kv().layer(il);
}

// Rows [0, n) of every layer's K and V regions.
std::vector<float> kv_rows(const Session& s, int n_layer, int64_t n) {
    std::vector<float> out;
    for (int il = 0; il < n_layer; ++il) {
        const KvCache::Region& r = kv_region(s, il);
        const auto* k = reinterpret_cast<const float*>(r.k.data());  // an f32 cache
        const auto* v = reinterpret_cast<const float*>(r.v.data());
        out.insert(out.end(), k, k + n * r.n_embd);
        out.insert(out.end(), v, v + n * r.n_embd);
    }
    return out;
}

// ---- positions are data ----------------------------------------------------------------------

TEST(Graph, kv_nodes_carry_layer_only) {
    static_assert(sizeof(op::KvcacheStore) == sizeof(int) && sizeof(op::KvcacheLoad) == sizeof(int),
                  "KV ops carry their layer and nothing positional");
    constexpr int L = 3;
    const auto m = synth("qwen2", L);
    Session a(*m, {64, 1}), b(*m, {64, 1});
    b.forward(prompt(5, m->hp.n_vocab), 1);
    ASSERT_EQ(b.n_past(), 5);

    // Two sessions at different n_past ask for the same params and get the same graph.
    EXPECT_EQ(a.params_for(4, 1), b.params_for(4, 1));
    const ComputeGraph g = a.planned_graph(a.params_for(4, 1));
    EXPECT_EQ(structural_diff(g, b.planned_graph(b.params_for(4, 1))), std::nullopt);

    const NodeId positions = g.find_input("positions"), slot = g.find_input("seq_slot"),
                 table = g.find_input("block_table");
    std::vector<int> stores(L, 0), loads(L, 0);
    for (const CNode& n : g.nodes) {
        if (const auto* st = std::get_if<op::KvcacheStore>(&n.op)) {
            ++stores[size_t(st->layer)];
            ASSERT_EQ(n.src.size(), 5u);
            EXPECT_EQ(n.src[2], positions) << "where to write arrives as data";
            EXPECT_EQ(n.src[3], slot) << "so does the sequence";
            EXPECT_EQ(n.src[4], table) << "and its blocks";
            EXPECT_EQ(n.shape, (Shape{m->hp.n_kv_embd(), 64, 1, 1})) << "the region, not the rows written";
        }
        if (const auto* ld = std::get_if<op::KvcacheLoad>(&n.op)) {
            ++loads[size_t(ld->layer)];
            EXPECT_TRUE(n.src.empty()) << "kv_load is a view with no edges in";
            EXPECT_EQ(n.shape, (Shape{m->hp.n_kv_embd(), 64, 1, 1}));
        }
    }
    EXPECT_EQ(stores, std::vector<int>(L, 1));
    EXPECT_EQ(loads, std::vector<int>(L, 1));

    // Running the same params at a later n_past replays the cached graph.
    b.forward(prompt(4, m->hp.n_vocab, 1), 1);
    const uint64_t builds = b.graph_builds(), uid = b.graph().uid;
    b.forward(prompt(4, m->hp.n_vocab, 2), 1);
    EXPECT_EQ(b.n_past(), 13);
    EXPECT_EQ(b.graph_builds(), builds);
    EXPECT_EQ(b.graph().uid, uid);
}

// ---- reuse over a generation -------------------------------------------------------------------

TEST(Reuse, graph_built_once_per_params_over_100_token_generation) {
    const auto m = synth("qwen2", 2);
    Session s(*m, {128, 2});
    std::span<const float> logits = s.forward(prompt(6, m->hp.n_vocab), 1);
    EXPECT_EQ(s.graph_builds(), 1u);
    uint64_t decode_uid = 0;
    for (int step = 0; step < 100; ++step) {
        const int32_t tok = argmax(logits);
        logits = s.forward(std::span<const int32_t>(&tok, 1), 1);
        if (step == 0) decode_uid = s.graph().uid;
        ASSERT_EQ(s.graph().uid, decode_uid) << "decode graph rebuilt at step " << step;
    }
    EXPECT_EQ(s.graph_builds(), 2u) << "one prefill graph, one decode graph";
    EXPECT_EQ(s.n_past(), 106);
}

// ---- KV regions across rebuilds ----------------------------------------------------------------

TEST(Alloc, allocator_survives_rebuild) {
    constexpr int L = 2;
    const auto m = synth("qwen2", L);
    const std::vector<int32_t> ids = prompt(8, m->hp.n_vocab);
    const std::vector<int32_t> more = prompt(12, m->hp.n_vocab, 3);

    // A: prefill 5, then 3 single-token steps (a rebuild: n_tokens 5 -> 1), then 12 more (another
    // rebuild with a larger arena). B: the 8 tokens at once, then the same 12.
    Session a(*m, {64, 2}), b(*m, {64, 2});
    a.forward(std::span(ids).first(5), 1);
    const std::vector<float> kv_before = kv_rows(a, L, 5);
    std::vector<float> la;
    for (size_t i = 5; i < ids.size(); ++i) {
        const std::span<const float> l = a.forward(std::span(ids).subspan(i, 1), 1);
        la.assign(l.begin(), l.end());
    }
    EXPECT_EQ(a.graph_builds(), 2u);
    EXPECT_EQ(kv_rows(a, L, 5), kv_before) << "the rebuild touched KV rows of earlier positions";

    const std::span<const float> lb = b.forward(ids, 1);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_LE(max_abs_diff(la, lb), 1e-4f);
    EXPECT_LE(max_abs_diff(kv_rows(a, L, 8), kv_rows(b, L, 8)), 1e-4f);

    const std::vector<float> kv_mid = kv_rows(a, L, 8);
    const std::span<const float> la2 = a.forward(more, 1);
    EXPECT_EQ(a.graph_builds(), 3u);
    EXPECT_EQ(kv_rows(a, L, 8), kv_mid) << "the growing rebuild touched KV rows of earlier positions";
    const std::vector<float> la2_copy(la2.begin(), la2.end());
    EXPECT_LE(max_abs_diff(la2_copy, b.forward(more, 1)), 1e-4f);
}

// ---- micro-batches -----------------------------------------------------------------------------

// A prompt longer than n_ubatch runs as passes of at most n_ubatch tokens: the same KV rows and logits
// as one pass (to f32 summation order), the wanted rows gathered across passes when n_out spans several.
TEST(Ubatch, passes_compute_what_one_pass_does) {
    constexpr int L = 2;
    const auto m = synth("qwen2", L);
    for (const int64_t nt : {int64_t(23), int64_t(21)}) {  // passes of 5 ending with 3 tokens, or with 1
        const std::vector<int32_t> ids = prompt(nt, m->hp.n_vocab);
        const int64_t nv = m->hp.n_vocab;
        Session whole(*m, {64, 2}), parts(*m, {64, 2, BackendKind::Cpu, 5});
        const std::span<const float> w = whole.forward(ids, nt);
        const std::vector<float> want(w.begin(), w.end());
        for (const int64_t n_out : {int64_t(1), int64_t(3), int64_t(7), nt}) {
            SCOPED_TRACE(std::to_string(nt) + " tokens, n_out " + std::to_string(n_out));
            parts.reset();
            const int64_t steps = parts.steps();
            const std::span<const float> got = parts.forward(ids, n_out);
            EXPECT_EQ(parts.steps() - steps, 5);
            EXPECT_EQ(parts.n_past(), nt);
            ASSERT_EQ(int64_t(got.size()), n_out * nv);
            EXPECT_LE(max_abs_diff(got, std::span(want).last(size_t(n_out * nv))), 1e-4f);
            EXPECT_LE(max_abs_diff(kv_rows(parts, L, nt), kv_rows(whole, L, nt)), 1e-4f);
        }
    }
}

TEST(Ubatch, refuses_an_empty_micro_batch) {
    const auto m = synth("qwen2", 1);
    EXPECT_THROW(Session(*m, {64, 1, BackendKind::Cpu, 0}), Error);
}

// ---- the n_out tail (§2.8) ---------------------------------------------------------------------

void expect_tail_matches_full(const Model& m, float tol) {
    const std::vector<int32_t> ids = prompt(11, m.hp.n_vocab);
    const auto nt = int64_t(ids.size()), nv = m.hp.n_vocab;
    Session s(m, {64, 2});
    const std::span<const float> all = s.forward(ids, nt);
    ASSERT_EQ(int64_t(all.size()), nt * nv);
    EXPECT_EQ(s.graph().find_input("out_ids"), -1) << "n_out == nt needs no out_ids";
    const std::vector<float> full(all.begin(), all.end());
    for (const int64_t n_out : {int64_t(1), int64_t(3)}) {
        s.reset();
        const std::span<const float> tail = s.forward(ids, n_out);
        ASSERT_EQ(int64_t(tail.size()), n_out * nv);
        EXPECT_GE(s.graph().find_input("out_ids"), 0);
        EXPECT_LE(max_abs_diff(tail, std::span(full).subspan(size_t((nt - n_out) * nv))), tol)
            << "n_out " << n_out;
    }
}

TEST(Tail, tail_reduction_matches_full_nt) {
    for (const char* arch : {"qwen2", "qwen3", "llama", "qwen3moe"}) {
        SCOPED_TRACE(arch);
        expect_tail_matches_full(*synth(arch, 2), 1e-5f);
    }
    const std::string file = model_path("qwen2-mini-F16.gguf");
    MINFER_REQUIRE_FILE(file);
    expect_tail_matches_full(*Model::load(file), 1e-5f);
}

// ---- mixture of experts ---------------------------------------------------------------------------

// Every layer of a qwen3moe graph routes (a MatMul with ffn_gate_inp) and then runs one MoeFfn node on
// the stacked experts, in place of the dense FFN's products.
TEST(Moe, each_layer_routes_then_runs_one_grouped_expert_node) {
    const auto m = synth("qwen3moe", 3);
    Session s(*m, {64, 2});
    s.forward(prompt(5, m->hp.n_vocab), 1);
    const ComputeGraph& g = s.graph();
    int moe = 0;
    for (const CNode& n : g.nodes) {
        EXPECT_NE(node_stem(n), "ffn_gate") << "no dense FFN";
        const auto* o = std::get_if<op::MoeFfn>(&n.op);
        if (!o) continue;
        ++moe;
        EXPECT_EQ(n.name, "ffn_moe-" + std::to_string(n.layer));
        EXPECT_EQ(op_string(n.op), "MoeFfn { n_expert: 8, n_used: 2, gating: softmax, norm: true }");
        const CNode& router = g[n.src[1]];
        ASSERT_TRUE(std::holds_alternative<op::MatMul>(router.op));
        EXPECT_EQ(std::get<meta::MatMul>(router.meta).weight.name,
                  "blk." + std::to_string(n.layer) + ".ffn_gate_inp.weight");
        EXPECT_EQ(std::get<meta::MoeFfn>(n.meta).down.n_out, m->hp.n_embd * 8);
    }
    EXPECT_EQ(moe, 3);
}

// Gemma 3: the embedding scaled by sqrt(n_embd); layers 0-4 attend within the window, layer 5 to every
// position; RMSNorm after the attention and after the FFN (GeGLU), the local layers' RoPE at base 10000.
TEST(Gemma3, local_and_global_layers_post_norms_and_geglu) {
    const auto m = synth("gemma3", 7, 24);
    Session s(*m, {64, 2});
    s.forward(prompt(5, m->hp.n_vocab), 1);
    const ComputeGraph& g = s.graph();
    std::vector<std::string> attn;
    int geglu = 0, post_norms = 0, scale = 0;
    for (const CNode& n : g.nodes) {
        if (const auto* o = std::get_if<op::Scale>(&n.op)) {
            ++scale;
            EXPECT_EQ(o->factor, std::sqrt(64.0f));
        }
        if (std::holds_alternative<op::Attn>(n.op)) attn.push_back(op_string(n.op));
        if (std::holds_alternative<op::GeGLU>(n.op)) ++geglu;
        if (const auto* w = std::get_if<meta::Weight>(&n.meta);
            w && w->weight.name.find("post_") != std::string::npos)
            ++post_norms;
        if (const auto* r = std::get_if<meta::Rope>(&n.meta))
            EXPECT_EQ(r->freq_base, n.layer == 5 ? 1e6f : 1e4f) << n.name;
        EXPECT_NE(node_stem(n), "silu");
    }
    const std::string local = "Attn { mode: SlidingWindow, window: 24 }", global = "Attn { mode: Causal }";
    EXPECT_EQ(attn, (std::vector<std::string>{local, local, local, local, local, global, local}));
    EXPECT_EQ(geglu, 7);
    EXPECT_EQ(post_norms, 14);
    EXPECT_EQ(scale, 1);
}

// Llama-layout files (Mistral) that set attention.sliding_window attend within it in every layer; the
// others causally.
TEST(Llama, sliding_window_where_the_file_sets_one) {
    for (const int64_t window : {int64_t{0}, int64_t{32}}) {
        const auto m = synth("llama", 2, window);
        Session s(*m, {64, 2});
        s.forward(prompt(5, m->hp.n_vocab), 1);
        int attn = 0;
        for (const CNode& n : s.graph().nodes) {
            if (!std::holds_alternative<op::Attn>(n.op)) continue;
            ++attn;
            EXPECT_EQ(op_string(n.op),
                      window ? "Attn { mode: SlidingWindow, window: 32 }" : "Attn { mode: Causal }");
        }
        EXPECT_EQ(attn, 2);
    }
}

// gpt-oss: the even layers attend within the window, the odd ones to every position, all with sink logits
// and YaRN RoPE (correction range not rounded); biases on the attention output, the router and the
// experts; the experts weighted by the softmax of the chosen logits, through the clamped SwiGLU.
TEST(GptOss, sinks_windows_yarn_and_biased_experts) {
    static TempDir dir;
    SynthSpec s;
    s.arch = "gpt-oss";
    s.n_layer = 3, s.n_swa = 16, s.head_dim = 16;
    s.extra_metadata = {
        {"gpt-oss.rope.scaling.type", GgufValue{GgufValueType::STRING, std::string("yarn")}},
        {"gpt-oss.rope.scaling.factor", GgufValue{GgufValueType::F32, 32.0}},
        {"gpt-oss.rope.scaling.original_context_length", GgufValue{GgufValueType::U32, uint64_t(4096)}}};
    write_synth_model(s, dir.file("gptoss.gguf"));
    const auto m = Model::load(dir.file("gptoss.gguf"));
    Session session(*m, {64, 2});
    session.forward(prompt(5, m->hp.n_vocab), 1);
    std::vector<std::string> attn;
    int biased = 0;
    for (const CNode& n : session.graph().nodes) {
        if (const auto* a = std::get_if<meta::Attn>(&n.meta)) {
            attn.push_back(op_string(n.op));
            EXPECT_EQ(a->sinks.name, "blk." + std::to_string(n.layer) + ".attn_sinks.weight");
        }
        if (const auto* r = std::get_if<meta::Rope>(&n.meta)) {
            EXPECT_EQ(r->freq_scale, 1.0f / 32);
            // 16 * ln(4096 / (32 * 2 pi)) / (2 ln 1e6) and the same at beta 1: not whole numbers.
            EXPECT_NEAR(r->yarn.low, 16 * std::log(4096 / (64 * M_PI)) / (2 * std::log(1e6)), 1e-12);
            EXPECT_NEAR(r->yarn.high, 16 * std::log(4096 / (2 * M_PI)) / (2 * std::log(1e6)), 1e-12);
            EXPECT_NEAR(r->yarn.mscale, 0.1 * std::log(32.0) + 1, 1e-12);
        }
        if (const auto* mm = std::get_if<meta::MatMul>(&n.meta); mm && mm->bias.present()) ++biased;
        if (std::holds_alternative<op::MoeFfn>(n.op)) {
            EXPECT_EQ(
                op_string(n.op),
                "MoeFfn { n_expert: 8, n_used: 2, gating: softmax_weight, norm: true, act: swiglu_oai }");
            EXPECT_TRUE(std::get<meta::MoeFfn>(n.meta).down_b.present());
        }
    }
    const std::string local = "Attn { mode: SlidingWindow, window: 16 }", global = "Attn { mode: Causal }";
    EXPECT_EQ(attn, (std::vector<std::string>{local, global, local}));
    EXPECT_EQ(biased, 3 * 5);  // q, k, v, attn_output and the router in each layer
}

// ---- fused decode vs unfused (§2.6, pitfall 4) ---------------------------------------------------

// Runs graphs built for any GraphParams through the production passes (validate, assign backends,
// SwiGLU fusion, buffer plan) on the CPU backend, which also implements the fused decode ops.
// A Session cannot: it always builds with gpu = false, which disables the decode fusions.
class Driver {
  public:
    explicit Driver(const Model& m) : m_(m), cpu_(*m.file, 2), backends_{&cpu_} {}

    // Runs `tokens` at the next positions with n_out = n_tokens; returns the last row of logits.
    std::vector<float> forward(std::span<const int32_t> tokens, bool gpu, bool fuse) {
        CParams c;
        c.n_ctx = 64;
        c.gpu = gpu;
        c.fuse_qkv = c.fuse_ffn = fuse;
        const auto nt = int64_t(tokens.size());
        graph_ = m_.build_graph(m_, GraphParams::make(nt, nt, c));
        graph_.topo_order();
        assign_backends(graph_, backends_);
        fuse_swiglu(graph_, backends_);  // on the unfused graph too: the same SwiGLU kernel
        cpu_.prepare(graph_);
        kv_.reserve(graph_);
        exec_.bind(graph_, plan_buffers(graph_), backends_);
        std::vector<int32_t> pos(tokens.size());
        std::iota(pos.begin(), pos.end(), int32_t(n_past_));
        exec_.fill_input(graph_.find_input("token_ids"), tokens);
        exec_.fill_input(graph_.find_input("positions"), pos);
        EXPECT_EQ(graph_.find_input("seq_slot"), -1) << "unpaged: the slot is the position";
        exec_.run(graph_);
        n_past_ += nt;
        const float* out = exec_.data(graph_.outputs.front());
        return {out + (nt - 1) * m_.hp.n_vocab, out + nt * m_.hp.n_vocab};
    }
    const ComputeGraph& graph() const { return graph_; }

  private:
    const Model& m_;
    CpuBackend cpu_;
    std::vector<Backend*> backends_;
    KvCache kv_;
    Executor exec_{kv_};
    ComputeGraph graph_;
    int64_t n_past_ = 0;
};

bool has_op(const ComputeGraph& g, auto pred) {
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const CNode& n) { return pred(n.op); });
}

void expect_fused_matches_unfused(const Model& m, const char* fused_op) {
    Driver fused(m), plain(m);
    const std::vector<int32_t> ids = prompt(5, m.hp.n_vocab);
    std::vector<float> lf = fused.forward(ids, true, true);
    ASSERT_EQ(lf, plain.forward(ids, true, false)) << "a prefill of 5 tokens, QKV fused";
    EXPECT_TRUE(has_op(fused.graph(), [&](const Op& o) { return op_name(o) == std::string(fused_op); }));
    for (int step = 0; step < 4; ++step) {
        const int32_t tok = argmax(lf);
        lf = fused.forward(std::span(&tok, 1), true, true);
        const std::vector<float> lp = plain.forward(std::span(&tok, 1), true, false);
        EXPECT_TRUE(has_op(fused.graph(), [&](const Op& o) { return op_name(o) == std::string(fused_op); }));
        EXPECT_TRUE(
            has_op(fused.graph(), [](const Op& o) { return std::holds_alternative<op::FusedFFN>(o); }));
        EXPECT_FALSE(
            has_op(plain.graph(), [](const Op& o) { return std::holds_alternative<op::FusedFFN>(o); }));
        ASSERT_EQ(lf, lp) << "step " << step << ", max diff " << max_abs_diff(lf, lp);
    }
}

TEST(Fused, fused_qkv_matches_unfused_decode) {
    {
        SCOPED_TRACE("qwen2: FusedQKV");
        expect_fused_matches_unfused(*synth("qwen2", 2), "FusedQKV");
    }
    {
        SCOPED_TRACE("qwen3: FusedQkvNorm");
        expect_fused_matches_unfused(*synth("qwen3", 2), "FusedQkvNorm");
    }
    {
        // The declared type of K differs, which selects the epilogue-only class; the CPU backend reads
        // the real (F32) tensor, so the numbers stay comparable.
        SCOPED_TRACE("qwen2, Q and K of different types: QkvBiasRopeStore");
        const auto m = synth("qwen2", 2);
        for (LayerWeights& l : m->layers) l.wk.type = GgmlType::Q8_0;
        expect_fused_matches_unfused(*m, "QkvBiasRopeStore");
    }
    {
        SCOPED_TRACE("qwen2, V of another type: FusedQKV");
        const auto m = synth("qwen2", 2);
        for (LayerWeights& l : m->layers) l.wv.type = GgmlType::Q8_0;
        expect_fused_matches_unfused(*m, "FusedQKV");
    }
}

// A decode graph can be a session's first graph (a one-token prompt). Its KV regions must then come
// from the nodes the fused graph does have: with FusedQKV there is no kv_store, only kv_load views.
TEST(Fused, fused_decode_as_first_graph_has_kv_regions) {
    const auto m = synth("qwen2", 2);
    Driver fused(*m), plain(*m);
    const std::vector<int32_t> tok = prompt(1, m->hp.n_vocab);
    std::vector<float> lf;
    ASSERT_NO_THROW(lf = fused.forward(tok, true, true));
    EXPECT_EQ(lf, plain.forward(tok, true, false));
}

}  // namespace
}  // namespace minfer::test
