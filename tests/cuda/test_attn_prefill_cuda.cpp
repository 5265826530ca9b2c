// The query-tiled prefill attention kernels against attention_ref, each with the budget of its order of
// roundings (attn_test_util.h): the f32 one (cuda::attention_prefill, attention_prefill_tol), whose query
// and key tiles are 32 rows and keys, and the tensor-core one (cuda::attention_prefill_mma,
// attention_prefill_mma_tol; head_dim 64 and 128), whose tiles are 64. The row counts cover a partial
// tile (9), whole tiles (64), one row past them (65, 130) and a full micro-batch (512); the positions
// start at 0, mid-tile (45) and deep (1000, 3584). For the f32 kernel, small grids (few heads or rows)
// split the keys over a thread-block cluster (up to 8 blocks) that merges its partial softmaxes; most of
// its cases run split, and short contexts in long regions leave splits without keys. The region's rows
// past the last position hold random data, so reading a key too many changes the result. Paged batches,
// and the tensor-core kernel's rows against themselves in other batches, are in test_attn_paged_cuda.cpp.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <utility>

#include "backend/cuda/attn_prefill_mma.h"
#include "backend/cuda/ops_cuda.h"
#include "cuda/attn_test_util.h"
#include "cuda/cuda_test_util.h"
#include "util/error.h"

namespace minfer::test {
namespace {

Pos consecutive(int64_t nt, int32_t n_past) {
    Pos pos(static_cast<size_t>(nt));
    for (int64_t t = 0; t < nt; ++t) pos[size_t(t)] = n_past + int32_t(t);
    return pos;
}

void check_prefill(const AttnCase& c, const Pos& pos, int64_t n_ctx, bool wide_q, std::mt19937& rng,
                   float q_amp = 1.0f, AttnKernel kernel = AttnKernel::Prefill) {
    check_attention(c, pos, n_ctx, wide_q, q_amp, rng, kernel);
}

// The cases both tiled kernels run: the f32 one (attention_prefill) and the tensor-core one
// (attention_prefill_mma, head_dim 64 and 128 only, query and key tiles of 64, no key splits).
class CudaAttnPrefillKernels : public ::testing::TestWithParam<AttnKernel> {
  protected:
    bool serves(const AttnCase& c) const {
        return GetParam() == AttnKernel::Prefill || c.head_dim == 64 || c.head_dim == 128;
    }
    void check(const AttnCase& c, const Pos& pos, int64_t n_ctx, bool wide_q, std::mt19937& rng,
               float q_amp = 1.0f) const {
        if (serves(c)) check_prefill(c, pos, n_ctx, wide_q, rng, q_amp, GetParam());
    }
};

// pos[t] = n_past + t over every shape, 37 region rows past the last position; Q inside a fused QKV
// buffer (wider q_stride) for every other case.
TEST_P(CudaAttnPrefillKernels, Causal) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1111);
    int k = 0;
    for (const AttnCase& c : kAttnShapes)
        for (int64_t nt : {9, 64, 65, 130, 512})
            for (int32_t n_past : {0, 45, 1000})
                check(c, consecutive(nt, n_past), n_past + nt + 37, ++k % 2 == 0, rng);
}

// The last position is the region's last row (n_ctx - 1), and positions past the region, which see
// all of it (min(pos + 1, n_ctx) keys).
TEST_P(CudaAttnPrefillKernels, RegionEnd) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1212);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i) {
        const AttnCase& c = kAttnShapes[i];
        check(c, consecutive(130, 45), 175, i % 2 == 0, rng);
        check(c, consecutive(64, 0), 64, i % 2 == 1, rng);
        check(c, consecutive(100, 50), 100, i % 2 == 0, rng);  // pos >= 99: all 100 keys
    }
    check(kAttnShapes[0], consecutive(512, 1000), 1512, true, rng);
    check(kAttnShapes[3], consecutive(512, 1000), 1512, false, rng);
}

