// Many sequences in one forward: batch invariance (a sequence's logits are memcmp-equal whatever shares
// its forwards, however its prompt is chunked, whether its prefix came from the cache), the paged KV
// cache's prefix hits and forks, and the continuous-batching scheduler (greedy and seeded sampling as
// alone, preemption, cancellation, bad requests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "gguf/gguf_test_util.h"
#include "greedy_check.h"
#include "invariant_params.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "test_data.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::test {
namespace {

std::string embedded_model() {
    return std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf";
}

EngineParams params(int max_seqs, int64_t n_ctx, bool prefix_cache = true, GgmlType kv = GgmlType::F32) {
    EngineParams p = invariant_params(max_seqs, n_ctx);
    p.kv_type = kv;
    p.prefix_cache = prefix_cache;
    return p;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t n_vocab) {
    std::uniform_int_distribution<int32_t> d(0, int32_t(n_vocab - 1));
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = d(rng);
    return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// A sequence run alone on a fresh engine: the prompt in one pass with every position's logits, then
// `n_gen` greedy tokens one at a time. Returns the stream (prompt + greedy tokens) and the logits of every
// position but the last: [stream.size() - 1][n_vocab] (position i predicts token i + 1).
struct Alone {
    std::vector<int32_t> stream;
    std::vector<float> logits;
};

Alone run_alone(const Model& m, const std::vector<int32_t>& prompt, int n_gen, GgmlType kv) {
    Engine e(m, params(1, 512, false, kv));
    const SeqId s = e.open();
    Alone a{prompt, {}};
    const Engine::Chunk first{s, prompt, int64_t(prompt.size())};
    std::span<const float> l = e.forward({&first, 1});
    a.logits.assign(l.begin(), l.end());
    for (int i = 0; i < n_gen; ++i) {
        a.stream.push_back(argmax(l.subspan(l.size() - size_t(m.hp.n_vocab))));
        if (i + 1 == n_gen) break;
        const Engine::Chunk next{s, std::span(&a.stream.back(), 1), 1};
        l = e.forward({&next, 1});
        a.logits.insert(a.logits.end(), l.begin(), l.end());
    }
    a.logits.resize(a.logits.size() - size_t(m.hp.n_vocab));  // the last one predicts past the stream
    return a;
}

// 64 sequences (the golden prompts, random ones, a third sharing a 70-token prefix) arrive at random
// steps and are fed their alone-run streams in random chunks, up to the micro-batch per forward; every
// position's logits must be memcmp-equal to the alone run's.
void expect_invariant_under_load(const Model& m, const std::vector<std::vector<int32_t>>& golden,
                                 bool prefix_cache, GgmlType kv = GgmlType::F32) {
    std::mt19937 rng(prefix_cache ? 7 : 8);
    const std::vector<int32_t> common = random_ids(rng, 70, m.hp.n_vocab);
    std::vector<Alone> alone;
    for (int i = 0; i < 64; ++i) {
        std::vector<int32_t> p =
            i < int(golden.size()) ? golden[size_t(i)] : random_ids(rng, 3 + i % 40, m.hp.n_vocab);
        if (i % 3 == 0 && i >= int(golden.size())) p.insert(p.begin(), common.begin(), common.end());
        alone.push_back(run_alone(m, p, 8 + i % 9, kv));
    }
    Engine e(m, params(64, 64 * 256, prefix_cache, kv));
    std::vector<int> arrival(64);
    for (int& a : arrival) a = std::uniform_int_distribution<int>(0, 30)(rng);
    std::vector<SeqId> seq(64, -1);
    std::vector<int64_t> fed(64, 0);
    int64_t compared = 0;
    for (int step = 0; std::any_of(fed.begin(), fed.end(), [&](int64_t f) { return f >= 0; }); ++step) {
        std::vector<Engine::Chunk> batch;
        std::vector<int> owner;
        int64_t left = e.max_tokens();
        for (int i = 0; i < 64 && left > 0; ++i) {
            if (fed[size_t(i)] < 0 || arrival[size_t(i)] > step) continue;
            const auto& st = alone[size_t(i)].stream;
            if (seq[size_t(i)] < 0) {
                seq[size_t(i)] = e.open();
                fed[size_t(i)] = e.attach_prefix(seq[size_t(i)], st);
            }
            const int64_t rest = int64_t(st.size()) - fed[size_t(i)];
            const int64_t n = std::min({rest, left, int64_t(std::uniform_int_distribution<int>(1, 24)(rng))});
            batch.push_back({seq[size_t(i)], std::span(st).subspan(size_t(fed[size_t(i)]), size_t(n)), n});
            owner.push_back(i);
            left -= n;
        }
        if (batch.empty()) continue;
        const std::span<const float> l = e.forward(batch);
        const auto nv = size_t(m.hp.n_vocab);
        size_t row = 0;
        for (size_t b = 0; b < batch.size(); ++b) {
            const int i = owner[b];
            const Alone& a = alone[size_t(i)];
            for (size_t t = 0; t < batch[b].tokens.size(); ++t, ++row) {
                const auto pos = size_t(fed[size_t(i)]) + t;
                if (pos + 1 >= a.stream.size()) continue;  // the alone run has no logits past the stream
                ASSERT_TRUE(same_bits(l.subspan(row * nv, nv), std::span(a.logits).subspan(pos * nv, nv)))
                    << "sequence " << i << " position " << pos << " step " << step;
                ++compared;
            }
            fed[size_t(i)] += int64_t(batch[b].tokens.size());
            if (fed[size_t(i)] == int64_t(a.stream.size())) {
                e.close(seq[size_t(i)]);
                fed[size_t(i)] = -1;
            }
        }
    }
    EXPECT_GT(compared, 1000);
    if (prefix_cache) {
        EXPECT_GE(e.prefix_hit_tokens(), 64) << "the shared prefix came from the cache";
    }
}

std::vector<std::vector<int32_t>> golden_prompts(const std::string& ref) {
    std::vector<std::vector<int32_t>> out;
    if (!std::filesystem::exists(ref)) return out;
    std::ifstream f(ref);
    const nlohmann::json j = nlohmann::json::parse(f);  // kept: the loop below reads inside it
    for (const auto& p : j["prompts"]) out.push_back(p["ids"].get<std::vector<int32_t>>());
    return out;
}

// The greedy forward's ids are the argmax of the logits forward's rows, padding and chunking included.
TEST(Engine, GreedyForwardPicksTheLogitsArgmax) {
    const auto m = Model::load(embedded_model());
    expect_greedy_equals_argmax(*m, params(6, 6 * 128));
}

TEST(BatchInvariance, EmbeddedModelUnderLoadEqualsAlone) {
    const auto m = Model::load(embedded_model());
    const auto golden = golden_prompts(ref_path("qwen2-mini-Q8_0.ref.json"));
    expect_invariant_under_load(*m, golden, true);
    expect_invariant_under_load(*m, golden, false);
}

// The compact caches store rounded rows and read them back as f32: invariance holds for them alike.
TEST(BatchInvariance, CompactKvCachesUnderLoadEqualAlone) {
    const auto m = Model::load(embedded_model());
    for (const GgmlType kv : {GgmlType::F16, GgmlType::Q8_0}) {
        SCOPED_TRACE(ggml_type_name(kv));
        expect_invariant_under_load(*m, {}, true, kv);
    }
}

// Bytes per cached token: f32 4 per element, f16 2, q8_0 34 per 32.
TEST(KvCache, CompactTypesShrinkTheRegions) {
    const auto m = Model::load(embedded_model());
    const int64_t per_token_f32 = 2 * m->hp.n_layer * m->hp.n_kv_embd() * 4;
    for (const auto& [kv, bytes] :
         {std::pair{GgmlType::F32, per_token_f32}, std::pair{GgmlType::F16, per_token_f32 / 2},
          std::pair{GgmlType::Q8_0, per_token_f32 / 128 * 34}}) {
        Engine e(*m, params(1, 256, false, kv));
        const SeqId s = e.open();
        const std::vector<int32_t> ids{1, 2, 3};
        const Engine::Chunk c{s, ids, 1};
        e.forward({&c, 1});
        EXPECT_EQ(int64_t(e.kv().bytes()), bytes * e.n_ctx()) << ggml_type_name(kv);
    }
}

// --kv-mem: the cache holds what the bytes hold, in whole blocks.
TEST(KvCache, MemoryBudgetSetsTheContext) {
    const auto m = Model::load(embedded_model());
    const int64_t per_token = 2 * m->hp.n_layer * m->hp.n_kv_embd() * 2;  // f16
    EngineParams p = params(4, 0, true, GgmlType::F16);
    p.kv_mem = per_token * 100;
    EXPECT_EQ(Engine(*m, p).n_ctx(), 96) << "100 tokens' bytes: three blocks of 32";
    p.kv_mem = per_token * 31;
    EXPECT_THROW(Engine(*m, p), Error) << "less than one block";
}

TEST(BatchInvariance, GoldenModelsUnderLoadEqualAlone) {
    for (const char* name : {"qwen3-mini-Q4_K_M", "llama-mini-Q4_K_M", "qwen2-mini-F16"}) {
        SCOPED_TRACE(name);
        const std::string file = model_path(std::string(name) + ".gguf");
        MINFER_REQUIRE_FILE(file);
        const auto m = Model::load(file);
        expect_invariant_under_load(*m, {}, true);
    }
}

// A mixture of experts: tokens of different sequences share experts in a forward (each expert's rows
// gathered from the batch), yet every sequence's logits equal its run alone.
TEST(BatchInvariance, MixtureOfExpertsUnderLoadEqualsAlone) {
    TempDir dir;
    SynthSpec s;
    s.arch = "qwen3moe";
    s.n_embd = 128, s.head_dim = 32, s.n_vocab = 512, s.n_expert = 8, s.n_expert_used = 3, s.n_ff_exp = 64;
    s.type = GgmlType::Q8_0;
    const std::string file = dir.file("moe.gguf");
    write_synth_model(s, file);
    const auto m = Model::load(file);
    expect_invariant_under_load(*m, {}, true);
}

// A small Q8_0 file's spec of `arch` with windows of 16 where its layers take them: 128 wide, heads of
// 32, a vocabulary of 512.
SynthSpec windowed_spec(const char* arch, int n_layer) {
    SynthSpec s;
    s.arch = arch;
    s.n_layer = n_layer, s.n_embd = 128, s.head_dim = 32, s.n_vocab = 512, s.n_swa = 16;
    s.type = GgmlType::Q8_0;
    return s;
}

// gpt-oss: sinks, windows, YaRN and biased experts under load equal their runs alone.
TEST(BatchInvariance, GptOssUnderLoadEqualsAlone) {
    TempDir dir;
    SynthSpec s = windowed_spec("gpt-oss", 2);
    s.n_expert = 8, s.n_expert_used = 4, s.n_ff_exp = 64;
    s.extra_metadata = {{"gpt-oss.rope.scaling.type", GgufValue{GgufValueType::STRING, std::string("yarn")}},
                        {"gpt-oss.rope.scaling.factor", GgufValue{GgufValueType::F32, 32.0}}};
    write_synth_model(s, dir.file("gptoss.gguf"));
    const auto m = Model::load(dir.file("gptoss.gguf"));
    expect_invariant_under_load(*m, {}, true);
}

// Sliding-window layers (gemma3: five local layers of window 16, then a global one): sequences longer
// than the window, with and without the prefix cache and in a compact cache, equal their runs alone.
TEST(BatchInvariance, SlidingWindowUnderLoadEqualsAlone) {
    TempDir dir;
    const std::string file = dir.file("swa.gguf");
    write_synth_model(windowed_spec("gemma3", 6), file);
    const auto m = Model::load(file);
    expect_invariant_under_load(*m, {}, true);
    expect_invariant_under_load(*m, {}, false, GgmlType::F16);
}

// The blocks a sequence of `n` tokens holds after being fed in chunks of 8 (in a context of 1024): in
// the engine's pool, and in its window pool (-1 without one).
struct Held {
    int32_t blocks, window_blocks;
};
Held blocks_held_after(const Model& m, int64_t n) {
    Engine e(m, params(1, 1024, false));
    const SeqId q = e.open();
    std::mt19937 rng(3);
    const std::vector<int32_t> ids = random_ids(rng, n, m.hp.n_vocab);
    for (int64_t at = 0; at < n; at += 8) {
        const Engine::Chunk c{q, std::span(ids).subspan(size_t(at), 8), 1};
        e.forward({&c, 1});
    }
    return {e.pool().n_used(), e.window_pool() ? e.window_pool()->n_used() : -1};
}

// Mistral v0.1's layout: every layer attends within a window (16 here). A sequence's blocks wholly
// before its window go back to the pool as it grows and other sequences reuse them, while every
// sequence's logits still equal its run alone, with the prefix cache (whose released blocks stay
// findable) and without.
TEST(BatchInvariance, WindowInEveryLayerReleasesBlocksAndEqualsAlone) {
    TempDir dir;
    write_synth_model(windowed_spec("llama", 2), dir.file("window.gguf"));
    const auto m = Model::load(dir.file("window.gguf"));
    expect_invariant_under_load(*m, {}, true);
    expect_invariant_under_load(*m, {}, false);
    const int32_t block = Engine(*m, params(1, 1024, false)).pool().block_size();
    const Held held = blocks_held_after(*m, 600);
    EXPECT_LE(held.blocks, (16 + block - 1) / block + 1) << "the window's blocks and the next";
    EXPECT_EQ(held.window_blocks, -1) << "no global layer: one pool";
}

// --kv-mem with window layers of their own blocks: they take their share (a window and the micro-batch
// per layer) and the global layer the rest, which sets the context; the cache then holds those bytes.
TEST(KvCache, MemoryBudgetOfMixedWindowLayers) {
    TempDir dir;
    write_synth_model(windowed_spec("gemma3", 6), dir.file("mixed.gguf"));
    const auto m = Model::load(dir.file("mixed.gguf"));
    const int64_t row = 2 * m->hp.n_kv_embd() * 4, window_ctx = (1 + 2 + 512 / 32) * 32;  // f32 K and V
    EngineParams p = params(1, 0, false);
    p.kv_mem = row * (5 * window_ctx + 2048);
    Engine e(*m, p);
    EXPECT_EQ(e.n_ctx(), 2048);
    EXPECT_EQ(e.cparams().window_ctx, window_ctx);
    const SeqId s = e.open();
    const std::vector<int32_t> ids{1, 2, 3};
    const Engine::Chunk c{s, ids, 1};
    e.forward({&c, 1});
    EXPECT_EQ(int64_t(e.kv().bytes()), p.kv_mem);
}

// Gemma 3's layout (five window layers, then a global one): the window layers keep their rows in a
// region of their own, window_ctx slots in blocks of a second pool, and a sequence gives those back as
// it leaves them behind, while the global layer keeps every block. The under-load tests above run in
// this layout and compare with runs alone in a context too short for it (one pool for all layers).
TEST(BatchInvariance, MixedWindowLayersKeepOnlyTheirWindow) {
    TempDir dir;
    write_synth_model(windowed_spec("gemma3", 6), dir.file("mixed.gguf"));
    const auto m = Model::load(dir.file("mixed.gguf"));
    Engine e(*m, params(1, 1024, false));
    const int64_t block = e.cparams().block(), window_ctx = e.cparams().window_ctx;
    ASSERT_NE(e.window_pool(), nullptr);
    EXPECT_EQ(window_ctx, (1 * (16 / block + 1 + 2) + 512 / block) * block) << "a window and the micro-batch";
    e.prepare(1, 1);
    EXPECT_EQ(e.kv().layer(0).n_ctx, window_ctx);
    EXPECT_EQ(e.kv().layer(5).n_ctx, 1024) << "the global layer";
    const Held held = blocks_held_after(*m, 600);
    EXPECT_EQ(held.blocks, (600 + block - 1) / block);
    EXPECT_LE(held.window_blocks, (16 + block - 1) / block + 1) << "the window's blocks and the next";
    EXPECT_EQ(Engine(*m, params(1, 512, false)).window_pool(), nullptr)
        << "no fewer blocks than the context's";
}

// A fork of a sequence that mixes window and global layers shares its blocks in both pools; each side
// copies the shared partial block of each pool (in that pool's regions) before writing, and both equal
// their streams run alone.
TEST(BatchInvariance, ForkInBothPoolsEqualsAlone) {
    TempDir dir;
    write_synth_model(windowed_spec("gemma3", 6), dir.file("mixed.gguf"));
    const auto m = Model::load(dir.file("mixed.gguf"));
    std::mt19937 rng(11);
    const std::vector<int32_t> prompt = random_ids(rng, 50, m->hp.n_vocab);  // a partial second block
    Engine e(*m, params(2, 2048));
    ASSERT_NE(e.window_pool(), nullptr);
    const SeqId a = e.open();
    const Engine::Chunk first{a, prompt, 1};
    e.forward({&first, 1});
    const SeqId b = e.fork(a);
    const auto nv = size_t(m->hp.n_vocab);
    for (const SeqId s : {a, b}) {
        const std::vector<int32_t> next = random_ids(rng, 5, m->hp.n_vocab);
        std::vector<int32_t> stream = prompt;
        stream.insert(stream.end(), next.begin(), next.end());
        const Alone alone = run_alone(*m, stream, 1, GgmlType::F32);
        const Engine::Chunk c{s, next, 5};
        const std::span<const float> l = e.forward({&c, 1});
        EXPECT_TRUE(same_bits(l, std::span(alone.logits).subspan(prompt.size() * nv, 5 * nv)))
            << "sequence " << s;
    }
}

// A prefix whose global blocks are cached but whose window blocks were evicted is reused only as far
// as its window blocks are cached (here not at all): the sequence recomputes the rest and equals its run
// alone.
TEST(BatchInvariance, EvictedWindowBlocksShortenThePrefixHit) {
    TempDir dir;
    write_synth_model(windowed_spec("gemma3", 6), dir.file("mixed.gguf"));
    const auto m = Model::load(dir.file("mixed.gguf"));
    std::mt19937 rng(5);
    const std::vector<int32_t> prompt = random_ids(rng, 200, m->hp.n_vocab);
    const Alone alone = run_alone(*m, prompt, 2, GgmlType::F32);
    Engine e(*m, params(1, 4096));  // 128 blocks; the window pool's 19 recycle after 19 more
    const auto run = [&](std::span<const int32_t> ids) {
        const SeqId s = e.open();
        const int64_t reused = e.attach_prefix(s, ids);
        const Engine::Chunk c{s, ids.subspan(size_t(reused)), 1};
        const std::span<const float> l = e.forward({&c, 1});
        const bool same =
            same_bits(l, std::span(alone.logits).subspan((prompt.size() - 1) * l.size(), l.size()));
        e.close(s);
        return std::pair{reused, same};
    };
    EXPECT_EQ(run(prompt), std::pair(int64_t(0), true));
    EXPECT_EQ(run(prompt), std::pair(int64_t(192), true)) << "every full block short of the last token";
    for (int i = 0; i < 3; ++i) run(random_ids(rng, 300, m->hp.n_vocab));  // 30 window blocks
    EXPECT_EQ(run(prompt), std::pair(int64_t(0), true)) << "the window blocks were evicted";
    EXPECT_GT(e.pool().n_cached(), 6) << "while the global blocks stayed cached";
}

}  // namespace
}  // namespace minfer::test
