#include "models/shard.h"

#include <cstring>

#include "gguf/gguf.h"
#include "quant/quants.h"
#include "util/error.h"

namespace minfer {

namespace {

struct Range {
    int64_t begin, end;
    int64_t size() const { return end - begin; }
};

// Part r of n of [0, units) (units spread as evenly as they go), scaled by `unit`.
Range part(int64_t units, int r, int n, int64_t unit) {
    return {units * r / n * unit, units * (r + 1) / n * unit};
}

// Collects one rank's tensors: row slices as views of the whole file, column slices as copies.
class Slicer {
  public:
    Slicer(const Model& whole, int rank, int ranks) : f_(*whole.file), rank_(rank), ranks_(ranks) {}

    // Rows [r.begin, r.end) of a [n_in, n_out] matrix, or elements of a vector (n_out 1).
    WeightRef rows(const WeightRef& w, Range r) {
        if (!w.present()) return w;
        if (w.n_out == 1) return columns(w, r);
        const GgufTensor& t = f_.tensor(w.name);
        const size_t row = quant_row_bytes(*quant_traits(t.type), w.n_in);
        add({w.name, t.type, {w.n_in, r.size()}, 0, row * size_t(r.size()), t.data + row * size_t(r.begin)});
        return {w.name, w.type, w.n_in, r.size()};
    }
    // Input columns [c.begin, c.end) of every row: whole blocks of the weight's type.
    WeightRef columns(const WeightRef& w, Range c) {
        if (!w.present()) return w;
        const GgufTensor& t = f_.tensor(w.name);
        const QuantTraits& q = *quant_traits(t.type);
        if (c.begin % q.block_size != 0 || c.end % q.block_size != 0)
            throw Error(f_.path() + ": tensor '" + w.name + "' (" + q.name + ", blocks of " +
                        std::to_string(q.block_size) + ") does not split at column " +
                        std::to_string(c.begin % q.block_size ? c.begin : c.end));
        const size_t row = quant_row_bytes(q, w.n_in), off = quant_row_bytes(q, c.begin),
                     part = quant_row_bytes(q, c.size());
        std::vector<uint8_t>& bytes = owned_.emplace_back(part * size_t(w.n_out));
        for (int64_t r = 0; r < w.n_out; ++r)
            std::memcpy(bytes.data() + part * size_t(r), t.data + row * size_t(r) + off, part);
        std::vector<int64_t> dims{c.size()};
        if (t.dims.size() > 1) dims.push_back(w.n_out);
        add({w.name, t.type, dims, 0, bytes.size(), bytes.data()});
        return {w.name, w.type, c.size(), w.n_out};
    }
    WeightRef whole(const WeightRef& w) {
        if (w.present()) add(f_.tensor(w.name));
        return w;
    }
    bool splits_at(const WeightRef& w, Range c) const {
        const int bs = quant_traits(w.type)->block_size;
        return c.begin % bs == 0 && c.end % bs == 0;
    }
    std::unique_ptr<GgufFile> file() && {
        return GgufFile::from_tensors(f_.path() + " (tensor-parallel rank " + std::to_string(rank_) + " of " +
                                          std::to_string(ranks_) + ")",
                                      std::move(tensors_), std::move(owned_));
    }

