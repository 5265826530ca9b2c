// GraphParams: every knob that decides graph topology, and nothing else. Equal params build an
// identical graph, so reuse is a comparison of these fields. n_past is deliberately absent: how many
// tokens the KV cache holds is execution data (the positions input), not structure.
#pragma once
#include <cstdint>

namespace minfer {

enum class GraphType : uint8_t { Prefill, Decode };

struct CParams {
    int64_t n_ctx = 4096;  // sizes the persistent KV regions
    bool flash_attn = false;
    bool gpu = false;      // a GPU backend participates (enables the decode fusions)
    bool fuse_qkv = true;  // MINFER_NO_FUSE_QKV=1 turns off
    bool fuse_ffn = true;  // MINFER_NO_FUSE_FFN=1 turns off
    bool operator==(const CParams&) const = default;
    // Defaults with the fusion toggles read from the environment.
    static CParams from_env(int64_t n_ctx, bool gpu);
};

struct GraphParams {
    int64_t n_tokens = 1;  // tokens in this forward pass
    int64_t n_out = 1;     // rows of logits wanted (the last n_out tokens)
    GraphType gtype = GraphType::Decode;
    CParams cparams;
    uint64_t weights_version = 0;
    bool operator==(const GraphParams&) const = default;

    static GraphParams make(int64_t n_tokens, int64_t n_out, const CParams& cp,
                            uint64_t weights_version = 0) {
        return {n_tokens, n_out, n_tokens > 1 ? GraphType::Prefill : GraphType::Decode, cp, weights_version};
    }
};

}  // namespace minfer
