#include "viz/graph_view.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "graph/dump.h"
#include "runtime/session.h"
#include "sched/alloc.h"
#include "sched/passes.h"
#include "util/error.h"

namespace minfer::viz {

using nlohmann::json;

const char* kind_name(GraphKind k) {
    return k == GraphKind::Prefill ? "prefill" : "decode";
}

GraphKind parse_kind(const std::string& s) {
    if (s == "prefill") return GraphKind::Prefill;
    if (s == "decode") return GraphKind::Decode;
    throw Error("unknown graph '" + s + "' (prefill or decode)");
}

GraphView make_view(Session& s, GraphKind kind) {
    GraphView v;
    v.kind = kind;
    const int64_t n_prefill =
        std::clamp<int64_t>(kShownPrefillTokens, 2, std::max<int64_t>(s.n_ctx() - 1, 2));
    v.params = s.params_for(kind == GraphKind::Decode ? 1 : n_prefill, 1);
    v.graph = s.planned_graph(v.params);
    v.plan = plan_buffers(v.graph);
    v.live = live_nodes(v.graph);
    v.n_layer = s.model().hp.n_layer;
    return v;
}

bool is_fused(const CNode& n) {
    if (const auto* mm = std::get_if<op::MatMul>(&n.op)) return mm->residual;
    return std::holds_alternative<op::SwiGLU>(n.op) || std::holds_alternative<op::FusedQKV>(n.op) ||
           std::holds_alternative<op::FusedQkvNorm>(n.op) ||
           std::holds_alternative<op::QkvBiasRopeStore>(n.op) || std::holds_alternative<op::FusedFFN>(n.op);
}

namespace {

bool contains(const std::vector<NodeId>& v, NodeId id) {
    return std::find(v.begin(), v.end(), id) != v.end();
}

bool is_orphan(const GraphView& v, const CNode& n) {
    return !v.live[size_t(n.id)];
}

}  // namespace

json view_json(const GraphView& v) {
    json doc = graph_json(v.graph, v.params);
    std::map<int, json> layers;
    for (json& j : doc["nodes"]) {
        const CNode& n = v.graph[j["id"].get<NodeId>()];
        j["input"] = contains(v.graph.inputs, n.id);
        j["output"] = contains(v.graph.outputs, n.id);
        j["orphan"] = is_orphan(v, n);
        j["fused"] = is_fused(n);
        j["buffer"] = v.plan.has_buffer(n.id)
                          ? json{{"offset", v.plan.offset[size_t(n.id)]}, {"floats", n.n_elements()}}
                          : json(nullptr);
        if (n.layer >= 0) layers[n.layer].push_back(n.id);
    }
    json list = json::array();
    for (auto& [layer, ids] : layers) list.push_back({{"layer", layer}, {"nodes", std::move(ids)}});
    doc["graph"] = kind_name(v.kind);
    doc["n_nodes"] = v.graph.nodes.size();
    doc["n_layer"] = v.n_layer;
    doc["arena_floats"] = v.plan.arena_floats;
    doc["layers"] = std::move(list);
    return doc;
}

namespace {

std::string dot_quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

// An input every layer reads (positions, seq_slot, block_table), as opposed to token_ids and out_ids.
bool is_index_input(const GraphView& v, NodeId id) {
    const std::string& name = v.graph[id].name;
    return contains(v.graph.inputs, id) &&
           (name == "positions" || name == "seq_slot" || name == "block_table");
}

// The DOT attributes of one graph node: label "name\n[d, nt]", fill by backend, marks by role.
std::string node_attrs(const GraphView& v, const CNode& n) {
    const bool io = contains(v.graph.inputs, n.id) || contains(v.graph.outputs, n.id);
    const bool orphan = is_orphan(v, n), fused = is_fused(n);
    const char* fill = orphan                           ? "#f2f2f2"
                       : !n.backend                     ? "#ffffff"
                       : *n.backend == BackendKind::Cpu ? "#cfe3f7"
                                                        : "#c9efc4";
    std::string cls = std::string("backend-") + (n.backend ? backend_name(*n.backend) : "none");
    if (io) cls += " io";
    if (orphan) cls += " orphan";
    if (fused) cls += " fused";
    std::ostringstream os;
    const std::string note = is_index_input(v, n.id) ? "\n(read by every layer)" : "";
    os << "id=\"n" << n.id << "\", class=" << dot_quote(cls) << ", label="
       << dot_quote(n.name + "\n[" + std::to_string(n.shape[0]) + ", " + std::to_string(n.shape[1]) + "]" +
                    note)
       << ", fillcolor=\"" << fill << "\"";
    if (io) os << ", peripheries=2";
    if (fused) os << ", penwidth=2.2, color=\"#c05a00\"";
    if (orphan) os << ", style=\"filled,dashed\", fontcolor=\"#888888\", color=\"#999999\"";
    return os.str();
}

}  // namespace

std::string view_dot(const GraphView& v, const std::set<int>& collapsed) {
    std::ostringstream os;
    os << "digraph minfer {\n"
          "  graph [rankdir=TB, nodesep=0.12, ranksep=0.22, fontname=\"monospace\", fontsize=11];\n"
          "  node [shape=box, style=filled, fontname=\"monospace\", fontsize=9, height=0.3, "
          "margin=\"0.05,0.02\"];\n"
          "  edge [arrowsize=0.5, color=\"#8a96a3\"];\n";
    std::map<int, std::vector<NodeId>> layers;
    for (const CNode& n : v.graph.nodes) {
        if (n.layer >= 0) {
            layers[n.layer].push_back(n.id);
            if (collapsed.count(n.layer)) continue;
        }
        if (n.layer < 0) os << "  n" << n.id << " [" << node_attrs(v, n) << "];\n";
    }
    for (const auto& [layer, ids] : layers) {
        const std::string l = std::to_string(layer);
        if (collapsed.count(layer)) {
            os << "  L" << l << " [id=\"L" << l << "\", class=\"layer\", label=\"layer " << l << "\\n"
               << ids.size() << " nodes\", fillcolor=\"#fff3c4\", shape=box3d];\n";
            continue;
        }
        os << "  subgraph cluster_L" << l << " {\n    id=\"L" << l << "\"; label=\"layer " << l
           << "\"; style=rounded; color=\"#9aa5b1\";\n";
        for (NodeId id : ids) os << "    n" << id << " [" << node_attrs(v, v.graph[id]) << "];\n";
        os << "  }\n";
    }
    // Edges between what is drawn: a collapsed layer stands for its nodes, edges inside it vanish.
    const auto drawn = [&](NodeId id) {
        const int l = v.graph[id].layer;
        return l >= 0 && collapsed.count(l) ? "L" + std::to_string(l) : "n" + std::to_string(id);
    };
    // The KV-index inputs (positions, slots, block table) are read by every layer: their edges are left
    // out of the drawing (the document and the node details keep them), or they would fan over the page.
    std::set<std::pair<std::string, std::string>> edges;
    for (const CNode& n : v.graph.nodes)
        for (NodeId s : n.src)
            if (!is_index_input(v, s) && drawn(s) != drawn(n.id) &&
                edges.emplace(drawn(s), drawn(n.id)).second)
                os << "  " << drawn(s) << " -> " << drawn(n.id) << ";\n";
    os << "}\n";
    return os.str();
}

}  // namespace minfer::viz