  private:
    void add(const GgufTensor& t) {
        for (const GgufTensor& have : tensors_)
            if (have.name == t.name) return;  // tied embeddings: one tensor, sliced once
        tensors_.push_back(t);
    }
    const GgufFile& f_;
    int rank_, ranks_;
    std::vector<GgufTensor> tensors_;
    std::vector<std::vector<uint8_t>> owned_;
};

// The rank's K/V heads, query heads and FFN columns; Error when the model does not split over `ranks`.
struct Split {
    Range kv_heads, q_heads, ffn;
};

Split split_of(const Model& m, int rank, int ranks) {
    const Hparams& hp = m.hp;
    if (hp.n_head_kv % ranks != 0)
        throw Error("tensor parallelism over " + std::to_string(ranks) +
                    " ranks splits attention by K/V head: " + m.file->path() + " has " +
                    std::to_string(hp.n_head_kv) + " K/V heads");
    const int64_t group = hp.n_head / hp.n_head_kv;
    const Range kv = part(hp.n_head_kv, rank, ranks, 1);
    const int64_t ffn_block = quant_traits(m.layers.front().ffn_down.type)->block_size;
    for (const LayerWeights& l : m.layers)
        if (quant_traits(l.ffn_down.type)->block_size != ffn_block)
            throw Error(m.file->path() + ": ffn_down's block sizes differ between layers");
    if (hp.n_ff % ffn_block != 0 || hp.n_ff / ffn_block < ranks)
        throw Error("tensor parallelism over " + std::to_string(ranks) + " ranks: " + m.file->path() +
                    "'s n_ff of " + std::to_string(hp.n_ff) + " has fewer blocks of " +
                    std::to_string(ffn_block) + " than ranks");
    return {kv, {kv.begin * group, kv.end * group}, part(hp.n_ff / ffn_block, rank, ranks, ffn_block)};
}

LayerWeights shard_layer(Slicer& s, const Hparams& hp, const LayerWeights& l, const Split& sp) {
    const Range q{sp.q_heads.begin * hp.head_dim, sp.q_heads.end * hp.head_dim};
    const Range kv{sp.kv_heads.begin * hp.head_dim, sp.kv_heads.end * hp.head_dim};
    LayerWeights r = l;
    r.attn_norm = s.whole(l.attn_norm), r.ffn_norm = s.whole(l.ffn_norm);
    r.q_norm = s.whole(l.q_norm), r.k_norm = s.whole(l.k_norm);
    r.wq = s.rows(l.wq, q), r.bq = s.rows(l.bq, q);
    r.wk = s.rows(l.wk, kv), r.bk = s.rows(l.bk, kv);
    r.wv = s.rows(l.wv, kv), r.bv = s.rows(l.bv, kv);
    r.wo = s.splits_at(l.wo, q) ? s.columns(l.wo, q) : s.whole(l.wo);
    r.ffn_gate = s.rows(l.ffn_gate, sp.ffn), r.ffn_up = s.rows(l.ffn_up, sp.ffn);
    r.ffn_down = s.columns(l.ffn_down, sp.ffn);
    return r;
}

}  // namespace

std::unique_ptr<Model> shard_model(const Model& whole, int rank, int ranks) {
    if (ranks < 1 || rank < 0 || rank >= ranks)
        throw Error("tensor parallelism: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
    if (whole.hp.n_expert > 0 && ranks > 1)
        throw Error("tensor parallelism does not split a mixture of experts (" + whole.hp.arch + ") yet");
    const Split sp = split_of(whole, rank, ranks);
    Slicer s(whole, rank, ranks);
    auto m = std::make_unique<Model>();
    m->hp = whole.hp;
    m->hp.n_head = sp.q_heads.size(), m->hp.n_head_kv = sp.kv_heads.size(), m->hp.n_ff = sp.ffn.size();
    m->build_graph = whole.build_graph;
    m->shard = {rank, ranks, 0};
    const bool vocab_split = whole.hp.n_vocab % ranks == 0;
    const Range vocab = part(whole.hp.n_vocab, rank, ranks, 1);
    if (vocab_split) m->shard.vocab_first = vocab.begin;
    m->tok_embd = vocab_split ? s.rows(whole.tok_embd, vocab) : s.whole(whole.tok_embd);
    m->output = vocab_split ? s.rows(whole.output, vocab) : s.whole(whole.output);
    m->output_norm = s.whole(whole.output_norm);
    for (const LayerWeights& l : whole.layers) m->layers.push_back(shard_layer(s, whole.hp, l, sp));
    m->file = std::move(s).file();
    return m;
}

}  // namespace minfer
