// Step observers installed from the environment by Session: they see every executed node of every
// forward step (step 0 is a session's first forward, usually the prompt prefill; each later forward,
// usually one decoded token, is the next step).
//   MINFER_TRACE=PATH       one JSON line per executed node: step, node, name, op, shape, backend,
//                           wall time in us and, when the node has an f32 output buffer, min, max,
//                           mean and the NaN count of that buffer (min/max/mean skip NaNs). KV stores
//                           write only into the cache: their lines carry no stats. Input leaves are
//                           filled, not executed, so they are not traced.
//   MINFER_GRAPH_DUMP=DIR   DIR/step<S>_node<ID>.f32 (raw little-endian f32) for each executed node with
//                           an f32 output buffer, and DIR/index.json, rewritten after each step, listing
//                           every dumped file as {step, node, name, op, shape, file}.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sched/executor.h"

namespace minfer {

class StepObserver : public NodeObserver {
  public:
    virtual void begin_step(int64_t step) = 0;
    virtual void end_step() = 0;
};

// Over the first n floats, NaNs excluded from min/max/mean (which are NaN when every value is).
struct BufferStats {
    float min = 0, max = 0;
    double mean = 0;
    int64_t nan = 0;
};
BufferStats buffer_stats(const float* data, int64_t n);

class TraceWriter final : public StepObserver {
  public:
    explicit TraceWriter(const std::string& path);  // truncates; Error naming the path on failure
    void begin_step(int64_t step) override { step_ = step; }
    void on_node(const CNode& n, const float* data, double us) override;
    void end_step() override;  // flushes; Error on a write failure

  private:
    std::string path_;
    std::ofstream out_;
    int64_t step_ = 0;
};

class GraphDumper final : public StepObserver {
  public:
    explicit GraphDumper(const std::string& dir);  // creates dir; Error naming it on failure
    void begin_step(int64_t step) override { step_ = step; }
    void on_node(const CNode& n, const float* data, double us) override;
    void end_step() override;  // (re)writes index.json

  private:
    std::string dir_;
    nlohmann::json index_ = nlohmann::json::array();
    int64_t step_ = 0;
};

class ObserverSet final : public StepObserver {
  public:
    void add(std::unique_ptr<StepObserver> o) { list_.push_back(std::move(o)); }
    bool empty() const { return list_.empty(); }
    void begin_step(int64_t step) override;
    void on_node(const CNode& n, const float* data, double us) override;
    void end_step() override;

  private:
    std::vector<std::unique_ptr<StepObserver>> list_;
};

// The observers that MINFER_TRACE and MINFER_GRAPH_DUMP ask for; nullptr when neither is set (or
// both are empty).
std::unique_ptr<StepObserver> observers_from_env();

}  // namespace minfer
