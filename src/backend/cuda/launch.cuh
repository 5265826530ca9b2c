// Kernel launches with programmatic dependent launch (Hopper, sm_90). A kernel launched through
// `launch` may have its blocks scheduled while the previous kernel in the stream still runs: it first
// does what depends on no earlier kernel (the matvec prefetches its weights into L2), then waits in
// wait_for_inputs() until the previous kernel has finished and its writes are visible. Decode runs a
// few hundred short kernels per token, so hiding each one's launch and first DRAM round trip behind
// its predecessor is worth more than any single kernel's speed. MINFER_NO_PDL=1 launches normally.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_util.h"

namespace minfer::cuda {

// Every kernel launched through `launch` calls this before it reads anything an earlier kernel wrote
// and before it writes anything. A no-op for a normal launch.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream schedule its blocks now; they run up to their own
// wait_for_inputs(), which still waits for this whole kernel to finish.
__device__ __forceinline__ void release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The start of a kernel that has nothing to do before its inputs are ready.
__device__ __forceinline__ void begin_kernel() {
    release_next();
    wait_for_inputs();
}

// Fetches the 128-byte line holding p into L2 without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Of the `steps` a thread walks through a matrix of `bytes`, how many it prefetches into L2 before its
// input is ready: all of a matrix up to 16 MB, that share of a larger one (well below the H200's 50 MB
// of L2, so the lines survive until read).
inline int prefetch_steps(int64_t steps, double bytes) {
    constexpr double kPrefetchBytes = 16 << 20;
    return int(std::ceil(double(steps) * std::min(1.0, kPrefetchBytes / bytes)));
}

// Launches kernel<<<grid, block, shmem, s>>>(args...) in thread-block clusters of `cluster` blocks
// (dim3(1, 1, 1): none; needs block_clusters()), early when the device allows it.
template <class... Params, class... Args>
void launch_clustered(const char* what, void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block,
                      size_t shmem, cudaStream_t s, Args... args) {
    cudaLaunchAttribute attrs[2]{};
    unsigned n = 0;
    if (early_launch()) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        attrs[n].id = cudaLaunchAttributeClusterDimension;
        attrs[n].val.clusterDim.x = cluster.x;
        attrs[n].val.clusterDim.y = cluster.y;
        attrs[n++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = s;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    check(int(cudaLaunchKernelEx(&cfg, kernel, Params(args)...)), what);
}

// Launches kernel<<<grid, block, shmem, s>>>(args...), early when the device allows it.
template <class... Params, class... Args>
void launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
            Args... args) {
    launch_clustered(what, kernel, grid, dim3(1, 1, 1), block, shmem, s, args...);
}

}  // namespace minfer::cuda
