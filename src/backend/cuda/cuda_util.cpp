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

bool early_launch() {
    static const bool on = [] {
        int dev = 0, major = 0;
        if (env_flag("MINFER_NO_PDL") || cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return major >= 9;
    }();
    return on;
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
