// Shared helpers for the golden tests: reference loading and the greedy / teacher-forced drivers.
#pragma once
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace minfer::test {

// The device the golden tests run on: MINFER_TEST_DEVICE=cuda runs them on the GPU (default cpu);
// MINFER_TEST_KV_TYPE=f16 or q8_0 measures another KV cache type against the same references.
inline SessionParams golden_params(int64_t n_ctx) {
    const char* d = std::getenv("MINFER_TEST_DEVICE");
    const char* kv = std::getenv("MINFER_TEST_KV_TYPE");
    const bool cuda = d && std::strcmp(d, "cuda") == 0;
    SessionParams p{n_ctx, 2, cuda ? BackendKind::Cuda : BackendKind::Cpu};
    if (kv && std::strcmp(kv, "f16") == 0) p.kv_type = GgmlType::F16;
    if (kv && std::strcmp(kv, "q8_0") == 0) p.kv_type = GgmlType::Q8_0;
    return p;
}

inline nlohmann::json load_json(const std::string& path) {
    std::ifstream f(path);
    return nlohmann::json::parse(f);
}

// Greedy continuation of `prompt` for n tokens; end-of-generation does not stop it.
inline std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, int n) {
    s.reset();
    std::vector<int32_t> out;
    std::span<const float> logits = s.forward(prompt, 1);
    for (int i = 0; i < n; ++i) {
        out.push_back(argmax(logits));
        if (i + 1 < n) logits = s.forward(std::span<const int32_t>(&out.back(), 1), 1);
    }
    return out;
}

// Teacher-forced logits over `ids`: [n_ids][n_vocab].
inline std::vector<float> teacher_forced(Session& s, const std::vector<int32_t>& ids) {
    s.reset();
    const std::span<const float> l = s.forward(ids, int64_t(ids.size()));
    return {l.begin(), l.end()};
}

}  // namespace minfer::test
