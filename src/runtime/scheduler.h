// Continuous batching over an Engine: a queue of generation requests, each step admitting waiting
// requests while sequence slots and KV blocks allow, then one forward over every running sequence's next
// token plus prefill chunks under a token budget (chunked prefill). Each sequence samples with its own
// Sampler (its seed, its penalties), streams its text through its callback and finishes on end of
// generation, a stop string, max tokens or the end of its context, freeing its blocks. When blocks run
// out the most recently admitted sequence is preempted: its blocks are freed and it is requeued at the
// front to be recomputed (prompt plus what it generated), so no request is dropped or changed — batch
// invariance makes the recomputed logits those it would have had. submit() and cancel() may be called
// from any thread; step() from the one thread that owns the engine.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/constraint.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer {

enum class FinishReason : uint8_t { Stop, Length, Cancelled };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled"

struct GenerationResult {
    std::vector<int32_t> ids;  // generated tokens, without the end-of-generation token that stopped
    std::string text;          // their text, cut before a stop string
    FinishReason finish = FinishReason::Length;
    int64_t prompt_tokens = 0, cached_tokens = 0;  // cached: prompt tokens reused from the prefix cache
};

struct GenerationRequest {
    std::vector<int32_t> prompt;
    GenerateParams gen;  // n_predict, ignore_eos, sampling (seed included), stop; should_stop unused
    std::function<void(std::string_view)> on_text;         // safe text as it comes (scheduler thread)
    std::function<void(const GenerationResult&)> on_done;  // once, at the end (scheduler thread)
    // With n_logprobs >= 0, each generated token's log-probability and n_logprobs alternatives, before
    // its text reaches on_text (scheduler thread). The end-of-generation token that stops gets none.
    int n_logprobs = -1;
    std::function<void(const TokenLogprob&)> on_logprob = {};
    GrammarSpec grammar = {};  // structured output: the tokens it may sample (none: any)
};

class Scheduler {
  public:
    // token_budget: most tokens per forward (0: the engine's micro-batch).
    Scheduler(Engine& engine, const Tokenizer& tok, int64_t token_budget = 0);
    ~Scheduler();

    // Queues a request; throws Error for an empty prompt, max tokens <= 0, or a prompt that cannot fit
    // the context or the KV pool. Returns its id.
    uint64_t submit(GenerationRequest r);
    // Finishes the request with FinishReason::Cancelled at the next step (its blocks return to the pool).
    void cancel(uint64_t id);
    // One scheduling step: admit, one forward, sample. False when there was nothing to do.
    bool step();
    void run_until_idle();

    size_t n_running() const { return running_.size(); }
    size_t n_waiting() const;
    int64_t preemptions() const { return preemptions_; }

  private:
    struct Active;  // a request and its sequence state
    using ActivePtr = std::unique_ptr<Active>;

    void take_submissions();
    void drop_cancelled();
    void admit();
    bool build_batch(std::vector<Engine::Chunk>& batch, std::vector<Active*>& owners);
    void preempt_youngest();
    // A sequence's next token from its logits row, and its log-probabilities when the request asks:
    // drawn for many rows at once (one sampler per sequence), then taken in row order.
    struct Draw {
        int32_t id;
        bool stops;  // the end of generation, and the request does not ignore it
        std::optional<TokenLogprob> logprob;
    };
    Draw draw(Active& a, std::span<const float> logits) const;
    std::vector<Draw> forward_and_draw(std::span<const Engine::Chunk> batch, std::span<Active* const> rows);
    void take(Active& a, Draw d);
    void finish(Active& a, FinishReason why);
    std::shared_ptr<const grammar::Vocab> grammar_vocab();  // built on first use, shared by all grammars

    Engine& engine_;
    const Tokenizer& tok_;
    int64_t budget_;
    mutable std::mutex mu_;            // guards incoming_ and cancelled_
    std::vector<ActivePtr> incoming_;  // submitted, not yet seen by step()
    std::vector<uint64_t> cancelled_;
    std::atomic<uint64_t> next_id_{1};
    std::deque<ActivePtr> waiting_;   // admission order; preempted requests go back to the front
    std::vector<ActivePtr> running_;  // admission order (the youngest last)
    int64_t preemptions_ = 0;
    std::once_flag vocab_once_;
    std::shared_ptr<const grammar::Vocab> vocab_;
};

}  // namespace minfer
