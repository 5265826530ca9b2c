// An LD_PRELOAD library for bench/cuda-timeline.sh: records, through CUPTI's activity API, when every
// kernel and memory copy of the process started and ended on the GPU (kernels inside replayed CUDA graphs
// included) and writes them to $MINFER_TIMELINE (default cuda-timeline.csv) at exit, one row each:
//   K,start_ns,end_ns,grid_x,grid_z,name      (kernel; name demangled, namespaces dropped)
//   M,start_ns,end_ns,bytes,copy_kind,copy    (copy_kind 1: host to device, 2: device to host)
// Unlike Nsight Compute, kernels run as they do in production: overlapped by programmatic dependent
// launch, so a kernel's start is its first block and the critical path is the sequence of kernel ends.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

namespace {

FILE* g_out = nullptr;

std::string short_name(const char* mangled) {
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    std::free(d);
    static const std::regex noise(R"(minfer::|cuda::|qblocks::|\(anonymous namespace\)::|,)");
    return std::regex_replace(s, noise, "");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = size_t(16) << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* r = nullptr;
    while (g_out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
            std::fprintf(g_out, "K,%llu,%llu,%d,%d,%s\n", static_cast<unsigned long long>(k->start),
                         static_cast<unsigned long long>(k->end), k->gridX, k->gridZ,
                         short_name(k->name).c_str());
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
            std::fprintf(g_out, "M,%llu,%llu,%llu,%d,copy\n", static_cast<unsigned long long>(m->start),
                         static_cast<unsigned long long>(m->end), static_cast<unsigned long long>(m->bytes),
                         int(m->copyKind));
        }
    }
    std::free(buffer);
}

__attribute__((constructor)) void start_recording() {
    const char* path = std::getenv("MINFER_TIMELINE");
    g_out = std::fopen(path ? path : "cuda-timeline.csv", "w");
    if (!g_out) return;
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
}

__attribute__((destructor)) void stop_recording() {
    if (!g_out) return;
    cuptiActivityFlushAll(1);
    std::fclose(g_out);
    g_out = nullptr;
}

}  // namespace
