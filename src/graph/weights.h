// The weights a model's graphs read, grouped as a backend with its own memory uploads them at
// construction. It lives beside WeightRef so that models/ fills it and backends read it without
// either seeing the other: a backend runs graphs, whatever model built them.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace minfer {

struct WeightSet {
    struct Layer {
        WeightRef q, k, v;                // the projections a fused QKV product reads as one matrix
        std::vector<WeightRef> matrices;  // every other 2-D weight of the layer
        std::vector<WeightRef> experts;   // a mixture's stacked expert matrices (n_out = rows * n_expert)
        std::vector<WeightRef> vectors;   // norms and biases (an expert bias: n_in per expert, n_out
                                          // experts); absent ones (!present()) are skipped
    };
    std::vector<Layer> layers;
    WeightRef tok_embd;  // read by rows (get_rows), not multiplied
    WeightRef output;    // the same tensor as tok_embd when the embeddings are tied
    WeightRef output_norm;
};

}  // namespace minfer
