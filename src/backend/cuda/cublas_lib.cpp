#include "backend/cuda/cublas_lib.h"

#include <dlfcn.h>

#include <string>

#include "util/error.h"

namespace minfer::cuda {
namespace {

#define MINFER_STR2(x) #x
#define MINFER_STR(x) MINFER_STR2(x)
constexpr const char* kLibName = "libcublas.so." MINFER_STR(CUBLAS_VER_MAJOR);

template <class F>
void bind(void* lib, F& fn, const char* symbol) {
    fn = reinterpret_cast<F>(dlsym(lib, symbol));
    if (!fn) throw Error(std::string("cuBLAS: ") + kLibName + " has no symbol " + symbol);
}

// The loader's search path first, then the toolkit this binary was built against.
void* open_library() {
    if (void* lib = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL)) return lib;
    return dlopen((std::string(MINFER_CUDA_LIBDIR) + "/" + kLibName).c_str(), RTLD_NOW | RTLD_LOCAL);
}

CublasLib load() {
    void* lib = open_library();
    if (!lib) {
        const char* why = dlerror();
        throw Error(std::string("cannot load cuBLAS (") + kLibName + "): " + (why ? why : "unknown error") +
                    "; add the CUDA library folder to LD_LIBRARY_PATH");
    }
    CublasLib b{};
    bind(lib, b.create, "cublasCreate_v2");
    bind(lib, b.destroy, "cublasDestroy_v2");
    bind(lib, b.set_stream, "cublasSetStream_v2");
    bind(lib, b.set_workspace, "cublasSetWorkspace_v2");
    bind(lib, b.status_string, "cublasGetStatusString");
    bind(lib, b.sgemm, "cublasSgemm_v2");
    bind(lib, b.sgemm_strided_batched, "cublasSgemmStridedBatched");
    bind(lib, b.gemm_ex, "cublasGemmEx");
    return b;
}

}  // namespace

const CublasLib& cublas() {
    static const CublasLib lib = load();
    return lib;
}

}  // namespace minfer::cuda
