#include "backend/cpu/threadpool.h"

#include <algorithm>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "util/error.h"

namespace minfer {

namespace {

// Iterations an idle worker polls before it sleeps: a few milliseconds, long enough to cover the gap
// between two kernels of one forward pass, short enough that an idle process stops burning CPU.
constexpr int kSpinBudget = 100000;
// Every this many polls a spinning thread yields, so spinners do not starve other work on a busy host.
constexpr int kYieldEvery = 64;

inline void spin_pause(int i) {
    if (i % kYieldEvery == kYieldEvery - 1) {
        std::this_thread::yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      ranges_(std::make_unique<Range[]>(size_t(n_threads_))),
      taken_(std::make_unique<std::atomic<uint64_t>[]>(size_t(n_threads_))) {
    threads_.reserve(size_t(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    publish();
    for (auto& t : threads_) t.join();
}

uint64_t ThreadPool::publish() {
    // seq_cst on both sides: either a sleeping worker sees the new generation in its predicate, or we
    // see its sleepers_ increment and wake it (taking the mutex so the wake cannot slip in between
    // its predicate check and its wait).
    const uint64_t g = generation_.fetch_add(1, std::memory_order_seq_cst) + 1;
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        wake_.notify_all();
    }
    return g;
}

uint64_t ThreadPool::wait_for_generation(uint64_t seen) {
    for (int i = 0; i < kSpinBudget; ++i) {
        const uint64_t g = generation_.load(std::memory_order_acquire);
        if (g != seen) return g;
        spin_pause(i);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint64_t g = seen;
    wake_.wait(lock, [&] {
        g = generation_.load(std::memory_order_seq_cst);
        return g != seen;
    });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return g;
}

void ThreadPool::wait_for_workers() {
    for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) spin_pause(i);
}

void ThreadPool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_generation(seen);
        if (stop_.load(std::memory_order_acquire)) return;
        if (!take_share(ith, seen)) continue;  // the caller ran it
        fn_(ctx_, ith, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

namespace {

uint64_t pack(int64_t b, int64_t e) {
    return uint64_t(b) | uint64_t(e) << 32;
}

}  // namespace

void ThreadPool::share_out(int64_t n) {
    if (n < 0 || n >= int64_t(1) << 32)
        throw Error("parallel_for_stealing: " + std::to_string(n) + " indices do not fit 32 bits");
    const int64_t per = (n + n_threads_ - 1) / n_threads_;
    for (int t = 0; t < n_threads_; ++t) {
        const int64_t b = std::min(n, per * t), e = std::min(n, b + per);
        ranges_[size_t(t)].bounds.store(pack(b, e), std::memory_order_relaxed);
    }
}

bool ThreadPool::claim(int t, int64_t grain, bool front, int64_t& b, int64_t& e) {
    std::atomic<uint64_t>& r = ranges_[size_t(t)].bounds;
    for (uint64_t cur = r.load(std::memory_order_relaxed);;) {
        const int64_t lo = int64_t(cur & 0xFFFFFFFFu), hi = int64_t(cur >> 32);
        if (lo >= hi) return false;
        b = front ? lo : std::max(lo, hi - grain);
        e = front ? std::min(hi, lo + grain) : hi;
        if (r.compare_exchange_weak(cur, front ? pack(e, hi) : pack(lo, b), std::memory_order_relaxed))
            return true;
    }
}

void ThreadPool::run_erased(void* ctx, TaskFn fn) {
    if (n_threads_ == 1) {
        fn(ctx, 0, 1);
        return;
    }
    ctx_ = ctx;
    fn_ = fn;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    const uint64_t g = publish();
    // Join the workers even if a share throws: they still read ctx, which lives in our caller.
    struct Join {
        ThreadPool* pool;
        ~Join() { pool->wait_for_workers(); }
    } join{this};
    fn(ctx, 0, n_threads_);
    for (int i = 1; i < n_threads_; ++i) {
        if (!take_share(i, g)) continue;  // its worker has it
        struct Done {                     // counted even if the share throws, so that the join above ends
            std::atomic<int>& pending;
            ~Done() { pending.fetch_sub(1, std::memory_order_acq_rel); }
        } done{pending_};
        fn(ctx, i, n_threads_);
    }
}

}  // namespace minfer
