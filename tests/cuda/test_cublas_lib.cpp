// The dlopen()ed cuBLAS: it loads without a GPU (only handle creation needs one), every entry point
// resolves, and the process did not map cuBLAS before the first use.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "backend/cuda/cublas_lib.h"

namespace minfer::test {
namespace {

bool mapped(const std::string& lib) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
        if (line.find(lib) != std::string::npos) return true;
    return false;
}

TEST(CublasLib, LoadsOnFirstUse) {
    ASSERT_FALSE(mapped("libcublasLt")) << "cuBLAS was mapped before its first use";
    const cuda::CublasLib& b = cuda::cublas();
    EXPECT_TRUE(b.create && b.destroy && b.set_stream && b.set_workspace && b.status_string && b.sgemm &&
                b.sgemm_strided_batched && b.gemm_ex);
    EXPECT_FALSE(std::string(b.status_string(CUBLAS_STATUS_NOT_INITIALIZED)).empty());
    EXPECT_TRUE(mapped("libcublasLt"));
    EXPECT_EQ(&cuda::cublas(), &b);
}

}  // namespace
}  // namespace minfer::test
