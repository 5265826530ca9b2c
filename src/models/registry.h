// Architecture registry: the general.architecture string -> that architecture's graph builder.
// Adding an architecture = one file in src/models/ + one line in registry.cpp + one golden test.
#pragma once
#include <string>

#include "models/model.h"

namespace minfer {

// An architecture's facts: its graph builder, how RoPE pairs the dimensions, and which optional tensors
// its layers hold (minfer-synth writes them; the loader requires the Q/K norms, the biases it takes when
// present).
struct ArchInfo {
    const char* name;
    GraphBuildFn build;
    RopeStyle rope_style;
    bool qkv_bias;  // attn_{q,k,v}.bias (Qwen2)
    bool qk_norm;   // attn_{q,k}_norm.weight, per-head RMSNorm of Q and K (Qwen3)
    bool moe;       // a mixture of experts (ffn_gate_inp, ffn_{gate,up,down}_exps) instead of the dense FFN
    bool post_norms = false;            // post_attention_norm.weight and post_ffw_norm.weight (Gemma)
    bool attn_sinks = false;            // attn_sinks.weight, a sink logit per head (gpt-oss)
    bool expert_biases = false;         // ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias (gpt-oss)
    const char* ffn_norm = "ffn_norm";  // the FFN's input norm ("post_attention_norm" in gpt-oss)
};

// nullptr when `arch` is unknown.
const ArchInfo* find_arch(const std::string& arch);
std::string known_archs();  // "qwen2, qwen3, llama, ..."

ComputeGraph build_qwen2(const Model& m, const GraphParams& p);
ComputeGraph build_qwen3(const Model& m, const GraphParams& p);
ComputeGraph build_llama(const Model& m, const GraphParams& p);
ComputeGraph build_qwen3moe(const Model& m, const GraphParams& p);
ComputeGraph build_gemma3(const Model& m, const GraphParams& p);
ComputeGraph build_gptoss(const Model& m, const GraphParams& p);

}  // namespace minfer
