// GraphParams: every knob that decides graph topology, and nothing else. Equal params build an
// identical graph, so reuse is a comparison of these fields. n_past is deliberately absent: how many
// tokens the KV cache holds is execution data (the positions input), not structure.
#pragma once
#include <cstdint>

#include "gguf/ggml_type.h"

namespace minfer {

enum class GraphType : uint8_t { Prefill, Decode };

// What the graph's output holds, per wanted row: the logits [n_vocab, n_out]; their argmax [n_out] i32
// (greedy decoding, so a device sends back ids, not rows of the vocabulary); or the final norm's hidden
// state [n_embd, n_out], the graph stopping before lm_head (embeddings).
enum class GraphOutput : uint8_t { Logits, Argmax, Hidden };
const char* graph_output_name(GraphOutput o);  // "logits", "argmax", "hidden"

// The KV layout: n_ctx token slots shared by every sequence, in blocks of kv_block slots (a power of two,
// at least 16, dividing n_ctx; or 0: one block of n_ctx, the unpaged layout of a single sequence); a
// forward's tokens belong to at most max_seqs sequences, each reaching at most max_blocks() blocks
// through its row of the block table.
struct CParams {
    int64_t n_ctx = 4096;  // KV token slots: sizes the persistent KV regions
    int64_t kv_block = 0;  // token slots per KV block; 0: unpaged
    int64_t max_seqs = 1;  // rows of the block table
    // Token slots of the sliding-window layers when they keep their own blocks (a second block table,
    // window_block_table, of the same shape): a model mixing window and global layers keeps only each
    // sequence's window there. 0: every layer has n_ctx slots and the one table.
    int64_t window_ctx = 0;
    GgmlType kv_type = GgmlType::F32;  // K/V element type (--kv-type): F32, F16 or Q8_0
    bool flash_attn = false;
    bool gpu = false;      // a GPU backend participates (enables the decode fusions)
    bool fuse_qkv = true;  // MINFER_NO_FUSE_QKV=1 turns off
    bool fuse_ffn = true;  // MINFER_NO_FUSE_FFN=1 turns off
    bool operator==(const CParams&) const = default;
    int64_t block() const { return kv_block > 0 ? kv_block : n_ctx; }
    int64_t max_blocks() const { return n_ctx / block(); }  // block-table entries per sequence
    // More than one block or sequence: the graph takes seq_slot and block_table inputs. Otherwise a
    // token's KV slot is its position (the unpaged layout the GPU kernels address).
    bool paged() const { return max_blocks() > 1 || max_seqs > 1; }
    // Defaults with the fusion toggles read from the environment.
    static CParams from_env(int64_t n_ctx, bool gpu);
};

struct GraphParams {
    int64_t n_tokens = 1;  // tokens in this forward pass
    int64_t n_out = 1;     // rows of logits wanted (the out_ids input names them when n_out < n_tokens)
    GraphType gtype = GraphType::Decode;
    CParams cparams;
    uint64_t weights_version = 0;
    GraphOutput output = GraphOutput::Logits;
    bool operator==(const GraphParams&) const = default;

    static GraphParams make(int64_t n_tokens, int64_t n_out, const CParams& cp, uint64_t weights_version = 0,
                            GraphOutput output = GraphOutput::Logits) {
        return {n_tokens, n_out,           n_tokens > 1 ? GraphType::Prefill : GraphType::Decode,
                cp,       weights_version, output};
    }
};

}  // namespace minfer
