#include "kv/kv_cache.h"

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace minfer {

std::vector<KvShape> kv_shapes(const ComputeGraph& g) {
    std::vector<KvShape> out;
    for (const CNode& n : g.nodes) {
        // Loads too: a fused decode graph stores K/V inside FusedQKV and has only the load views.
        const auto* st = std::get_if<op::KvcacheStore>(&n.op);
        const auto* ld = std::get_if<op::KvcacheLoad>(&n.op);
        if (st || ld) out.push_back({st ? st->layer : ld->layer, n.shape[0], n.shape[1]});
    }
    return out;
}

void KvCache::reserve(const ComputeGraph& g) {
    for (const KvShape& s : kv_shapes(g)) {
        if (size_t(s.layer) >= regions_.size()) regions_.resize(size_t(s.layer) + 1);
        Region& r = regions_[size_t(s.layer)];
        if (r.n_embd == s.n_embd && r.n_ctx == s.n_ctx) continue;  // survives the rebuild untouched
        if (r.n_embd != 0)
            throw Error("KV region of layer " + std::to_string(s.layer) +
                        " was declared with a different shape");
        r.n_embd = s.n_embd;
        r.n_ctx = s.n_ctx;
    }
}

KvCache::Region& KvCache::layer(int il) {
    Region& r = const_cast<Region&>(std::as_const(*this).layer(il));
    if (r.k.empty()) {  // host memory only for layers a host backend touches
        r.k.assign(size_t(r.n_embd * r.n_ctx), 0.0f);
        r.v.assign(size_t(r.n_embd * r.n_ctx), 0.0f);
    }
    return r;
}

const KvCache::Region& KvCache::layer(int il) const {
    if (il < 0 || size_t(il) >= regions_.size() || regions_[size_t(il)].n_embd == 0)
        throw Error("no KV region for layer " + std::to_string(il));
    return regions_[size_t(il)];
}

void KvCache::copy_block(int32_t src, int32_t dst, int64_t block, int64_t n) {
    for (Region& r : regions_) {
        if (r.k.empty()) continue;
        const size_t from = size_t(src * block * r.n_embd), to = size_t(dst * block * r.n_embd),
                     len = size_t(n * r.n_embd);
        std::copy_n(r.k.begin() + ptrdiff_t(from), len, r.k.begin() + ptrdiff_t(to));
        std::copy_n(r.v.begin() + ptrdiff_t(from), len, r.v.begin() + ptrdiff_t(to));
    }
}

size_t KvCache::bytes() const {
    size_t b = 0;
    for (const Region& r : regions_) b += (r.k.size() + r.v.size()) * sizeof(float);
    return b;
}

}  // namespace minfer
