// A fixed pool of worker threads that spin-wait for work (no per-op thread creation). run() hands
// the same task to every thread (the caller is thread 0) and returns when all have finished.
// Idle workers spin for a bounded budget, then sleep on a condition variable so an idle process
// does not burn CPU. A worker that has not started its share when the caller is done with its own
// (descheduled beside a busy process, or asleep) has that share run by the caller instead, so that a
// busy core slows a forward pass down to the speed of fewer threads rather than to the scheduler's
// time slice. run() must not be called concurrently or from inside a task.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer {

class ThreadPool {
  public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Calls task(ith, nth) on every thread, ith in [0, nth); blocks until all calls return.
    template <class F>
    void run(F&& task) {
        run_erased(&task, [](void* ctx, int ith, int nth) { (*static_cast<F*>(ctx))(ith, nth); });
    }
    // Splits [0, n) into contiguous chunks, about four per thread, which the threads claim as they go
    // (parallel_for_stealing): body(begin, end) sees every index once. For work whose results do not
    // depend on where the chunks begin and end. n must be below 2^32.
    template <class F>
    void parallel_for(int64_t n, F&& body) {
        parallel_for_stealing(n, std::max<int64_t>(1, n / (4 * int64_t(n_threads_))), std::forward<F>(body));
    }

    // Hands out items 0 .. n-1 in order, one at a time, to whichever thread is free: body(i, ith). For
    // compute-bound items, which then finish together even when the threads run at different speeds.
    template <class F>
    void for_each_dynamic(int64_t n, F&& body) {
        std::atomic<int64_t> next{0};
        run([&](int ith, int) {
            for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) body(i, ith);
        });
    }

    // Splits [0, n) into one contiguous range per thread, which its thread walks from the front in
    // chunks of `grain`; a thread done with its own range then takes chunks from the back of the others'.
    // body(begin, end) sees every index once. For memory-bound rows: each thread streams one range, and
    // a thread the machine slows down no longer holds up the rest. n must be below 2^32.
    template <class F>
    void parallel_for_stealing(int64_t n, int64_t grain, F&& body) {
        share_out(n);
        run([&](int ith, int nth) {
            int64_t b, e;
            while (claim(ith, grain, true, b, e)) body(b, e);
            for (int k = 1; k < nth; ++k)
                while (claim((ith + k) % nth, grain, false, b, e)) body(b, e);
        });
    }

  private:
    // A thread's remaining range for parallel_for_stealing, begin and end packed into one word so that
    // its owner (from the front) and thieves (from the back) claim chunks with one compare-and-swap.
    struct alignas(64) Range {
        std::atomic<uint64_t> bounds{0};
    };
    void share_out(int64_t n);
    // Takes [b, e), at most grain indices, from the front or the back of thread t's range; false when
    // the range is empty.
    bool claim(int t, int64_t grain, bool front, int64_t& b, int64_t& e);

    using TaskFn = void (*)(void*, int, int);
    void run_erased(void* ctx, TaskFn fn);
    void worker(int ith);
    uint64_t publish();                           // starts a new generation, wakes sleepers, returns it
    uint64_t wait_for_generation(uint64_t seen);  // returns the first generation != seen
    void wait_for_workers();                      // spins until pending_ == 0
    // Whether this thread gets share ith of generation g: exactly one of the worker and the caller does.
    // A worker that saw g late (the caller already took it, and maybe later shares) gets nothing.
    bool take_share(int ith, uint64_t g) {
        std::atomic<uint64_t>& t = taken_[size_t(ith)];
        for (uint64_t cur = t.load(std::memory_order_acquire); cur < g;)
            if (t.compare_exchange_weak(cur, g, std::memory_order_acq_rel)) return true;
        return false;
    }

    int n_threads_;
    std::vector<std::thread> threads_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::atomic<int> sleepers_{0};  // workers blocked (or about to block) on wake_
    std::mutex mutex_;
    std::condition_variable wake_;
    void* ctx_ = nullptr;
    TaskFn fn_ = nullptr;
    std::unique_ptr<Range[]> ranges_;  // [n_threads_]
    std::unique_ptr<std::atomic<uint64_t>[]>
        taken_;  // [n_threads_]: the last generation whose share was taken
};

}  // namespace minfer
