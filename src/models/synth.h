// Writes a random-valued GGUF with a given architecture's exact tensor layout: small ones for tests
// (graph census, fused-vs-unfused) and full-size shapes for benchmarks (bench/synth).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/gguf.h"

namespace minfer {

struct SynthSpec {
    std::string arch = "qwen2";  // qwen2 (QKV bias), qwen3 (Q/K norms), llama, qwen3moe, gemma3
    int n_layer = 2;
    int64_t n_embd = 64, n_head = 4, n_head_kv = 2, head_dim = 16, n_ff = 128, n_vocab = 256;
    int64_t n_ctx_train = 4096;
    // A mixture-of-experts architecture (qwen3moe) gets n_expert experts of width n_ff_exp, n_expert_used
    // per token, instead of the dense FFN.
    int64_t n_expert = 8, n_expert_used = 2, n_ff_exp = 32;
    int64_t n_swa = 0;  // > 0: written as attention.sliding_window (gemma3's local layers)
    bool tied_output = true;
    GgmlType type = GgmlType::F32;  // type of the 2-D matrices; norms and biases stay F32
    // Type for matrices whose rows `type` cannot hold (row length not a multiple of its block, e.g. 896
    // for a 256-block K-quant), as llama-quantize falls back; unset: such a matrix is an Error.
    std::optional<GgmlType> fallback_type;
    // llama-quantize's _M mixes: the output matrix (the embedding when tied), and attn_v and ffn_down of
    // the layers use_more_bits picks, take this type (with its own fallback); unset: `type` everywhere.
    std::optional<GgmlType> more_bits_type, more_bits_fallback;
    // Extra metadata written after the hyperparameters (e.g. a real vocabulary's tokenizer.* keys).
    std::vector<std::pair<std::string, GgufValue>> extra_metadata;
    uint64_t seed = 1;
};

void write_synth_model(const SynthSpec& s, const std::string& path);

// Whether layer il of n gets more bits in llama-quantize's _M mixes: the first and last eighth of the
// layers, and every third layer between them.
bool use_more_bits(int il, int n);

}  // namespace minfer
