// Embedding pooling: the rows Engine::embed returns ([n][n_embd], the final norm's hidden states, before
// lm_head) become one vector, L2-normalised as llama-server's /v1/embeddings returns it.
//
//   const Pooling p = embedding_pooling(Pooling::Unspecified, model.hp);  // the file's, else Mean
//   std::vector<float> v = pool_rows(engine.embed(ids), model.hp.n_embd, p);   // [n_embd]
//   l2_normalize(v);
//
// The default when the GGUF has no <arch>.pooling_type: Mean. llama.cpp reads the key for its Qwen2 /
// Qwen3 (and encoder) architectures and otherwise takes None, which its /v1/embeddings refuses ("Pooling
// type 'none' is not OAI compatible"); `--pooling mean` is the usual remedy. minfer serves instead, with
// mean pooling: it assumes least about how the model was trained. Last-token pooling suits only models
// trained for it, and their files say so (Qwen3-Embedding's converter writes pooling_type = 3).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"

namespace minfer {

const char* pooling_name(Pooling p);  // "mean", "cls", "last", "none", "rank", "unspecified"
// The pooling embeddings use: `requested` (minfer serve --pooling) unless Unspecified, else the model's
// <arch>.pooling_type when present, else Mean.
Pooling embedding_pooling(Pooling requested, const Hparams& hp);
// Whether p makes one vector of an input's rows: mean, cls (the first row) or last (the last row).
bool pools_to_vector(Pooling p);
// rows: [n][d], n >= 1 -> [d]. The mean is summed in double. Throws Error when !pools_to_vector(p).
std::vector<float> pool_rows(std::span<const float> rows, int64_t d, Pooling p);
// v / |v| (norm summed in double); a zero vector stays zero.
void l2_normalize(std::span<float> v);

}  // namespace minfer
