#include "backend/cuda/cuda_util.h"

#include <cuda_runtime.h>

#include "util/env.h"
#include "util/error.h"

namespace minfer::cuda {

void check(int status, const char* what) {
    if (status == cudaSuccess) return;
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(cudaError_t(status)));
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" status
        return 0;
    }
    return n;
}

void use_device(int d) {
    check(cudaSetDevice(d), "cudaSetDevice");
}

int64_t device_free_bytes() {
    size_t free = 0, total = 0;
    if (device_count() == 0 || cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return int64_t(free);
}

namespace {

// The current device's compute capability major version; 0 when it cannot be read. Read once.
int compute_major() {
    static const int major = [] {
        int dev = 0, m = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        return m;
    }();
    return major;
}

}  // namespace

bool early_launch() {
    static const bool on = !env_flag("MINFER_NO_PDL") && compute_major() >= 9;
    return on;
}

bool block_clusters() {
    return compute_major() >= 9;
}

int64_t gpu_warps() {
    static const int64_t n = [] {
        int dev = 0, sms = 0;
        MINFER_CUDA_CHECK(cudaGetDevice(&dev));
        MINFER_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        return int64_t(sms) * 32;
    }();
    return n;
}

}  // namespace minfer::cuda
