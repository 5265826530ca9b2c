// The graph IR, the builder, the reuse identity and the node census (design seed 05, §2.3–2.8, 3.4).
// Expectations come from the design: the per-layer node listing of §2.5, the census formula
// 5 inputs + embedding + 18 per layer + 2 out rows + final norm + lm_head, and the stated invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_test_util.h"
#include "graph/builder.h"
#include "graph/cache.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/session.h"
#include "test_data.h"
#include "util/error.h"

namespace minfer::test {
namespace {

// A tiny synthetic model of `arch`, written to a scratch directory that outlives every test.
std::unique_ptr<Model> synth(const std::string& arch, int n_layer, int64_t n_ff = 128) {
    static TempDir dir;
    static int count = 0;
    SynthSpec s;
    s.arch = arch;
    s.n_layer = n_layer;
    s.n_ff = n_ff;
    const std::string path = dir.file(arch + "-" + std::to_string(count++) + ".gguf");
    write_synth_model(s, path);
    return Model::load(path);
}

GraphParams decode_params(bool gpu, bool fuse_qkv = true, bool fuse_ffn = true) {
    CParams c;
    c.n_ctx = 128;
    c.gpu = gpu;
    c.fuse_qkv = fuse_qkv;
    c.fuse_ffn = fuse_ffn;
    return GraphParams::make(1, 1, c);
}

// A graph of Add nodes (Input where a node reads nothing) with the given edges, bypassing the builder.
ComputeGraph hand_graph(const std::vector<std::vector<NodeId>>& edges) {
    ComputeGraph g;
    for (size_t i = 0; i < edges.size(); ++i) {
        CNode n;
        n.id = NodeId(i);
        n.name = "n" + std::to_string(i);
        n.op = edges[i].empty() ? Op{op::Input{}} : Op{op::Add{}};
        n.src = edges[i];
        n.shape = {4, 1, 1, 1};
        g.nodes.push_back(std::move(n));
    }
    return g;
}

std::vector<NodeId> build_order(const ComputeGraph& g) {
    std::vector<NodeId> ids(g.nodes.size());
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
}

// Message of the minfer::Error `f` throws; nullopt when it does not throw.
template <class F>
std::optional<std::string> error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return std::nullopt;
}

int count_op(const ComputeGraph& g, const char* name) {
    int n = 0;
    for (const CNode& node : g.nodes) n += std::string(op_name(node.op)) == name;
    return n;
}

std::vector<std::string> op_names(const ComputeGraph& g, NodeId begin, NodeId end) {
    std::vector<std::string> out;
    for (NodeId i = begin; i < end; ++i) out.push_back(op_name(g[i].op));
    return out;
}

// ---- IR ----------------------------------------------------------------------------------------

// The KV block's log2, shared by both backends' addressing: at least the backend's minimum, the one
// block of the unpaged layout rounded up, and a paged block that is no power of two refused.
TEST(Graph, paging_shift) {
    EXPECT_EQ((meta::Paging{32, 64}.shift()), 5);
    EXPECT_EQ((meta::Paging{32, 64}.shift(4)), 5);
    EXPECT_EQ((meta::Paging{8, 1}.shift(4)), 4);
    EXPECT_EQ((meta::Paging{1000, 1}.shift()), 10);
    EXPECT_THROW((meta::Paging{24, 4}.shift()), Error);
    EXPECT_THROW((meta::Paging{8, 4}.shift(4)), Error);
}

TEST(Graph, topo_order_validates_chain) {
    const ComputeGraph chain = hand_graph({{}, {0}, {1}, {2}});
    EXPECT_EQ(chain.topo_order(), build_order(chain));
    // Two leaves and a diamond: a stable order keeps build order, not the order leaves are reached.
    const ComputeGraph diamond = hand_graph({{}, {}, {0}, {1, 2}, {2, 3}});
    EXPECT_EQ(diamond.topo_order(), build_order(diamond));
}

TEST(Graph, topo_order_detects_cycle) {
    const auto cycle = error_of([] { hand_graph({{}, {0, 2}, {1}}).topo_order(); });
    ASSERT_TRUE(cycle) << "a 1 <-> 2 cycle was accepted";
    EXPECT_NE(cycle->find("cycle"), std::string::npos) << *cycle;
    EXPECT_TRUE(error_of([] { hand_graph({{1}}).topo_order(); })) << "self loop accepted";
    const auto dangling = error_of([] { hand_graph({{}, {0}, {7}}).topo_order(); });
    ASSERT_TRUE(dangling) << "an edge to id 7 of a 3-node graph was accepted";
    EXPECT_NE(dangling->find("dangling"), std::string::npos) << *dangling;
    EXPECT_TRUE(error_of([] { hand_graph({{}, {-1}}).topo_order(); })) << "negative id accepted";
}

// Execution order is build order, so validation must reject an edge to a later node even without
// a cycle (graph.h: "every edge points to an earlier-existing node").
TEST(Graph, topo_order_rejects_forward_edge) {
    EXPECT_TRUE(error_of([] { hand_graph({{1}, {}}).topo_order(); }));
    EXPECT_TRUE(error_of([] { hand_graph({{}, {0, 3}, {0}, {2}}).topo_order(); }));
}

TEST(Graph, op_partial_eq_compares_payloads) {
    EXPECT_NE(Op{op::RmsNorm{1e-5f}}, Op{op::RmsNorm{1e-6f}});
    EXPECT_EQ(Op{op::RmsNorm{1e-6f}}, Op{op::RmsNorm{1e-6f}});
    EXPECT_NE(Op{op::KvcacheLoad{2}}, Op{op::KvcacheLoad{3}});
    EXPECT_NE(Op{op::KvcacheLoad{2}}, Op{op::KvcacheStore{2}});
    EXPECT_NE(Op{op::FusedQKV{1}}, Op{op::FusedQkvNorm{1}});
    EXPECT_NE((Op{op::QkNorm{16, 4, 1e-6f}}), (Op{op::QkNorm{16, 2, 1e-6f}}));
    EXPECT_NE(Op{op::Rope{RopeStyle::Neox}}, Op{op::Rope{RopeStyle::Normal}});
    EXPECT_EQ(op_string(op::RmsNorm{1e-6f}), "RmsNorm { eps: 1e-06 }");
    EXPECT_EQ(op_string(op::KvcacheStore{23}), "KvcacheStore { layer: 23 }");
    EXPECT_EQ(op_string(op::KvcacheLoad{0}), "KvcacheLoad { layer: 0 }");
    // Node metadata compares by value too: the weight a matmul reads is part of its identity.
    const WeightRef wq{"blk.0.attn_q.weight", GgmlType::F32, 64, 64};
    const WeightRef wk{"blk.0.attn_k.weight", GgmlType::F32, 64, 64};
    const NodeMeta reads_q = meta::MatMul{wq, {}}, reads_q_too = meta::MatMul{wq, {}},
                   reads_k = meta::MatMul{wk, {}};
    EXPECT_NE(reads_q, reads_k);
    EXPECT_EQ(reads_q, reads_q_too);
}

// ---- builder -----------------------------------------------------------------------------------

TEST(Graph, builder_creates_topo_sorted_graph) {
    const auto m = synth("qwen2", 2);
    CParams c;
    c.n_ctx = 128;
    for (const GraphParams& p : {GraphParams::make(7, 1, c), GraphParams::make(7, 7, c), decode_params(false),
                                 decode_params(true)}) {
        SCOPED_TRACE("n_tokens " + std::to_string(p.n_tokens) + ", gpu " + std::to_string(p.cparams.gpu));
        const ComputeGraph g = m->build_graph(*m, p);
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            ASSERT_EQ(g.nodes[i].id, NodeId(i));
            for (NodeId s : g.nodes[i].src) ASSERT_LT(s, NodeId(i)) << g.nodes[i].name;
            EXPECT_FALSE(g.nodes[i].backend) << "the builder assigns no backend";
        }
        EXPECT_EQ(g.topo_order(), build_order(g));
    }
    // The builder itself refuses an edge to an id it has not returned yet.
    GraphBuilder b;
    const NodeId x = b.input("x", {4, 1, 1, 1}, DType::F32);
    EXPECT_TRUE(error_of([&] { b.add(x, x + 1); }));
    EXPECT_TRUE(error_of([&] { b.silu(-1); }));
}

