// Tensor parallelism's split of a model, Megatron's: rank r of N holds
// - attention by K/V group: n_head_kv / N K/V heads and their query heads (rows of attn_q/k/v and their
//   biases; Qwen3's per-head norms whole);
// - attn_output's input columns of those heads, when they are whole blocks of its type (an AllReduce of
//   the partial products follows); otherwise all of it, after an AllGather of every rank's heads;
// - the FFN's columns in whole blocks of ffn_down's type, spread as evenly as they go (rows of ffn_gate
//   and ffn_up, input columns of ffn_down; an AllReduce follows);
// - when N divides the vocabulary, its rows of token_embd and output (a masked lookup and an AllReduce;
//   logits gathered); otherwise both whole;
// - the norms whole.
// Row slices point into the whole model's file; column slices are copied block by block.
#pragma once
#include <memory>

#include "models/model.h"

namespace minfer {

// Rank `rank` of `ranks`; the whole model (and its file) must outlive the shard. Throws Error naming the
// tensor or count that does not split: K/V heads not divisible by N, fewer FFN blocks than ranks.
std::unique_ptr<Model> shard_model(const Model& whole, int rank, int ranks);

}  // namespace minfer
