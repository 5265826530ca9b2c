#include "sched/alloc.h"

#include <algorithm>
#include <map>

#include "sched/passes.h"
#include "util/error.h"

namespace minfer {

namespace {

constexpr int64_t kAlign = 16;  // floats: 64-byte aligned buffers for SIMD rows

int64_t aligned(int64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

bool is_kv_view(const Op& op) {
    return std::holds_alternative<op::KvcacheStore>(op) || std::holds_alternative<op::KvcacheLoad>(op);
}

// Free blocks of the arena, best-fit with coalescing of neighbours.
class FreeList {
  public:
    int64_t take(int64_t size) {
        auto best = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
        if (best == free_.end()) {
            const int64_t off = top_;
            top_ += size;
            return off;
        }
        const int64_t off = best->first, left = best->second - size;
        free_.erase(best);
        if (left > 0) free_[off + size] = left;
        return off;
    }
    void give(int64_t off, int64_t size) {
        auto it = free_.emplace(off, size).first;
        if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
            it->second += next->second;
            free_.erase(next);
        }
        if (it != free_.begin()) {
            if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
                prev->second += it->second;
                free_.erase(it);
            }
        }
    }
    int64_t high_water() const { return top_; }

  private:
    std::map<int64_t, int64_t> free_;  // offset -> size
    int64_t top_ = 0;
};

}  // namespace

BufferPlan plan_buffers(const ComputeGraph& g) {
    const auto live = live_nodes(g);
    const size_t n = g.nodes.size();
    std::vector<int64_t> last_use(n, -1);
    for (const CNode& node : g.nodes)
        if (live[size_t(node.id)])
            for (NodeId s : node.src) last_use[size_t(s)] = std::max<int64_t>(last_use[size_t(s)], node.id);
    for (NodeId id : g.inputs) last_use[size_t(id)] = int64_t(n);   // inputs never overlap
    for (NodeId id : g.outputs) last_use[size_t(id)] = int64_t(n);  // outputs are never freed

    BufferPlan plan;
    plan.offset.assign(n, -1);
    std::vector<std::vector<NodeId>> dies_at(n);
    FreeList arena;
    for (const CNode& node : g.nodes) {
        const auto i = size_t(node.id);
        if (live[i] && !is_kv_view(node.op)) {
            const int64_t size = aligned(node.n_elements());
            plan.offset[i] = arena.take(size);
            plan.naive_floats += size;
            if (last_use[i] < int64_t(n))
                dies_at[size_t(std::max<int64_t>(last_use[i], node.id))].push_back(node.id);
        }
        // Released only after node i ran: a node never writes into a buffer it is reading.
        for (NodeId d : dies_at[i]) arena.give(plan.offset[size_t(d)], aligned(g[d].n_elements()));
    }
    plan.arena_floats = arena.high_water();
    return plan;
}

}  // namespace minfer
