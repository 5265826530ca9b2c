// The live half of `minfer viz`: a StepObserver that turns every observed forward step into one SSE
// "step" event (per node: wall time in us, min/max/mean/NaN of its f32 output) and keeps a histogram of
// every node's output of the latest step of each graph; and the event log that SSE viewers read.
//
// EventLog holds the events of the current generation (a new one clears it, bumping the epoch), so a
// viewer that connects or reloads mid-way, or after the end, replays that generation from its start.
//
//   EventLog log;
//   HistogramStore hists;
//   session.add_observer(std::make_unique<LiveObserver>(log, hists));
//   log.reset(); log.publish("start", {...}); generate(...);   // "step" events come from the observer
//   EventLog::Cursor c; std::string text = log.wait(c, 250ms);  // an SSE viewer
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/observe.h"
#include "viz/graph_view.h"

namespace minfer::viz {

class EventLog {
  public:
    struct Cursor {
        uint64_t epoch = 0;  // the generation the viewer has read from
        size_t next = 0;     // the next event of it to send
    };
    void reset();  // a new generation: drops the events, bumps the epoch
    void publish(const std::string& event, const nlohmann::json& data);  // appends one SSE event
    // The SSE text of the events after `c` (from the start when the epoch moved on), waiting up to
    // `timeout` for one; advances `c`. Empty when nothing came.
    std::string wait(Cursor& c, std::chrono::milliseconds timeout);
    void close();  // wakes every waiter for good (shutdown)
    bool closed() const;
    uint64_t epoch() const;

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> events_;  // framed: "event: NAME\ndata: {...}\n\n"
    uint64_t epoch_ = 1;
    bool closed_ = false;
};

// Counts of the finite values in kHistBins equal bins over [lo, hi] (their min and max); NaN and
// infinities are counted apart.
inline constexpr int kHistBins = 40;
struct Histogram {
    int64_t step = -1;
    NodeId node = -1;
    float lo = 0, hi = 0;
    std::vector<int64_t> bins;
    int64_t n = 0, nan = 0, inf = 0;
};
Histogram histogram(const float* data, int64_t n);
nlohmann::json histogram_json(const Histogram& h, GraphKind kind);

// The histogram of each node's output in the latest observed step of each graph kind.
class HistogramStore {
  public:
    void put(GraphKind k, Histogram h);
    bool get(GraphKind k, NodeId node, Histogram& out) const;  // false when none was observed
    void clear();

  private:
    mutable std::mutex mu_;
    std::vector<Histogram> by_kind_[2];  // indexed by node id
};

class LiveObserver final : public StepObserver {
  public:
    LiveObserver(EventLog& log, HistogramStore& hists) : log_(log), hists_(hists) {}
    void begin_step(int64_t step) override;
    // The step's graph is told by its first executed node, the embedding [n_embd, nt]: nt tokens.
    void on_node(const CNode& n, const float* data, double us) override;
    void end_step() override;  // publishes {"step", "graph", "n_tokens", "total_us", "nodes"}

  private:
    EventLog& log_;
    HistogramStore& hists_;
    int64_t step_ = 0, n_tokens_ = 0;
    double total_us_ = 0;
    nlohmann::json nodes_;               // [[id, us, min, max, mean, nan] | [id, us], ...]
    std::vector<Histogram> step_hists_;  // this step's, stored at its end
};

}  // namespace minfer::viz
