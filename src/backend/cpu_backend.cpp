#include "backend/cpu_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/comm.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "util/error.h"
#include "util/overload.h"

namespace minfer {

namespace {

const int32_t* ids_of(const NodeBuffers& bufs, NodeId id) {
    return reinterpret_cast<const int32_t*>(bufs.data(id));
}

}  // namespace

CpuBackend::CpuBackend(const GgufFile& weights, int n_threads, const CpuOptions& o)
    : file_(weights),
      pool_(std::max(1, n_threads)),
      decode_(o.decode),
      invariant_(o.invariant),
      comm_(o.comm) {}

bool CpuBackend::supports(const CNode&) const {
    return true;
}

void CpuBackend::prepare(const ComputeGraph& g) {
    for (const CNode& n : g.nodes)
        for_each_weight(n.meta, [&](const WeightRef& w) {
            if (!w.present()) return;
            if (w.n_out == 1)
                vec(w);
            else
                weight(w);
        });
}

const CpuBackend::Weight& CpuBackend::weight(const WeightRef& w) {
    if (auto it = weights_.find(w.name); it != weights_.end()) return it->second;
    const GgufTensor* t = file_.find_tensor(w.name);
    if (!t) throw Error(file_.path() + ": graph references tensor '" + w.name + "', which the file lacks");
    const QuantTraits* q = quant_traits(t->type);
    if (!q)
        throw Error(file_.path() + ": tensor '" + w.name + "' has unsupported type " +
                    ggml_type_name(t->type));
    return weights_[w.name] = Weight{t->data, q};
}

const float* CpuBackend::vec(const WeightRef& w) {
    const Weight& wt = weight(w);
    if (wt.q->type == GgmlType::F32) return static_cast<const float*>(wt.data);
    auto [it, fresh] = converted_.try_emplace(w.name);
    if (fresh) {  // a 2-D tensor (experts' biases) whole
        it->second.resize(size_t(w.n_in * w.n_out));
        wt.q->to_float(wt.data, it->second.data(), w.n_in * w.n_out);
    }
    return it->second.data();
}

template <class F>
void CpuBackend::rows(int64_t nt, F&& f) {
    if (nt == 1) return f(0);
    pool_.parallel_for(nt, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) f(t);
    });
}

void CpuBackend::matmul(const meta::MatMul& m, const float* x, int64_t nt, float* y) {
    const Weight& w = weight(m.weight);
    const float* bias = m.bias.present() ? vec(m.bias) : nullptr;
    cpu::matmul(*w.q, w.data, m.weight.n_in, m.weight.n_out, x, nt, y, bias, pool_, decode_, invariant_);
}

void CpuBackend::embedding(const CNode& n, const NodeBuffers& bufs) {
    const WeightRef& table = std::get<meta::Weight>(n.meta).weight;
    const auto& o = std::get<op::GetRows>(n.op);
    const Weight& w = weight(table);
    const int32_t* ids = ids_of(bufs, n.src[0]);
    const size_t row_bytes = quant_row_bytes(*w.q, table.n_in);
    float* out = bufs.data(n.id);
    for (int64_t t = 0; t < n.shape[1]; ++t) {
        const int64_t row = int64_t(ids[t]) - o.first;
        const bool outside = row < 0 || row >= table.n_out;
        if (o.shard && outside) {  // another rank's token
            std::fill_n(out + t * table.n_in, table.n_in, 0.0f);
            continue;
        }
        if (outside)
            throw Error("token id " + std::to_string(ids[t]) + " is out of range [0, " +
                        std::to_string(table.n_out) + ")");
        w.q->to_float(static_cast<const uint8_t*>(w.data) + size_t(row) * row_bytes, out + t * table.n_in,
                      table.n_in);
    }
}

void CpuBackend::collective(const CNode& n, const NodeBuffers& bufs) {
    if (!comm_)
        throw Error("graph node " + n.name + " is a collective, but this backend has no communicator");
    const float* x = bufs.data(n.src[0]);
    float* out = bufs.data(n.id);
    if (std::holds_alternative<op::AllGather>(n.op))
        return comm_->all_gather(x, n.shape[0] / comm_->size(), n.shape[1], out);
    std::memcpy(out, x, size_t(n.n_elements()) * sizeof(float));
    comm_->all_reduce(out, n.n_elements());
}

