#include "graph/dump.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/builder.h"

namespace minfer {

namespace {

std::string shape_str(const Shape& s) {
    return "[" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + "]";
}

std::string dot_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\' || c == '{' || c == '}' || c == '<' || c == '>' || c == '|') out += '\\';
        out += c;
    }
    return out;
}

std::string weight_of(const NodeMeta& m) {
    if (const auto* w = std::get_if<meta::Weight>(&m)) return w->weight.name;
    if (const auto* mm = std::get_if<meta::MatMul>(&m)) return mm->weight.name;
    return "";
}

bool contains(const std::vector<NodeId>& v, NodeId id) {
    return std::find(v.begin(), v.end(), id) != v.end();
}

}  // namespace

void write_dot(std::ostream& os, const ComputeGraph& g) {
    os << "digraph minfer {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\"];\n";
    for (const CNode& n : g.nodes) {
        const bool io = contains(g.inputs, n.id) || contains(g.outputs, n.id);
        const char* color = !n.backend ? "white" : *n.backend == BackendKind::Cpu ? "lightblue" : "palegreen";
        std::string label =
            std::to_string(n.id) + ": " + n.name + "\\n" + op_string(n.op) + "\\n" + shape_str(n.shape);
        if (const std::string w = weight_of(n.meta); !w.empty() && n.name.find(w) == std::string::npos)
            label += "\\n" + w;
        os << "  n" << n.id << " [label=\"" << dot_escape(label) << "\", fillcolor=" << color
           << (io ? ", shape=doublecircle" : "") << "];\n";
    }
    for (const CNode& n : g.nodes)
        for (NodeId s : n.src) os << "  n" << s << " -> n" << n.id << ";\n";
    os << "}\n";
}

nlohmann::json graph_json(const ComputeGraph& g, const GraphParams& p) {
    using nlohmann::json;
    json nodes = json::array(), edges = json::array();
    for (const CNode& n : g.nodes) {
        json j = {{"id", n.id},
                  {"name", n.name},
                  {"op", op_name(n.op)},
                  {"payload", op_string(n.op)},
                  {"shape", n.shape},
                  {"dtype", dtype_name(n.dtype)},
                  {"backend", n.backend ? backend_name(*n.backend) : nullptr},
                  {"src", n.src},
                  {"layer", n.layer},
                  {"kv_layer", node_kv_layer(n)}};
        if (const std::string w = weight_of(n.meta); !w.empty()) j["weight"] = w;
        nodes.push_back(std::move(j));
        for (NodeId s : n.src) edges.push_back({s, n.id});
    }
    const json params = {{"n_tokens", p.n_tokens},
                         {"n_out", p.n_out},
                         {"gtype", p.gtype == GraphType::Prefill ? "prefill" : "decode"},
                         {"cparams",
                          {{"n_ctx", p.cparams.n_ctx},
                           {"flash_attn", p.cparams.flash_attn},
                           {"gpu", p.cparams.gpu},
                           {"fuse_qkv", p.cparams.fuse_qkv},
                           {"fuse_ffn", p.cparams.fuse_ffn}}},
                         {"weights_version", p.weights_version},
                         {"output", graph_output_name(p.output)}};
    return {{"params", params},     {"uid", g.uid},   {"inputs", g.inputs},
            {"outputs", g.outputs}, {"nodes", nodes}, {"edges", edges}};
}

void write_json(std::ostream& os, const ComputeGraph& g, const GraphParams& p) {
    os << graph_json(g, p).dump(1) << "\n";
}

}  // namespace minfer
