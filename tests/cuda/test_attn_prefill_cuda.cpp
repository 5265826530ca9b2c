// The query-tiled prefill attention kernel (cuda::attention_prefill) against attention_ref, with the
// budget of its summation order (attention_prefill_tol in attn_test_util.h). Query tiles are 32 rows and
// key tiles 32 keys, so the row counts cover one partial tile (9), whole tiles (64), one row past them
// (65, 130) and a full micro-batch (512); the positions start at 0, mid-tile (45) and deep (1000, 3584).
// Small grids (few heads or rows) split the keys over a thread-block cluster (up to 8 blocks) that merges
// its partial softmaxes; most cases here run split, and short contexts in long regions leave splits
// without keys. The region's rows past the last position hold random data, so reading a key too many
// changes the result. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <utility>

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
                   float q_amp = 1.0f) {
    check_attention(c, pos, n_ctx, wide_q, q_amp, rng, AttnKernel::Prefill);
}

// pos[t] = n_past + t over every shape, 37 region rows past the last position; Q inside a fused QKV
// buffer (wider q_stride) for every other case.
TEST(CudaAttnPrefill, Causal) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1111);
    int k = 0;
    for (const AttnCase& c : kAttnShapes)
        for (int64_t nt : {9, 64, 65, 130, 512})
            for (int32_t n_past : {0, 45, 1000})
                check_prefill(c, consecutive(nt, n_past), n_past + nt + 37, ++k % 2 == 0, rng);
}

// The last position is the region's last row (n_ctx - 1), and positions past the region, which see
// all of it (min(pos + 1, n_ctx) keys).
TEST(CudaAttnPrefill, RegionEnd) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1212);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i) {
        const AttnCase& c = kAttnShapes[i];
        check_prefill(c, consecutive(130, 45), 175, i % 2 == 0, rng);
        check_prefill(c, consecutive(64, 0), 64, i % 2 == 1, rng);
        check_prefill(c, consecutive(100, 50), 100, i % 2 == 0, rng);  // pos >= 99: all 100 keys
    }
    check_prefill(kAttnShapes[0], consecutive(512, 1000), 1512, true, rng);
    check_prefill(kAttnShapes[3], consecutive(512, 1000), 1512, false, rng);
}

// Positions in no order: reversed (the mask of every row differs from its tile's diagonal), and random
// with repeats and gaps, row 0 at position 0 (one key) beside rows at the region's last row and past
// it, so one query tile mixes rows of 1 key and of every key.
TEST(CudaAttnPrefill, Positions) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1313);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i) {
        const AttnCase& c = kAttnShapes[i];
        for (int64_t nt : {70, 130}) {
            Pos reversed = consecutive(nt, 20);
            std::reverse(reversed.begin(), reversed.end());
            check_prefill(c, reversed, 20 + nt + 5, i % 2 == 0, rng);
            const int64_t n_ctx = 300;
            std::uniform_int_distribution<int32_t> dist(0, int32_t(n_ctx + 20));
            Pos scattered(static_cast<size_t>(nt));
            for (auto& p : scattered) p = dist(rng);
            scattered[0] = 0, scattered[1] = int32_t(n_ctx - 1), scattered[2] = int32_t(n_ctx + 7);
            scattered[size_t(nt - 1)] = scattered[3];
            check_prefill(c, scattered, n_ctx, i % 2 == 1, rng);
        }
    }
}

// Head sizes off the two tuned ones (64, 128) run the generic instances: up to 128, and up to 256.
TEST(CudaAttnPrefill, OtherHeadDims) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1414);
    const AttnCase cases[] = {{6, 3, 4}, {5, 5, 40}, {6, 2, 96}, {4, 4, 132}, {4, 2, 256}, {3, 1, 252}};
    for (const AttnCase& c : cases)
        for (auto [nt, n_past] : {std::pair<int64_t, int32_t>{9, 0}, {130, 45}, {65, 1000}})
            check_prefill(c, consecutive(nt, n_past), n_past + nt + 11, nt % 2 == 1, rng);
}

// Sharp softmaxes (large q): the running max changes by much between tiles, so the rescales matter.
TEST(CudaAttnPrefill, SharpSoftmax) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1515);
    check_prefill(kAttnShapes[0], consecutive(130, 45), 200, false, rng, 8.0f);
    check_prefill(kAttnShapes[3], consecutive(512, 1000), 1600, true, rng, 6.0f);
    check_prefill(kAttnShapes[1], consecutive(65, 1000), 1100, false, rng, 8.0f);
}

// Few heads over a long context: the keys split over 8 blocks that merge (Qwen2.5-0.5B's 14/2 heads at
// depth 3584, 512 rows over 4096 keys; a head of 128 and the generic instances), with a sharp softmax
// (the splits' maxima far apart), and positions in no order, where rows see no key of some splits.
TEST(CudaAttnPrefill, SplitKeys) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1616);
    check_prefill(kAttnShapes[0], consecutive(512, 3584), 4096, true, rng);
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

// Head layouts the kernel does not serve are refused before anything runs.
TEST(CudaAttnPrefill, UnsupportedHeadDim) {
    MINFER_SKIP_WITHOUT_GPU();
    const cuda::KvRegion r{nullptr, nullptr, 264, 16};
    for (int64_t hd : {66, 260, 0}) {
        const cuda::AttnShape a{4, 2, hd, 4 * hd, 1.0f};
        EXPECT_THROW(cuda::attention_prefill(nullptr, r, nullptr, 16, a, nullptr, nullptr), Error)
            << "head_dim " << hd;
    }
}

}  // namespace
}  // namespace minfer::test
