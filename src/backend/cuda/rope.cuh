// The RoPE rotation angle shared by the rope kernel and the QKV epilogue.
#pragma once
#include <cstdint>

#include "backend/cuda/ops_cuda.h"

namespace minfer::cuda {

// cos and sin of pair i's angle at position p, in double as the CPU reference (cpu::RopeFreq) computes
// them: p * freq_scale * base^(-2i/n_rot), or with YaRN p times the blend of the scaled and unscaled
// frequencies, cos and sin then times yarn_mscale.
__device__ inline void rope_cos_sin(int32_t p, int64_t i, const RopeShape& r, float& c, float& s) {
    const double extrap = pow(double(r.freq_base), -2.0 * double(i) / double(r.n_rot));
    double theta = double(p) * double(r.freq_scale) * extrap, m = 1.0;
    if (r.yarn_high > 0.0) {
        const double span = r.yarn_high > r.yarn_low ? r.yarn_high - r.yarn_low : 0.001;
        const double keep = 1.0 - fmin(fmax((double(i) - r.yarn_low) / span, 0.0), 1.0);
        theta = double(p) * (extrap * double(r.freq_scale) * (1.0 - keep) + extrap * keep);
        m = r.yarn_mscale;
    }
    double sd, cd;
    sincos(theta, &sd, &cd);
    c = float(cd * m);
    s = float(sd * m);
}

}  // namespace minfer::cuda