// ---- reuse identity ----------------------------------------------------------------------------

TEST(Reuse, reuse_requires_equal_params) {
    const auto m = synth("qwen2", 2);
    CParams c;
    c.n_ctx = 128;
    const GraphParams p = GraphParams::make(5, 1, c);
    GraphCache cache;
    EXPECT_FALSE(cache.find(p)) << "an empty cache reuses nothing";
    const uint64_t uid = cache.insert(m->build_graph(*m, p), p).uid;
    EXPECT_NE(uid, 0u);
    EXPECT_EQ(cache.builds(), 1u);
    EXPECT_TRUE(cache.find(p));
    EXPECT_TRUE(cache.find(GraphParams(p)));

    auto changed = [&](auto&& edit) {
        GraphParams q = p;
        edit(q);
        return cache.find(q) != nullptr;
    };
    EXPECT_FALSE(changed([](GraphParams& q) { q.n_tokens = 6; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.n_out = 2; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.gtype = GraphType::Decode; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.weights_version = 1; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.cparams.n_ctx = 256; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.cparams.flash_attn = true; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.cparams.kv_block = 32; }));
    EXPECT_FALSE(changed([](GraphParams& q) { q.cparams.max_seqs = 4; }));

    const GraphParams d = GraphParams::make(1, 1, c);
    ComputeGraph& decode = cache.insert(m->build_graph(*m, d), d);
    EXPECT_GT(decode.uid, uid) << "uids are monotonic";
    EXPECT_EQ(cache.builds(), 2u);
    EXPECT_EQ(cache.find(d), &decode);
    ASSERT_TRUE(cache.find(p)) << "one graph per params: prefill and decode do not evict each other";
    EXPECT_EQ(cache.find(p)->uid, uid);
    cache.clear();
    EXPECT_FALSE(cache.find(d));
}

