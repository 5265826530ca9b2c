// membw [THREADS] [MiB] [REPS]: DRAM read bandwidth, the ceiling of memory-bound decode. THREADS threads
// (default: all cores) each sum their slice of a MiB-sized buffer (default 1024, far beyond any cache);
// prints the best of REPS passes (default 5) as "read_GBps <value>" (1 GB = 1e9 bytes). The buffer is
// on 2 MiB pages where the kernel offers them, as the CPU backend's weights are.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "util/huge_pages.h"

namespace {

// Elements each thread reads: an equal share, a multiple of the 4-way unrolled loop.
size_t slice_len(size_t n, int threads) {
    return n / size_t(threads) / 4 * 4;
}

uint64_t sum_slice(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a + b + c + d;
}

// Seconds for `threads` threads to read all `n` elements of `buf` once.
double read_pass(const uint64_t* buf, size_t n, int threads, std::vector<uint64_t>& sums) {
    const size_t chunk = slice_len(n, threads);
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { sums[size_t(t)] += sum_slice(buf + size_t(t) * chunk, chunk); });
    for (std::thread& th : pool) th.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const int threads =
        argc > 1 ? std::atoi(argv[1]) : int(std::max(1u, std::thread::hardware_concurrency()));
    const size_t mib = argc > 2 ? size_t(std::atoll(argv[2])) : 1024;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    if (threads < 1 || mib < 1 || reps < 1) {
        std::fprintf(stderr, "usage: membw [THREADS] [MiB] [REPS]\n");
        return 1;
    }
    const size_t n = mib << 17;  // 2^17 uint64 per MiB
    const minfer::HugePages mem(n * sizeof(uint64_t));
    auto* buf = reinterpret_cast<uint64_t*>(mem.data());
    for (size_t i = 0; i < n; ++i) buf[i] = i;  // also faults the pages in
    std::vector<uint64_t> sums(size_t(threads), 0);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) best = std::min(best, read_pass(buf, n, threads, sums));
    uint64_t check = 0;
    for (uint64_t s : sums) check ^= s;
    const double bytes = double(slice_len(n, threads) * size_t(threads) * sizeof(uint64_t));
    std::printf("read_GBps %.2f\n", bytes / best / 1e9);
    std::fprintf(stderr, "membw: %d threads, %zu MiB, best of %d (checksum %llx)\n", threads, mib, reps,
                 (unsigned long long)check);
    return 0;
}
