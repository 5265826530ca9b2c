// The graphs `minfer viz` draws: node names carrying their layer (at the builder, so dumps and traces
// have them too), the page's JSON document, the Graphviz SVG (one element of class node per graph node,
// one cluster per layer, collapsed layers) and the assembled page.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "graph/builder.h"
#include "graph/dump.h"
#include "util/error.h"
#include "viz/layout.h"
#include "viz/page.h"
#include "viz_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;
using viz::GraphKind;

class VizGraphs : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { mini_ = new MiniModel(); }
    static void TearDownTestSuite() {
        delete mini_;
        mini_ = nullptr;
    }
    static Session& session() { return mini_->session; }
    static int n_layer() { return mini_->model->hp.n_layer; }
    static MiniModel* mini_;
};
MiniModel* VizGraphs::mini_ = nullptr;

TEST(VizNames, WeightStemsAndLayerSuffixes) {
    EXPECT_EQ(weight_stem("blk.12.attn_q.weight"), "attn_q");
    EXPECT_EQ(weight_stem("output_norm.weight"), "output_norm");
    EXPECT_EQ(weight_stem("token_embd.weight"), "token_embd");
    EXPECT_EQ(node_name("attn_norm", 3), "attn_norm-3");
    EXPECT_EQ(node_name("embed", -1), "embed");
}

// Every node inside a layer is named "<stem>-<layer>" and carries that layer; the head and tail carry none.
TEST_F(VizGraphs, NodeNamesCarryTheirLayer) {
    for (const GraphKind k : {GraphKind::Prefill, GraphKind::Decode}) {
        const viz::GraphView v = viz::make_view(session(), k);
        std::set<std::string> names;
        std::set<int> layers;
        for (const CNode& n : v.graph.nodes) {
            names.insert(n.name);
            if (n.layer < 0) {
                EXPECT_EQ(n.name.find('-'), std::string::npos) << n.name;
                continue;
            }
            layers.insert(n.layer);
            EXPECT_EQ(n.name, std::string(node_stem(n)) + "-" + std::to_string(n.layer));
            if (const int kv = node_kv_layer(n); kv >= 0) {
                EXPECT_EQ(kv, n.layer) << n.name;
            }
        }
        EXPECT_EQ(int(layers.size()), n_layer());
        const std::string last = std::to_string(n_layer() - 1);
        for (const std::string& want :
             {std::string("token_ids"), std::string("embed"), std::string("attn_norm-0"),
              std::string("attn_q-0"), std::string("kv_store-0"), std::string("attn-0"),
              std::string("ffn_down-") + last, std::string("output_norm")})
            EXPECT_TRUE(names.count(want)) << kind_name(k) << " lacks " << want;
    }
}

// The --dump-graph-json document names the layer of each node and its KV layer.
TEST_F(VizGraphs, DumpJsonHasLayers) {
    const viz::GraphView v = viz::make_view(session(), GraphKind::Prefill);
    const json doc = graph_json(v.graph, v.params);
    ASSERT_EQ(doc["nodes"].size(), v.graph.nodes.size());
    for (const json& n : doc["nodes"]) {
        const CNode& c = v.graph[n["id"].get<NodeId>()];
        EXPECT_EQ(n["layer"], c.layer);
        EXPECT_EQ(n["kv_layer"], node_kv_layer(c));
        EXPECT_EQ(n["name"], c.name);
    }
}

// Prefill graphs of any prompt of two tokens or more have one topology: node ids of a live step map
// onto the graph shown.
TEST_F(VizGraphs, PrefillTopologyIsThatOfEveryPrompt) {
    const ComputeGraph a = session().planned_graph(session().params_for(5, 1));
    const ComputeGraph b = session().planned_graph(session().params_for(viz::kShownPrefillTokens, 1));
    ASSERT_EQ(a.nodes.size(), b.nodes.size());
    for (size_t i = 0; i < a.nodes.size(); ++i) {
        EXPECT_EQ(a.nodes[i].name, b.nodes[i].name);
        EXPECT_EQ(a.nodes[i].src, b.nodes[i].src);
    }
}

