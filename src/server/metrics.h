// Server counters in Prometheus' text format (GET /metrics): requests running and waiting, prompt and
// generated token totals and the seconds they took, KV blocks used and total, prefix-cache hit tokens.
// Plain atomics: the scheduler thread writes the engine's numbers after every step, HTTP threads read.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace minfer::server {

struct Metrics {
    std::atomic<int64_t> requests_running{0}, requests_waiting{0};  // sequences (choices), not HTTP requests
    std::atomic<int64_t> requests_done{0}, requests_rejected{0};    // finished choices; 503s for a full queue
    std::atomic<int64_t> prompt_tokens{0}, generated_tokens{0};
    std::atomic<int64_t> prompt_us{0}, generate_us{0};  // submit to first token; first token to the end
    std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_total{0};
    std::atomic<int64_t> kv_window_blocks_used{0}, kv_window_blocks_total{0};  // 0 without a window pool
    std::atomic<int64_t> prefix_hit_tokens{0}, preemptions{0};

    std::string render() const;
};

}  // namespace minfer::server