TEST(Reuse, fuse_flags_are_part_of_the_reuse_identity) {
    const auto m = synth("qwen2", 2);
    const GraphParams p = decode_params(true);
    GraphCache cache;
    const ComputeGraph& fused = cache.insert(m->build_graph(*m, p), p);
    EXPECT_TRUE(cache.find(p));
    EXPECT_FALSE(cache.find(decode_params(false)));
    EXPECT_FALSE(cache.find(decode_params(true, false, true)));
    EXPECT_FALSE(cache.find(decode_params(true, true, false)));
    // ... and rightly so: each toggle changes the topology.
    for (const GraphParams& q :
         {decode_params(false), decode_params(true, false, true), decode_params(true, true, false)})
        EXPECT_TRUE(structural_diff(fused, m->build_graph(*m, q)));

    // The environment toggles reach the params (and so force a rebuild through the front door).
    const char* saved_qkv = std::getenv("MINFER_NO_FUSE_QKV");
    const char* saved_ffn = std::getenv("MINFER_NO_FUSE_FFN");
    const std::string qkv_value = saved_qkv ? saved_qkv : "", ffn_value = saved_ffn ? saved_ffn : "";
    unsetenv("MINFER_NO_FUSE_QKV");
    unsetenv("MINFER_NO_FUSE_FFN");
    const CParams plain = CParams::from_env(128, true);
    EXPECT_TRUE(plain.fuse_qkv && plain.fuse_ffn && plain.gpu);
    EXPECT_EQ(plain.n_ctx, 128);
    setenv("MINFER_NO_FUSE_QKV", "1", 1);
    const CParams no_qkv = CParams::from_env(128, true);
    EXPECT_FALSE(no_qkv.fuse_qkv);
    EXPECT_TRUE(no_qkv.fuse_ffn);
    EXPECT_NE(no_qkv, plain);
    setenv("MINFER_NO_FUSE_QKV", "0", 1);
    EXPECT_EQ(CParams::from_env(128, true), plain) << "MINFER_NO_FUSE_QKV=0 keeps the fusion";
    unsetenv("MINFER_NO_FUSE_QKV");
    setenv("MINFER_NO_FUSE_FFN", "1", 1);
    const CParams no_ffn = CParams::from_env(128, true);
    EXPECT_TRUE(no_ffn.fuse_qkv);
    EXPECT_FALSE(no_ffn.fuse_ffn);
    unsetenv("MINFER_NO_FUSE_FFN");
    if (saved_qkv) setenv("MINFER_NO_FUSE_QKV", qkv_value.c_str(), 1);
    if (saved_ffn) setenv("MINFER_NO_FUSE_FFN", ffn_value.c_str(), 1);
}

