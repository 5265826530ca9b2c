// A loaded model: hyper-parameters and weight references read from the GGUF, and the architecture's
// graph builder. Weights stay inside `file` (mapped, or read into huge pages); the graph names them, the
// executor reads them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/params.h"
#include "graph/weights.h"

namespace minfer {

class GgufFile;

// How an embedding pools the hidden states of its rows into one vector: llama.cpp's llama_pooling_type,
// as the GGUF key <arch>.pooling_type stores it (Unspecified when the key is absent). None gives no
// single vector; Rank is a reranker's classification head, which minfer does not run.
enum class Pooling : int8_t { Unspecified = -1, None = 0, Mean = 1, Cls = 2, Last = 3, Rank = 4 };

struct Hparams {
    std::string arch;  // "qwen2", "qwen3", "llama", "qwen3moe", "gemma3"
    int n_layer = 0;
    int64_t n_embd = 0;  // hidden width
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;  // may differ from n_embd / n_head (Qwen3)
    int64_t n_ff = 0;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_rot = 0;  // rotated dims per head
    float rms_eps = 1e-6f;
    float rope_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor when rope.scaling.type is linear
    float rope_base_swa = 0.0f;    // rope.freq_base_swa: sliding-window layers' RoPE base (0: absent)
    int64_t n_swa = 0;             // attention.sliding_window: a sliding-window layer's window (0: none)
    // rope.scaling.type "yarn": its factor (0: no YaRN), original context and correction betas. The
    // architectures that take YaRN build it from these (gpt-oss); the others leave it out.
    float yarn_factor = 0.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
    int64_t yarn_orig_ctx = 0;
    RopeStyle rope_style = RopeStyle::Neox;
    Pooling pooling = Pooling::Unspecified;  // <arch>.pooling_type
    // Mixture of experts (0 experts: a dense FFN): n_expert_used of n_expert experts per token, each an
    // FFN of width n_ff_exp; the router's gating, and whether the chosen probabilities are renormalised.
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
    ExpertGating expert_gating = ExpertGating::Softmax;
    bool expert_norm = true;
    int64_t n_kv_embd() const { return n_head_kv * head_dim; }
    int64_t n_q_embd() const { return n_head * head_dim; }
};

struct LayerWeights {
    WeightRef attn_norm;         // [n_embd]
    WeightRef wq, wk, wv, wo;    // [n_embd, n_q_embd], [n_embd, n_kv_embd] x2, [n_q_embd, n_embd]
    WeightRef bq, bk, bv;        // optional biases (Qwen2)
    WeightRef bo;                // optional [n_embd]: attn_output's bias (gpt-oss)
    WeightRef attn_sinks;        // optional [n_head]: each head's sink logit (gpt-oss)
    WeightRef q_norm, k_norm;    // optional per-head norms [head_dim] (Qwen3)
    WeightRef attn_post_norm;    // optional [n_embd]: RMSNorm of the attention output (Gemma)
    WeightRef ffn_norm;          // [n_embd]
    WeightRef ffn_post_norm;     // optional [n_embd]: RMSNorm of the FFN output (Gemma)
    WeightRef ffn_gate, ffn_up;  // [n_embd, n_ff]
    WeightRef ffn_down;          // [n_ff, n_embd]
    // Mixture of experts instead of ffn_gate/up/down: the router and the stacked experts (graph.h's
    // meta::MoeFfn: each [n_in, n_out, n_expert] tensor named as [n_in, n_out * n_expert]).
    WeightRef ffn_gate_inp;                    // [n_embd, n_expert]
    WeightRef ffn_gate_exps, ffn_up_exps;      // [n_embd, n_ff_exp * n_expert]
    WeightRef ffn_down_exps;                   // [n_ff_exp, n_embd * n_expert]
    WeightRef ffn_gate_inp_b;                  // optional [n_expert]: the router's bias (gpt-oss)
    WeightRef ffn_gate_exps_b, ffn_up_exps_b;  // optional [n_ff_exp, n_expert]: per-expert biases
    WeightRef ffn_down_exps_b;                 // optional [n_embd, n_expert]
};

// A model's part in a tensor-parallel group (models/shard.h): its rank's heads and K/V heads (Hparams'
// n_head, n_head_kv), FFN columns (n_ff) and, when the vocabulary splits, rows of the embedding and the
// lm_head from vocab_first (Hparams' n_vocab stays the whole vocabulary). A whole model is rank 0 of 1.
struct ShardInfo {
    int rank = 0, ranks = 1;
    int64_t vocab_first = 0;
    bool sharded() const { return ranks > 1; }
};

struct Model;
using GraphBuildFn = ComputeGraph (*)(const Model& m, const GraphParams& p);

struct Model {
    std::unique_ptr<GgufFile> file;
    Hparams hp;
    WeightRef tok_embd;     // [n_embd, n_vocab]
    WeightRef output_norm;  // [n_embd]
    WeightRef output;       // [n_embd, n_vocab]: token_embd when tied
    std::vector<LayerWeights> layers;
    GraphBuildFn build_graph = nullptr;
    ShardInfo shard;

    // Opens `path`, reads hyper-parameters for its architecture and checks every tensor the graph will
    // reference exists with a supported type and the expected shape. Throws Error naming the problem.
    static std::unique_ptr<Model> load(const std::string& path);
    // The same on a file already opened (mapped or read into huge pages).
    static std::unique_ptr<Model> from_file(std::unique_ptr<GgufFile> file);
    // Every weight, grouped by layer, for a backend that uploads them (CudaBackend).
    WeightSet weight_set() const;
    ~Model();
};

}  // namespace minfer
