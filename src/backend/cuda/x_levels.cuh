// The int8 levels of activations quantized per 32 consecutive elements, shared by the dp4a
// matrix-vector kernels (quant_dp4a.cu) and the tensor-core products (quant_mma.cu), so that both read
// x quantized by the same arithmetic (quant_cuda.h, matvec_int8_x, describes the two formats).
#pragma once
#include <cstdint>

namespace minfer::cuda {

__device__ __forceinline__ uint32_t pack4(int a, int b, int c, int d) {
    return (uint32_t(a) & 0xFF) | (uint32_t(b) & 0xFF) << 8 | (uint32_t(c) & 0xFF) << 16 | uint32_t(d) << 24;
}

// The levels of four elements of one 32-element block with max |x| = amax: one (q) or two (hi, lo, as
// the CPU's quantize_q8x2 computes them); d is the block's step and sum their 254 hi + lo (or q) sum.
template <int kL>
__device__ __forceinline__ void levels4(const float4& v, float amax, uint32_t (&w)[kL], float& d, int& sum) {
    const float x[4] = {v.x, v.y, v.z, v.w};
    int q[kL][4];
    if constexpr (kL == 1) {
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        d = amax / 127.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) q[0][e] = __float2int_rn(x[e] * id);
        sum = q[0][0] + q[0][1] + q[0][2] + q[0][3];
    } else {
        d = amax / (127.0f * 254.0f);
        const float ih = d != 0.0f ? 1.0f / (254.0f * d) : 0.0f, il = d != 0.0f ? 1.0f / d : 0.0f;
        sum = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            q[0][e] = __float2int_rn(x[e] * ih);
            q[1][e] = __float2int_rn(fmaf(-d, float(254 * q[0][e]), x[e]) * il);
            sum += 254 * q[0][e] + q[1][e];
        }
    }
#pragma unroll
    for (int l = 0; l < kL; ++l) w[l] = pack4(q[l][0], q[l][1], q[l][2], q[l][3]);
}

}  // namespace minfer::cuda
