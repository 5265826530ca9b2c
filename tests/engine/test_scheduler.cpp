// The continuous-batching scheduler and the cache operations it relies on: greedy and seeded sampling
// under load give the tokens of a request run alone (generate() on a Session, what `minfer run` does),
// preemption recomputes without changing a token, cancellation frees blocks, prefix hits skip prefill
// with identical logits, forks share blocks and diverge, and bad requests are refused clearly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "invariant_params.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::test {
namespace {

struct Fixture {
    std::unique_ptr<Model> model =
        Model::load(std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf");
    std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*model->file);
};

std::vector<std::vector<int32_t>> prompts(const Tokenizer& tok, int n) {
    std::vector<std::vector<int32_t>> out;
    const char* texts[] = {"The list type",
                           "def main():",
                           "Once upon a time",
                           "import numpy as np",
                           "The capital of France is",
                           "SELECT * FROM",
                           "In 1905 Einstein",
                           "Hello"};
    for (int i = 0; i < n; ++i)
        out.push_back(tok.encode(std::string(texts[i % 8]) + std::string(size_t(i / 8), 0x21), false, false));
    return out;
}

GenerateParams gen(float temp, uint64_t seed, int n) {
    GenerateParams g;
    g.n_predict = n;
    g.ignore_eos = true;
    g.sampling.temp = temp;
    g.sampling.seed = seed;
    return g;
}

// Every prompt through one scheduler; results by submission order.
std::vector<GenerationResult> run_all(Engine& e, const Tokenizer& tok,
                                      const std::vector<std::vector<int32_t>>& ps, float temp,
                                      int64_t budget = 0, Scheduler* out = nullptr) {
    Scheduler s(e, tok, budget);
    std::vector<GenerationResult> res(ps.size());
    for (size_t i = 0; i < ps.size(); ++i)
        s.submit({ps[i], gen(temp, 100 + i, 24), {}, [&res, i](const GenerationResult& r) { res[i] = r; }});
    s.run_until_idle();
    if (out) EXPECT_EQ(s.n_running() + s.n_waiting(), 0u);
    return res;
}

std::vector<int32_t> alone(const Model& m, const Tokenizer& tok, const std::vector<int32_t>& p, float temp,
                           uint64_t seed) {
    Session s(m, {512, 2, BackendKind::Cpu, kDefaultUbatch, true});
    return generate(s, tok, p, gen(temp, seed, 24)).ids;
}

TEST(Scheduler, GreedyAndSeededSamplingUnderLoadEqualAlone) {
    Fixture f;
    const auto ps = prompts(*f.tok, 12);
    for (const float temp : {0.0f, 0.8f}) {
        Engine e(*f.model, invariant_params(8, 2048));
        const auto res = run_all(e, *f.tok, ps, temp);
        for (size_t i = 0; i < ps.size(); ++i) {
            EXPECT_EQ(res[i].ids, alone(*f.model, *f.tok, ps[i], temp, 100 + i))
                << "temp " << temp << " prompt " << i;
            EXPECT_EQ(res[i].finish, FinishReason::Length);
            EXPECT_EQ(res[i].prompt_tokens, int64_t(ps[i].size()));
        }
        EXPECT_EQ(e.pool().n_used(), 0) << "every finished request freed its blocks";
    }
}

TEST(Scheduler, PreemptionRecomputesWithoutChangingATokenAndChunkedPrefillToo) {
    Fixture f;
    const auto ps = prompts(*f.tok, 8);
    Engine roomy(*f.model, invariant_params(8, 2048));
    const auto want = run_all(roomy, *f.tok, ps, 0.8f);
    // 8 sequences of up to 30 tokens in 96 slots (3 blocks of 32): the pool runs out, so the youngest are
    // preempted; a budget of 5 tokens per forward chunks every prompt.
    EngineParams tight = invariant_params(8, 96);
    Engine small(*f.model, tight);
    Scheduler s(small, *f.tok, 5);
    std::vector<GenerationResult> got(ps.size());
    for (size_t i = 0; i < ps.size(); ++i)
        s.submit({ps[i], gen(0.8f, 100 + i, 24), {}, [&got, i](const GenerationResult& r) { got[i] = r; }});
    s.run_until_idle();
    EXPECT_GT(s.preemptions(), 0);
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << "prompt " << i;
}

// Another thread submits and cancels while this one steps, under a pool small enough to preempt: every
// request finishes exactly once, each one not cancelled with its alone tokens, and the pool drains.
TEST(Scheduler, SubmitAndCancelFromAnotherThreadUnderPressure) {
    Fixture f;
    const auto ps = prompts(*f.tok, 16);
    Engine roomy(*f.model, invariant_params(8, 4096));
    const auto want = run_all(roomy, *f.tok, ps, 0.8f);
    Engine small(*f.model, invariant_params(6, 128));
    Scheduler s(small, *f.tok, 24);
    std::mutex mu;
    std::map<size_t, std::vector<GenerationResult>> got;
    std::atomic<int> submitted{0};
    auto submit = [&](size_t i) {
        return s.submit({ps[i], gen(0.8f, 100 + i, 24), {}, [&, i](const GenerationResult& r) {
                             std::lock_guard lock(mu);
                             got[i].push_back(r);
                         }});
    };
    for (size_t i = 0; i < 8; ++i) submit(i), ++submitted;
    std::thread other([&] {
        for (size_t i = 8; i < ps.size(); ++i) {
            const uint64_t id = submit(i);
            ++submitted;
            if (i % 4 == 0) s.cancel(id);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });
    while (submitted < int(ps.size()) || s.n_running() + s.n_waiting() > 0) s.step();
    other.join();
    s.run_until_idle();
    ASSERT_EQ(got.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
        ASSERT_EQ(got[i].size(), 1u) << "request " << i << " finished once";
        const GenerationResult& r = got[i][0];
        if (r.finish == FinishReason::Cancelled) {
            EXPECT_EQ(i % 4, 0u) << "only the cancelled ones";
            EXPECT_TRUE(std::equal(r.ids.begin(), r.ids.end(), want[i].ids.begin()))
                << "a prefix of its tokens";
        } else {
            EXPECT_EQ(r.ids, want[i].ids) << "request " << i;
        }
    }
    EXPECT_EQ(small.pool().n_used(), 0);
}

TEST(Scheduler, CancelFreesTheBlocks) {
    Fixture f;
    Engine e(*f.model, invariant_params(4, 1024));
    Scheduler s(e, *f.tok);
    GenerationResult r;
    std::string streamed;
    GenerateParams g = gen(0.0f, 1, 500);
    const uint64_t id = s.submit({prompts(*f.tok, 1)[0], g, [&](std::string_view t) { streamed += t; },
                                  [&](const GenerationResult& x) { r = x; }});
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.step());
    EXPECT_GT(e.pool().n_used(), 0);
    s.cancel(id);
    s.run_until_idle();
    EXPECT_EQ(r.finish, FinishReason::Cancelled);
    EXPECT_EQ(r.ids.size(), 5u) << "one token a step, the first right after the prefill";
    EXPECT_EQ(r.text, streamed);
    EXPECT_EQ(e.pool().n_used(), 0);
    EXPECT_EQ(e.free_blocks(), e.pool().n_blocks());
}

TEST(Scheduler, StopStringsAndEndOfGenerationFinishWithStop) {
    Fixture f;
    Engine e(*f.model, invariant_params(2, 1024));
    Scheduler s(e, *f.tok);
    const auto p = prompts(*f.tok, 1)[0];
    const auto free_text = alone(*f.model, *f.tok, p, 0.0f, 1);
    const std::string full = f.tok->decode(free_text);
    ASSERT_GT(full.size(), 6u);
    GenerateParams g = gen(0.0f, 1, 24);
    g.stop = {full.substr(3, 3)};
    GenerationResult r;
    s.submit({p, g, {}, [&](const GenerationResult& x) { r = x; }});
    s.run_until_idle();
    EXPECT_EQ(r.finish, FinishReason::Stop);
    EXPECT_EQ(r.text, full.substr(0, full.find(g.stop[0])));
}

// A generation past the end of text (ignore_eos) picks control tokens; its text leaves them out unless
// GenerateParams::special asks for them, the same ids either way; generate() (minfer run) agrees.
TEST(Scheduler, TextShowsControlTokensOnlyWhenAsked) {
    Fixture f;
    Engine e(*f.model, invariant_params(2, 1024));
    Scheduler s(e, *f.tok);
    const std::vector<int32_t> p = f.tok->encode("Hello", false, false);
    GenerationResult plain, shown;
    GenerateParams g = gen(0.0f, 1, 200);
    s.submit({p, g, {}, [&](const GenerationResult& x) { plain = x; }});
    g.special = true;
    s.submit({p, g, {}, [&](const GenerationResult& x) { shown = x; }});
    s.run_until_idle();
    ASSERT_EQ(plain.ids, shown.ids);
    std::string without;
    int specials = 0;
    for (const int32_t id : plain.ids) {
        specials += f.tok->is_special(id);
        if (!f.tok->is_special(id)) without += f.tok->token_to_bytes(id);
    }
    ASSERT_GT(specials, 0) << "the prompt should run past an end-of-text token within 200 tokens";
    EXPECT_EQ(plain.text, without);
    EXPECT_EQ(shown.text, f.tok->decode(shown.ids));
    EXPECT_NE(plain.text, shown.text);
    Session session(*f.model, {1024, 2, BackendKind::Cpu, kDefaultUbatch, true});
    EXPECT_EQ(generate(session, *f.tok, p, g).text, shown.text);
}

TEST(Scheduler, BadRequestsAreRefused) {
    Fixture f;
    Engine e(*f.model, invariant_params(2, 64));
    Scheduler s(e, *f.tok);
    EXPECT_THROW(s.submit({{}, gen(0, 1, 4), {}, {}}), Error) << "empty prompt";
    EXPECT_THROW(s.submit({std::vector<int32_t>(64, 1), gen(0, 1, 4), {}, {}}), Error)
        << "prompt over the KV budget";
    EXPECT_THROW(s.submit({{1, 2}, gen(0, 1, 0), {}, {}}), Error) << "max tokens 0";
    EXPECT_THROW(s.submit({{1, 2}, gen(0, 1, -1), {}, {}}), Error) << "max tokens < 0";
    EXPECT_THROW(s.submit({{-1}, gen(0, 1, 4), {}, {}}), Error) << "token id out of range";
    EXPECT_FALSE(s.step()) << "nothing was queued";
}

// ---- the engine's cache operations ----------------------------------------------------------------

std::vector<float> logits_alone(const Model& m, const std::vector<int32_t>& ids) {
    Engine e(m, invariant_params(1, 512));
    const SeqId s = e.open();
    const Engine::Chunk c{s, ids, int64_t(ids.size())};
    const auto l = e.forward({&c, 1});
    return {l.begin(), l.end()};
}

TEST(EngineCache, PrefixHitSkipsThePrefillAndGivesIdenticalLogits) {
    Fixture f;
    std::mt19937 rng(3);
    std::vector<int32_t> a(80), b;
    for (int32_t& x : a) x = int32_t(rng() % 4000);
    b.assign(a.begin(), a.begin() + 70);
    for (int i = 0; i < 9; ++i) b.push_back(int32_t(rng() % 4000));
    Engine e(*f.model, invariant_params(2, 512));
    const SeqId sa = e.open();
    const Engine::Chunk ca{sa, a, 1};
    e.forward({&ca, 1});
    e.close(sa);
    const SeqId sb = e.open();
    ASSERT_EQ(e.attach_prefix(sb, b), 64) << "two full blocks of 32 are shared";
    EXPECT_EQ(e.prefix_hit_tokens(), 64);
    const auto rest = std::span(b).subspan(64);
    const Engine::Chunk cb{sb, rest, int64_t(rest.size())};
    const auto got = e.forward({&cb, 1});
    const auto want = logits_alone(*f.model, b);
    const size_t nv = size_t(f.model->hp.n_vocab);
    ASSERT_EQ(got.size(), rest.size() * nv);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data() + 64 * nv, got.size_bytes()));
}

