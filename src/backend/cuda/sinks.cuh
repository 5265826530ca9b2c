// Attention sinks (gpt-oss) in the kernels' online softmax: a head's sink logit joins the softmax's sum at
// the end, after the keys, and weighs no row.
#pragma once
#include <cstdint>

namespace minfer::cuda {

// A softmax state (max m, sum l, unnormalised output acc) with a sink logit joined: the sum gains
// e^(sink - m') and acc and the sum are rescaled to the new max m' = max(m, sink).
struct SinkJoin {
    float scale, sum;  // acc * scale / sum is the output
};

__device__ inline SinkJoin join_sink(float m, float l, const float* sinks, int64_t h) {
    if (!sinks) return {1.0f, l};
    const float mm = fmaxf(m, sinks[h]), r = l > 0.0f ? expf(m - mm) : 0.0f;
    return {r, l * r + expf(sinks[h] - mm)};
}

}  // namespace minfer::cuda
