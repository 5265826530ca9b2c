// Writes a random-valued GGUF with a given architecture's exact tensor layout: small ones for tests
// (graph census, fused-vs-unfused) and full-size shapes for benchmarks (bench/synth).
#pragma once
#include <cstdint>
#include <string>

#include "gguf/ggml_type.h"

namespace minfer {

struct SynthSpec {
    std::string arch = "qwen2";  // qwen2 (QKV bias), qwen3 (Q/K norms), llama
    int n_layer = 2;
    int64_t n_embd = 64, n_head = 4, n_head_kv = 2, head_dim = 16, n_ff = 128, n_vocab = 256;
    int64_t n_ctx_train = 4096;
    bool tied_output = true;
    GgmlType type = GgmlType::F32;  // type of the 2-D matrices; norms and biases stay F32
    uint64_t seed = 1;
};

void write_synth_model(const SynthSpec& s, const std::string& path);

}  // namespace minfer