namespace {

// K/V rows of nt tokens into their slots (row t goes to slot(t)), converted to the region's type by
// the quant table's scalar quantizer (round to nearest; q8_0: one scale per 32 elements).
void kv_store_rows(KvCache::Region& r, int64_t nt, const auto& slot, const float* k, const float* v) {
    const QuantTraits* q = r.type == GgmlType::F32 ? nullptr : quant_traits(r.type);
    for (int64_t t = 0; t < nt; ++t) {
        const int64_t s = slot(t);
        const float *kt = k + t * r.n_embd, *vt = v + t * r.n_embd;
        if (!q) {
            std::memcpy(r.k_row(s), kt, r.row_bytes);
            std::memcpy(r.v_row(s), vt, r.row_bytes);
        } else {
            q->from_float_ref(kt, r.k_row(s), r.n_embd);
            q->from_float_ref(vt, r.v_row(s), r.n_embd);
        }
    }
}

// Where the tokens of one forward read and write their sequences' KV rows: the inputs positions,
// seq_slot and block_table (the sources from kv_index_src on; unpaged graphs have only positions, and
// their one block is block 0), checked against the region so that a bad table is an error, never
// a stray access.
struct KvIndexData {
    const int32_t *pos, *slot, *table;
    meta::Paging paging;
    int shift;

    const int32_t* blocks(int64_t t) const {
        static const int32_t first_block = 0;
        return table ? table + int64_t(slot[t]) * paging.max_blocks : &first_block;
    }
    // The slot of row j of token t's sequence, and of token t itself.
    int64_t slot_of(int64_t t, int64_t j) const {
        return int64_t(blocks(t)[j >> shift]) << shift | (j & ((int64_t(1) << shift) - 1));
    }
    int64_t physical(int64_t t) const { return slot_of(t, pos[t]); }
    void check(const std::string& node, int64_t n_slots, int64_t nt) const;
};

KvIndexData kv_index(const CNode& n, const NodeBuffers& bufs, const meta::Paging& pg, int64_t n_slots,
                     int64_t nt) {
    const size_t first = size_t(kv_index_src(n.op));
    const bool paged = n.src.size() == first + 3;
    const KvIndexData d{ids_of(bufs, n.src[first]), paged ? ids_of(bufs, n.src[first + 1]) : nullptr,
                        paged ? ids_of(bufs, n.src[first + 2]) : nullptr, pg, pg.shift(cpu::kMinBlockShift)};
    d.check(n.name, n_slots, nt);
    return d;
}

void KvIndexData::check(const std::string& node, int64_t n_slots, int64_t nt) const {
    // The unpaged layout's one block may be shorter than 2^shift rows.
    const int64_t n_blocks = std::max<int64_t>(n_slots >> shift, 1), n_pos = paging.block * paging.max_blocks;
    for (int64_t t = 0; t < nt; ++t) {
        if (pos[t] < 0 || pos[t] >= n_pos || (slot && slot[t] < 0))
            throw Error(node + ": token " + std::to_string(t) + " at position " + std::to_string(pos[t]) +
                        " is outside the context of " + std::to_string(n_pos) + " tokens");
        for (int64_t b = 0; b <= (pos[t] >> shift); ++b)
            if (blocks(t)[b] < 0 || blocks(t)[b] >= n_blocks)
                throw Error(node + ": token " + std::to_string(t) + " maps to KV block " +
                            std::to_string(blocks(t)[b]) + " of " + std::to_string(n_blocks));
    }
}

// Rows 0..n-1 of one KV head (columns [c0, c0 + hd) of each row) of a compact region, as f32 rows of hd:
// the attention kernels then run on them as on an f32 region, so every KV type gets their arithmetic.
void kv_head_to_f32(const KvCache::Region& r, const KvIndexData& at, int64_t t, int64_t c0, int64_t hd,
                    int64_t first, int64_t n, float* k, float* v) {
    const QuantTraits& q = *quant_traits(r.type);
    const size_t off = size_t(c0 / q.block_size) * q.type_size;  // heads start on a block boundary
    for (int64_t j = first; j < n; ++j) {
        const int64_t s = at.slot_of(t, j);
        q.to_float(r.k_row(s) + off, k + j * hd, hd);
        q.to_float(r.v_row(s) + off, v + j * hd, hd);
    }
}

// The kernels' angles of a RoPE node's metadata.
cpu::RopeFreq rope_freq(const meta::Rope& r) {
    return {r.freq_base, r.freq_scale, r.yarn.low, r.yarn.high, r.yarn.mscale};
}

}  // namespace

