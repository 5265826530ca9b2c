// The device collectives of tensor parallelism (backend/cuda/nccl_comm.h) against a serial reference:
// one group over every GPU there is, one thread per rank as the engine runs them. The all-gather is a copy
// and is compared exactly; the all-reduce sums the ranks' f32 inputs in NCCL's order, so against the float64
// sum its budget is (ranks - 1) roundings of the running sum: |got - sum| <= (ranks - 1) * 2^-24 * sum |x|
// (exact for one rank). Skipped without a GPU or without libnccl.so.2.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/nccl_comm.h"
#include "cuda/cuda_test_util.h"

namespace minfer::test {
namespace {

using Vec = std::vector<float>;

TEST(NcclGroup, RefusesMoreRanksThanDevices) {
    std::string why;
    EXPECT_EQ(cuda::NcclGroup::create(cuda::device_count() + 1, why), nullptr);
    EXPECT_FALSE(why.empty());
}

// Every rank's inputs: rank k's value i is a distinct random number (so a missing or doubled rank shows).
std::vector<Vec> rank_inputs(int ranks, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<Vec> x(size_t(ranks), Vec(static_cast<size_t>(n)));
    for (Vec& v : x)
        for (float& f : v) f = u(rng);
    return x;
}

// Runs f(rank) on one thread per rank, each on its device.
void on_ranks(int ranks, const std::function<void(int)>& f) {
    std::vector<std::thread> t;
    for (int r = 0; r < ranks; ++r)
        t.emplace_back([&, r] {
            cuda::use_device(r);
            f(r);
        });
    for (auto& x : t) x.join();
}

TEST(NcclGroup, CollectivesMatchTheSerialReference) {
    MINFER_SKIP_WITHOUT_GPU();
    const int ranks = cuda::device_count();
    std::string why;
    const auto g = cuda::NcclGroup::create(ranks, why);
    if (!g) GTEST_SKIP() << why;
    ASSERT_EQ(g->size(), ranks);
    for (const auto& [n, rows] : {std::pair<int64_t, int64_t>{1, 1}, {896, 1}, {4096, 7}, {151936, 2}}) {
        SCOPED_TRACE("n " + std::to_string(n) + ", rows " + std::to_string(rows));
        const std::vector<Vec> x = rank_inputs(ranks, n * rows, uint32_t(n + rows));
        std::vector<double> sum(size_t(n * rows)), bound(size_t(n * rows));
        for (int k = 0; k < ranks; ++k)
            for (size_t i = 0; i < sum.size(); ++i) {
                sum[i] += x[size_t(k)][i];
                bound[i] += std::fabs(x[size_t(k)][i]);
            }
        on_ranks(ranks, [&](int r) {
            TestStream s;
            DeviceBuffer<float> in(x[size_t(r)]), reduced(sum.size()), gathered(sum.size() * size_t(ranks)),
                scratch(sum.size() * size_t(ranks));
            g->all_reduce(r, in.get(), reduced.get(), n * rows, s.get());
            g->all_gather(r, in.get(), gathered.get(), n, rows, scratch.get(), s.get());
            s.sync();
            const Vec red = reduced.download(), gat = gathered.download();
            size_t bad_sum = 0, bad_gather = 0;
            for (size_t i = 0; i < sum.size(); ++i)
                bad_sum += std::fabs(double(red[i]) - sum[i]) > (ranks - 1) * 0x1p-24 * bound[i];
            for (int64_t t = 0; t < rows; ++t)
                for (int k = 0; k < ranks; ++k)
                    for (int64_t i = 0; i < n; ++i)
                        bad_gather += gat[size_t((t * ranks + k) * n + i)] != x[size_t(k)][size_t(t * n + i)];
            EXPECT_EQ(bad_sum, 0u) << "rank " << r << ": all_reduce outside the budget";
            EXPECT_EQ(bad_gather, 0u) << "rank " << r << ": all_gather differs from the ranks' inputs";
        });
    }
}

}  // namespace
}  // namespace minfer::test
