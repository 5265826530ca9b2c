#include "graph/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <sstream>
#include <string>

#include "util/error.h"

namespace minfer {

int32_t meta::Paging::shift(int32_t min_shift) const {
    int32_t s = min_shift;
    while ((int64_t(1) << s) < block) ++s;
    if ((int64_t(1) << s) != block && max_blocks != 1)
        throw Error("KV block size " + std::to_string(block) + " is not a power of two of at least " +
                    std::to_string(int64_t(1) << min_shift));
    return s;
}

const char* backend_name(BackendKind b) {
    return b == BackendKind::Cpu ? "cpu" : "cuda";
}

NodeId ComputeGraph::find_input(const std::string& name) const {
    for (NodeId id : inputs)
        if (nodes[size_t(id)].name == name) return id;
    return -1;
}

std::vector<std::vector<NodeId>> ComputeGraph::consumers() const {
    std::vector<std::vector<NodeId>> out(nodes.size());
    for (const CNode& n : nodes)
        for (NodeId s : n.src) out[size_t(s)].push_back(n.id);
    return out;
}

std::vector<NodeId> ComputeGraph::topo_order() const {
    const auto n = NodeId(nodes.size());
    std::vector<int> indegree(nodes.size(), 0);
    for (const CNode& node : nodes) {
        for (NodeId s : node.src) {
            if (s < 0 || s >= n)
                throw Error("graph: node " + std::to_string(node.id) + " (" + node.name +
                            ") reads dangling id " + std::to_string(s));
        }
        indegree[size_t(node.id)] = int(node.src.size());
    }
    const auto cons = consumers();
    std::vector<NodeId> order;
    // Min-heap: the smallest ready id first gives the lexicographically smallest topological order,
    // which is build order exactly when every edge points to an earlier node.
    std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
    for (NodeId i = 0; i < n; ++i)
        if (indegree[size_t(i)] == 0) ready.push(i);
    while (!ready.empty()) {
        const NodeId id = ready.top();
        ready.pop();
        order.push_back(id);
        for (NodeId c : cons[size_t(id)])
            if (--indegree[size_t(c)] == 0) ready.push(c);
    }
    if (order.size() != nodes.size())
        throw Error("graph: cycle detected (" + std::to_string(nodes.size() - order.size()) +
                    " nodes unreachable in topological order)");
    for (NodeId i = 0; i < n; ++i)
        if (order[size_t(i)] != i)  // execution follows build order, so it must be topological
            throw Error("graph: node " + std::to_string(order[size_t(i)]) +
                        " must run before an earlier-built node that reads it");
    return order;
}

std::optional<std::string> structural_diff(const ComputeGraph& a, const ComputeGraph& b) {
    auto diff = [](auto&&... parts) {
        std::ostringstream s;
        (s << ... << parts);
        return std::optional<std::string>(s.str());
    };
    if (a.nodes.size() != b.nodes.size()) return diff("node count ", a.nodes.size(), " != ", b.nodes.size());
    if (a.inputs != b.inputs) return diff("input ids differ");
    if (a.outputs != b.outputs) return diff("output ids differ");
    for (size_t i = 0; i < a.nodes.size(); ++i) {
        const CNode &x = a.nodes[i], &y = b.nodes[i];
        if (x.op != y.op) return diff("node ", i, ": op ", op_string(x.op), " != ", op_string(y.op));
        if (x.src != y.src) return diff("node ", i, " (", x.name, "): edges differ");
        if (x.shape != y.shape) return diff("node ", i, " (", x.name, "): shapes differ");
        if (x.dtype != y.dtype) return diff("node ", i, " (", x.name, "): dtypes differ");
        if (x.meta != y.meta) return diff("node ", i, " (", x.name, "): metadata differs");
        if (x.name != y.name) return diff("node ", i, ": name ", x.name, " != ", y.name);
    }
    return std::nullopt;
}

AttnLayers attn_layers(const ComputeGraph& g) {
    AttnLayers l;
    for (const CNode& n : g.nodes) {
        const auto* a = std::get_if<op::Attn>(&n.op);
        if (!a) continue;
        if (a->mode != AttnMode::SlidingWindow) {
            ++l.n_global;
            continue;
        }
        ++l.n_window;
        l.window = std::max(l.window, a->window);
    }
    return l;
}

}  // namespace minfer
