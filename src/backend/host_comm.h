// Collectives between the threads of one process through host memory: the CPU backend's communicator
// (and the one GPU ranks fall back to when no device collectives exist). Each collective is two
// barriers: every rank publishes its buffer, then reads the others' (a reduction splits the elements
// over the ranks, each summing its share in rank order into a shared buffer), then all pass the second
// barrier before any buffer is reused.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/comm.h"

namespace minfer {

class HostCommGroup {
  public:
    explicit HostCommGroup(int ranks);
    ~HostCommGroup();
    int size() const { return ranks_; }
    Communicator& rank(int r) { return *comms_[size_t(r)]; }  // rank r's handle
    void abort();

  private:
    class Rank;
    friend class Rank;
    void barrier();  // throws Error once aborted
    int ranks_;
    std::mutex mu_;
    std::condition_variable cv_;
    int waiting_ = 0;
    uint64_t generation_ = 0;
    bool aborted_ = false;
    std::vector<const float*> bufs_;  // each rank's published buffer
    std::vector<float> sum_;          // the reduction's result
    std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace minfer
