// Warp and block reductions shared by the CUDA kernels.
#pragma once

namespace minfer::cuda {

constexpr int kWarpSize = 32;

__device__ inline float warp_sum(float v) {
    for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// All threads of the block must call it.
__device__ inline float block_sum(float v) {
    __shared__ float part[kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int n_warps = blockDim.x / kWarpSize;
    v = warp_sum(v);
    __syncthreads();  // `part` may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < n_warps ? part[lane] : 0.0f;
    return warp_sum(v);
}

}  // namespace minfer::cuda
