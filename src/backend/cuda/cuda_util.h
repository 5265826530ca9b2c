// Error checking and device queries shared by the CUDA kernels, the backend and the tests.
#pragma once
#include <cstdint>

namespace minfer::cuda {

// Throws minfer::Error "CUDA error in <what>: <message>" when `status` (a cudaError_t) is not success.
void check(int status, const char* what);

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();

// Makes device d current on the calling thread (each tensor-parallel rank's thread, before its work).
void use_device(int d);

// Free bytes of the current device's memory (cudaMemGetInfo); 0 when there is no device.
int64_t device_free_bytes();

// Whether kernels may launch before their predecessor finishes (launch.cuh): a device of compute
// capability 9.0 or newer, and MINFER_NO_PDL unset. Read once.
bool early_launch();

// Whether the device runs thread-block clusters with distributed shared memory (compute capability 9.0
// or newer). Read once.
bool block_clusters();

// Warps that fill the current device: 32 per SM. Read once.
int64_t gpu_warps();

// Whether p lies on a 16-byte boundary (the kernels' vector loads and cp.async need it).
inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace minfer::cuda

#define MINFER_CUDA_CHECK(call) ::minfer::cuda::check(static_cast<int>(call), #call)