void CpuBackend::attention(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    const auto& m = std::get<meta::Attn>(n.meta);
    const auto& o = std::get<op::Attn>(n.op);
    const KvCache::Region& r = bufs.kv().layer(m.layer);
    const float* sinks = m.sinks.present() ? vec(m.sinks) : nullptr;  // [n_head]
    const int64_t nt = n.shape[1], group = m.n_head / m.n_head_kv, items = nt * m.n_head_kv;
    const KvIndexData at = kv_index(n, bufs, m.paging, r.n_ctx, nt);
    const float* q = bufs.data(n.src[0]);
    const int64_t q_stride = g[n.src[0]].shape[0];  // Q may sit in a wider buffer
    float* out = bufs.data(n.id);
    const bool f32 = r.type == GgmlType::F32;
    // Scores and converted rows are indexed by position, which a window layer's region (fewer slots,
    // CParams::window_ctx) may not bound.
    const int64_t n_pos = m.paging.n_pos();
    scratch_.resize(size_t(pool_.size() * group * n_pos));
    if (!f32) kv_scratch_.resize(size_t(pool_.size() * 2 * n_pos * m.hd_kv));
    pool_.for_each_dynamic(items, [&](int64_t it, int ith) {
        const int64_t t = it / m.n_head_kv, j = it % m.n_head_kv, n_kv = int64_t(at.pos[t]) + 1;
        const int64_t first = o.first_position(at.pos[t]);
        const float* qt = q + t * q_stride + j * group * m.hd;
        cpu::KvRows rows{reinterpret_cast<const float*>(r.k.data()) + j * m.hd_kv,
                         reinterpret_cast<const float*>(r.v.data()) + j * m.hd_kv, r.n_embd, at.blocks(t),
                         at.shift};
        if (!f32) {  // this head's rows as f32, contiguous
            float* k = kv_scratch_.data() + ith * 2 * n_pos * m.hd_kv;
            kv_head_to_f32(r, at, t, j * m.hd_kv, m.hd_kv, first, n_kv, k, k + n_pos * m.hd_kv);
            rows = cpu::contiguous_rows(k, k + n_pos * m.hd_kv, m.hd_kv, n_kv);
        }
        cpu::attention(qt, rows, out + t * n.shape[0] + j * group * m.hd, group, 1, m.hd, first, n_kv,
                       m.scale, scratch_.data() + ith * group * n_pos, sinks ? sinks + j * group : nullptr);
    });
}

void CpuBackend::kv_store(const ComputeGraph& g, const CNode& n, int layer, const NodeBuffers& bufs) {
    KvCache::Region& r = bufs.kv().layer(layer);
    const int64_t nt = g[n.src[0]].shape[1];
    const KvIndexData at = kv_index(n, bufs, std::get<meta::Kv>(n.meta).paging, r.n_ctx, nt);
    kv_store_rows(
        r, nt, [&](int64_t t) { return at.physical(t); }, bufs.data(n.src[0]), bufs.data(n.src[1]));
}

