#include "runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <unistd.h>

#include "backend/host_comm.h"
#include "gguf/gguf.h"
#include "models/shard.h"
#include "runtime/rank_threads.h"
#include "sched/executor.h"
#ifdef MINFER_HAVE_CUDA
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda_backend.h"
#endif
#include "runtime/observe.h"
#include "sched/passes.h"
#include "util/env.h"
#include "util/error.h"

namespace minfer {

namespace {

int default_threads(int n) {
    return n > 0 ? n : int(std::max(1u, std::thread::hardware_concurrency()));
}

// One sequence on a GPU keeps the unpaged layout (one block of n_ctx slots addressed by position).
bool paged_layout(const EngineParams& p) {
    return p.device == BackendKind::Cpu || p.max_seqs > 1;
}

// The model's attention layers by kind, read off a graph (building one reads no weight).
AttnLayers model_attn_layers(const Model& m) {
    return attn_layers(m.build_graph(m, GraphParams::make(1, 1, CParams{})));
}

// Blocks the sliding-window layers need of their own (CParams::window_ctx) in a paged cache mixing them
// with global layers: each of max_seqs sequences holds its window and a block on either side, and a
// forward adds at most a micro-batch of rows. 0 without such a mix.
int64_t window_blocks(const AttnLayers& l, const EngineParams& p) {
    if (!paged_layout(p) || l.n_window == 0 || l.n_global == 0) return 0;
    const int64_t b = p.kv_block;
    return p.max_seqs * ((l.window + b - 1) / b + 2) + (p.n_ubatch + b - 1) / b;
}

// Token slots the KV cache gets: --kv-mem's bytes, or -c (default: the model's context, at most 4096).
// Window layers with their own blocks take their fixed share of --kv-mem first, when that leaves the
// global layers a context longer than those blocks.
int64_t requested_ctx(const Model& m, const EngineParams& p, const AttnLayers& l) {
    if (p.kv_mem <= 0) return p.n_ctx > 0 ? p.n_ctx : std::min<int64_t>(m.hp.n_ctx_train, 4096);
    const auto row = int64_t(2 * kv_row_bytes(p.kv_type, m.hp.n_kv_embd()));  // K and V of a layer's token
    const int64_t window_slots = window_blocks(l, p) * p.kv_block;
    if (window_slots > 0) {
        const int64_t global = (p.kv_mem - l.n_window * row * window_slots) / (l.n_global * row);
        if (global / p.kv_block * p.kv_block > window_slots) return global / p.kv_block * p.kv_block;
    }
    const int64_t per_token = m.hp.n_layer * row, n = p.kv_mem / per_token / p.kv_block * p.kv_block;
    if (n < p.kv_block)
        throw Error("--kv-mem " + std::to_string(p.kv_mem) + " bytes hold less than one KV block of " +
                    std::to_string(p.kv_block) + " tokens (" + std::to_string(per_token) +
                    " bytes per token)");
    return n;
}

// Refuses a cache that cannot fit before anything is allocated: against this machine's memory, or on a
// GPU against the device's free memory less the weights it will upload.
// A rank's share with tensor parallelism: K/V heads split evenly.
void check_kv_fits(const Model& m, const CParams& c, const AttnLayers& l, bool gpu, int ranks) {
    const int64_t window = c.window_ctx > 0 ? l.n_window : 0;  // layers of window_ctx slots
    const double slots = double(m.hp.n_layer - window) * double(c.n_ctx) + double(window * c.window_ctx);
    const double kv = 2.0 * double(kv_row_bytes(c.kv_type, m.hp.n_kv_embd())) * slots / ranks;
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
#ifdef MINFER_HAVE_CUDA
    const double room = gpu ? double(cuda::device_free_bytes()) - double(m.file->file_size()) : ram;
#else
    const double room = ram;
#endif
    if (room > 0 && kv > room)
        throw Error("the KV cache for " + std::to_string(c.n_ctx) + " tokens needs " +
                    std::to_string(kv / double(1 << 30)) + " GiB, more than the " +
                    std::to_string(room / double(1 << 30)) + " GiB free " +
                    (gpu ? "on the GPU" : "in memory"));
}

// The KV layout: blocks of kv_block slots (the context rounded up to whole blocks), except for one
// sequence on a GPU, which keeps the unpaged layout (one block of n_ctx slots addressed by position).
// Window layers mixed with global ones keep blocks of their own when those are fewer.
CParams engine_cparams(const Model& m, const EngineParams& p, const AttnLayers& l) {
    const bool gpu = p.device != BackendKind::Cpu, paged = paged_layout(p);
    if (p.max_seqs < 1) throw Error("the engine needs room for at least one sequence");
    if (p.tensor_parallel < 1 || p.tensor_parallel > 64)
        throw Error("--tensor-parallel must be 1..64, not " + std::to_string(p.tensor_parallel));
    if (paged && (p.kv_block < 16 || (p.kv_block & (p.kv_block - 1)) != 0))
        throw Error("the KV block size must be a power of two of at least 16, not " +
                    std::to_string(p.kv_block));
    if (gpu && p.kv_type != GgmlType::F32)
        throw Error(std::string("--kv-type ") + ggml_type_name(p.kv_type) + " runs on the CPU only for now");
    const int64_t n_ctx = requested_ctx(m, p, l);
    CParams c = CParams::from_env(paged ? (n_ctx + p.kv_block - 1) / p.kv_block * p.kv_block : n_ctx, gpu);
    c.kv_block = paged ? p.kv_block : 0;
    c.max_seqs = p.max_seqs;
    c.kv_type = p.kv_type;
    if (const int64_t w = window_blocks(l, p); w < c.max_blocks()) c.window_ctx = w * p.kv_block;
    // The fusions depend on the token count (QKV up to 64, FFN one): an invariant row takes the unfused
    // chain at every width.
    if (p.batch_invariant) c.fuse_qkv = c.fuse_ffn = false;
    check_kv_fits(m, c, l, gpu, p.tensor_parallel);
    return c;
}

// The GPU of tensor-parallel rank `rank`: rank % the devices there are (all on device 0 without CUDA).
int rank_device([[maybe_unused]] int rank) {
#ifdef MINFER_HAVE_CUDA
    return rank % std::max(1, cuda::device_count());
#else
    return 0;
#endif
}

// Rank `rank`'s GPU backend: on rank_device(rank), its collectives through `nccl` when
// the group exists (one device per rank), else on the host.
std::unique_ptr<Backend> make_gpu_backend(const Model& m, const EngineParams& p, int rank,
                                          const cuda::NcclGroup* nccl) {
    if (p.device == BackendKind::Cpu) return nullptr;
#ifdef MINFER_HAVE_CUDA
    CudaOptions o = p.cuda;
    o.decode_x = p.decode == cpu::DecodeDot::F32    ? CudaOptions::DecodeX::F32
                 : p.decode == cpu::DecodeDot::Int8 ? CudaOptions::DecodeX::Int8
                                                    : CudaOptions::DecodeX::Int8x2;
    o.invariant = p.batch_invariant;
    o.device = rank_device(rank);
    o.nccl = nccl;
    o.rank = rank;
    return std::make_unique<CudaBackend>(*m.file, m.weight_set(), o);
#else
    throw Error("--device cuda: this minfer was built without CUDA (no nvcc was found at build time)");
#endif
}

// The device collectives of a tensor-parallel group on the GPU: null (the host's) for one rank, on the
// CPU, or when NCCL cannot make the group (fewer GPUs than ranks, no libnccl), which stderr then says.
std::shared_ptr<cuda::NcclGroup> make_nccl_group(const EngineParams& p) {
    if (p.device == BackendKind::Cpu || p.tensor_parallel < 2) return nullptr;
#ifdef MINFER_HAVE_CUDA
    std::string why;
    std::shared_ptr<cuda::NcclGroup> g = cuda::NcclGroup::create(p.tensor_parallel, why);
    if (!g) std::fprintf(stderr, "tensor parallel: collectives through host memory (%s)\n", why.c_str());
    return g;
#else
    return nullptr;
#endif
}

// Token counts (and logit rows) of the graphs built: exact up to 8, then steps of at most 50% (12, 16,
// 24, 32, ...), so that a few graphs serve every batch and padding costs at most a third of a step.
int64_t bucket(int64_t n) {
    if (n <= 8) return n;
    int64_t b = 8;
    while (b < n) b = (b & (b - 1)) == 0 ? b + b / 2 : b / 3 * 4;
    return b;
}

}  // namespace

CudaOptions cuda_options_from_env() {
    CudaOptions o;
    o.graphs = !env_flag("MINFER_NO_CUDA_GRAPH");
    o.tiles = !env_flag("MINFER_NO_TILES");
    o.pad = !env_flag("MINFER_NO_PAD");
    o.gemm_attention = env_flag("MINFER_PREFILL_GEMM");
    o.mma_attention = !env_flag("MINFER_F32_PREFILL_ATTN");
    o.profile = env_flag("MINFER_CUDA_PROFILE");
    // MINFER_MMA_TOKENS=N: the widest product on the tensor cores (measurements of the crossover).
    if (const char* n = std::getenv("MINFER_MMA_TOKENS"); n && std::atoll(n) >= 0)
        o.mma_tokens = std::atoll(n);
    if (const char* n = std::getenv("MINFER_MMA_F16_TOKENS"); n && std::atoll(n) >= 0)
        o.mma_f16_tokens = std::atoll(n);
    if (env_flag("MINFER_NO_MMA")) o.mma_tokens = 0, o.mma_f16_tokens = 0;
    o.half_weights = !env_flag("MINFER_NO_HALF_WEIGHTS");
    o.host_outputs = !env_flag("MINFER_NO_HOST_OUTPUTS");
    o.moe = !env_flag("MINFER_NO_CUDA_MOE");
    if (const char* n = std::getenv("MINFER_MOE_MMA_TOKENS"); n && std::atoll(n) >= 0)
        o.moe_mma_tokens = std::atoll(n);
    return o;
}

cpu::DecodeDot decode_dot_from_env() {
    if (env_flag("MINFER_EXACT_DECODE")) return cpu::DecodeDot::F32;
    if (env_flag("MINFER_INT8_DECODE")) return cpu::DecodeDot::Int8;
    return cpu::DecodeDot::Int8x2;
}

// The inputs of one forward, padded to the bucket by repeating the last real token (which then stores
// the same K/V into the same slot and computes the same row: padding never changes a real row).
struct Engine::Plan {
    std::vector<int32_t> tokens, positions, slots;
    std::vector<int32_t> out_rows;  // the wanted rows, in chunk order, padded likewise
    int64_t n_wanted = 0;
};

struct Engine::Rank {
    std::unique_ptr<Model> shard;  // null: the whole model
    const Model& model;
    CpuBackend cpu;
    std::unique_ptr<Backend> gpu;    // null on the CPU device
    std::vector<Backend*> backends;  // priority order
    GraphCache cache;
    ComputeGraph* active = nullptr;                      // the graph the executor is bound to
    std::vector<std::pair<uint64_t, BufferPlan>> plans;  // by graph uid
    KvCache kv;
    Executor exec{kv};
    int device;  // the GPU of `gpu`; -1 without one

