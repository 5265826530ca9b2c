#include "runtime/rank_threads.h"

namespace minfer {

RankThreads::RankThreads(int ranks, std::function<void()> on_failure)
    : on_failure_(std::move(on_failure)), errors_(size_t(ranks)) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void RankThreads::call(int rank) {
    try {
        (*job_)(rank);
    } catch (...) {
        errors_[size_t(rank)] = std::current_exception();
        if (on_failure_) on_failure_();
    }
}

void RankThreads::worker(int rank) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        call(rank);
        std::lock_guard lock(mu_);
        if (--running_ == 0) cv_.notify_all();
    }
}

void RankThreads::run(const std::function<void(int)>& f) {
    {
        std::lock_guard lock(mu_);
        job_ = &f;
        for (std::exception_ptr& e : errors_) e = nullptr;
        running_ = size() - 1;
        ++generation_;
    }
    cv_.notify_all();
    call(0);
    {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return running_ == 0; });
        job_ = nullptr;
    }
    for (const std::exception_ptr& e : errors_)
        if (e) std::rethrow_exception(e);
}

}  // namespace minfer