// Shared tail of the QKV fusions: per-head norms (Qwen3), RoPE on Q and K, K/V into the region.
// q is the node's output row block [nt][n_q]; k/v are [nt][n_kv] and may be modified.
void CpuBackend::qkv_epilogue(const CNode& n, int64_t nt, float* q, float* k, const float* v,
                              const NodeBuffers& bufs) {
    const auto& m = std::get<meta::FusedQkv>(n.meta);
    KvCache::Region& r = bufs.kv().layer(kv_layer(n.op));
    const KvIndexData at = kv_index(n, bufs, m.kv.paging, r.n_ctx, nt);
    const int32_t* pos = at.pos;
    const int64_t hd = m.rope.head_dim, n_q = m.rope.n_head * hd, n_kv = m.n_head_kv * hd;
    const bool neox = m.style == RopeStyle::Neox;
    for (int64_t t = 0; t < nt; ++t) {
        float* qt = q + t * n_q;
        float* kt = k + t * n_kv;
        if (m.q_norm.present()) {
            const float *wq = vec(m.q_norm), *wk = vec(m.k_norm);
            for (int64_t h = 0; h < m.rope.n_head; ++h)
                cpu::rms_norm(qt + h * hd, wq, qt + h * hd, hd, m.norm_eps);
            for (int64_t h = 0; h < m.n_head_kv; ++h)
                cpu::rms_norm(kt + h * hd, wk, kt + h * hd, hd, m.norm_eps);
        }
        cpu::rope(qt, m.rope.n_head, hd, m.rope.n_rot, pos[t], rope_freq(m.rope), neox);
        cpu::rope(kt, m.n_head_kv, hd, m.rope.n_rot, pos[t], rope_freq(m.rope), neox);
    }
    kv_store_rows(
        r, nt, [&](int64_t t) { return at.physical(t); }, k, v);
}

void CpuBackend::fused_qkv(const CNode& n, const NodeBuffers& bufs) {
    const auto& m = std::get<meta::FusedQkv>(n.meta);
    const int64_t nt = n.shape[1], n_kv = m.kv.n_embd;
    const float* x = bufs.data(n.src.front());
    std::vector<float>& kv = fused_scratch_;
    kv.resize(size_t(2 * nt * n_kv));
    float *k = kv.data(), *v = kv.data() + nt * n_kv, *q = bufs.data(n.id);
    if (std::holds_alternative<op::QkvBiasRopeStore>(n.op)) {  // projections ran as separate nodes
        const float* srcs[3] = {bufs.data(n.src[0]), bufs.data(n.src[1]), bufs.data(n.src[2])};
        float* dsts[3] = {q, k, v};
        const meta::MatMul* mm[3] = {&m.q, &m.k, &m.v};
        for (int i = 0; i < 3; ++i) {
            const int64_t w = mm[i]->weight.n_out;
            std::memcpy(dsts[i], srcs[i], size_t(nt * w) * sizeof(float));
            if (!mm[i]->bias.present()) continue;
            const float* b = vec(mm[i]->bias);
            for (int64_t t = 0; t < nt; ++t) cpu::add(dsts[i] + t * w, b, dsts[i] + t * w, w);
        }
    } else {
        matmul(m.q, x, nt, q);
        matmul(m.k, x, nt, k);
        matmul(m.v, x, nt, v);
    }
    qkv_epilogue(n, nt, q, k, v, bufs);
}

void CpuBackend::fused_ffn(const CNode& n, const NodeBuffers& bufs) {
    const auto& m = std::get<meta::FusedFfn>(n.meta);
    const int64_t nt = n.shape[1], nf = n.shape[0];
    fused_scratch_.resize(size_t(2 * nt * nf));
    float *gate = fused_scratch_.data(), *up = gate + nt * nf;
    const float* x = bufs.data(n.src[0]);
    matmul({m.gate, {}}, x, nt, gate);
    matmul({m.up, {}}, x, nt, up);
    float* out = bufs.data(n.id);
    rows(nt, [&](int64_t t) { cpu::swiglu(gate + t * nf, up + t * nf, out + t * nf, nf); });
}

void CpuBackend::moe_ffn(const CNode& n, const op::MoeFfn& o, const NodeBuffers& bufs) {
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    const Weight &gate = weight(m.gate), &up = weight(m.up), &down = weight(m.down);
    auto bias = [&](const WeightRef& b) { return b.present() ? vec(b) : nullptr; };
    const cpu::MoeExperts w{gate.q,     up.q,           down.q,       gate.data,
                            up.data,    down.data,      m.gate.n_in,  m.down.n_in,
                            o.n_expert, bias(m.gate_b), bias(m.up_b), bias(m.down_b)};
    cpu::moe_ffn(w, o, bufs.data(n.src[0]), bufs.data(n.src[1]), n.shape[1], bufs.data(n.id), pool_, decode_,
                 invariant_, moe_scratch_);
}

