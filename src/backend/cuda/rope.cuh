// The RoPE rotation angle shared by the rope kernel and the QKV epilogue.
#pragma once
#include <cstdint>

namespace minfer::cuda {

// cos and sin of pair i's angle at position p (times the linear scale), in double as the CPU reference
// computes them.
__device__ inline void rope_cos_sin(int32_t p, int64_t i, int64_t n_rot, float base, float scale, float& c,
                                    float& s) {
    const double theta = double(p) * double(scale) * pow(double(base), -2.0 * double(i) / double(n_rot));
    double sd, cd;
    sincos(theta, &sd, &cd);
    c = float(cd);
    s = float(sd);
}

}  // namespace minfer::cuda
