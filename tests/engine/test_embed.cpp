// Engine::embed and the pooling of runtime/embed.h: the rows are the final norm's hidden states (times the
// output matrix, in float64, they give Engine::forward's logits: a wrong row or a missing norm would not),
// each row equals the last row of its prefix embedded alone (so mean pooling is the mean of those),
// chunking by the micro-batch changes no row beyond rounding, and <arch>.pooling_type picks the pooling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "invariant_params.h"
#include "models/model.h"
#include "models/synth.h"
#include "quant/quants.h"
#include "runtime/embed.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "test_data.h"
#include "util/error.h"
#ifdef MINFER_HAVE_CUDA
#include "backend/cuda/cuda_util.h"
#endif

namespace minfer::test {
namespace {

std::unique_ptr<Model> synth(const std::string& arch, SynthSpec s = {}) {
    static TempDir dir;
    static int count = 0;
    s.arch = arch;
    s.tied_output = arch != "llama";  // llama: a separate output matrix
    const std::string path = dir.file("embed-" + arch + "-" + std::to_string(count++) + ".gguf");
    write_synth_model(s, path);
    return Model::load(path);
}

std::vector<int32_t> ids(int64_t n, int64_t n_vocab, int64_t salt = 0) {
    std::vector<int32_t> v(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((i * 7919 + 31 + salt * 104729) % n_vocab);
    return v;
}

// The largest |a - b| over max(1, the largest |b|): differences relative to the values' scale.
double rel_diff(std::span<const float> a, std::span<const float> b) {
    double d = 0, scale = 1;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return d / scale;
}

// h [n_embd] times the model's output matrix, dequantized, summed in double: [n_vocab] logits.
std::vector<float> logits_of(const Model& m, std::span<const float> h) {
    const GgufTensor& t = m.file->tensor(m.output.name);
    const QuantTraits& q = *quant_traits(t.type);
    const auto d = size_t(m.hp.n_embd), row_bytes = d / size_t(q.block_size) * q.type_size;
    std::vector<float> w(d), out(size_t(m.hp.n_vocab));
    for (size_t v = 0; v < out.size(); ++v) {
        q.to_float_ref(t.data + v * row_bytes, w.data(), int64_t(d));
        double s = 0;
        for (size_t i = 0; i < d; ++i) s += double(h[i]) * double(w[i]);
        out[v] = float(s);
    }
    return out;
}

// The last-token logits of `prompt` run by Engine::forward on a fresh sequence.
std::vector<float> forward_logits(Engine& e, std::span<const int32_t> prompt) {
    const SeqId s = e.open();
    const Engine::Chunk c{s, prompt, 1};
    const std::span<const float> l = e.forward({&c, 1});
    std::vector<float> out(l.begin(), l.end());
    e.close(s);
    return out;
}

std::span<const float> row(const std::vector<float>& rows, int64_t d, int64_t r) {
    return std::span(rows).subspan(size_t(r * d), size_t(d));
}

void expect_hidden_times_output_is_logits(const Model& m, double tol) {
    Engine e(m, invariant_params(2, 256));
    const std::vector<int32_t> prompt = ids(9, m.hp.n_vocab);
    const std::vector<float> rows = e.embed(prompt);  // [9][n_embd]
    ASSERT_EQ(rows.size(), prompt.size() * size_t(m.hp.n_embd));
    const std::vector<float> want = forward_logits(e, prompt);
    const std::vector<float> got = logits_of(m, row(rows, m.hp.n_embd, 8));
    const double diff = rel_diff(got, want);
    EXPECT_LT(diff, tol);
    EXPECT_EQ(argmax(got), argmax(want)) << "hidden * W_out picks the greedy next token";
    // The check can fail: another row's hidden state gives other logits, far beyond the tolerance.
    const double other = rel_diff(logits_of(m, row(rows, m.hp.n_embd, 7)), want);
    EXPECT_GT(other, 10 * tol) << "the right row is off by " << diff;
    std::printf("%s: hidden * W_out vs the logits %.3g (another row's %.3g)\n", m.hp.arch.c_str(), diff,
                other);
}

TEST(Embed, LastRowTimesOutputMatrixIsTheLogits) {
    for (const char* arch : {"qwen2", "qwen3", "llama"}) {
        SCOPED_TRACE(arch);
        expect_hidden_times_output_is_logits(*synth(arch), 1e-5);
    }
}

TEST(Embed, LastRowTimesOutputMatrixIsTheLogitsOfTheEmbeddedModel) {
    const std::string file = model_path("qwen2-mini-Q8_0.gguf");
    MINFER_REQUIRE_FILE(file);
    // Q8_0 weights: the engine's products round otherwise than the float64 reference (2e-5 measured).
    expect_hidden_times_output_is_logits(*Model::load(file), 1e-3);
}

// Row i of a prompt's embedding is the last row of its first i + 1 tokens embedded alone; mean, cls and
// last pooling are the mean, first and last of those.
TEST(Embed, RowsAreThePrefixesLastRows) {
    const auto m = synth("qwen2");
    const int64_t d = m->hp.n_embd, n = 12;
    Engine e(*m, invariant_params(1, 256));
    const std::vector<int32_t> prompt = ids(n, m->hp.n_vocab, 1);
    const std::vector<float> rows = e.embed(prompt);
    std::vector<double> mean(size_t(d), 0.0);
    std::vector<float> first, last;
    for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> alone = e.embed(std::span(prompt).first(size_t(i + 1)));
        const std::span<const float> tail = row(alone, d, i);
        EXPECT_LT(rel_diff(row(rows, d, i), tail), 1e-6) << "row " << i;
        for (int64_t k = 0; k < d; ++k) mean[size_t(k)] += double(tail[size_t(k)]) / double(n);
        if (i == 0) first.assign(tail.begin(), tail.end());
        if (i == n - 1) last.assign(tail.begin(), tail.end());
    }
    const std::vector<float> want_mean(mean.begin(), mean.end());
    EXPECT_LT(rel_diff(pool_rows(rows, d, Pooling::Mean), want_mean), 1e-6);
    EXPECT_LT(rel_diff(pool_rows(rows, d, Pooling::Cls), first), 1e-6);
    EXPECT_LT(rel_diff(pool_rows(rows, d, Pooling::Last), last), 1e-6);
    EXPECT_GT(rel_diff(first, last), 1e-3) << "the rows differ, so the pooling choice matters";
}

// A prompt longer than the micro-batch runs in chunks; the KV cache carries the context across them.
TEST(Embed, ChunkedEqualsUnchunked) {
    for (const char* arch : {"qwen2", "qwen3", "llama"}) {
        SCOPED_TRACE(arch);
        const auto m = synth(arch);
        EngineParams small = invariant_params(1, 256), whole = small;
        small.n_ubatch = 16;
        Engine a(*m, small), b(*m, whole);
        const std::vector<int32_t> prompt = ids(100, m->hp.n_vocab, 2);  // 7 chunks, the last of 4
        const std::vector<float> ra = a.embed(prompt), rb = b.embed(prompt);
        ASSERT_EQ(ra.size(), rb.size());
        EXPECT_LT(rel_diff(ra, rb), 1e-5);
        EXPECT_EQ(a.steps(), 7);
        EXPECT_EQ(b.steps(), 1);
    }
}

TEST(Embed, RefusesWhatCannotRunAndClosesItsSequence) {
    const auto m = synth("qwen2");
    Engine e(*m, invariant_params(2, 64));
    const int64_t free_before = e.free_blocks();
    EXPECT_TRUE(e.can_embed(64));
    EXPECT_FALSE(e.can_embed(65)) << "longer than the context";
    EXPECT_FALSE(e.can_embed(0));
    EXPECT_THROW(e.embed({}), Error);
    EXPECT_THROW(e.embed(ids(65, m->hp.n_vocab)), Error);
    const std::vector<int32_t> bad = {1, int32_t(m->hp.n_vocab)};
    EXPECT_THROW(e.embed(bad), Error);
    EXPECT_EQ(e.embed(ids(40, m->hp.n_vocab)).size(), size_t(40 * m->hp.n_embd));
    EXPECT_EQ(e.free_blocks(), free_before) << "its blocks went back (published ones stay cached, free)";
    const SeqId s0 = e.open(), s1 = e.open();
    EXPECT_FALSE(e.can_embed(1)) << "every sequence slot is taken";
    EXPECT_THROW(e.embed(ids(3, m->hp.n_vocab)), Error);
    e.close(s0);
    EXPECT_EQ(e.embed(ids(3, m->hp.n_vocab)).size(), size_t(3 * m->hp.n_embd));
    EXPECT_NO_THROW(e.open()) << "embed closed the slot it took";
    e.close(s1);
}

// <arch>.pooling_type (llama.cpp's enum) picks the pooling; absent: mean; --pooling overrides either.
TEST(Embed, PoolingComesFromTheFileUnlessAsked) {
    SynthSpec s;
    s.extra_metadata.emplace_back("qwen3.pooling_type", GgufValue{GgufValueType::U32, uint64_t(3)});
    const auto last = synth("qwen3", s);
    EXPECT_EQ(last->hp.pooling, Pooling::Last);
    EXPECT_EQ(embedding_pooling(Pooling::Unspecified, last->hp), Pooling::Last);
    EXPECT_EQ(embedding_pooling(Pooling::Cls, last->hp), Pooling::Cls);
    const auto plain = synth("qwen3");
    EXPECT_EQ(plain->hp.pooling, Pooling::Unspecified);
    EXPECT_EQ(embedding_pooling(Pooling::Unspecified, plain->hp), Pooling::Mean);
    SynthSpec bad;
    bad.extra_metadata.emplace_back("qwen3.pooling_type", GgufValue{GgufValueType::U32, uint64_t(7)});
    EXPECT_THROW(synth("qwen3", bad), Error);
    EXPECT_FALSE(pools_to_vector(Pooling::None));
    EXPECT_FALSE(pools_to_vector(Pooling::Rank));
    const std::vector<float> rows = {1, 2, 3, 4};
    EXPECT_THROW(pool_rows(rows, 2, Pooling::None), Error);
}

#ifdef MINFER_HAVE_CUDA
// The GPU's rows against the CPU's on F32 weights (the GPU's products then f32-like): one sequence
// (unpaged, exact token counts) and two (paged), whole and in chunks of 16, one token (a decode graph,
// fused) included.
TEST(Embed, CudaRowsMatchCpu) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    SynthSpec s;
    s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_ff = 512, s.n_vocab = 512;
    for (const char* arch : {"qwen2", "qwen3", "llama"}) {
        const auto m = synth(arch, s);
        Engine cpu(*m, invariant_params(1, 256));
        for (const int max_seqs : {1, 2})
            for (const int64_t ubatch : {int64_t(512), int64_t(16)}) {
                SCOPED_TRACE(std::string(arch) + ", " + std::to_string(max_seqs) + " sequences, ubatch " +
                             std::to_string(ubatch));
                EngineParams p;
                p.n_ctx = 256;
                p.max_seqs = max_seqs;
                p.n_ubatch = ubatch;
                p.device = BackendKind::Cuda;
                Engine gpu(*m, p);
                for (const int64_t n : {int64_t(1), int64_t(5), int64_t(70)}) {
                    const std::vector<int32_t> prompt = ids(n, m->hp.n_vocab, n);
                    const std::vector<float> want = cpu.embed(prompt), got = gpu.embed(prompt);
                    ASSERT_EQ(got.size(), want.size());
                    EXPECT_LT(rel_diff(got, want), 1e-4) << n << " tokens";
                }
            }
    }
}
#endif

TEST(Embed, L2NormalizeGivesUnitLength) {
    std::vector<float> v = {3, 4, 0};
    l2_normalize(v);
    EXPECT_FLOAT_EQ(v[0], 0.6f);
    EXPECT_FLOAT_EQ(v[1], 0.8f);
    std::vector<float> zero = {0, 0};
    l2_normalize(zero);
    EXPECT_EQ(zero, (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace minfer::test
