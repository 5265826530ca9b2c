#include "graph/cache.h"

#include <atomic>

#include "util/env.h"
#include "util/error.h"

namespace minfer {

namespace {
std::atomic<uint64_t> next_uid{1};
}

ComputeGraph& GraphCache::replace(ComputeGraph g, const GraphParams& p) {
    g.uid = next_uid.fetch_add(1);
    graph_ = std::move(g);
    params_ = p;
    ++builds_;
    return *graph_;
}

void GraphCache::clear() {
    graph_.reset();
    params_.reset();
}

void GraphCache::verify_structural(const ComputeGraph& rebuilt) const {
    if (!graph_) throw Error("graph tripwire: nothing cached to compare with");
    if (auto d = structural_diff(*graph_, rebuilt))
        throw Error("graph tripwire: rebuilding with equal GraphParams gave a different graph: " + *d);
}

bool GraphCache::tripwire_enabled() {
#ifndef NDEBUG
    return true;
#else
    return env_flag("MINFER_GRAPH_TRIPWIRE");
#endif
}

}  // namespace minfer
