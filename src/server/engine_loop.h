// The scheduler thread: it alone owns the Engine and its Scheduler and steps them while work remains.
// HTTP threads submit jobs (one request's n choices) and wait on the job's state for streamed text; the
// queue is bounded (choices running or waiting), a full one refuses with 503. A job of n > 1 choices
// submits its first choice at once and the others once the first has its first token, so their prompt's
// full KV blocks come from the prefix cache instead of being computed n times. Embeddings are a job kind
// of their own: the thread runs them between steps, each input on a sequence slot of its own while one
// is free and the pool holds its blocks (otherwise once a running request ends), and the HTTP thread
// waits for the vectors.
//
//   EngineLoop loop(model, engine_params, tokenizer, metrics, {.max_queue = 64});
//   std::shared_ptr<Job> job = loop.submit(prompt_ids, gen, 1);
//   while (job->wait(last_version, 100ms)) { ... job->take_text(0) ... }   // until job->all_done()
//   loop.cancel(*job);   // a client that went away: its blocks return to the pool within one step
//   std::vector<std::vector<float>> v = loop.embed({ids_a, ids_b}, Pooling::Mean);  // blocks until done
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "server/api_error.h"
#include "server/metrics.h"

namespace minfer::server {

using Clock = std::chrono::steady_clock;

// One request's choices as the scheduler thread fills them in; every member is guarded by `mu`.
struct Job {
    struct Choice {
        uint64_t id = 0;      // the scheduler's id, 0 until submitted
        std::string pending;  // streamed text not yet taken by the HTTP thread
        bool done = false;
        GenerationResult result;             // once done
        std::vector<TokenLogprob> logprobs;  // per generated token, when asked
    };

    // Waits until something changed since `seen` (then updates it) or `timeout` passed; false on timeout.
    bool wait(uint64_t& seen, std::chrono::milliseconds timeout);
    std::string take_text(size_t choice);  // the pending text of a choice, emptied
    bool all_done() const;                 // callers hold mu

    mutable std::mutex mu;
    std::condition_variable cv;
    uint64_t version = 0;  // bumped on every change
    std::vector<Choice> choices;
    std::vector<GenerationRequest> followers;  // choices 1..n-1 until choice 0 has its first token
    bool cancelled = false;
    std::string error;  // set when the engine failed: the job ends with a 500 naming it
    Clock::time_point submitted, first_token;
};

struct LoopOptions {
    int max_queue = 64;  // choices waiting beyond the engine's sequence slots
};

class EngineLoop {
  public:
    EngineLoop(const Model& m, const EngineParams& p, const Tokenizer& tok, Metrics& metrics,
               const LoopOptions& o);
    ~EngineLoop();  // cancels what is left and joins the thread

    // n choices of `prompt` (choice i samples with seed + i), each token's logprob and n_logprobs
    // alternatives recorded when n_logprobs >= 0. Throws ApiError: 400 when the prompt does not fit the
    // context, 503 when the queue is full or the server is shutting down.
    std::shared_ptr<Job> submit(const std::vector<int32_t>& prompt, const GenerateParams& gen, int n,
                                int n_logprobs = -1, const GrammarSpec& grammar = {});
    void cancel(Job& job);  // any thread; a no-op for a finished job
    // Stops accepting, waits up to `grace` for the jobs in flight, then cancels the rest and waits up to
    // a second for them to end.
    void drain(std::chrono::milliseconds grace);

    // One [n_embd] vector per input (token ids, 1..n_ctx() of them): the final norm's hidden states
    // pooled with `pooling` (mean, cls or last) and L2-normalised. Blocks until all are done. Throws
    // ApiError: 400 for an empty or too long input, an id out of range or a pooling that gives no vector,
    // 503 when the queue is full or the server is shutting down, 500 when the engine failed.
    std::vector<std::vector<float>> embed(std::vector<std::vector<int32_t>> inputs, Pooling pooling);

    int64_t n_ctx() const { return engine_.n_ctx(); }
    int max_seqs() const { return engine_.max_seqs(); }
    const Model& model() const { return engine_.model(); }

  private:
    struct EmbedJob;
    void run();
    void run_embeds();
    void fail_embeds(const ApiError& e);  // every queued embedding ends with e
    void publish_stats();
    void fail_all(const std::string& why);
    GenerationRequest request_for(const std::shared_ptr<Job>& job, size_t i,
                                  const std::vector<int32_t>& prompt, const GenerateParams& gen,
                                  int n_logprobs, const GrammarSpec& grammar);
    void on_text(Job& job, size_t i, std::string_view text);
    void on_done(Job& job, size_t i, const GenerationResult& r);
    void release_followers(Job& job);  // job.mu held
    void kick();

    Engine engine_;
    Scheduler sched_;
    Metrics& metrics_;
    LoopOptions opt_;
    std::mutex mu_;  // guards the members below
    std::condition_variable cv_;
    bool kicked_ = false, stop_ = false, draining_ = false;
    int64_t reserved_ = 0;                          // choices submitted and not done (followers included)
    std::vector<std::shared_ptr<Job>> jobs_;        // in flight
    std::deque<std::shared_ptr<EmbedJob>> embeds_;  // queued embeddings, oldest first
    std::thread thread_;
};

}  // namespace minfer::server