TEST(Reuse, structural_check_detects_different_graph) {
    const auto m = synth("qwen2", 2);
    CParams c;
    c.n_ctx = 128;
    const GraphParams p = GraphParams::make(5, 1, c);
    GraphCache cache;
    EXPECT_TRUE(error_of([&] { cache.verify_structural(p, m->build_graph(*m, p)); })) << "nothing cached";
    const ComputeGraph& cached = cache.insert(m->build_graph(*m, p), p);
    EXPECT_NO_THROW(cache.verify_structural(p, m->build_graph(*m, p)));

    EXPECT_TRUE(
        error_of([&] { cache.verify_structural(p, m->build_graph(*m, GraphParams::make(6, 1, c))); }));
    EXPECT_TRUE(
        error_of([&] { cache.verify_structural(p, m->build_graph(*m, GraphParams::make(5, 5, c))); }));
    GraphParams other_ctx = p;
    other_ctx.cparams.n_ctx = 256;
    EXPECT_TRUE(error_of([&] { cache.verify_structural(p, m->build_graph(*m, other_ctx)); }));

    // One tampered node at a time; the error names the node.
    const NodeId norm = 4;  // layer 0's attn_norm (§2.5; an unpaged graph has three inputs)
    ASSERT_TRUE(std::holds_alternative<op::RmsNorm>(cached[norm].op));
    auto tampered = [&](auto&& edit) {
        ComputeGraph g = m->build_graph(*m, p);
        edit(g[norm]);
        return error_of([&] { cache.verify_structural(p, g); });
    };
    for (const auto& msg :
         {tampered([](CNode& n) { n.op = op::RmsNorm{1e-5f}; }), tampered([](CNode& n) { n.src = {0}; }),
          tampered([](CNode& n) { n.shape[1] += 1; }),
          tampered([](CNode& n) { std::get<meta::Weight>(n.meta).weight.name += "x"; })}) {
        ASSERT_TRUE(msg) << "a tampered node passed the structural check";
        EXPECT_NE(msg->find("node 4"), std::string::npos) << *msg;
    }
}

// ---- census (§2.5) -----------------------------------------------------------------------------

// The 18 ops of one unfused layer in build order (§2.5, nodes 4..21), after the SwiGLU fusion pass.
const std::vector<std::string> kLayerOps = {
    "RmsNorm", "MatMul", "MatMul",  "MatMul", "RoPE",   "RoPE", "KvcacheStore", "KvcacheLoad", "Attn",
    "MatMul",  "Add",    "RmsNorm", "MatMul", "MatMul", "Silu", "SwiGLU",       "MatMul",      "Add"};

std::vector<std::string> last_layer_ops(std::vector<std::string> ops) {
    const auto attn = std::find(ops.begin(), ops.end(), "Attn");
    ops.insert(attn + 2, {"GetRows", "GetRows"});  // after the wo matmul that follows attention (§2.8)
    return ops;
}

std::vector<std::string> qk_norm_layer_ops(std::vector<std::string> ops) {
    ops.insert(ops.begin() + 4, {"QkNorm", "QkNorm"});  // per-head Q/K norms before RoPE
    return ops;
}

