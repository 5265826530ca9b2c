// Device collectives for tensor parallelism: one NCCL communicator per rank, each rank on its own GPU,
// created together by ncclCommInitAll. NCCL is loaded with dlopen (libnccl.so.2) when a group is made,
// so builds and CPU runs need no NCCL. Collectives are enqueued on the caller's stream (and so captured
// into its CUDA graphs); NCCL's ring algorithm reduces in a fixed order for a fixed rank count and size,
// so the tokens repeat run after run, and every rank receives the same bits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

class NcclGroup {
  public:
    // A communicator per rank, rank r on device r: null with `why` set when the group cannot be made
    // (fewer devices than ranks, no libnccl.so.2, an NCCL error).
    static std::unique_ptr<NcclGroup> create(int ranks, std::string& why);
    ~NcclGroup();
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;
    int size() const { return ranks_; }

    // Rank r's part of op::AllReduce: out[0, n) = the sum of every rank's in (out may be in).
    void all_reduce(int rank, const float* in, float* out, int64_t n, Stream s) const;
    // Rank r's part of op::AllGather: out [rows][size() * n] from every rank's in [rows][n]; `scratch`
    // holds size() * rows * n floats (NCCL's rank-major result) when rows > 1.
    void all_gather(int rank, const float* in, float* out, int64_t n, int64_t rows, float* scratch,
                    Stream s) const;

    struct Lib;  // the entry points of the loaded library

  private:
    NcclGroup() = default;
    int ranks_ = 0;
    const Lib* lib_ = nullptr;
    std::vector<void*> comms_;  // ncclComm_t per rank
};

}  // namespace minfer::cuda
