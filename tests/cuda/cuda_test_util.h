// Helpers for the CUDA tests: skip without a GPU, and an owning device buffer with host copies.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "backend/cuda/cuda_util.h"

// Skips the current test where no CUDA device is usable (CI and build machines have none).
#define MINFER_SKIP_WITHOUT_GPU()                                                  \
    do {                                                                           \
        if (::minfer::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

namespace minfer::test {

// n elements of T in device memory (uninitialized until written).
template <class T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t n) : n_(n) {
        MINFER_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), (n ? n : 1) * sizeof(T)));
    }
    explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() { cudaFree(p_); }

    T* get() const { return p_; }
    void upload(const std::vector<T>& v) {
        MINFER_CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> v(n_);
        MINFER_CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        return v;
    }

  private:
    T* p_ = nullptr;
    size_t n_;
};

// A non-default stream, so that kernels are tested on the stream they are given.
class TestStream {
  public:
    TestStream() { MINFER_CUDA_CHECK(cudaStreamCreate(&s_)); }
    TestStream(const TestStream&) = delete;
    TestStream& operator=(const TestStream&) = delete;
    ~TestStream() { cudaStreamDestroy(s_); }
    cudaStream_t get() const { return s_; }
    void sync() const { MINFER_CUDA_CHECK(cudaStreamSynchronize(s_)); }

  private:
    cudaStream_t s_ = nullptr;
};

}  // namespace minfer::test
