#include "sched/passes.h"

#include "backend/backend.h"
#include "graph/builder.h"
#include "util/error.h"

namespace minfer {

void assign_backends(ComputeGraph& g, const std::vector<Backend*>& backends) {
    for (CNode& n : g.nodes) {
        n.backend.reset();
        for (Backend* b : backends) {
            if (b->supports(n)) {
                n.backend = b->kind();
                break;
            }
        }
        if (!n.backend)
            throw Error("no backend can run node " + std::to_string(n.id) + " (" + op_string(n.op) + ")");
    }
}

namespace {

bool backend_supports(const std::vector<Backend*>& backends, const CNode& n) {
    for (Backend* b : backends)
        if (b->kind() == n.backend) return b->supports(n);
    return false;
}

}  // namespace

int fuse_matmul_add(ComputeGraph& g, const std::vector<Backend*>& backends) {
    const auto readers = g.consumers();
    int rewrites = 0;
    for (CNode& n : g.nodes) {
        if (!std::holds_alternative<op::Add>(n.op)) continue;
        for (int i = 0; i < 2; ++i) {
            const CNode& mm = g[n.src[size_t(i)]];
            const auto* op = std::get_if<op::MatMul>(&mm.op);
            if (!op || op->residual || readers[size_t(mm.id)].size() != 1 || mm.backend != n.backend)
                continue;
            CNode fused = mm;
            fused.id = n.id;
            fused.name = node_name(std::string(node_stem(mm)) + "+add", mm.layer);
            fused.op = op::MatMul{op->transpose_b, true};
            fused.src = {mm.src[0], n.src[size_t(1 - i)]};
            if (!backend_supports(backends, fused)) continue;
            n = std::move(fused);
            ++rewrites;
            break;
        }
    }
    return rewrites;
}

int fuse_swiglu(ComputeGraph& g, const std::vector<Backend*>& backends) {
    const auto readers = g.consumers();
    int rewrites = 0;
    for (CNode& n : g.nodes) {
        if (!std::holds_alternative<op::Mul>(n.op)) continue;
        const CNode& silu = g[n.src[0]];
        if (!std::holds_alternative<op::Silu>(silu.op) || readers[size_t(silu.id)].size() != 1) continue;
        CNode fused = n;
        fused.op = op::SwiGLU{};
        fused.src = {silu.src[0], n.src[1]};
        fused.name = node_name("swiglu", n.layer);
        const bool supported = !backends.empty() && [&] {
            for (Backend* b : backends)
                if (b->kind() == n.backend && b->supports(fused)) return true;
            return false;
        }();
        if (!supported) continue;
        n = std::move(fused);
        ++rewrites;
    }
    return rewrites;
}

std::vector<bool> live_nodes(const ComputeGraph& g) {
    std::vector<bool> live(g.nodes.size(), false);
    for (NodeId o : g.outputs) live[size_t(o)] = true;
    for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
        if (kv_layer(it->op) >= 0) live[size_t(it->id)] = true;  // writes a KV region
        if (!live[size_t(it->id)]) continue;
        for (NodeId s : it->src) live[size_t(s)] = true;
    }
    for (NodeId i : g.inputs) live[size_t(i)] = true;
    return live;
}

}  // namespace minfer
