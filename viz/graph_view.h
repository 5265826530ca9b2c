// The graphs `minfer viz` draws: the planned prefill and decode graphs of a session (built, assigned and
// fused by the engine's own planned_graph), their buffer plan, which nodes are fusion orphans, and
// two renderings of each: the page's JSON document (viz/README.md) and Graphviz DOT with one cluster
// per layer, any of which may be collapsed into a single node.
//
//   GraphView v = make_view(session, GraphKind::Decode);
//   nlohmann::json doc = view_json(v);                   // GET /api/graph?graph=decode
//   std::string svg = dot_to_svg(view_dot(v, {3, 4}));   // layers 3 and 4 collapsed (viz/layout.h)
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "backend/buffer_plan.h"
#include "graph/graph.h"
#include "graph/params.h"

namespace minfer {
class Session;
}

namespace minfer::viz {

enum class GraphKind : uint8_t { Prefill, Decode };
const char* kind_name(GraphKind k);  // "prefill", "decode"
// "prefill" / "decode"; throws Error naming the accepted values otherwise.
GraphKind parse_kind(const std::string& s);
// The graph a forward of n_tokens runs: decode for one token, prefill for more.
inline GraphKind kind_of(int64_t n_tokens) {
    return n_tokens == 1 ? GraphKind::Decode : GraphKind::Prefill;
}

// Tokens of the prefill graph shown before any generation (its topology is that of every prompt of
// two tokens or more: only the shapes' token counts differ).
inline constexpr int64_t kShownPrefillTokens = 32;

struct GraphView {
    GraphKind kind = GraphKind::Prefill;
    GraphParams params;
    ComputeGraph graph;      // planned: backends assigned, fusions applied
    BufferPlan plan;         // the executor's buffer offsets for this graph
    std::vector<bool> live;  // false for fusion orphans (no consumer reaches an output or the KV cache)
    int n_layer = 0;
};

GraphView make_view(Session& s, GraphKind kind);

// A node made by a fusion (SwiGLU, a matmul with its residual add, the QKV and FFN fusions).
bool is_fused(const CNode& n);

// graph_json (graph/dump.h) plus per node: input, output, orphan, fused, buffer ({offset, floats} in
// floats of the arena, or null), and the graph's kind, n_nodes, n_layer, arena_floats and layers.
nlohmann::json view_json(const GraphView& v);

// Nodes "n<ID>" coloured by backend, double-bordered inputs/outputs, bold fused nodes, dashed orphans,
// each layer a cluster "L<layer>"; a collapsed layer is one node "L<layer>" whose edges are its nodes'.
std::string view_dot(const GraphView& v, const std::set<int>& collapsed = {});

}  // namespace minfer::viz