// Positions in no order: reversed (the mask of every row differs from its tile's diagonal), and random
// with repeats and gaps, row 0 at position 0 (one key) beside rows at the region's last row and past
// it, so one query tile mixes rows of 1 key and of every key.
TEST_P(CudaAttnPrefillKernels, Positions) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1313);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i) {
        const AttnCase& c = kAttnShapes[i];
        for (int64_t nt : {70, 130}) {
            Pos reversed = consecutive(nt, 20);
            std::reverse(reversed.begin(), reversed.end());
            check(c, reversed, 20 + nt + 5, i % 2 == 0, rng);
            const int64_t n_ctx = 300;
            std::uniform_int_distribution<int32_t> dist(0, int32_t(n_ctx + 20));
            Pos scattered(static_cast<size_t>(nt));
            for (auto& p : scattered) p = dist(rng);
            scattered[0] = 0, scattered[1] = int32_t(n_ctx - 1), scattered[2] = int32_t(n_ctx + 7);
            scattered[size_t(nt - 1)] = scattered[3];
            check(c, scattered, n_ctx, i % 2 == 1, rng);
        }
    }
}

// Sharp softmaxes (large q): the running max changes by much between tiles, so the rescales matter (and
// for the tensor-core kernel most probabilities' low halves are subnormal).
TEST_P(CudaAttnPrefillKernels, SharpSoftmax) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1515);
    check(kAttnShapes[0], consecutive(130, 45), 200, false, rng, 8.0f);
    check(kAttnShapes[3], consecutive(512, 1000), 1600, true, rng, 6.0f);
    check(kAttnShapes[1], consecutive(65, 1000), 1100, false, rng, 8.0f);
}

// The last micro-batch of a 4096-token prompt: 512 rows over 4096 keys (Qwen2.5-0.5B's heads, and
// Qwen2.5-7B's 28/4 of 128).
TEST_P(CudaAttnPrefillKernels, LongContext) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1616);
    check(kAttnShapes[0], consecutive(512, 3584), 4096, true, rng);
    check({28, 4, 128}, consecutive(512, 3584), 4096, false, rng);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaAttnPrefillKernels,
                         ::testing::Values(AttnKernel::Prefill, AttnKernel::PrefillMma),
                         [](const ::testing::TestParamInfo<AttnKernel>& i) {
                             return i.param == AttnKernel::Prefill ? std::string("F32") : std::string("Mma");
                         });

// Head sizes off the two tuned ones (64, 128) run the generic instances: up to 128, and up to 256.
TEST(CudaAttnPrefill, OtherHeadDims) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1414);
    const AttnCase cases[] = {{6, 3, 4}, {5, 5, 40}, {6, 2, 96}, {4, 4, 132}, {4, 2, 256}, {3, 1, 252}};
    for (const AttnCase& c : cases)
        for (auto [nt, n_past] : {std::pair<int64_t, int32_t>{9, 0}, {130, 45}, {65, 1000}})
            check_prefill(c, consecutive(nt, n_past), n_past + nt + 11, nt % 2 == 1, rng);
}

// Few heads over a long context: the keys split over 8 blocks that merge (a head of 128 at depth 3584 and
// the generic instances; Qwen2.5-0.5B's 14/2 heads there are LongContext's), with a sharp softmax (the
// splits' maxima far apart), and positions in no order, where rows see no key of some splits.
TEST(CudaAttnPrefill, SplitKeys) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1616);
    check_prefill(kAttnShapes[1], consecutive(512, 3584), 4096, false, rng);
    check_prefill({4, 2, 256}, consecutive(130, 2000), 2200, false, rng);
    check_prefill({6, 2, 96}, consecutive(65, 1500), 1600, true, rng);
    check_prefill(kAttnShapes[0], consecutive(100, 3000), 3100, false, rng, 8.0f);
    const int64_t n_ctx = 3000;
    std::uniform_int_distribution<int32_t> dist(0, int32_t(n_ctx + 20));
    Pos scattered(200);
    for (auto& p : scattered) p = dist(rng);
    scattered[0] = 0, scattered[1] = 40, scattered[2] = int32_t(n_ctx - 1), scattered[3] = int32_t(n_ctx + 5);
    check_prefill(kAttnShapes[0], scattered, n_ctx, true, rng);
    check_prefill(kAttnShapes[5], scattered, n_ctx, false, rng);
}

