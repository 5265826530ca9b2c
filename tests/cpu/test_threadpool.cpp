#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/threadpool.h"
#include "util/error.h"

namespace minfer {
namespace {

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

TEST(ThreadPool, SingleThreadRunsOnCaller) {
    ThreadPool pool(1);
    EXPECT_EQ(pool.size(), 1);
    int calls = 0;
    const auto caller = std::this_thread::get_id();
    pool.run([&](int ith, int nth) {
        EXPECT_EQ(ith, 0);
        EXPECT_EQ(nth, 1);
        EXPECT_EQ(std::this_thread::get_id(), caller);
        ++calls;
    });
    EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, NonPositiveSizeMeansOneThread) {
    ThreadPool pool(0);
    EXPECT_EQ(pool.size(), 1);
}

TEST(ThreadPool, EveryThreadRunsOncePerRun) {
    for (int n : {2, 3, 4}) {
        ThreadPool pool(n);
        for (int rep = 0; rep < 50; ++rep) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<bool> caller_was_zero{false};
            const auto caller = std::this_thread::get_id();
            pool.run([&](int ith, int nth) {
                ASSERT_EQ(nth, n);
                hits[size_t(ith)].fetch_add(1);
                if (ith == 0) caller_was_zero = std::this_thread::get_id() == caller;
            });
            for (auto& h : hits) EXPECT_EQ(h.load(), 1);
            EXPECT_TRUE(caller_was_zero.load());
        }
    }
}

// Many back-to-back tiny runs: a lost wake-up or a worker running a generation twice shows up as a
// hang or a wrong count. Plain (non-atomic) per-thread slots also check that run() publishes the
// workers' writes to the caller.
TEST(ThreadPool, HundredThousandTinyRuns) {
    constexpr int kRuns = 100000;
    for (int n : {2, 3}) {
        ThreadPool pool(n);
        std::vector<int64_t> count(static_cast<size_t>(n), 0);
        for (int r = 0; r < kRuns; ++r) pool.run([&](int ith, int) { ++count[size_t(ith)]; });
        for (int i = 0; i < n; ++i) EXPECT_EQ(count[size_t(i)], kRuns) << "thread " << i;
    }
}

// Beside threads that keep every core busy, workers are often descheduled between seeing a run and
// taking their share, and the caller then runs their shares itself: every share still runs exactly once
// per run (a share run twice, or a late worker taking a later run's share, shows as a wrong count or a
// hang), and the caller did take some.
TEST(ThreadPool, LateWorkersSharesRunOnceByTheCaller) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> busy;
    for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
        busy.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed)) {
            }
        });
    constexpr int kRuns = 20000;
    ThreadPool pool(3);
    std::vector<std::atomic<int64_t>> count(3);
    std::atomic<int64_t> by_caller{0};
    const auto caller = std::this_thread::get_id();
    for (int r = 0; r < kRuns; ++r)
        pool.run([&](int ith, int) {
            count[size_t(ith)].fetch_add(1);
            if (ith > 0 && std::this_thread::get_id() == caller) by_caller.fetch_add(1);
        });
    stop = true;
    for (std::thread& t : busy) t.join();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(count[size_t(i)].load(), kRuns) << "share " << i;
    EXPECT_GT(by_caller.load(), 0) << "the caller never ran a late worker's share";
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
    for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        for (int64_t len : {0, 1, 2, 3, 5, 64, 1000, 100003}) {
            std::vector<int> seen(static_cast<size_t>(len), 0);
            std::atomic<int64_t> total{0};
            pool.parallel_for(len, [&](int64_t b, int64_t e) {
                int64_t s = 0;
                for (int64_t i = b; i < e; ++i) {
                    ++seen[size_t(i)];
                    s += i;
                }
                total.fetch_add(s);
            });
            EXPECT_EQ(total.load(), len * (len - 1) / 2) << "threads " << n << " len " << len;
            for (int64_t i = 0; i < len; ++i) ASSERT_EQ(seen[size_t(i)], 1) << "index " << i;
        }
    }
}