TEST_F(VizGraphs, ViewJsonMarksRolesAndBuffers) {
    const viz::GraphView v = viz::make_view(session(), GraphKind::Prefill);
    const json doc = viz::view_json(v);
    EXPECT_EQ(doc["graph"], "prefill");
    EXPECT_EQ(doc["n_nodes"], v.graph.nodes.size());
    EXPECT_EQ(doc["n_layer"], n_layer());
    ASSERT_EQ(doc["layers"].size(), size_t(n_layer()));
    size_t in_layers = 0, orphans = 0, fused = 0, inputs = 0, outputs = 0;
    for (const json& l : doc["layers"]) in_layers += l["nodes"].size();
    for (const json& n : doc["nodes"]) {
        const CNode& c = v.graph[n["id"].get<NodeId>()];
        orphans += n["orphan"].get<bool>();
        fused += n["fused"].get<bool>();
        inputs += n["input"].get<bool>();
        outputs += n["output"].get<bool>();
        EXPECT_EQ(n["buffer"].is_null(), !v.plan.has_buffer(c.id)) << c.name;
        if (n["orphan"].get<bool>()) {
            EXPECT_TRUE(n["buffer"].is_null()) << "an orphan gets no buffer: " << c.name;
            EXPECT_EQ(node_stem(c), "silu") << "the fusion orphans are the silu nodes";
        }
        if (!n["buffer"].is_null()) {
            EXPECT_EQ(n["buffer"]["floats"], c.n_elements());
        }
    }
    size_t outside = 0;
    for (const CNode& c : v.graph.nodes) outside += c.layer < 0;
    EXPECT_EQ(in_layers + outside, v.graph.nodes.size());
    EXPECT_EQ(orphans, size_t(n_layer())) << "one silu per layer is orphaned by the SwiGLU fusion";
    EXPECT_GE(fused, size_t(n_layer()));
    EXPECT_EQ(inputs, v.graph.inputs.size());
    EXPECT_EQ(outputs, v.graph.outputs.size());
}

// Graphviz draws one <g class="node ..."> per graph node, with the node's id, and one cluster per layer.
TEST_F(VizGraphs, SvgHasOneNodeElementPerGraphNode) {
    for (const GraphKind k : {GraphKind::Prefill, GraphKind::Decode}) {
        const viz::GraphView v = viz::make_view(session(), k);
        const std::string svg = viz::dot_to_svg(viz::view_dot(v));
        ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 200);
        EXPECT_EQ(count_of(svg, "class=\"node"), v.graph.nodes.size()) << kind_name(k);
        EXPECT_EQ(count_of(svg, "class=\"cluster"), size_t(n_layer()));
        for (const CNode& n : v.graph.nodes)
            EXPECT_NE(svg.find("id=\"n" + std::to_string(n.id) + "\""), std::string::npos) << n.name;
        const auto orphans = size_t(std::count(v.live.begin(), v.live.end(), false));
        EXPECT_EQ(count_of(svg, " orphan\""), orphans) << "orphans are drawn, marked";
    }
}

TEST_F(VizGraphs, CollapsedLayersBecomeOneNode) {
    const viz::GraphView v = viz::make_view(session(), GraphKind::Decode);
    size_t in_first_two = 0;
    for (const CNode& n : v.graph.nodes) in_first_two += n.layer == 0 || n.layer == 1;
    const std::string svg = viz::dot_to_svg(viz::view_dot(v, {0, 1}));
    EXPECT_EQ(count_of(svg, "class=\"node"), v.graph.nodes.size() - in_first_two + 2);
    EXPECT_NE(svg.find("id=\"L0\""), std::string::npos);
    EXPECT_NE(svg.find("id=\"L1\""), std::string::npos);
    EXPECT_EQ(count_of(svg, "class=\"cluster"), size_t(n_layer() - 2));
    try {
        viz::dot_to_svg("digraph { a -> ");
        ADD_FAILURE() << "broken DOT laid out";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("syntax error"), std::string::npos) << e.what();
    }
}

TEST_F(VizGraphs, PagesInlineEverything) {
    const std::string page = viz::render_page(nullptr);
    for (const char* marker : {"/*VIZ_CSS*/", "/*VIZ_JS*/", "/*VIZ_DATA*/"})
        EXPECT_EQ(page.find(marker), std::string::npos) << marker;
    EXPECT_NE(page.find("EventSource"), std::string::npos);
    EXPECT_NE(page.find("<script id=\"viz-data\" type=\"application/json\">null</script>"),
              std::string::npos);

    viz::GraphSet graphs(session());
    const std::string exported =
        viz::export_page(graphs, viz::model_info(session(), "mini", BackendKind::Cpu));
    const size_t data = exported.find("<script id=\"viz-data\"");
    ASSERT_NE(data, std::string::npos);
    const size_t end = exported.find("</script>", data);
    const json embedded =
        json::parse(exported.substr(exported.find('>', data) + 1, end - exported.find('>', data) - 1));
    for (const GraphKind k : {GraphKind::Prefill, GraphKind::Decode}) {
        const json& g = embedded["graphs"][kind_name(k)];
        EXPECT_EQ(count_of(g["svg"].get<std::string>(), "class=\"node"), graphs.view(k).graph.nodes.size());
        EXPECT_EQ(count_of(g["svg_collapsed"].get<std::string>(), "class=\"node layer"), size_t(n_layer()));
        EXPECT_EQ(g["doc"]["n_nodes"], graphs.view(k).graph.nodes.size());
    }
    for (const char* remote : {"src=\"http", "href=\"http", "url(http", "fetch(\"http"})
        EXPECT_EQ(exported.find(remote), std::string::npos) << "the export loads nothing remote: " << remote;
}

}  // namespace
}  // namespace minfer::test