TEST(Census, qwen2_prefill_graph_of_30_tokens) {
    constexpr int L = 24;
    const auto m = synth("qwen2", L);
    Session s(*m, {128, 1});
    const ComputeGraph g = s.planned_graph(s.params_for(30, 1));
    // §2.5's 440 nodes plus the two inputs of the paged KV cache (seq_slot, block_table).
    ASSERT_EQ(g.nodes.size(), size_t(5 + 1 + L * 18 + 2 + 1 + 1));
    ASSERT_EQ(g.nodes.size(), 442u);

    EXPECT_EQ(g.inputs, (std::vector<NodeId>{0, 1, 2, 3, 4}));
    EXPECT_EQ(g[0].name, "token_ids");
    EXPECT_EQ(g[1].name, "positions");
    EXPECT_EQ(g[2].name, "seq_slot");
    EXPECT_EQ(g[3].name, "block_table");
    EXPECT_EQ(g[4].name, "out_ids");
    for (NodeId i : g.inputs) EXPECT_EQ(g[i].dtype, DType::I32);
    EXPECT_EQ(g[2].shape[0], 30) << "seq_slot holds one block-table row per token";
    EXPECT_EQ(g[3].shape, (Shape{128 / 32, 1, 1, 1})) << "block_table: [max_blocks, max_seqs]";
    EXPECT_EQ(g[4].shape[0], 1) << "out_ids holds n_out rows";
    EXPECT_EQ(g.outputs, (std::vector<NodeId>{441}));
    EXPECT_EQ(op_names(g, 5, 6), (std::vector<std::string>{"GetRows"}));

    const auto readers = g.consumers();
    EXPECT_EQ(count_op(g, "SwiGLU"), L);
    EXPECT_EQ(count_op(g, "Silu"), L);
    EXPECT_EQ(count_op(g, "Mul"), 0);
    for (const CNode& n : g.nodes) {
        if (std::holds_alternative<op::Silu>(n.op)) {
            EXPECT_TRUE(readers[size_t(n.id)].empty()) << n.id;
        }
    }

    for (int il = 0; il < L; ++il) {
        const NodeId base = 6 + 18 * il;
        const bool last = il == L - 1;
        EXPECT_EQ(op_names(g, base, base + (last ? 20 : 18)), last ? last_layer_ops(kLayerOps) : kLayerOps)
            << "layer " << il;
        EXPECT_EQ(g[base + 6].op, Op{op::KvcacheStore{il}});
        EXPECT_EQ(g[base + 7].op, Op{op::KvcacheLoad{il}});
    }
    EXPECT_EQ(op_names(g, 440, 442), (std::vector<std::string>{"RmsNorm", "MatMul"}));

    // Edges of layer 0 as listed in §2.5 (ids after the five inputs); the KV store and attention also
    // read seq_slot and block_table (2, 3).
    const std::map<NodeId, std::vector<NodeId>> edges = {{5, {0}},       {6, {5}},
                                                         {7, {6}},       {8, {6}},
                                                         {9, {6}},       {10, {7, 1}},
                                                         {11, {8, 1}},   {12, {11, 9, 1, 2, 3}},
                                                         {13, {}},       {14, {10, 13, 1, 2, 3}},
                                                         {15, {14}},     {16, {5, 15}},
                                                         {17, {16}},     {18, {17}},
                                                         {19, {17}},     {20, {18}},
                                                         {21, {18, 19}}, {22, {21}},
                                                         {23, {16, 22}}};
    for (const auto& [id, src] : edges) EXPECT_EQ(g[id].src, src) << "node " << id;
    // The out rows: both sides of the last residual add narrow to out_ids (nodes 430, 431).
    EXPECT_EQ(g[430].src, (std::vector<NodeId>{429, 4}));
    EXPECT_EQ(g[431].src, (std::vector<NodeId>{419, 4}));
    EXPECT_EQ(g[440].src, (std::vector<NodeId>{439}));
    EXPECT_EQ(g[441].src, (std::vector<NodeId>{440}));

    // Shapes: [width, tokens]; KV nodes declare the region; the out rows shrink to n_out.
    const Hparams& hp = m->hp;
    EXPECT_EQ(g[7].shape, (Shape{hp.n_q_embd(), 30, 1, 1}));
    EXPECT_EQ(g[8].shape, (Shape{hp.n_kv_embd(), 30, 1, 1}));
    EXPECT_EQ(g[12].shape, (Shape{hp.n_kv_embd(), 128, 1, 1}));
    EXPECT_EQ(g[14].shape, (Shape{hp.n_q_embd(), 30, 1, 1}));
    EXPECT_EQ(g[430].shape, (Shape{hp.n_embd, 1, 1, 1}));
    EXPECT_EQ(g[441].shape, (Shape{hp.n_vocab, 1, 1, 1}));
}