// Short contexts in a long region: the host sizes the splits by the region, each block its share by its
// rows' keys, so some splits get none and leave. Query tiles of 1 or 2 key tiles have one active split
// (no merge), the others 2 to 8 (at n_past 0 and 512 rows, as Qwen2.5-0.5B at depth 0).
TEST(CudaAttnPrefill, EmptySplits) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1717);
    const AttnCase cases[] = {kAttnShapes[0], kAttnShapes[1], {5, 5, 40}};
    for (size_t i = 0; i < std::size(cases); ++i)
        for (auto [nt, n_past] : {std::pair<int64_t, int32_t>{9, 0}, {130, 0}, {65, 50}, {512, 0}})
            check_prefill(cases[i], consecutive(nt, n_past), 4096, (i + size_t(nt)) % 2 == 0, rng);
}

// Sliding windows: each row sees its last `window` positions only; windows shorter than a key tile, on
// and across its boundary, longer than the context; rows whose windows start in different tiles, split
// and unsplit key ranges. The tensor-core kernel does not take them.
TEST(CudaAttnPrefill, SlidingWindow) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1818);
    const AttnCase cases[] = {kAttnShapes[0], kAttnShapes[1], kAttnShapes[6], {6, 2, 96}};
    for (size_t i = 0; i < std::size(cases); ++i)
        for (int64_t window : {1, 7, 32, 33, 100, 5000})
            for (auto [nt, n_past] :
                 {std::pair<int64_t, int32_t>{9, 0}, {65, 50}, {130, 0}, {512, 0}, {100, 3000}})
                check_attention(cases[i], consecutive(nt, n_past), 4096, (i + size_t(nt)) % 2 == 0, 1.0f, rng,
                                AttnKernel::Prefill, window);
    cuda::AttnShape a{4, 2, 128, 512, 1.0f};
    a.window = 16;
    EXPECT_FALSE(cuda::attention_prefill_mma_fits(a, 16));
}

// Head layouts a kernel does not serve are refused before anything runs; the tensor-core kernel's fit
// says which it takes.
TEST(CudaAttnPrefill, UnsupportedHeadDim) {
    MINFER_SKIP_WITHOUT_GPU();
    const cuda::KvRegion r{nullptr, nullptr, 264, 16};
    for (int64_t hd : {66, 260, 0}) {
        const cuda::AttnShape a{4, 2, hd, 4 * hd, 1.0f};
        EXPECT_THROW(cuda::attention_prefill(nullptr, r, nullptr, 16, a, nullptr, nullptr), Error)
            << "head_dim " << hd;
    }
    for (int64_t hd : {32, 96, 132, 256}) {
        const cuda::AttnShape a{4, 2, hd, 4 * hd, 1.0f};
        EXPECT_FALSE(cuda::attention_prefill_mma_fits(a, 16)) << "head_dim " << hd;
        EXPECT_THROW(cuda::attention_prefill_mma(nullptr, r, nullptr, 16, a, nullptr, nullptr), Error)
            << "head_dim " << hd;
    }
    EXPECT_TRUE(cuda::attention_prefill_mma_fits({4, 2, 128, 512, 1.0f}, 16));
    EXPECT_FALSE(cuda::attention_prefill_mma_fits({6, 4, 128, 768, 1.0f}, 16)) << "groups must divide";
}

}  // namespace
}  // namespace minfer::test
