#include "server/metrics.h"

#include <cstdio>

namespace minfer::server {

namespace {

void add(std::string& out, const char* name, const char* type, const char* help, double value) {
    char line[64];
    std::snprintf(line, sizeof line, "%.9g", value);
    out += std::string("# HELP minfer_") + name + " " + help + "\n# TYPE minfer_" + name + " " + type +
           "\nminfer_" + name + " " + line + "\n";
}

}  // namespace

std::string Metrics::render() const {
    std::string out;
    add(out, "requests_processing", "gauge", "Sequences being generated.", double(requests_running));
    add(out, "requests_deferred", "gauge", "Sequences waiting for a slot or KV blocks.",
        double(requests_waiting));
    add(out, "requests_total", "counter", "Sequences finished.", double(requests_done));
    add(out, "requests_rejected_total", "counter", "Requests refused because the queue was full.",
        double(requests_rejected));
    add(out, "prompt_tokens_total", "counter", "Prompt tokens processed.", double(prompt_tokens));
    add(out, "prompt_seconds_total", "counter", "Seconds from submission to the first token.",
        double(prompt_us) * 1e-6);
    add(out, "tokens_predicted_total", "counter", "Tokens generated.", double(generated_tokens));
    add(out, "tokens_predicted_seconds_total", "counter", "Seconds from the first token to the end.",
        double(generate_us) * 1e-6);
    add(out, "kv_blocks_used", "gauge", "KV cache blocks held by sequences.", double(kv_blocks_used));
    add(out, "kv_blocks_total", "gauge", "KV cache blocks in the pool.", double(kv_blocks_total));
    add(out, "kv_window_blocks_used", "gauge", "Sliding-window layers' blocks held by sequences.",
        double(kv_window_blocks_used));
    add(out, "kv_window_blocks_total", "gauge", "Sliding-window layers' blocks (0: they share the pool).",
        double(kv_window_blocks_total));
    add(out, "prefix_cache_hit_tokens_total", "counter", "Prompt tokens reused from the prefix cache.",
        double(prefix_hit_tokens));
    add(out, "preemptions_total", "counter", "Sequences preempted for KV blocks (recomputed later).",
        double(preemptions));
    return out;
}

}  // namespace minfer::server