TEST(Census, qwen2_decode_graph) {
    constexpr int L = 24;
    const auto m = synth("qwen2", L);
    Session s(*m, {128, 1});
    const ComputeGraph g = s.planned_graph(s.params_for(1, 1));
    EXPECT_EQ(g.nodes.size(), size_t(4 + 1 + L * 18 + 1 + 1));
    EXPECT_EQ(g.nodes.size(), 439u);
    EXPECT_EQ(g.inputs, (std::vector<NodeId>{0, 1, 2, 3}));
    EXPECT_EQ(g.find_input("out_ids"), -1);
    EXPECT_EQ(count_op(g, "GetRows"), 1) << "only the embedding: nothing to narrow";
    EXPECT_EQ(g.outputs, (std::vector<NodeId>{438}));
}

TEST(Census, qwen3_adds_two_qk_norms_per_layer) {
    constexpr int L = 24;
    const auto m = synth("qwen3", L);
    Session s(*m, {128, 1});
    const ComputeGraph g = s.planned_graph(s.params_for(30, 1));
    ASSERT_EQ(g.nodes.size(), size_t(442 + 2 * L));
    EXPECT_EQ(count_op(g, "QkNorm"), 2 * L);
    const std::vector<std::string> layer = qk_norm_layer_ops(kLayerOps);
    for (int il = 0; il < L; ++il) {
        const NodeId base = 6 + 20 * il;
        const bool last = il == L - 1;
        EXPECT_EQ(op_names(g, base, base + (last ? 22 : 20)), last ? last_layer_ops(layer) : layer)
            << "layer " << il;
    }
    EXPECT_EQ(s.planned_graph(s.params_for(1, 1)).nodes.size(), size_t(439 + 2 * L));
}

TEST(Census, real_model_follows_the_formula) {
    const std::string file = model_path("qwen2-mini-F16.gguf");
    MINFER_REQUIRE_FILE(file);
    const auto m = Model::load(file);
    Session s(*m, {256, 1});
    const auto L = size_t(m->hp.n_layer);
    EXPECT_EQ(s.planned_graph(s.params_for(30, 1)).nodes.size(), 5 + 1 + 18 * L + 2 + 2);
    EXPECT_EQ(s.planned_graph(s.params_for(30, 30)).nodes.size(), 4 + 1 + 18 * L + 2);
    EXPECT_EQ(s.planned_graph(s.params_for(1, 1)).nodes.size(), 4 + 1 + 18 * L + 2);
}

// ---- decode fusions at graph level (§2.6) -----------------------------------------------------

