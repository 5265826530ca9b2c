// One generation at a time for `minfer viz`: a worker thread resets the session, runs the generation
// loop on it and publishes "start", "token" and "done" events (the observer adds the "step" events). A
// request while one runs is refused (the caller answers 409), not queued.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "viz/live.h"

namespace minfer::viz {

struct GenerationAsk {
    std::string prompt;
    std::vector<int32_t> ids;  // the prompt, tokenized
    int64_t n_predict = 16;
    float temperature = 0;  // 0: greedy
    uint64_t seed = 0;
};

class Runner {
  public:
    Runner(Session& s, const Tokenizer& tok, EventLog& log, HistogramStore& hists)
        : s_(s), tok_(tok), log_(log), hists_(hists) {}
    ~Runner();  // cancels a running generation and joins it

    // Starts `a` on the worker; false (nothing started) while a generation runs. `id` is its number.
    bool start(GenerationAsk a, uint64_t& id);
    bool busy() const { return busy_; }
    void cancel() { cancel_ = true; }  // the running generation stops before its next token
    int64_t n_ctx() const { return s_.n_ctx(); }

  private:
    void run(const GenerationAsk& a, uint64_t id);

    Session& s_;
    const Tokenizer& tok_;
    EventLog& log_;
    HistogramStore& hists_;
    std::mutex mu_;  // guards start()
    std::thread worker_;
    std::atomic<bool> busy_{false}, cancel_{false};
    uint64_t next_id_ = 1;
};

}  // namespace minfer::viz
