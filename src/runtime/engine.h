// An Engine holds one model's backends (weights resolved and uploaded once), its paged KV cache and one
// planned graph per token-count bucket, and runs forward passes that mix the tokens of many sequences:
// prefill chunks and decode tokens alike. Sequences are cheap handles (a block-table row, a block list,
// their tokens); their KV blocks come from one BlockPool shared by all, with automatic prefix caching of
// full blocks and copy-on-write forks. With batch_invariant a sequence's logits do not depend on what
// else shares its forwards: every per-token computation is row-local with a fixed arithmetic, and
// padding a batch to its bucket repeats a real token. With tensor parallelism the sequences, blocks and
// block tables are shared by every rank; each rank holds its heads' K/V for them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "graph/cache.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "models/model.h"

namespace minfer {

class StepObserver;  // runtime/observe.h
class HostCommGroup;
class RankThreads;

// Most tokens per forward pass unless asked otherwise: llama.cpp's default micro-batch (-ub).
constexpr int64_t kDefaultUbatch = 512;
// Token slots per KV block of a paged layout: the prefix cache's granularity (the attention kernels need a
// power of two of at least 16).
constexpr int64_t kDefaultKvBlock = 32;

cpu::DecodeDot decode_dot_from_env();
// The CUDA backend's measurement switches (MINFER_NO_CUDA_GRAPH, MINFER_NO_TILES, MINFER_NO_PAD,
// MINFER_PREFILL_GEMM, MINFER_F32_PREFILL_ATTN, MINFER_CUDA_PROFILE, MINFER_NO_MMA, MINFER_NO_HALF_WEIGHTS);
// decode_x and invariant come from EngineParams.
CudaOptions cuda_options_from_env();

struct EngineParams {
    int64_t n_ctx = 0;                      // KV token slots shared by all sequences; 0: the model's, <= 4096
    int64_t kv_mem = 0;                     // bytes for the KV cache (--kv-mem): sets n_ctx when > 0
    int n_threads = 0;                      // 0: all hardware threads
    BackendKind device = BackendKind::Cpu;  // Cuda with max_seqs 1: the unpaged layout
    int64_t n_ubatch = kDefaultUbatch;      // most tokens per forward pass
    int max_seqs = 1;                       // sequences open at once
    int64_t kv_block = kDefaultKvBlock;     // token slots per KV block (paged layouts)
    bool prefix_cache = true;               // reuse cached full blocks of equal prompt prefixes
    GgmlType kv_type = GgmlType::F32;       // K/V element type (--kv-type f32 | f16 | q8_0; CPU)
    // Per-column matmul arithmetic independent of the batch (--deterministic): off by default, since it
    // costs more than 10% of throughput at large batches and in prefill (README, Batch invariance).
    bool batch_invariant = false;
    // The CPU's integer dots, read from the environment when the params are made (MINFER_EXACT_DECODE=1:
    // f32, MINFER_INT8_DECODE=1: plain int8, otherwise int8x2).
    cpu::DecodeDot decode = decode_dot_from_env();
    CudaOptions cuda = cuda_options_from_env();
    // Ranks of tensor parallelism (--tensor-parallel): each holds a shard of the model (models/shard.h),
    // its own backends and KV cache, and runs its graph on its own thread; the collectives run through
    // host memory. 1: the whole model on one rank, no collectives.
    int tensor_parallel = 1;
};

using SeqId = int32_t;

class Engine {
  public:
    Engine(const Model& m, const EngineParams& p);
    ~Engine();

    // One sequence's share of a forward pass: its next tokens, and how many of the last of them need
    // logits (0..tokens.size()).
    struct Chunk {
        SeqId seq;
        std::span<const int32_t> tokens;
        int64_t n_logits = 1;
    };
    // Runs every chunk's tokens at their sequence's next positions (each sequence at most once, at most
    // max_tokens() tokens in all) and appends them to the sequences. Returns the wanted logits, chunk after
    // chunk: [sum of n_logits][n_vocab]. Throws Error, changing nothing, when a sequence's context would
    // overflow or the pool lacks blocks (blocks_needed tells beforehand).
    std::span<const float> forward(std::span<const Chunk> batch);
    // As forward, but returns each wanted row's argmax (the lowest id on ties) instead of its logits:
    // greedy decoding, computed where the logits are, so a GPU sends back ids, not rows of the vocabulary.
    std::span<const int32_t> forward_greedy(std::span<const Chunk> batch);
    // The final norm's hidden state of every token of `tokens` (the rows lm_head would read):
    // [tokens.size()][n_embd]. Runs on a fresh sequence, in forwards of at most max_tokens() tokens (the
    // KV cache carries the context from one to the next), then closes it. Throws Error, changing nothing,
    // for no tokens, more than n_ctx(), an id out of range, or when can_embed() is false.
    std::vector<float> embed(std::span<const int32_t> tokens);
    // Whether embed() of n tokens can run now: a free sequence slot and the KV blocks of all n tokens.
    bool can_embed(int64_t n) const;

    SeqId open();         // an empty sequence; Error when max_seqs are open
    void close(SeqId s);  // its blocks go back to the pool (published ones stay cached)
    SeqId fork(SeqId s);  // a new sequence sharing s's tokens and blocks (copy-on-write)
    // On an empty sequence: attaches the cached blocks holding the longest block-aligned prefix of
    // `prompt`, short of its last token (whose logits are wanted); returns the tokens reused.
    int64_t attach_prefix(SeqId s, std::span<const int32_t> prompt);
    // Blocks that appending n tokens to s takes from the pool (new blocks, a copy of a shared last block).
    int64_t blocks_needed(SeqId s, int64_t n) const;

