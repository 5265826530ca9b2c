#include "backend/cuda/nccl_comm.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <numeric>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/ops_cuda.h"
#include "util/error.h"

// NCCL's header comes with some CUDA installations only (this toolkit's include folder, or Debian's
// libnccl-dev); without it the group is never made and the collectives run on the host.
#if __has_include(<nccl.h>)
#include <nccl.h>

namespace minfer::cuda {

struct NcclGroup::Lib {
    decltype(&ncclCommInitAll) init_all;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclAllGather) all_gather;
    decltype(&ncclGetErrorString) error_string;
};

namespace {

constexpr const char* kLibName = "libnccl.so.2";

template <class F>
bool bind(void* lib, F& fn, const char* symbol) {
    fn = reinterpret_cast<F>(dlsym(lib, symbol));
    return fn != nullptr;
}

// The loaded library, once per process; null with `why` when it cannot be loaded.
const NcclGroup::Lib* load(std::string& why) {
    static NcclGroup::Lib lib{};
    static const std::string error = [] {
        void* h = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen((std::string(MINFER_CUDA_LIBDIR) + "/" + kLibName).c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = dlerror();
            return std::string("cannot load ") + kLibName + ": " + (e ? e : "unknown error");
        }
        const bool ok = bind(h, lib.init_all, "ncclCommInitAll") && bind(h, lib.destroy, "ncclCommDestroy") &&
                        bind(h, lib.all_reduce, "ncclAllReduce") &&
                        bind(h, lib.all_gather, "ncclAllGather") &&
                        bind(h, lib.error_string, "ncclGetErrorString");
        return ok ? std::string() : std::string(kLibName) + " lacks an NCCL 2 entry point";
    }();
    why = error;
    return error.empty() ? &lib : nullptr;
}

void nccl_check(const NcclGroup::Lib& lib, ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw Error(std::string("NCCL error in ") + what + ": " + lib.error_string(r));
}

}  // namespace

std::unique_ptr<NcclGroup> NcclGroup::create(int ranks, std::string& why) {
    if (device_count() < ranks) {
        why =
            std::to_string(ranks) + " ranks need as many GPUs, " + std::to_string(device_count()) + " found";
        return nullptr;
    }
    const Lib* lib = load(why);
    if (!lib) return nullptr;
    std::unique_ptr<NcclGroup> g(new NcclGroup());
    g->ranks_ = ranks;
    g->lib_ = lib;
    g->comms_.assign(size_t(ranks), nullptr);
    std::vector<int> devices(static_cast<size_t>(ranks));
    std::iota(devices.begin(), devices.end(), 0);
    const ncclResult_t r =
        lib->init_all(reinterpret_cast<ncclComm_t*>(g->comms_.data()), ranks, devices.data());
    if (r != ncclSuccess) {
        why = std::string("ncclCommInitAll: ") + lib->error_string(r);
        return nullptr;
    }
    return g;
}

NcclGroup::~NcclGroup() {
    for (void* c : comms_)
        if (c) lib_->destroy(static_cast<ncclComm_t>(c));
}

void NcclGroup::all_reduce(int rank, const float* in, float* out, int64_t n, Stream s) const {
    nccl_check(*lib_,
               lib_->all_reduce(in, out, size_t(n), ncclFloat32, ncclSum,
                                static_cast<ncclComm_t>(comms_[size_t(rank)]), static_cast<cudaStream_t>(s)),
               "ncclAllReduce");
}

void NcclGroup::all_gather(int rank, const float* in, float* out, int64_t n, int64_t rows, float* scratch,
                           Stream s) const {
    float* to = rows == 1 ? out : scratch;
    nccl_check(*lib_,
               lib_->all_gather(in, to, size_t(n * rows), ncclFloat32,
                                static_cast<ncclComm_t>(comms_[size_t(rank)]), static_cast<cudaStream_t>(s)),
               "ncclAllGather");
    if (rows > 1) interleave_ranks(scratch, n, rows, ranks_, out, s);
}

}  // namespace minfer::cuda

#else

namespace minfer::cuda {

struct NcclGroup::Lib {};

std::unique_ptr<NcclGroup> NcclGroup::create(int, std::string& why) {
    why = "this minfer was built without NCCL's header (nccl.h)";
    return nullptr;
}

NcclGroup::~NcclGroup() = default;

void NcclGroup::all_reduce(int, const float*, float*, int64_t, Stream) const {
    throw Error("NCCL is not available");
}

void NcclGroup::all_gather(int, const float*, float*, int64_t, int64_t, float*, Stream) const {
    throw Error("NCCL is not available");
}

}  // namespace minfer::cuda

#endif