void CpuBackend::compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    float* out = bufs.data(n.id);
    auto in = [&](size_t i) { return bufs.data(n.src[i]); };
    const int64_t d = n.shape[0], nt = n.shape[1], numel = n.n_elements();
    std::visit(
        Overload{
            [&](const op::GetRows&) {
                if (std::holds_alternative<meta::Weight>(n.meta)) return embedding(n, bufs);
                const int32_t* ids = ids_of(bufs, n.src[1]);
                for (int64_t t = 0; t < nt; ++t)
                    std::memcpy(out + t * d, in(0) + int64_t(ids[t]) * d, size_t(d) * sizeof(float));
            },
            [&](const op::RmsNorm& o) {
                const float* w = vec(std::get<meta::Weight>(n.meta).weight);
                rows(nt, [&](int64_t t) { cpu::rms_norm(in(0) + t * d, w, out + t * d, d, o.eps); });
            },
            [&](const op::QkNorm& o) {
                const float* w = vec(std::get<meta::Weight>(n.meta).weight);
                rows(nt * o.nh,
                     [&](int64_t r) { cpu::rms_norm(in(0) + r * o.hd, w, out + r * o.hd, o.hd, o.eps); });
            },
            [&](const op::MatMul& o) {
                matmul(std::get<meta::MatMul>(n.meta), in(0), nt, out);
                if (o.residual)
                    rows(nt, [&](int64_t t) { cpu::add(out + t * d, in(1) + t * d, out + t * d, d); });
            },
            [&](const op::Rope& o) {
                const auto& m = std::get<meta::Rope>(n.meta);
                const int32_t* pos = ids_of(bufs, n.src[1]);
                std::memcpy(out, in(0), size_t(numel) * sizeof(float));
                rows(nt, [&](int64_t t) {
                    cpu::rope(out + t * d, m.n_head, m.head_dim, m.n_rot, pos[t], rope_freq(m),
                              o.style == RopeStyle::Neox);
                });
            },
            [&](const op::Attn&) { attention(g, n, bufs); },
            [&](const op::KvcacheStore& o) { kv_store(g, n, o.layer, bufs); },
            [&](const op::Add&) {
                rows(nt, [&](int64_t t) { cpu::add(in(0) + t * d, in(1) + t * d, out + t * d, d); });
            },
            [&](const op::Mul&) {
                rows(nt, [&](int64_t t) { cpu::mul(in(0) + t * d, in(1) + t * d, out + t * d, d); });
            },
            [&](const op::Silu&) { rows(nt, [&](int64_t t) { cpu::silu(in(0) + t * d, out + t * d, d); }); },
            [&](const op::SwiGLU&) {
                rows(nt, [&](int64_t t) { cpu::swiglu(in(0) + t * d, in(1) + t * d, out + t * d, d); });
            },
            [&](const op::GeGLU&) {
                rows(nt, [&](int64_t t) { cpu::geglu(in(0) + t * d, in(1) + t * d, out + t * d, d); });
            },
            [&](const op::Scale& o) { cpu::scale(in(0), o.factor, out, numel); },
            [&](const op::ArgMax&) {
                const int64_t w = g[n.src[0]].shape[0];  // [w, n] -> [n]
                auto* ids = reinterpret_cast<int32_t*>(out);
                rows(d, [&](int64_t t) { ids[t] = cpu::argmax(in(0) + t * w, w); });
            },
            [&](const op::FusedFFN&) { fused_ffn(n, bufs); },
            [&](const op::MoeFfn& o) { moe_ffn(n, o, bufs); },
            [&](const op::AllReduce&) { collective(n, bufs); },
            [&](const op::AllGather&) { collective(n, bufs); },
            [&](const op::Input&) {},
            [&](const op::KvcacheLoad&) {},
            [&](const op::FusedQKV&) { fused_qkv(n, bufs); },
            [&](const op::FusedQkvNorm&) { fused_qkv(n, bufs); },
            [&](const op::QkvBiasRopeStore&) { fused_qkv(n, bufs); },
        },
        n.op);
}

}  // namespace minfer