    Rank(std::unique_ptr<Model> s, const Model& whole, const EngineParams& p, int threads, int rank,
         Communicator* comm, const cuda::NcclGroup* nccl)
        : shard(std::move(s)),
          model(shard ? *shard : whole),
          cpu(*model.file, threads, CpuOptions{p.decode, p.batch_invariant, comm}),
          gpu(make_gpu_backend(model, p, rank, nccl)),
          device(gpu ? rank_device(rank) : -1) {
        if (gpu) backends.push_back(gpu.get());
        backends.push_back(&cpu);
    }
    ~Rank() { enter(); }  // the backends free their device memory on their own device

    // Makes the rank's GPU current on the calling thread.
    void enter() const {
#ifdef MINFER_HAVE_CUDA
        if (device >= 0) cuda::use_device(device);
#endif
    }

    ComputeGraph planned_graph(const GraphParams& p) const {
        ComputeGraph g = model.build_graph(model, p);
        g.topo_order();  // validates: no dangling ids, no cycles
        assign_backends(g, backends);
        fuse_swiglu(g, backends);
        if (p.cparams.gpu) fuse_matmul_add(g, backends);  // saves a kernel launch; nothing on the CPU
        return g;
    }

    // The graph for `p`, built on first use; the executor and the backends are rebound when it is not the
    // graph of the last step (a GPU backend sizes its scratch per graph in prepare).
    ComputeGraph& activate(const GraphParams& p) {
        ComputeGraph* g = cache.find(p);
        if (g && GraphCache::tripwire_enabled()) cache.verify_structural(p, planned_graph(p));
        if (!g) {
            g = &cache.insert(planned_graph(p), p);
            plans.emplace_back(g->uid, plan_buffers(*g));
        }
        if (g == active) return *g;
        for (Backend* b : backends) b->prepare(*g);
        kv.reserve(*g);
        const auto it =
            std::find_if(plans.begin(), plans.end(), [&](const auto& e) { return e.first == g->uid; });
        exec.bind(*g, it->second, backends);
        active = g;
        return *g;
    }
};

Engine::Engine(const Model& m, const EngineParams& p)
    : model_(m),
      layers_(model_attn_layers(m)),
      cparams_(engine_cparams(m, p, layers_)),
      n_ubatch_(p.n_ubatch),
      prefix_cache_(p.prefix_cache && cparams_.paged()),  // the unpaged layout has no blocks to share
      comms_(p.tensor_parallel > 1 ? std::make_unique<HostCommGroup>(p.tensor_parallel) : nullptr),
      nccl_(make_nccl_group(p)),
      pool_(int32_t(cparams_.max_blocks()), int32_t(cparams_.block())),
      seqs_(size_t(p.max_seqs)),
      table_(size_t(cparams_.max_seqs * cparams_.max_blocks()), 0),
      observer_(observers_from_env()) {
    if (n_ubatch_ < 1) throw Error("the micro-batch size must be at least 1 token");
    if (cparams_.window_ctx > 0) {
        window_pool_.emplace(int32_t(cparams_.window_ctx / cparams_.block()), int32_t(cparams_.block()));
        window_table_.assign(table_.size(), 0);
    }
    const bool every_layer_windowed = layers_.n_window > 0 && layers_.n_global == 0;
    kv_window_ = cparams_.paged() && (window_pool_ || every_layer_windowed) ? layers_.window : 0;
    const int tp = p.tensor_parallel, threads = std::max(1, default_threads(p.n_threads) / tp);
    for (int r = 0; r < tp; ++r)
        ranks_.push_back(std::make_unique<Rank>(tp > 1 ? shard_model(m, r, tp) : nullptr, m, p, threads, r,
                                                comms_ ? &comms_->rank(r) : nullptr, nccl_.get()));
    ranks_.front()->enter();
    if (tp > 1) threads_ = std::make_unique<RankThreads>(tp, [this] { comms_->abort(); });
    ranks_.front()->exec.set_observer(observer_.get());
}

Engine::~Engine() = default;

const ComputeGraph& Engine::graph() const {
    return *ranks_.front()->active;
}
uint64_t Engine::graph_builds() const {
    return ranks_.front()->cache.builds();
}
const KvCache& Engine::kv() const {
    return ranks_.front()->kv;
}
const Backend* Engine::gpu() const {
    return ranks_.front()->gpu.get();
}
ThreadPool& Engine::host_threads() {
    return ranks_.front()->cpu.threads();
}

void Engine::on_ranks(const std::function<void(Rank&)>& f) {
    if (!threads_) return f(*ranks_.front());
    threads_->run([&](int r) {
        ranks_[size_t(r)]->enter();
        f(*ranks_[size_t(r)]);
    });
}

void Engine::add_observer(std::unique_ptr<StepObserver> o) {
    if (observer_) {
        auto set = std::make_unique<ObserverSet>();
        set->add(std::move(observer_));
        set->add(std::move(o));
        o = std::move(set);
    }
    observer_ = std::move(o);
    ranks_.front()->exec.set_observer(observer_.get());
}

GraphParams Engine::params_for(int64_t n_tokens, int64_t n_out, GraphOutput out) const {
    return GraphParams::make(n_tokens, n_out, cparams_, 0, out);
}

ComputeGraph Engine::planned_graph(const GraphParams& p) {
    return ranks_.front()->planned_graph(p);
}

void Engine::prepare(int64_t n_tokens, int64_t n_out) {
    const GraphParams p = params_for(n_tokens, n_out);
    on_ranks([&](Rank& r) {
        r.activate(p);
        if (!r.gpu)
            for (int il = 0; il < r.model.hp.n_layer; ++il) r.kv.layer(il);
    });
}

const Engine::Sequence& Engine::seq(SeqId s) const {
    if (s < 0 || size_t(s) >= seqs_.size() || !seqs_[size_t(s)].open)
        throw Error("sequence " + std::to_string(s) + " is not open");
    return seqs_[size_t(s)];
}

SeqId Engine::open() {
    for (size_t i = 0; i < seqs_.size(); ++i)
        if (!seqs_[i].open) {
            seqs_[i] = Sequence{};
            seqs_[i].open = true;
            return SeqId(i);
        }
    throw Error("all " + std::to_string(seqs_.size()) + " sequence slots are in use");
}

void Engine::release(Blocks& b, kv::BlockPool& pool) {
    for (size_t i = size_t(b.n_released); i < b.ids.size(); ++i) pool.release(b.ids[i]);
}

void Engine::close(SeqId s) {
    Sequence& q = seq(s);
    release(q.blocks, pool_);
    if (window_pool_) release(q.window, *window_pool_);
    q = Sequence{};
}

SeqId Engine::fork(SeqId s) {
    if (cparams_.max_blocks() == 1) throw Error("forking a sequence needs the paged KV cache (CPU)");
    if (gpu())
        throw Error("forking a sequence runs on the CPU only: the copy of a shared last block is host-side");
    const SeqId f = open();
    Sequence& child = seqs_[size_t(f)];
    child = seq(s);
    const auto retain = [](const Blocks& b, kv::BlockPool& pool) {
        for (size_t i = size_t(b.n_released); i < b.ids.size(); ++i) pool.retain(b.ids[i]);
    };
    retain(child.blocks, pool_);
    if (window_pool_) retain(child.window, *window_pool_);
    return f;
}

int64_t Engine::attach_prefix(SeqId s, std::span<const int32_t> prompt) {
    Sequence& q = seq(s);
    if (!q.tokens.empty()) throw Error("attach_prefix: sequence " + std::to_string(s) + " is not empty");
    const auto block = size_t(cparams_.block());
    while (prefix_cache_ && (q.blocks.ids.size() + 1) * block < prompt.size()) {
        const auto part = prompt.subspan(q.blocks.ids.size() * block, block);
        const kv::BlockId b = pool_.lookup(q.last_key, part);
        if (b < 0) break;
        q.blocks.ids.push_back(b);
        q.tokens.insert(q.tokens.end(), part.begin(), part.end());
        q.last_key = pool_.key_of(b);
        q.n_published = int64_t(q.blocks.ids.size());
    }
    if (window_pool_) attach_window(q);
    prefix_hits_ += int64_t(q.tokens.size());
    return int64_t(q.tokens.size());
}

// The window pool's blocks of the attached prefix's last window, cached under the keys of the prefix's
// blocks; the prefix drops its last block until all of them are found. The blocks before the window
// are placeholders (block 0, released from the start).
void Engine::attach_window(Sequence& q) {
    const int64_t block = cparams_.block();
    while (!q.blocks.ids.empty()) {
        const auto k = int64_t(q.blocks.ids.size());
        const int64_t first = std::max<int64_t>(0, k * block - kv_window_ + 1) / block;  // the next token's
        q.window = Blocks{std::vector<kv::BlockId>(size_t(first), 0), first};
        for (int64_t i = first; i < k; ++i) {
            const uint64_t parent = i == 0 ? kv::kRootHash : pool_.key_of(q.blocks.ids[size_t(i - 1)]);
            const auto part = std::span<const int32_t>(q.tokens).subspan(size_t(i * block), size_t(block));
            const kv::BlockId w = window_pool_->lookup(parent, part);
            if (w < 0) break;
            q.window.ids.push_back(w);
        }
        if (int64_t(q.window.ids.size()) == k) return;
        release(q.window, *window_pool_);
        pool_.release(q.blocks.ids.back());
        q.blocks.ids.pop_back();
        q.tokens.resize(q.blocks.ids.size() * size_t(block));
        q.n_published = k - 1;
        q.last_key = k > 1 ? pool_.key_of(q.blocks.ids.back()) : kv::kRootHash;
    }
    q.window = Blocks{};
}

int64_t Engine::blocks_needed(const Blocks& b, const kv::BlockPool& pool, int64_t past, int64_t n) const {
    const int64_t block = cparams_.block();
    int64_t need = (past + n + block - 1) / block - int64_t(b.ids.size());
    if (past % block != 0 && n > 0 && pool.refcount(b.ids.back()) > 1) ++need;  // copy-on-write
    return std::max<int64_t>(need, 0);
}

int64_t Engine::blocks_needed(SeqId s, int64_t n) const {
    const Sequence& q = seq(s);
    return blocks_needed(q.blocks, pool_, int64_t(q.tokens.size()), n);
}

// Blocks of `pool` for n more tokens after past: a shared partial last block is copied first, in the
// layers of the pool's regions (its other holders keep theirs).
void Engine::grow(Blocks& b, kv::BlockPool& pool, int64_t past, int64_t n) {
    const int64_t block = cparams_.block();
    if (past % block != 0 && pool.refcount(b.ids.back()) > 1) {
        const kv::BlockId copy = pool.allocate();
        for (const std::unique_ptr<Rank>& r : ranks_)
            r->kv.copy_block(b.ids.back(), copy, block, past % block, int64_t(pool.n_blocks()) * block);
        pool.release(b.ids.back());
        b.ids.back() = copy;
    }
    while (int64_t(b.ids.size()) * block < past + n) b.ids.push_back(pool.allocate());
}

// Full blocks go into the prefix cache, a window pool's under the same keys.
void Engine::publish_full_blocks(Sequence& q) {
    const int64_t block = cparams_.block();
    while (prefix_cache_ && (q.n_published + 1) * block <= int64_t(q.tokens.size())) {
        const auto part =
            std::span<const int32_t>(q.tokens).subspan(size_t(q.n_published * block), size_t(block));
        const auto i = size_t(q.n_published++);
        if (window_pool_) window_pool_->publish(q.window.ids[i], q.last_key, part);
        q.last_key = pool_.publish(q.blocks.ids[i], q.last_key, part);
    }
}

// Rows before (tokens - window + 1) are outside the window of every later query, the next token's
// included: the window's blocks (window_pool_'s, or pool_'s when every layer is windowed) wholly before
// that row go back to their pool once published (a prefix-cache hit may still find them). Their ids stay
// in the table; the attention kernels read no row of them, and the store writes only new rows.
void Engine::release_outside_window(Sequence& q) {
    if (kv_window_ <= 0) return;
    Blocks& b = window_pool_ ? q.window : q.blocks;
    kv::BlockPool& pool = window_pool_ ? *window_pool_ : pool_;
    const int64_t block = cparams_.block(), first_read = int64_t(q.tokens.size()) - kv_window_ + 1;
    while ((b.n_released + 1) * block <= first_read) pool.release(b.ids[size_t(b.n_released++)]);
}

void Engine::check_batch(std::span<const Chunk> batch) const {
    if (batch.empty()) throw Error("forward: no tokens");
    int64_t total = 0, blocks = 0, window_need = 0;
    std::vector<bool> seen(seqs_.size(), false);
    for (const Chunk& c : batch) {
        const Sequence& q = seq(c.seq);
        const auto n = int64_t(c.tokens.size());
        if (n == 0) throw Error("forward: sequence " + std::to_string(c.seq) + " has no tokens");
        if (seen[size_t(c.seq)]) throw Error("forward: sequence " + std::to_string(c.seq) + " appears twice");
        seen[size_t(c.seq)] = true;
        if (c.n_logits < 0 || c.n_logits > n) throw Error("forward: n_logits out of range");
        if (int64_t(q.tokens.size()) + n > cparams_.n_ctx)
            throw Error("context size exceeded: " + std::to_string(q.tokens.size() + size_t(n)) +
                        " tokens do not fit in a context of " + std::to_string(cparams_.n_ctx) +
                        " (use -c to raise it)");
        for (const int32_t id : c.tokens)
            if (id < 0 || id >= model_.hp.n_vocab)
                throw Error("token id " + std::to_string(id) + " is out of range [0, " +
                            std::to_string(model_.hp.n_vocab) + ")");
        total += n;
        blocks += blocks_needed(c.seq, n);
        if (window_pool_) window_need += blocks_needed(q.window, *window_pool_, int64_t(q.tokens.size()), n);
    }
    if (total > n_ubatch_)
        throw Error("forward: " + std::to_string(total) + " tokens exceed the micro-batch of " +
                    std::to_string(n_ubatch_));
    if (blocks > pool_.n_free())
        throw Error("out of KV cache blocks: the batch needs " + std::to_string(blocks) + ", " +
                    std::to_string(pool_.n_free()) + " are free");
    if (window_pool_ && window_need > window_pool_->n_free())  // sized so that this never happens
        throw Error("out of sliding-window KV blocks: the batch needs " + std::to_string(window_need) + ", " +
                    std::to_string(window_pool_->n_free()) + " are free");
}

Engine::Plan Engine::plan(std::span<const Chunk> batch) const {
    Plan pl;
    for (const Chunk& c : batch) {
        const auto past = int32_t(seq(c.seq).tokens.size()), n = int32_t(c.tokens.size());
        for (int32_t i = 0; i < n; ++i) {
            if (i >= n - c.n_logits) pl.out_rows.push_back(int32_t(pl.tokens.size()));
            pl.tokens.push_back(c.tokens[size_t(i)]);
            pl.positions.push_back(past + i);
            pl.slots.push_back(c.seq);
        }
    }
    pl.n_wanted = int64_t(pl.out_rows.size());
    if (pl.out_rows.empty()) pl.out_rows.push_back(int32_t(pl.tokens.size()) - 1);  // a row the graph needs
    // One sequence on a GPU runs its exact token count (its prefill graphs run once each).
    const bool exact = cparams_.gpu && !cparams_.paged();
    const auto n_tokens = size_t(exact ? pl.tokens.size() : bucket(int64_t(pl.tokens.size())));
    for (std::vector<int32_t>* v : {&pl.tokens, &pl.positions, &pl.slots}) v->resize(n_tokens, v->back());
    pl.out_rows.resize(std::min(n_tokens, size_t(bucket(int64_t(pl.out_rows.size())))), pl.out_rows.back());
    return pl;
}

// Runs the batch's graph (logits, their argmax or the hidden states) and appends the tokens to their
// sequences. Returns the output rows: pl.out_rows' when out_ids narrowed them, every token's otherwise.
const float* Engine::run(std::span<const Chunk> batch, const Plan& pl, GraphOutput out, bool& narrowed) {
    const auto n_tokens = int64_t(pl.tokens.size()), n_out = int64_t(pl.out_rows.size());
    for (const Chunk& c : batch) {
        Sequence& q = seq(c.seq);
        const auto past = int64_t(q.tokens.size()), n = int64_t(c.tokens.size()),
                   row = c.seq * cparams_.max_blocks();
        grow(q.blocks, pool_, past, n);
        std::copy(q.blocks.ids.begin(), q.blocks.ids.end(), table_.begin() + row);
        if (!window_pool_) continue;
        grow(q.window, *window_pool_, past, n);
        std::copy(q.window.ids.begin(), q.window.ids.end(), window_table_.begin() + row);
    }
    const GraphParams p = params_for(n_tokens, n_out, out);
    on_ranks([&](Rank& r) {
        ComputeGraph& g = r.activate(p);
        r.exec.fill_input(g.find_input("token_ids"), pl.tokens);
        r.exec.fill_input(g.find_input("positions"), pl.positions);
        if (cparams_.paged()) {
            r.exec.fill_input(g.find_input("seq_slot"), pl.slots);
            r.exec.fill_input(g.find_input("block_table"), table_);
            if (window_pool_) r.exec.fill_input(g.find_input("window_block_table"), window_table_);
        }
        if (const NodeId out = g.find_input("out_ids"); out >= 0) r.exec.fill_input(out, pl.out_rows);
        const bool observed = observer_ && &r == ranks_.front().get();
        if (observed) observer_->begin_step(step_);
        r.exec.run(g);
        if (observed) observer_->end_step();
    });
    ++step_;
    for (const Chunk& c : batch) {
        Sequence& q = seq(c.seq);
        q.tokens.insert(q.tokens.end(), c.tokens.begin(), c.tokens.end());
        publish_full_blocks(q);
        release_outside_window(q);
    }
    narrowed = n_out < n_tokens;
    const Rank& r0 = *ranks_.front();
    return r0.exec.data(r0.active->outputs.front());
}

namespace {

// The wanted rows of `width` values among a forward's output rows: in place when out_ids picked them
// or when they are the leading ones, otherwise copied into `keep`.
template <class T>
std::span<const T> wanted_rows(const T* out, std::span<const int32_t> out_rows, int64_t n_wanted,
                               bool narrowed, size_t width, std::vector<T>& keep) {
    bool leading = true;
    for (int64_t r = 0; r < n_wanted; ++r) leading = leading && out_rows[size_t(r)] == r;
    if (narrowed || leading) return {out, size_t(n_wanted) * width};
    keep.resize(size_t(n_wanted) * width);
    for (int64_t r = 0; r < n_wanted; ++r)
        std::copy_n(out + size_t(out_rows[size_t(r)]) * width, width, keep.begin() + r * ptrdiff_t(width));
    return keep;
}

}  // namespace

std::span<const float> Engine::forward(std::span<const Chunk> batch) {
    check_batch(batch);
    const Plan pl = plan(batch);
    bool narrowed = false;
    const float* logits = run(batch, pl, GraphOutput::Logits, narrowed);
    return wanted_rows(logits, pl.out_rows, pl.n_wanted, narrowed, size_t(model_.hp.n_vocab), logits_);
}

std::span<const int32_t> Engine::forward_greedy(std::span<const Chunk> batch) {
    check_batch(batch);
    const Plan pl = plan(batch);
    bool narrowed = false;
    const auto* ids = reinterpret_cast<const int32_t*>(run(batch, pl, GraphOutput::Argmax, narrowed));
    return wanted_rows(ids, pl.out_rows, pl.n_wanted, narrowed, 1, greedy_ids_);
}

bool Engine::can_embed(int64_t n) const {
    const bool slot = std::any_of(seqs_.begin(), seqs_.end(), [](const Sequence& q) { return !q.open; });
    const int64_t block = cparams_.block();
    return slot && n > 0 && n <= cparams_.n_ctx && (n + block - 1) / block <= pool_.n_free();
}

std::vector<float> Engine::embed(std::span<const int32_t> tokens) {
    const auto n = int64_t(tokens.size()), d = model_.hp.n_embd;
    if (n > cparams_.n_ctx)
        throw Error("embed: " + std::to_string(n) + " tokens do not fit in a context of " +
                    std::to_string(cparams_.n_ctx));
    if (!can_embed(n)) throw Error("embed: no tokens, or no free sequence slot or KV blocks for them");
    for (const int32_t id : tokens)  // checked here too, before any chunk runs
        if (id < 0 || id >= model_.hp.n_vocab)
            throw Error("token id " + std::to_string(id) + " is out of range [0, " +
                        std::to_string(model_.hp.n_vocab) + ")");
    const SeqId s = open();
    std::vector<float> rows;  // [n][n_embd]
    rows.reserve(size_t(n * d));
    try {
        for (int64_t at = 0; at < n; at += n_ubatch_) {
            const int64_t len = std::min(n_ubatch_, n - at);
            const Chunk c{s, tokens.subspan(size_t(at), size_t(len)), len};  // every row
            check_batch({&c, 1});
            const Plan pl = plan({&c, 1});
            bool narrowed = false;
            const float* out = run({&c, 1}, pl, GraphOutput::Hidden, narrowed);  // [n_embd, n_out]
            const std::span<const float> part =
                wanted_rows(out, pl.out_rows, pl.n_wanted, narrowed, size_t(d), hidden_);
            rows.insert(rows.end(), part.begin(), part.end());
        }
    } catch (...) {
        close(s);
        throw;
    }
    close(s);
    return rows;
}

}  // namespace minfer