TEST(ThreadPool, ParallelForSumsUnderRepeatedRuns) {
    ThreadPool pool(3);
    std::vector<double> data(10007);
    for (size_t i = 0; i < data.size(); ++i) data[i] = double(i % 97);
    double expected = 0.0;
    for (double d : data) expected += d;
    for (int rep = 0; rep < 2000; ++rep) {
        std::atomic<int64_t> sum{0};
        pool.parallel_for(int64_t(data.size()), [&](int64_t b, int64_t e) {
            int64_t s = 0;
            for (int64_t i = b; i < e; ++i) s += int64_t(data[size_t(i)]);
            sum.fetch_add(s);
        });
        ASSERT_EQ(double(sum.load()), expected) << "rep " << rep;
    }
}

TEST(ThreadPool, ParallelForStealingCoversRangeOnceInChunks) {
    for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        for (int64_t len : {0, 1, 2, 3, 5, 64, 1000, 100003})
            for (int64_t grain : {1, 7, 64, 1 << 20}) {
                std::vector<std::atomic<int>> seen(static_cast<size_t>(len));
                std::atomic<int64_t> oversized{0};
                pool.parallel_for_stealing(len, grain, [&](int64_t b, int64_t e) {
                    if (e - b > grain || b >= e) oversized.fetch_add(1);
                    for (int64_t i = b; i < e; ++i) seen[size_t(i)].fetch_add(1);
                });
                EXPECT_EQ(oversized.load(), 0) << "threads " << n << " len " << len << " grain " << grain;
                for (int64_t i = 0; i < len; ++i)
                    ASSERT_EQ(seen[size_t(i)].load(), 1)
                        << "threads " << n << " len " << len << " index " << i;
            }
    }
}

TEST(ThreadPool, ParallelForStealingRejectsRangesBeyond32Bits) {
    ThreadPool pool(2);
    EXPECT_THROW(pool.parallel_for_stealing(int64_t(1) << 32, 1, [](int64_t, int64_t) {}), Error);
}

// A thread that runs slowly loses the back of its range to the others: the caller, done with its own
// half at once, takes chunks from the end of the worker's half while the worker sleeps in each chunk.
TEST(ThreadPool, ParallelForStealingMovesWorkOffASlowThread) {
    ThreadPool pool(2);
    const auto caller = std::this_thread::get_id();
    std::vector<std::thread::id> by(64);
    pool.parallel_for_stealing(64, 1, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != caller) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        for (int64_t i = b; i < e; ++i) by[size_t(i)] = std::this_thread::get_id();
    });
    int64_t mine = 0;
    for (const auto& id : by) mine += id == caller;
    EXPECT_GT(mine, 40) << "the caller ran " << mine << " of 64 items";
    EXPECT_EQ(by[63], caller) << "the last item of the worker's half was not taken from it";
}

// After the spin budget the workers sleep; the next run must wake them all.
TEST(ThreadPool, WakesSleepingWorkers) {
    ThreadPool pool(3);
    for (int rep = 0; rep < 5; ++rep) {
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        std::atomic<int> calls{0};
        pool.run([&](int, int) { calls.fetch_add(1); });
        EXPECT_EQ(calls.load(), 3);
    }
}

// An idle pool must stop burning CPU: over half a second idle, three workers may spend their spin budget
// (a few ms each) but nowhere near the 1.5 CPU-seconds that spinning throughout would cost.
TEST(ThreadPool, IdleWorkersSleep) {
    ThreadPool pool(4);
    pool.run([](int, int) {});
    const double t0 = process_cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double used = process_cpu_seconds() - t0;
    EXPECT_LT(used, 0.25) << "idle workers used " << used << " CPU seconds in 0.5 s";
    std::atomic<int> calls{0};
    pool.run([&](int, int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 4);
}

TEST(ThreadPool, CallerExceptionWaitsForWorkersAndPoolStaysUsable) {
    ThreadPool pool(3);
    std::atomic<int> worker_calls{0};
    EXPECT_THROW(pool.run([&](int ith, int) {
        if (ith == 0) throw std::runtime_error("boom");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        worker_calls.fetch_add(1);
    }),
                 std::runtime_error);
    EXPECT_EQ(worker_calls.load(), 2);
    std::atomic<int> calls{0};
    pool.run([&](int, int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 3);
}

}  // namespace
}  // namespace minfer