TEST(EngineCache, ForkSharesBlocksAndDivergesCopyOnWrite) {
    Fixture f;
    std::vector<int32_t> p(40);
    for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(17 * i + 5);
    Engine e(*f.model, invariant_params(2, 512));
    const SeqId a = e.open();
    const Engine::Chunk c{a, p, 1};
    e.forward({&c, 1});
    const int32_t used = e.pool().n_used();
    const SeqId b = e.fork(a);
    EXPECT_EQ(e.pool().n_used(), used) << "a fork shares every block";
    EXPECT_EQ(e.blocks_needed(b, 1), 1) << "its partial last block is copied before it writes";
    const int32_t ta = 7, tb = 9;
    const Engine::Chunk next[] = {{a, std::span(&ta, 1), 1}, {b, std::span(&tb, 1), 1}};
    const auto l = e.forward(next);
    EXPECT_EQ(e.pool().n_used(), used + 1);
    const size_t nv = size_t(f.model->hp.n_vocab);
    std::vector<int32_t> pa = p, pb = p;
    pa.push_back(ta);
    pb.push_back(tb);
    const auto wa = logits_alone(*f.model, pa), wb = logits_alone(*f.model, pb);
    EXPECT_EQ(0, std::memcmp(l.data(), wa.data() + 40 * nv, nv * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(l.data() + nv, wb.data() + 40 * nv, nv * sizeof(float)));
}

// The CPU's decode arithmetic comes from the environment when the params are made, and reaches the
// logits: plain int8 dots are not int8x2's.
TEST(EngineParamsTest, DecodeModeIsReadWhenTheParamsAreMade) {
    Fixture f;
    setenv("MINFER_INT8_DECODE", "1", 1);
    EngineParams int8 = invariant_params(1, 128);
    unsetenv("MINFER_INT8_DECODE");
    const EngineParams x2 = invariant_params(1, 128);
    EXPECT_EQ(int8.decode, cpu::DecodeDot::Int8);
    EXPECT_EQ(x2.decode, cpu::DecodeDot::Int8x2);
    const std::vector<int32_t> ids{785, 1140, 943};
    std::vector<std::vector<float>> out;
    for (const EngineParams& p : {int8, x2}) {
        Engine e(*f.model, p);
        const Engine::Chunk c{e.open(), ids, 1};
        const auto l = e.forward({&c, 1});
        out.emplace_back(l.begin(), l.end());
    }
    EXPECT_NE(out[0], out[1]);
}

TEST(EngineCache, ClearErrorsNeverCorruption) {
    Fixture f;
    Engine e(*f.model, invariant_params(2, 64));
    const SeqId s = e.open();
    const std::vector<int32_t> none, too_long(65, 1);
    const Engine::Chunk empty{s, none, 0}, over{s, too_long, 1};
    EXPECT_THROW(e.forward({&empty, 1}), Error);
    EXPECT_THROW(e.forward({&over, 1}), Error);
    EXPECT_EQ(e.n_past(s), 0) << "a refused forward changes nothing";
    EXPECT_THROW(e.close(5), Error);
    e.open();
    EXPECT_THROW(e.open(), Error) << "two slots";
}

}  // namespace
}  // namespace minfer::test