    int64_t n_past(SeqId s) const { return seq(s).tokens.size(); }
    std::span<const int32_t> tokens(SeqId s) const { return seq(s).tokens; }
    int64_t n_ctx() const { return cparams_.n_ctx; }  // also the most tokens one sequence can hold
    int64_t max_tokens() const { return n_ubatch_; }
    int max_seqs() const { return int(cparams_.max_seqs); }
    int64_t free_blocks() const { return pool_.n_free(); }
    const kv::BlockPool& pool() const { return pool_; }
    // The sliding-window layers' own blocks (CParams::window_ctx); null when they share pool()'s.
    const kv::BlockPool* window_pool() const { return window_pool_ ? &*window_pool_ : nullptr; }
    int64_t prefix_hit_tokens() const { return prefix_hits_; }
    const Model& model() const { return model_; }
    const CParams& cparams() const { return cparams_; }
    GraphParams params_for(int64_t n_tokens, int64_t n_out, GraphOutput out = GraphOutput::Logits) const;
    // Builds, assigns and fuses the graph for `p` without executing it (dumps, tests).
    ComputeGraph planned_graph(const GraphParams& p);
    // Builds and binds the graph of a forward of n_tokens (n_out logits) and allocates the KV cache's host
    // memory, so that the first forward times its computation alone (run's prompt rate).
    void prepare(int64_t n_tokens, int64_t n_out);
    // Rank 0's last graph run, graph builds, KV cache and GPU backend (null on the CPU device).
    const ComputeGraph& graph() const;
    uint64_t graph_builds() const;
    const KvCache& kv() const;
    const Backend* gpu() const;
    int64_t steps() const { return step_; }
    int tensor_parallel() const { return int(ranks_.size()); }
    // Rank 0's CPU threads, idle between forwards: the scheduler samples its rows on them.
    ThreadPool& host_threads();
    // Observes every later step beside the observers of MINFER_TRACE / MINFER_GRAPH_DUMP (minfer viz
    // streams its steps through one). Observed steps run node by node: no CUDA-graph replay.
    void add_observer(std::unique_ptr<StepObserver> o);

  private:
    // A sequence's blocks in one pool. The leading n_released are outside every later query's window
    // (kv_window_) and went back to the pool; their ids stay in the table, where no kernel reads a row.
    struct Blocks {
        std::vector<kv::BlockId> ids;
        int64_t n_released = 0;
    };
    struct Sequence {
        bool open = false;
        std::vector<int32_t> tokens;
        Blocks blocks;  // in pool_: every layer's rows, or the global layers' when window_pool_ exists
        Blocks window;  // in window_pool_: the sliding-window layers' rows
        int64_t n_published = 0;            // leading full blocks offered to the prefix cache
        uint64_t last_key = kv::kRootHash;  // chain key of the last of them
    };
    struct Plan;  // the bucketed inputs of one forward
    struct Rank;  // one tensor-parallel rank's model (or shard), backends, graphs and KV cache

    const Sequence& seq(SeqId s) const;
    Sequence& seq(SeqId s) { return const_cast<Sequence&>(std::as_const(*this).seq(s)); }
    void check_batch(std::span<const Chunk> batch) const;
    int64_t blocks_needed(const Blocks& b, const kv::BlockPool& pool, int64_t past, int64_t n) const;
    void grow(Blocks& b, kv::BlockPool& pool, int64_t past, int64_t n);
    void attach_window(Sequence& q);
    void publish_full_blocks(Sequence& s);
    void release_outside_window(Sequence& s);
    void release(Blocks& b, kv::BlockPool& pool);
    Plan plan(std::span<const Chunk> batch) const;
    const float* run(std::span<const Chunk> batch, const Plan& pl, GraphOutput out, bool& narrowed);
    void on_ranks(const std::function<void(Rank&)>& f);  // f on every rank at once

    const Model& model_;
    AttnLayers layers_;  // the model's attention layers by kind
    CParams cparams_;
    int64_t n_ubatch_;
    bool prefix_cache_;
    std::unique_ptr<HostCommGroup> comms_;  // null for one rank
    // A GPU group's device collectives (NCCL); null: the host's. A shared_ptr binds its deleter where the
    // group is made, so builds without CUDA never need the type.
    std::shared_ptr<cuda::NcclGroup> nccl_;
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::unique_ptr<RankThreads> threads_;  // null for one rank
    kv::BlockPool pool_;
    std::optional<kv::BlockPool> window_pool_;  // with CParams::window_ctx
    std::vector<Sequence> seqs_;
    std::vector<int32_t> table_;         // [max_seqs][max_blocks], the block_table input
    std::vector<int32_t> window_table_;  // likewise, window_block_table (with window_pool_)
    // The window of the blocks that release rows (paged caches only): those of window_pool_, or pool_'s
    // when every layer attends within a window. A sequence's blocks wholly before it go back to their
    // pool. 0: none are released.
    int64_t kv_window_ = 0;
    int64_t step_ = 0, prefix_hits_ = 0;
    std::unique_ptr<StepObserver> observer_;
    std::vector<float> logits_;        // the wanted rows, when padding left others in the output
    std::vector<int32_t> greedy_ids_;  // likewise for forward_greedy
    std::vector<float> hidden_;        // and for embed's rows
};

}  // namespace minfer
