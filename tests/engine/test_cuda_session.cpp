// The CUDA backend end to end, against the CPU backend computing in f32 on the same weights (for a
// quantized model: an F32 copy of its dequantized weights, since the GPU keeps activations in f32 too):
// prefill (cuBLAS) and decode (matrix-vector kernels, fused decode graph, CUDA-graph replay) logits,
// fused against unfused decode, replay against eager execution, and many sequences in one forward (the
// paged layout) against a CPU engine running the same batches, and --deterministic rows memcmp-equal to
// the sequence run alone. Skipped where there is no GPU.
#include <gtest/gtest.h>

#ifdef MINFER_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda_backend.h"
#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"
#include "golden_util.h"
#include "greedy_check.h"
#include "models/model.h"
#include "models/synth.h"
#include "quant/quants.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "test_data.h"

namespace minfer::test {
namespace {

#define MINFER_REQUIRE_GPU() \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

TempDir& scratch() {
    static TempDir dir;
    return dir;
}

// more_bits: llama-quantize's _M mix, these matrices (attn_v and ffn_down of both layers) in that type.
// n_vocab >= 65536 gets an output head of its own (untied), which the CUDA backend uploads tiled for Q4_K.
// gemma3 has six layers, five of them within a window of 8 positions; qwen3moe 8 experts of width 128
// (rows of whole stages, which the products per expert take: CudaMoe.ProductsPerExpert).
std::unique_ptr<Model> synth(const std::string& arch, GgmlType type, int64_t n_vocab = 512,
                             std::optional<GgmlType> more_bits = std::nullopt) {
    TempDir& dir = scratch();
    static int count = 0;
    SynthSpec s;
    s.arch = arch;
    s.n_layer = 2;
    s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_ff = 512, s.n_vocab = n_vocab;
    s.tied_output = n_vocab < 65536;
    s.type = type;
    s.more_bits_type = more_bits;
    if (arch == "gemma3") s.n_layer = 6, s.n_swa = 8;
    if (arch == "gpt-oss") {
        s.n_swa = 8;
        s.extra_metadata = {
            {"gpt-oss.rope.scaling.type", GgufValue{GgufValueType::STRING, std::string("yarn")}},
            {"gpt-oss.rope.scaling.factor", GgufValue{GgufValueType::F32, 32.0}}};
    }
    s.n_ff_exp = 128;
    const std::string path = dir.file(arch + "-" + std::to_string(count++) + ".gguf");
    write_synth_model(s, path);
    return Model::load(path);
}

// The same model with every tensor dequantized to F32 (metadata copied).
std::unique_ptr<Model> dequantized(const Model& m) {
    GgufWriter w;
    for (const auto& [key, value] : m.file->metadata()) w.set(key, value);
    for (const GgufTensor& t : m.file->tensors()) {
        int64_t n = 1;
        for (int64_t d : t.dims) n *= d;
        std::vector<float> f(static_cast<size_t>(n));
        quant_traits(t.type)->to_float_ref(t.data, f.data(), n);
        w.add_tensor(t.name, GgmlType::F32, t.dims, f.data(), f.size() * sizeof(float));
    }
    static int count = 0;
    const std::string path = scratch().file("dequantized-" + std::to_string(count++) + ".gguf");
    w.write(path);
    return Model::load(path);
}

// Sets an environment variable for the lifetime of the guard (read when a Session is constructed).
struct EnvGuard {
    std::string name;
    EnvGuard(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~EnvGuard() { unsetenv(name.c_str()); }
};

float max_abs(std::span<const float> a) {
    float m = 0;
    for (float v : a) m = std::max(m, std::fabs(v));
    return m;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

std::vector<int32_t> prompt(int n, int64_t n_vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % n_vocab));
    return ids;
}

// Greedy decode of n tokens after `p`; every step's logits appended to `logits`.
std::vector<int32_t> decode(Session& s, const std::vector<int32_t>& p, int n, std::vector<float>& logits) {
    std::span<const float> l = s.forward(p, 1);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        logits.insert(logits.end(), l.begin(), l.end());
        out.push_back(argmax(l));
        l = s.forward(std::span<const int32_t>(&out.back(), 1), 1);
    }
    return out;
}

struct TypeCase {
    const char* arch;
    GgmlType type;
    // Budgets relative to the largest |logit|: prefill activations enter cuBLAS as half (one half for
    // quantized weights: 2^-11 relative rounding; hi + lo halves for F16/BF16/F32 weights: f32-like), and
    // decode (after a prompt of at most kMaxMatvecTokens, which takes the same path) runs matrix-vector
    // kernels: with MINFER_EXACT_DECODE=1 in f32, whose only difference to the CPU is summation order
    // (decode_budget); by default Q4_K and Q6_K take x as int8x2, within 1/64516 of each 32-element
    // block's max |x|, 31.5x finer than half's 2^-11 (decode_budget + prefill_budget / 31.5); with
    // MINFER_INT8_DECODE=1 as int8, 1/254 of it, 8x coarser (8x the prefill budget, and no
    // token-for-token equality: a near tie may flip).
    float prefill_budget, decode_budget;
    int64_t n_vocab = 512;  // 65536: Q4_K's output head is uploaded tiled (tensor-core decode), or int8
};

class CudaVsCpu : public ::testing::TestWithParam<TypeCase> {};

TEST_P(CudaVsCpu, PrefillAndDecodeLogitsMatchCpu) {
    MINFER_REQUIRE_GPU();
    const TypeCase c = GetParam();
    const auto m = synth(c.arch, c.type, c.n_vocab);
    const auto ref = dequantized(*m);
    Session cpu(*ref, {128, 2, BackendKind::Cpu}), gpu(*m, {128, 2, BackendKind::Cuda});
    const std::vector<int32_t> ids = prompt(24, m->hp.n_vocab);
    const auto nt = int64_t(ids.size());
    const std::span<const float> w0 = cpu.forward(ids, nt);
    const std::vector<float> want(w0.begin(), w0.end());
    const std::span<const float> got = gpu.forward(ids, nt);
    const float scale = max_abs(want);
    EXPECT_LE(max_abs_diff(got, want), c.prefill_budget * scale) << "prefill of " << nt << " tokens";
    gpu.reset();
    cpu.reset();

    // Decode after a prompt short enough for the matrix-vector kernels, so the KV rows are f32-exact too.
    const std::vector<int32_t> short_prompt(ids.begin(), ids.begin() + cuda::kMaxMatvecTokens);
    std::vector<float> lc;
    const std::vector<int32_t> tc = decode(cpu, short_prompt, 16, lc);
    struct Mode {
        const char* env;  // switch set for the session, or null: the default (int8x2)
        float budget;
        bool same_tokens;
    };
    for (const Mode& mode : {Mode{"MINFER_EXACT_DECODE", c.decode_budget, true},
                             Mode{nullptr, c.decode_budget + c.prefill_budget / 31.5f, true},
                             Mode{"MINFER_INT8_DECODE", 8.0f * c.prefill_budget, false}}) {
        SCOPED_TRACE(mode.env ? mode.env : "default decode");
        // A mixture of experts routes each token by its largest router logits: int8 activations move
        // them enough to swap a near tie, a jump no logit budget covers (seen on the H100: 3.5 against
        // a budget of 0.32 on the qwen3moe file); its other two modes hold the budgets.
        if (m->hp.n_expert > 0 && !mode.same_tokens) continue;
        const std::optional<EnvGuard> on =
            mode.env ? std::optional<EnvGuard>(std::in_place, mode.env, "1") : std::nullopt;
        Session gpu_mode(*m, {128, 2, BackendKind::Cuda});
        std::vector<float> lg;
        const std::vector<int32_t> tg = decode(gpu_mode, short_prompt, 16, lg);
        EXPECT_LE(max_abs_diff(lg, lc), mode.budget * max_abs(lc)) << "decode logits";
        if (mode.same_tokens) {
            EXPECT_EQ(tg, tc);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaVsCpu,
                         ::testing::Values(TypeCase{"qwen2", GgmlType::F32, 1e-4f, 1e-4f},
                                           TypeCase{"qwen2", GgmlType::F16, 1e-4f, 1e-4f},
                                           TypeCase{"qwen3", GgmlType::BF16, 1e-4f, 1e-4f},
                                           TypeCase{"llama", GgmlType::Q8_0, 1e-2f, 1e-4f},
                                           TypeCase{"qwen2", GgmlType::Q4_0, 1e-2f, 1e-4f},
                                           TypeCase{"qwen3", GgmlType::Q4_K, 1e-2f, 1e-4f},
                                           TypeCase{"qwen2", GgmlType::Q4_K, 1e-2f, 1e-4f, 65536},
                                           TypeCase{"llama", GgmlType::Q5_K, 1e-2f, 1e-4f},
                                           TypeCase{"qwen2", GgmlType::Q6_K, 1e-2f, 1e-4f},
                                           TypeCase{"gemma3", GgmlType::Q8_0, 1e-2f, 1e-4f},
                                           TypeCase{"qwen3moe", GgmlType::Q8_0, 1e-2f, 1e-4f},
                                           TypeCase{"gpt-oss", GgmlType::Q8_0, 1e-2f, 1e-4f}),
                         [](const auto& info) {
                             std::string arch = info.param.arch;
                             std::replace(arch.begin(), arch.end(), '-', '_');
                             return arch + "_" + ggml_type_name(info.param.type);
                         });

// The decode fusions (FusedQKV / FusedQkvNorm, FusedFFN) compute what the unfused chain does, V of its
// own type (an _M mix) included. In f32 (MINFER_EXACT_DECODE=1, and MINFER_NO_MMA=1 for the 7-token
// prompt, which the QKV fusion takes too): with x quantized, the summation-order differences of a
// product's input would move levels across rounding boundaries (an int8x2 level is 1/32258 of its
// block's max |x|), and the int8 products split the concatenated matrix's sums otherwise than Q's, K's
// and V's.
TEST(CudaSession, FusedAndUnfusedDecodeAgree) {
    MINFER_REQUIRE_GPU();
    const EnvGuard exact("MINFER_EXACT_DECODE", "1"), f32("MINFER_NO_MMA", "1");
    for (const char* arch : {"qwen2", "qwen3", "llama", "qwen2-mix"}) {
        SCOPED_TRACE(arch);
        const bool mix = std::string(arch) == "qwen2-mix";  // V in Q6_K: its own product in FusedQKV
        const auto m =
            mix ? synth("qwen2", GgmlType::Q8_0, 512, GgmlType::Q6_K) : synth(arch, GgmlType::Q8_0);
        const std::vector<int32_t> ids = prompt(7, m->hp.n_vocab);
        std::vector<float> lf, lu;
        Session fused(*m, {128, 2, BackendKind::Cuda});
        const std::vector<int32_t> tf = decode(fused, ids, 24, lf);
        EnvGuard a("MINFER_NO_FUSE_QKV", "1"), b("MINFER_NO_FUSE_FFN", "1");
        Session unfused(*m, {128, 2, BackendKind::Cuda});
        const std::vector<int32_t> tu = decode(unfused, ids, 24, lu);
        EXPECT_EQ(tf, tu);
        EXPECT_LE(max_abs_diff(lf, lu), 1e-5f * max_abs(lu)) << "f32 kernels, different summation order";
    }
}

// Decode steps after the first two replay a captured CUDA graph, and replay changes no number.
TEST(CudaSession, DecodeGraphIsReplayed) {
    MINFER_REQUIRE_GPU();
    const auto m = synth("qwen2", GgmlType::Q4_K);
    const std::vector<int32_t> ids = prompt(5, m->hp.n_vocab);
    std::vector<float> lr, le;
    Session replayed(*m, {128, 2, BackendKind::Cuda});
    const std::vector<int32_t> tr = decode(replayed, ids, 20, lr);
    const auto* backend = dynamic_cast<const CudaBackend*>(replayed.gpu());
    ASSERT_NE(backend, nullptr);
    EXPECT_GE(backend->graph_launches(), 18u);
    EnvGuard off("MINFER_NO_CUDA_GRAPH", "1");
    Session eager(*m, {128, 2, BackendKind::Cuda});
    const std::vector<int32_t> te = decode(eager, ids, 20, le);
    EXPECT_EQ(dynamic_cast<const CudaBackend*>(eager.gpu())->graph_launches(), 0u);
    EXPECT_EQ(tr, te);
    EXPECT_EQ(max_abs_diff(lr, le), 0.0f) << "the same kernels in the same order";
}

// A prompt in micro-batches on the GPU: passes of 9 tokens (the cuBLAS prefill at n_past > 0, its
// attention over the earlier passes' KV rows) and a last pass of 6 (the matrix-vector kernels) give the
// logits of every token as the CPU does in one pass, within the prefill budget of CudaVsCpu.
TEST(CudaSession, MicroBatchedPrefillMatchesCpu) {
    MINFER_REQUIRE_GPU();
    const auto m = synth("qwen2", GgmlType::Q8_0);
    const auto ref = dequantized(*m);
    const std::vector<int32_t> ids = prompt(24, m->hp.n_vocab);
    const auto nt = int64_t(ids.size());
    Session cpu(*ref, {128, 2, BackendKind::Cpu}), gpu(*m, {128, 2, BackendKind::Cuda, 9});
    const std::span<const float> w = cpu.forward(ids, nt);
    const std::vector<float> want(w.begin(), w.end());
    const std::span<const float> got = gpu.forward(ids, nt);
    EXPECT_EQ(gpu.steps(), 3);
    EXPECT_LE(max_abs_diff(got, want), 1e-2f * max_abs(want));
}

// The GEMM's weights kept as half copies (CudaOptions::half_weights) are the halves it would make before
// every product: a prompt in passes of 20 tokens (cuBLAS products either way: wider than the int8
// tensor-core product takes these matrices with or without the copies) gives the same bits, in every
// layout the copies are made from (Q4_K tiled for a vocabulary of 65536, Q6_K padded, Q8_0, BF16; F16
// weights are read in place, never copied).
TEST(CudaSession, HalfWeightCopiesChangeNoBit) {
    MINFER_REQUIRE_GPU();
    const struct {
        GgmlType type;
        int64_t n_vocab;
    } cases[] = {{GgmlType::Q4_K, 65536},
                 {GgmlType::Q6_K, 512},
                 {GgmlType::Q8_0, 512},
                 {GgmlType::BF16, 512},
                 {GgmlType::F16, 512}};
    for (const auto& c : cases) {
        SCOPED_TRACE(ggml_type_name(c.type));
        const auto m = synth("qwen2", c.type, c.n_vocab);
        const std::vector<int32_t> ids = prompt(40, m->hp.n_vocab);
        const auto nt = int64_t(ids.size());
        Session kept(*m, {128, 2, BackendKind::Cuda, 20});
        const std::span<const float> lk = kept.forward(ids, nt);
        const std::vector<float> with(lk.begin(), lk.end());
        const size_t copies = dynamic_cast<const CudaBackend*>(kept.gpu())->half_copies();
        if (c.type == GgmlType::F16) {
            EXPECT_EQ(copies, 0u) << "F16 weights are read in place";
        } else {
            EXPECT_GT(copies, 0u) << "no matrix was kept in half";
        }
        const EnvGuard off("MINFER_NO_HALF_WEIGHTS", "1");
        Session made(*m, {128, 2, BackendKind::Cuda, 20});
        const std::span<const float> lm = made.forward(ids, nt);
        EXPECT_EQ(dynamic_cast<const CudaBackend*>(made.gpu())->half_copies(), 0u);
        ASSERT_EQ(lm.size(), with.size());
        EXPECT_EQ(std::memcmp(lm.data(), with.data(), with.size() * sizeof(float)), 0);
    }
}

// One forward of the engines over `chunks`; the GPU's wanted logits must be within budget * max|logit|
// of the CPU's. Returns each chunk's next token (the CPU's greedy pick), so both engines go on alike.
std::vector<int32_t> forward_both(Engine& gpu, Engine& cpu, const std::vector<Engine::Chunk>& chunks,
                                  float budget, int64_t n_vocab) {
    const std::span<const float> w = cpu.forward(chunks);
    const std::vector<float> want(w.begin(), w.end());
    const std::span<const float> got = gpu.forward(chunks);
    EXPECT_LE(max_abs_diff(got, want), budget * max_abs(want)) << chunks.size() << " sequences";
    std::vector<int32_t> next;
    size_t row = 0;
    for (const Engine::Chunk& c : chunks) {
        row += size_t(c.n_logits);
        next.push_back(argmax(std::span(want).subspan((row - 1) * size_t(n_vocab), size_t(n_vocab))));
    }
    return next;
}

// Many sequences in one forward on the GPU (the paged layout, blocks of 32): twelve prompts of 1 to 70
// tokens in one forward (prefill chunks beside single rows, the query-tiled attention's tiles
// straddling them), then decode steps of all twelve (cuBLAS products, single-row chunks), of five (the
// matrix-vector kernels and the decode attention kernel) and of one (the fused decode graph, paged):
// each step's logits against a CPU engine running the same batches on the dequantized weights, within
// CudaVsCpu's prefill budget (the batched products take the prefill path).
// The argmax kernel at the end of the greedy graph picks what the host picks from the logits graph's rows,
// in batches that mix prefill chunks (the cuBLAS products) and single rows.
TEST(CudaBatch, GreedyForwardPicksTheLogitsArgmax) {
    MINFER_REQUIRE_GPU();
    for (const GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
        SCOPED_TRACE(ggml_type_name(t));
        const auto m = synth("qwen2", t);
        EngineParams p;
        p.n_ctx = 768, p.n_threads = 2, p.max_seqs = 6, p.device = BackendKind::Cuda;
        expect_greedy_equals_argmax(*m, p);
    }
}

void expect_many_sequences_match_cpu(const TypeCase& c) {
    SCOPED_TRACE(std::string(c.arch) + " " + ggml_type_name(c.type));
    const auto m = synth(c.arch, c.type);
    const auto ref = dequantized(*m);
    EngineParams p;
    p.n_ctx = 1024, p.n_threads = 2, p.max_seqs = 12;
    Engine cpu(*ref, p);
    p.device = BackendKind::Cuda;
    Engine gpu(*m, p);
    ASSERT_TRUE(gpu.cparams().paged());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Engine::Chunk> chunks;
    for (int n : {1, 5, 33, 47, 70, 9, 2, 64, 17, 3, 40, 11}) {
        prompts.push_back(prompt(n, m->hp.n_vocab));
        std::rotate(prompts.back().begin(), prompts.back().begin() + n / 2, prompts.back().end());
        const SeqId s = gpu.open();
        ASSERT_EQ(cpu.open(), s);
        chunks.push_back({s, prompts.back(), std::min(n, 3)});
    }
    std::vector<int32_t> next = forward_both(gpu, cpu, chunks, c.prefill_budget, m->hp.n_vocab);
    for (size_t live : {12u, 5u, 1u}) {
        for (size_t s = live; s < chunks.size(); ++s) gpu.close(chunks[s].seq), cpu.close(chunks[s].seq);
        chunks.resize(live), next.resize(live);
        for (int step = 0; step < 4; ++step) {
            const std::vector<int32_t> fed = next;
            for (size_t s = 0; s < live; ++s) chunks[s] = {chunks[s].seq, std::span(&fed[s], 1), 1};
            next = forward_both(gpu, cpu, chunks, c.prefill_budget, m->hp.n_vocab);
        }
    }
}

TEST(CudaBatch, ManySequencesMatchCpuEngine) {
    MINFER_REQUIRE_GPU();
    for (const TypeCase& c :
         {TypeCase{"qwen2", GgmlType::Q8_0, 1e-2f, 0}, TypeCase{"qwen3", GgmlType::Q4_K, 1e-2f, 0},
          TypeCase{"llama", GgmlType::F16, 1e-4f, 0}, TypeCase{"gemma3", GgmlType::Q8_0, 1e-2f, 0},
          TypeCase{"qwen3moe", GgmlType::Q8_0, 1e-2f, 0}, TypeCase{"gpt-oss", GgmlType::Q8_0, 1e-2f, 0}})
        expect_many_sequences_match_cpu(c);
}

// Decode steps of a paged engine that alternate between two buckets (one sequence, then two) keep the
// captured CUDA graphs of both: after the first two rounds (a graph is captured on its second run, the
// two sequences' prefill graph included) no step records a graph again, every later step replays, and
// the logits equal those of an engine that runs every step eagerly.
TEST(CudaBatch, CapturesSurviveBucketSwitches) {
    MINFER_REQUIRE_GPU();
    const auto m = synth("qwen2", GgmlType::Q4_K);
    const auto n_vocab = size_t(m->hp.n_vocab);
    EngineParams p;
    p.n_ctx = 1024, p.n_threads = 2, p.max_seqs = 6, p.device = BackendKind::Cuda;
    // Both engines run the same steps; `rounds` alternating steps each, logits appended.
    const auto run = [&](Engine& e, int rounds, std::vector<float>& logits) {
        const std::vector<int32_t> ids = prompt(9, m->hp.n_vocab);
        const SeqId a = e.open(), b = e.open();
        const Engine::Chunk prefill[] = {{a, ids, 1}, {b, ids, 1}};
        e.forward(prefill);
        int32_t tok[2] = {3, 4};
        for (int r = 0; r < rounds; ++r) {
            const Engine::Chunk both[] = {{a, std::span(&tok[0], 1), 1}, {b, std::span(&tok[1], 1), 1}};
            const Engine::Chunk one[] = {{a, std::span(&tok[0], 1), 1}};
            const std::span<const float> l = r % 2 ? e.forward(one) : e.forward(both);
            logits.insert(logits.end(), l.begin(), l.end());
            tok[0] = argmax(l.first(n_vocab));
            tok[1] = (tok[1] * 7 + 1) % int32_t(n_vocab);
        }
    };
    Engine replayed(*m, p);
    ASSERT_TRUE(replayed.cparams().paged());
    const auto* gpu = dynamic_cast<const CudaBackend*>(replayed.gpu());
    ASSERT_NE(gpu, nullptr);
    std::vector<float> lr, le;
    run(replayed, 8, lr);
    run(replayed, 8, lr);
    const uint64_t captures = gpu->graph_captures(), launches = gpu->graph_launches();
    EXPECT_GT(captures, 0u);
    run(replayed, 8, lr);
    EXPECT_EQ(gpu->graph_captures(), captures) << "a bucket switch dropped the captured graphs";
    EXPECT_GE(gpu->graph_launches() - launches, 9u);
    p.cuda.graphs = false;  // EngineParams read the environment when p was made
    Engine eager(*m, p);
    for (int i = 0; i < 3; ++i) run(eager, 8, le);
    EXPECT_EQ(dynamic_cast<const CudaBackend*>(eager.gpu())->graph_launches(), 0u);
    ASSERT_EQ(lr.size(), le.size());
    EXPECT_EQ(std::memcmp(lr.data(), le.data(), lr.size() * sizeof(float)), 0);
}

// A batch's logits written by the lm_head GEMM straight into pinned host memory (CudaOptions::host_outputs)
// are the bits the copy after the graph brings: eight prompts of 3 to 40 tokens, each wanting its last
// two rows, then decode steps of all eight (the GEMM over a kept half copy, captured) and of three, both
// ways, memcmp-equal. Q4_K writes in place; F16 (a second GEMM adds its lo halves) keeps the copy.
TEST(CudaBatch, HostWrittenLogitsEqualCopiedOnes) {
    MINFER_REQUIRE_GPU();
    for (const GgmlType t : {GgmlType::Q4_K, GgmlType::F16}) {
        SCOPED_TRACE(ggml_type_name(t));
        const auto m = synth("qwen2", t);
        EngineParams p;
        p.n_ctx = 1024, p.n_threads = 2, p.max_seqs = 8, p.device = BackendKind::Cuda;
        const auto run = [&](Engine& e) {
            std::vector<float> logits;
            std::vector<std::vector<int32_t>> ids;
            std::vector<Engine::Chunk> chunks;
            for (int n : {3, 40, 7, 12, 29, 5, 18, 33}) {
                ids.push_back(prompt(n, m->hp.n_vocab));
                chunks.push_back({e.open(), ids.back(), 2});
            }
            for (size_t live : {8u, 8u, 8u, 3u, 3u}) {
                chunks.resize(live);
                const std::span<const float> l = e.forward(chunks);
                logits.insert(logits.end(), l.begin(), l.end());
                for (size_t s = 0; s < live; ++s) {
                    ids[s] = {int32_t((s * 31 + logits.size()) % size_t(m->hp.n_vocab))};
                    chunks[s] = {chunks[s].seq, ids[s], 1};
                }
            }
            return logits;
        };
        Engine written(*m, p);
        const std::vector<float> lw = run(written);
        p.cuda.host_outputs = false;
        Engine copied(*m, p);
        const std::vector<float> lc = run(copied);
        ASSERT_EQ(lw.size(), lc.size());
        EXPECT_EQ(std::memcmp(lw.data(), lc.data(), lw.size() * sizeof(float)), 0);
    }
}

// Every position's logits of one sequence fed its whole stream in one forward on `e`, then closed:
// [stream.size()][n_vocab].
std::vector<float> alone_logits(Engine& e, const std::vector<int32_t>& stream) {
    const SeqId s = e.open();
    const Engine::Chunk c{s, stream, int64_t(stream.size())};
    const std::span<const float> l = e.forward({&c, 1});
    std::vector<float> out(l.begin(), l.end());
    e.close(s);
    return out;
}

// --deterministic on the GPU: eight sequences (two sharing a 40-token prefix with the first, attached
// from the prefix cache) arrive at random steps and are fed their streams in random chunks of 1 to 40
// tokens, so that their rows meet products and attention of many widths beside each other; every
// position's logits must be memcmp-equal to the sequence run alone in one forward. Q4_K takes the int8x2
// kernels, Q8_0 and BF16 the f32 matrix-vector ones.
void expect_deterministic_rows_equal_alone(const char* arch, GgmlType type) {
    SCOPED_TRACE(std::string(arch) + " " + ggml_type_name(type));
    const auto m = synth(arch, type);
    const auto n_vocab = size_t(m->hp.n_vocab);
    EngineParams p;
    p.n_ctx = 2048, p.n_threads = 2, p.max_seqs = 8, p.device = BackendKind::Cuda, p.batch_invariant = true;
    std::mt19937 rng(99);
    std::vector<std::vector<int32_t>> streams;
    for (int i = 0; i < 8; ++i) {
        std::vector<int32_t> v = prompt(int(rng() % 60) + 5, m->hp.n_vocab);
        std::shuffle(v.begin(), v.end(), rng);
        if (i == 0) v.resize(std::max<size_t>(v.size(), 50), 7);
        if (i >= 6) v.insert(v.begin(), streams[0].begin(), streams[0].begin() + 40);
        streams.push_back(std::move(v));
    }
    Engine solo(*m, p);
    std::vector<std::vector<float>> want;
    for (const auto& st : streams) want.push_back(alone_logits(solo, st));
    Engine e(*m, p);
    std::vector<SeqId> seq(streams.size(), -1);
    std::vector<size_t> fed(streams.size(), 0);
    int mismatches = 0;
    for (int step = 0; step < 200; ++step) {
        std::vector<Engine::Chunk> batch;
        std::vector<size_t> owner;
        for (size_t i = 0; i < streams.size(); ++i) {
            if (fed[i] == streams[i].size() || int(i) > step) continue;
            if (seq[i] < 0) seq[i] = e.open(), fed[i] = size_t(e.attach_prefix(seq[i], streams[i]));
            const size_t n = std::min<size_t>(rng() % 40 + 1, streams[i].size() - fed[i]);
            batch.push_back({seq[i], std::span(streams[i]).subspan(fed[i], n), int64_t(n)});
            owner.push_back(i);
        }
        if (batch.empty()) break;
        const std::span<const float> l = e.forward(batch);
        size_t row = 0;
        for (size_t b = 0; b < batch.size(); ++b) {
            const size_t i = owner[b];
            for (size_t r = 0; r < batch[b].tokens.size(); ++r, ++row)
                mismatches += std::memcmp(l.data() + row * n_vocab, want[i].data() + (fed[i] + r) * n_vocab,
                                          n_vocab * sizeof(float)) != 0;
            fed[i] += batch[b].tokens.size();
        }
    }
    for (size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(fed[i], streams[i].size()) << "sequence " << i;
    EXPECT_GT(e.prefix_hit_tokens(), 0) << "the shared prefix came from the cache";
    EXPECT_EQ(mismatches, 0) << "rows whose logits differ from the sequence run alone";
}

TEST(CudaBatch, DeterministicRowsEqualAlone) {
    MINFER_REQUIRE_GPU();
    for (const auto& [arch, type] :
         {std::pair{"qwen2", GgmlType::Q4_K}, std::pair{"llama", GgmlType::Q8_0},
          std::pair{"qwen3", GgmlType::BF16}, std::pair{"gemma3", GgmlType::Q8_0},
          std::pair{"qwen3moe", GgmlType::Q8_0}, std::pair{"gpt-oss", GgmlType::Q8_0}})
        expect_deterministic_rows_equal_alone(arch, type);
}

void expect_repo_mini_golden(const char* name) {
    SCOPED_TRACE(name);
    const auto model = Model::load(repo_mini_path(std::string(name) + "-F16.gguf"));
    const auto ref = load_json(repo_mini_path(std::string(name) + ".ref.json"));
    SessionParams sp = golden_params(512);
    sp.device = BackendKind::Cuda;
    Session s(*model, sp);
    for (const auto& p : ref["prompts"])
        EXPECT_EQ(greedy(s, p["ids"].get<std::vector<int32_t>>(), 48),
                  p["greedy_ids"].get<std::vector<int32_t>>())
            << p["text"].get<std::string>();
}

// The float64 goldens of the minis this repository holds, on the GPU: every greedy token of the six prompts
// (sliding windows, sinks, YaRN and the experts on the host included).
TEST(CudaGolden, RepoMinisGreedyEqualsFloat64) {
    MINFER_REQUIRE_GPU();
    for (const char* name : {"qwen3moe-mini", "gemma3-mini", "gptoss-mini"}) expect_repo_mini_golden(name);
}

// The experts run on the device by default (CudaOptions::moe: CudaGolden and CudaBatch take both mixtures
// that way); with MINFER_NO_CUDA_MOE=1 on the host, under the same checks: the goldens, a CPU engine's
// logits in mixed batches, and under --deterministic a row's bits alone and in a batch.
TEST(CudaMoe, ExpertsOnTheHost) {
    MINFER_REQUIRE_GPU();
    const EnvGuard off("MINFER_NO_CUDA_MOE", "1");
    expect_repo_mini_golden("qwen3moe-mini");
    expect_repo_mini_golden("gptoss-mini");
    for (const char* arch : {"qwen3moe", "gpt-oss"}) {
        expect_many_sequences_match_cpu(TypeCase{arch, GgmlType::Q8_0, 1e-2f, 0});
        expect_deterministic_rows_equal_alone(arch, GgmlType::Q8_0);
    }
}

// With MINFER_MOE_MMA_TOKENS=8, steps of 8 tokens or more run the experts as one tensor-core product per
// expert (CudaOptions::moe_mma_tokens), under the checks of the one-token products: a CPU engine's logits
// in mixed batches (prompts of 1 to 70 tokens in one step, then decode steps of 12, 5 and 1 sequences:
// both kinds of product), and a 24-token prefill of each mixture within the prefill budget.
TEST(CudaMoe, ProductsPerExpert) {
    MINFER_REQUIRE_GPU();
    const EnvGuard on("MINFER_MOE_MMA_TOKENS", "8");
    for (const char* arch : {"qwen3moe", "gpt-oss"}) {
        SCOPED_TRACE(arch);
        expect_many_sequences_match_cpu(TypeCase{arch, GgmlType::Q8_0, 1e-2f, 0});
        const auto m = synth(arch, GgmlType::Q8_0);
        const auto ref = dequantized(*m);
        Session cpu(*ref, {128, 2, BackendKind::Cpu}), gpu(*m, {128, 2, BackendKind::Cuda});
        const std::vector<int32_t> ids = prompt(24, m->hp.n_vocab);
        const std::span<const float> w = cpu.forward(ids, int64_t(ids.size()));
        const std::vector<float> want(w.begin(), w.end());
        EXPECT_LE(max_abs_diff(gpu.forward(ids, int64_t(ids.size())), want), 1e-2f * max_abs(want));
    }
}

}  // namespace
}  // namespace minfer::test

#endif  // MINFER_HAVE_CUDA
