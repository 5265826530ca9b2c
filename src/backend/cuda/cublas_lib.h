// cuBLAS entry points, loaded with dlopen when the first CUDA backend starts. Linking libcublas would
// map libcublasLt into every process at startup (about 210 MiB resident), CPU-only runs included.
#pragma once
#include <cublas_v2.h>

namespace minfer::cuda {

struct CublasLib {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                              const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
};

// The loaded library (once per process); throws Error when it cannot be loaded.
const CublasLib& cublas();

}  // namespace minfer::cuda