TEST(Fused, decode_fusions_replace_their_chains) {
    constexpr int L = 3;
    struct Case {
        const char* arch;
        const char* qkv_op;        // the QKV fusion this architecture gets ("" when none)
        int qkv_saved, ffn_saved;  // nodes each fusion removes per layer
        int layer_nodes;           // unfused nodes per layer
    };
    // FusedQKV: 3 matmul + 2 rope + store -> 1; FusedQkvNorm also absorbs the 2 qk_norm;
    // FusedFFN: gate + up + silu + mul -> 1. Llama's FusedQKV has no biases to add.
    for (const Case& c : {Case{"qwen2", "FusedQKV", 5, 3, 18}, Case{"qwen3", "FusedQkvNorm", 7, 3, 20},
                          Case{"llama", "FusedQKV", 5, 3, 18}}) {
        SCOPED_TRACE(c.arch);
        const auto m = synth(c.arch, L);
        const size_t frame = 2 + 1 + 2;  // inputs (unpaged), embedding, final norm, lm_head
        auto nodes = [&](const GraphParams& p) { return m->build_graph(*m, p).nodes.size(); };
        EXPECT_EQ(nodes(decode_params(false)), frame + size_t(L * c.layer_nodes));
        EXPECT_EQ(nodes(decode_params(true, false, false)), frame + size_t(L * c.layer_nodes));
        EXPECT_EQ(nodes(decode_params(true)),
                  frame + size_t(L * (c.layer_nodes - c.qkv_saved - c.ffn_saved)));
        EXPECT_EQ(nodes(decode_params(true, false, true)), frame + size_t(L * (c.layer_nodes - c.ffn_saved)));
        EXPECT_EQ(nodes(decode_params(true, true, false)), frame + size_t(L * (c.layer_nodes - c.qkv_saved)));

        const ComputeGraph fused = m->build_graph(*m, decode_params(true));
        EXPECT_EQ(count_op(fused, "FusedFFN"), L);
        EXPECT_EQ(count_op(fused, "Silu") + count_op(fused, "Mul"), 0);
        EXPECT_EQ(count_op(fused, "KvcacheLoad"), L) << "attention still reads the region through a view";
        if (*c.qkv_op) {
            EXPECT_EQ(count_op(fused, c.qkv_op), L);
            EXPECT_EQ(count_op(fused, "RoPE") + count_op(fused, "KvcacheStore") + count_op(fused, "QkNorm"),
                      0);
            for (const CNode& n : fused.nodes) {
                if (std::holds_alternative<op::Attn>(n.op)) {
                    EXPECT_EQ(op_name(fused[n.src[0]].op), std::string(c.qkv_op))
                        << "attn reads Q from the fusion";
                }
            }
        }
        const ComputeGraph no_qkv = m->build_graph(*m, decode_params(true, false, true));
        EXPECT_EQ(count_op(no_qkv, "FusedQKV") + count_op(no_qkv, "FusedQkvNorm"), 0);
        EXPECT_EQ(count_op(no_qkv, "KvcacheStore"), L);
        EXPECT_EQ(count_op(m->build_graph(*m, decode_params(true, true, false)), "FusedFFN"), 0);

        // Graphs of several tokens: the QKV fusion up to 64 tokens (decode batches), never the FFN one (a
        // matrix-vector kernel); longer prefill chunks neither.
        const CParams gpu = decode_params(true).cparams;
        for (const int64_t nt : {4, 64}) {
            const ComputeGraph batch = m->build_graph(*m, GraphParams::make(nt, nt, gpu));
            EXPECT_EQ(count_op(batch, "FusedFFN"), 0) << nt << " tokens";
            if (*c.qkv_op) {
                EXPECT_EQ(count_op(batch, c.qkv_op), L) << nt << " tokens";
            }
        }
        const ComputeGraph pg = m->build_graph(*m, GraphParams::make(65, 1, gpu));
        EXPECT_EQ(count_op(pg, "FusedFFN") + count_op(pg, "FusedQKV") + count_op(pg, "FusedQkvNorm"), 0);
    }
}

// The fused FFN reads gate and up side by side, so it is chosen at every width (7B: n_ff = 18944).
TEST(Fused, ffn_fusion_at_every_width) {
    for (const int64_t n_ff : {int64_t(16384), int64_t(18944)}) {
        const auto m = synth("qwen2", 1, n_ff);
        EXPECT_EQ(count_op(m->build_graph(*m, decode_params(true)), "FusedFFN"), 1) << "n_ff " << n_ff;
    }
}

// Q and K of different quant types cannot share a concat weight: three matmuls plus the fused epilogue.
// V of another type (llama-quantize's _M mixes) keeps the concat fusion: V runs inside the node.
TEST(Fused, mixed_type_qkv_fuses_the_epilogue_only) {
    const auto m = synth("qwen2", 3);
    m->layers[0].wk.type = GgmlType::Q8_0;  // graph-level: only the declared type matters here
    m->layers[1].wv.type = GgmlType::Q8_0;
    const ComputeGraph g = m->build_graph(*m, decode_params(true));
    EXPECT_EQ(count_op(g, "QkvBiasRopeStore"), 1);
    EXPECT_EQ(count_op(g, "FusedQKV"), 2) << "layer 1 (V differs) and layer 2 keep the concat fusion";
    for (const CNode& n : g.nodes) {
        if (!std::holds_alternative<op::QkvBiasRopeStore>(n.op)) continue;
        EXPECT_EQ(n.op, Op{op::QkvBiasRopeStore{0}});
        ASSERT_EQ(n.src.size(), 4u);
        for (int i = 0; i < 3; ++i) {
            const auto& mm = std::get<meta::MatMul>(g[n.src[size_t(i)]].meta);
            EXPECT_FALSE(mm.bias.present()) << "the epilogue applies the biases, not the matmul";
        }
        EXPECT_EQ(n.src[3], g.find_input("positions"));
    }
}

}  // namespace
}  // namespace minfer::test
