// One thread per tensor-parallel rank, kept for the engine's life: run(f) calls f(r) for every rank at
// once (rank 0 on the caller) and returns when all have returned. The ranks must run concurrently, since
// each waits for the others in its collectives; a rank that throws calls on_failure (which aborts the
// communicators, waking the ranks waiting for it), and run rethrows the lowest rank's error.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer {

class RankThreads {
  public:
    RankThreads(int ranks, std::function<void()> on_failure);
    ~RankThreads();
    RankThreads(const RankThreads&) = delete;
    RankThreads& operator=(const RankThreads&) = delete;
    int size() const { return int(errors_.size()); }
    void run(const std::function<void(int)>& f);

  private:
    void worker(int rank);
    void call(int rank);
    std::function<void()> on_failure_;
    std::mutex mu_;
    std::condition_variable cv_;
    const std::function<void(int)>* job_ = nullptr;
    uint64_t generation_ = 0;
    int running_ = 0;
    bool stop_ = false;
    std::vector<std::exception_ptr> errors_;
    std::vector<std::thread> threads_;
};

}  // namespace minfer
