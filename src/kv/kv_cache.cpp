#include "kv/kv_cache.h"

#include <algorithm>
#include <string>
#include <utility>

#include "util/error.h"

namespace minfer {

std::vector<KvShape> kv_shapes(const ComputeGraph& g) {
    std::vector<KvShape> out;
    for (const CNode& n : g.nodes) {
        // Loads too: a fused decode graph stores K/V inside FusedQKV and has only the load views.
        const auto* st = std::get_if<op::KvcacheStore>(&n.op);
        const auto* ld = std::get_if<op::KvcacheLoad>(&n.op);
        if (st || ld)
            out.push_back(
                {st ? st->layer : ld->layer, n.shape[0], n.shape[1], std::get<meta::Kv>(n.meta).type});
    }
    return out;
}

size_t kv_row_bytes(GgmlType type, int64_t n_embd) {
    switch (type) {
        case GgmlType::F32:
            return size_t(n_embd) * 4;
        case GgmlType::F16:
            return size_t(n_embd) * 2;
        case GgmlType::Q8_0:
            if (n_embd % 32 != 0) throw Error("a q8_0 KV cache needs rows of a multiple of 32 elements");
            return size_t(n_embd / 32) * 34;
        default:
            throw Error(std::string("KV cache type ") + ggml_type_name(type) +
                        " is not supported (f32, f16, q8_0)");
    }
}

void KvCache::reserve(const ComputeGraph& g) {
    for (const KvShape& s : kv_shapes(g)) {
        if (size_t(s.layer) >= regions_.size()) regions_.resize(size_t(s.layer) + 1);
        Region& r = regions_[size_t(s.layer)];
        if (r.n_embd == s.n_embd && r.n_ctx == s.n_ctx && r.type == s.type) continue;  // survives the rebuild
        if (r.n_embd != 0)
            throw Error("KV region of layer " + std::to_string(s.layer) +
                        " was declared with a different shape");
        r.n_embd = s.n_embd;
        r.n_ctx = s.n_ctx;
        r.type = s.type;
        r.row_bytes = kv_row_bytes(s.type, s.n_embd);
    }
}

KvCache::Region& KvCache::layer(int il) {
    Region& r = const_cast<Region&>(std::as_const(*this).layer(il));
    if (r.k.empty()) {  // host memory only for layers a host backend touches
        r.k.assign(size_t(r.n_ctx) * r.row_bytes, 0);
        r.v.assign(size_t(r.n_ctx) * r.row_bytes, 0);
    }
    return r;
}

const KvCache::Region& KvCache::layer(int il) const {
    if (il < 0 || size_t(il) >= regions_.size() || regions_[size_t(il)].n_embd == 0)
        throw Error("no KV region for layer " + std::to_string(il));
    return regions_[size_t(il)];
}

void KvCache::copy_block(int32_t src, int32_t dst, int64_t block, int64_t n, int64_t n_slots) {
    for (Region& r : regions_) {
        if (r.k.empty() || r.n_ctx != n_slots) continue;
        const size_t from = size_t(src * block) * r.row_bytes, to = size_t(dst * block) * r.row_bytes,
                     len = size_t(n) * r.row_bytes;
        std::copy_n(r.k.begin() + ptrdiff_t(from), len, r.k.begin() + ptrdiff_t(to));
        std::copy_n(r.v.begin() + ptrdiff_t(from), len, r.v.begin() + ptrdiff_t(to));
    }
}

size_t KvCache::bytes() const {
    size_t b = 0;
    for (const Region& r : regions_) b += r.k.size() + r.v.size();
    return b;
}

}  // namespace minfer
