// The tensor-core prefill attention kernel (cuda::attention_prefill_mma) against attention_ref, with the
// budget of its split-half arithmetic (attention_prefill_mma_tol in attn_test_util.h). Query tiles are 64
// rows and key tiles 64 keys, so the row counts cover one partial tile (9), whole tiles (64), one row past
// them (65, 130) and a full micro-batch (512); the positions start at 0, mid-tile (45) and deep (1000,
// 3584). The region's rows past the last position hold random data, so reading a key too many changes
// the result. Paged batches and the bitwise independence of a row from its neighbours are in
// test_attn_paged_cuda.cpp. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>

#include "backend/cuda/attn_prefill_mma.h"
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

void check_mma(const AttnCase& c, const Pos& pos, int64_t n_ctx, bool wide_q, std::mt19937& rng,
               float q_amp = 1.0f) {
    check_attention(c, pos, n_ctx, wide_q, q_amp, rng, AttnKernel::PrefillMma);
}

// The head layouts the kernel serves (head_dim 64 and 128) of the shared shapes, and Qwen2.5-7B's.
const AttnCase kMmaShapes[] = {{14, 2, 64},  {4, 2, 128},  {32, 8, 128},
                               {16, 16, 64}, {12, 2, 128}, {28, 4, 128}};

// pos[t] = n_past + t, 37 region rows past the last position; Q inside a fused QKV buffer for every other
// case.
TEST(CudaAttnPrefillMma, Causal) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(2111);
    int k = 0;
    for (const AttnCase& c : kMmaShapes)
        for (int64_t nt : {9, 64, 65, 130, 512})
            for (int32_t n_past : {0, 45, 1000})
                check_mma(c, consecutive(nt, n_past), n_past + nt + 37, ++k % 2 == 0, rng);
}

// Deep contexts: 512 rows over 4096 keys (the last micro-batch of a 4096-token prompt), and the region's
// last row as the last position, and positions past the region (they see all of it).
TEST(CudaAttnPrefillMma, LongContextAndRegionEnd) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(2212);
    check_mma(kMmaShapes[0], consecutive(512, 3584), 4096, true, rng);
    check_mma(kMmaShapes[5], consecutive(512, 3584), 4096, false, rng);
    for (size_t i = 0; i < std::size(kMmaShapes); ++i) {
        check_mma(kMmaShapes[i], consecutive(130, 45), 175, i % 2 == 0, rng);
        check_mma(kMmaShapes[i], consecutive(100, 50), 100, i % 2 == 1, rng);  // pos >= 99: all 100 keys
    }
}

// Positions in no order: reversed (every row's mask differs from its tile's diagonal), and random with
// repeats and gaps, row 0 at position 0 (one key) beside rows at the region's last row and past it.
TEST(CudaAttnPrefillMma, Positions) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(2313);
    for (size_t i = 0; i < std::size(kMmaShapes); ++i) {
        const AttnCase& c = kMmaShapes[i];
        for (int64_t nt : {70, 130}) {
            Pos reversed = consecutive(nt, 20);
            std::reverse(reversed.begin(), reversed.end());
            check_mma(c, reversed, 20 + nt + 5, i % 2 == 0, rng);
            const int64_t n_ctx = 300;
            std::uniform_int_distribution<int32_t> dist(0, int32_t(n_ctx + 20));
            Pos scattered(static_cast<size_t>(nt));
            for (auto& p : scattered) p = dist(rng);
            scattered[0] = 0, scattered[1] = int32_t(n_ctx - 1), scattered[2] = int32_t(n_ctx + 7);
            check_mma(c, scattered, n_ctx, i % 2 == 1, rng);
        }
    }
}

// Sharp softmaxes (large q): the running max changes by much between tiles, so the rescales matter, and
// most probabilities are far below 1 (their low halves subnormal).
TEST(CudaAttnPrefillMma, SharpSoftmax) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(2414);
    check_mma(kMmaShapes[0], consecutive(130, 45), 200, false, rng, 8.0f);
    check_mma(kMmaShapes[5], consecutive(512, 1000), 1600, true, rng, 6.0f);
    check_mma(kMmaShapes[1], consecutive(65, 1000), 1100, false, rng, 8.0f);
}

// Layouts the kernel does not serve are refused before anything runs, and the fit says so.
TEST(CudaAttnPrefillMma, UnsupportedHeadDim) {
    MINFER_SKIP_WITHOUT_GPU();
    const cuda::KvRegion r{nullptr, nullptr, 264, 16};
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
