#include "graph/cache.h"

#include <atomic>

#include "util/env.h"
#include "util/error.h"

namespace minfer {

namespace {
std::atomic<uint64_t> next_uid{1};
}

ComputeGraph* GraphCache::find(const GraphParams& p) {
    for (Entry& e : entries_)
        if (e.params == p) return &e.graph;
    return nullptr;
}

ComputeGraph& GraphCache::insert(ComputeGraph g, const GraphParams& p) {
    g.uid = next_uid.fetch_add(1);
    ++builds_;
    return entries_.emplace_back(Entry{p, std::move(g)}).graph;
}

void GraphCache::verify_structural(const GraphParams& p, const ComputeGraph& rebuilt) {
    const ComputeGraph* cached = find(p);
    if (!cached) throw Error("graph tripwire: nothing cached to compare with");
    if (auto d = structural_diff(*cached, rebuilt))
        throw Error("graph tripwire: rebuilding with equal GraphParams gave a different graph: " + *d);
}

bool GraphCache::tripwire_enabled() {
#ifndef NDEBUG
    return true;
#else
    static const bool on = env_flag("MINFER_GRAPH_TRIPWIRE");  // read once: activate asks every step
    return on;
#endif
}

}  // namespace minfer
