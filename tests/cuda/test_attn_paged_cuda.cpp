// The KV kernels in the paged layout (cuda::KvSlots): sequences hold their rows in blocks scattered over
// one region through a block table, and one launch serves the tokens of several sequences. kv_store puts
// each row in its slot; the decode kernel gives each row what it gives the same sequence laid out
// contiguously (bit for bit: addressing is all that differs); the query-tiled prefill kernel, whose tiles
// of 32 rows then straddle sequences (prefill chunks beside single decode rows), stays within its budget
// against attention_ref over the sequence's own rows, also when the decode rows of the batch go to the
// decode kernel and only the chunks to the tiled one (AttnRows); the tensor-core prefill kernel likewise,
// and its rows' bits do not depend on the rows beside them. Unused block-table entries point at a block
// of NaN rows, so that reading past a sequence shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/attn_test_util.h"
#include "util/error.h"

namespace minfer::test {
namespace {

// The sequences of one launch: rows [0, past + n_new) of sequence s are in its blocks, and its n_new
// tokens (positions past, past + 1, ...) are consecutive rows of the batch.
struct Chunk {
    int32_t past, n_new;
};

// Blocks of 2^shift rows handed out at random; block 0 is the poison block (NaN rows), which every
// unused table entry names.
struct PagedLayout {
    int32_t shift, max_blocks;
    int64_t n_blocks;
    std::vector<int32_t> table;  // [n_seq][max_blocks]

    int64_t block() const { return int64_t(1) << shift; }
    cpu::KvRows rows(const TestRegion& reg, size_t s) const {
        return {reg.k.data(), reg.v.data(), reg.n_embd, table.data() + s * size_t(max_blocks), shift};
    }
};

PagedLayout scatter(const std::vector<Chunk>& chunks, int32_t shift, int32_t max_blocks, std::mt19937& rng) {
    PagedLayout l{shift, max_blocks, 1, {}};
    std::vector<int64_t> need;
    for (const Chunk& c : chunks) need.push_back((c.past + c.n_new + l.block() - 1) >> shift);
    l.n_blocks += std::accumulate(need.begin(), need.end(), int64_t(0)) + 3;  // and three spare
    std::vector<int32_t> ids(size_t(l.n_blocks - 1));
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    l.table.assign(chunks.size() * size_t(max_blocks), 0);
    size_t next = 0;
    for (size_t s = 0; s < chunks.size(); ++s)
        for (int64_t b = 0; b < need[s]; ++b) l.table[s * size_t(max_blocks) + size_t(b)] = ids[next++];
    return l;
}

// The poison block's rows of a random region of the layout's blocks set to NaN.
void poison(TestRegion& reg, const PagedLayout& l) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill_n(reg.k.begin(), l.block() * reg.n_embd, nan);
    std::fill_n(reg.v.begin(), l.block() * reg.n_embd, nan);
    reg.dk.upload(reg.k);
    reg.dv.upload(reg.v);
}

// The batch's positions and block-table rows, chunk after chunk.
struct BatchRows {
    Pos pos, slot;
};
BatchRows batch_rows(const std::vector<Chunk>& chunks) {
    BatchRows b;
    for (size_t s = 0; s < chunks.size(); ++s)
        for (int32_t i = 0; i < chunks[s].n_new; ++i)
            b.pos.push_back(chunks[s].past + i), b.slot.push_back(int32_t(s));
    return b;
}

struct DeviceSlots {
    DeviceBuffer<int32_t> pos, slot, table;
    int32_t max_blocks, shift;
    DeviceSlots(const BatchRows& b, const PagedLayout& l)
        : pos(b.pos), slot(b.slot), table(l.table), max_blocks(l.max_blocks), shift(l.shift) {}
    cuda::KvSlots view() const { return {pos.get(), slot.get(), table.get(), max_blocks, shift}; }
};

// Sequence s's first n rows copied out of the paged region, contiguous ([n][n_embd]).
Vec gather(const Vec& region, const PagedLayout& l, size_t s, int64_t n, int64_t n_embd) {
    Vec out(size_t(n * n_embd));
    const cpu::KvRows rows{region.data(), region.data(), n_embd, l.table.data() + s * size_t(l.max_blocks),
                           l.shift};
    for (int64_t j = 0; j < n; ++j) std::copy_n(rows.k_row(j), n_embd, out.begin() + j * n_embd);
    return out;
}

TEST(CudaPaged, KvStorePutsEachRowInItsSlot) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4242);
    const int64_t n_embd = 128;
    const std::vector<Chunk> chunks = {{0, 5}, {31, 2}, {60, 1}, {16, 20}};
    const PagedLayout l = scatter(chunks, 4, 8, rng);
    BatchRows b = batch_rows(chunks);
    b.pos.push_back(int32_t(l.max_blocks * l.block())), b.slot.push_back(0);  // past the capacity: skipped
    b.pos.push_back(-1), b.slot.push_back(1);
    const auto nt = int64_t(b.pos.size());
    const Vec k = uniform(rng, nt * n_embd, -1.0f, 1.0f), v = uniform(rng, nt * n_embd, -1.0f, 1.0f);
    const int64_t n_slots = l.n_blocks * l.block();
    const Vec k0 = uniform(rng, n_slots * n_embd, 5.0f, 6.0f),
              v0 = uniform(rng, n_slots * n_embd, 7.0f, 8.0f);
    DeviceBuffer<float> dk(k), dv(v), rk(k0), rv(v0);
    const DeviceSlots at(b, l);
    cuda::kv_store(dk.get(), dv.get(), at.view(), nt, {rk.get(), rv.get(), n_embd, n_slots}, nullptr);
    sync();
    Vec want_k = k0, want_v = v0;
    for (int64_t t = 0; t < nt - 2; ++t) {
        const cpu::KvRows rows{nullptr, nullptr, 1, l.table.data() + size_t(b.slot[size_t(t)] * l.max_blocks),
                               l.shift};
        const int64_t slot = rows.physical(b.pos[size_t(t)]);
        std::copy_n(k.begin() + t * n_embd, n_embd, want_k.begin() + slot * n_embd);
        std::copy_n(v.begin() + t * n_embd, n_embd, want_v.begin() + slot * n_embd);
    }
    EXPECT_EQ(rk.download(), want_k) << "K rows in their slots, the others untouched";
    EXPECT_EQ(rv.download(), want_v) << "V rows in their slots, the others untouched";
}

// One decode row per sequence; each must equal, bit for bit, the same row against the sequence's rows
// copied into a contiguous region (run with the same split count: nt = 2, or nt = 1 for one sequence).
void check_decode_rows(const AttnCase& c, const std::vector<Chunk>& chunks, std::mt19937& rng) {
    const int64_t hd = c.head_dim, row = c.n_head * hd, n_embd = c.n_head_kv * hd,
                  nt = int64_t(chunks.size());
    const PagedLayout l = scatter(chunks, 5, 80, rng);
    TestRegion reg(n_embd, l.n_blocks * l.block(), rng);
    poison(reg, l);
    const Vec q = uniform(rng, nt * row, -1.0f, 1.0f);
    const cuda::AttnShape a{c.n_head, c.n_head_kv, hd, row, float(1.0 / std::sqrt(double(hd)))};
    const BatchRows b = batch_rows(chunks);
    const DeviceSlots at(b, l);
    DeviceBuffer<float> dq(q), dout(size_t(nt * row));
    fill_nan(dout, nt * row);
    cuda::attention(dq.get(), reg.view(), at.view(), nt, a, dout.get(), nullptr);
    sync();
    const Vec got = dout.download();
    for (size_t s = 0; s < chunks.size(); ++s) {
        const int64_t n = chunks[s].past + 1, pairs = nt == 1 ? 1 : 2;
        SCOPED_TRACE("sequence " + std::to_string(s) + " of " + std::to_string(nt) + ", " +
                     std::to_string(n) + " keys");
        const Vec kc = gather(reg.k, l, s, n, n_embd), vc = gather(reg.v, l, s, n, n_embd);
        DeviceBuffer<float> ck(kc), cv(vc), cq(size_t(pairs * row)), cout(size_t(pairs * row));
        Vec qq;
        for (int64_t i = 0; i < pairs; ++i)
            qq.insert(qq.end(), q.begin() + int64_t(s) * row, q.begin() + int64_t(s + 1) * row);
        cq.upload(qq);
        const DeviceBuffer<int32_t> cpos(Pos(size_t(pairs), chunks[s].past));
        cuda::attention(cq.get(), {ck.get(), cv.get(), n_embd, n}, cpos.get(), pairs, a, cout.get(), nullptr);
        sync();
        const Vec want = cout.download();
        EXPECT_EQ(std::memcmp(got.data() + s * size_t(row), want.data(), size_t(row) * sizeof(float)), 0)
            << "paged and contiguous rows differ";
        EXPECT_FALSE(std::isnan(got[s * size_t(row)])) << "a NaN row: a poisoned block was read";
    }
}

TEST(CudaPaged, DecodeRowsEqualContiguousOnes) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4343);
    for (const AttnCase& c : kAttnShapes) {
        SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + ", head_dim " +
                     std::to_string(c.head_dim));
        check_decode_rows(c, {{0, 1}, {31, 1}, {32, 1}, {100, 1}, {700, 1}, {2047, 1}, {5, 1}}, rng);
        check_decode_rows(c, {{1500, 1}}, rng);  // one sequence: split-K over the cluster
    }
}

// The tiled prefill kernel `tiled` (AttnKernel::Prefill or PrefillMma) on the batch's rows.
void run_tiled(AttnKernel tiled, const float* q, const cuda::KvRegion& r, const cuda::KvSlots& at, int64_t nt,
               const cuda::AttnShape& a, float* out, cuda::AttnRows rows) {
    if (tiled == AttnKernel::PrefillMma)
        return cuda::attention_prefill_mma(q, r, at, nt, a, out, nullptr, rows);
    cuda::attention_prefill(q, r, at, nt, a, out, nullptr, rows);
}

// Mixed batches against attention_ref over each sequence's paged rows: the tiled kernel on every row,
// or (split_rows, as the backend runs a paged batch) the decode kernel on the rows alone in their chunk
// and the tiled kernel on the others, each row within its kernel's budget (rows left out stay NaN).
void check_prefill_batch(const AttnCase& c, const std::vector<Chunk>& chunks, bool split_rows,
                         std::mt19937& rng, AttnKernel tiled = AttnKernel::Prefill, int64_t window = 0) {
    const int64_t hd = c.head_dim, row = c.n_head * hd, n_embd = c.n_head_kv * hd;
    const PagedLayout l = scatter(chunks, 5, 40, rng);
    TestRegion reg(n_embd, l.n_blocks * l.block(), rng);
    poison(reg, l);
    const BatchRows b = batch_rows(chunks);
    const auto nt = int64_t(b.pos.size());
    const Vec q = uniform(rng, nt * row, -1.0f, 1.0f);
    cuda::AttnShape a{c.n_head, c.n_head_kv, hd, row, float(1.0 / std::sqrt(double(hd)))};
    a.window = window;
    const DeviceSlots at(b, l);
    DeviceBuffer<float> dq(q), dout(size_t(nt * row));
    fill_nan(dout, nt * row);
    std::vector<bool> single(size_t(nt), false);
    if (split_rows) {
        cuda::attention(dq.get(), reg.view(), at.view(), nt, a, dout.get(), nullptr, cuda::AttnRows::kSingle);
        run_tiled(tiled, dq.get(), reg.view(), at.view(), nt, a, dout.get(), cuda::AttnRows::kChunked);
        size_t t = 0;
        for (const Chunk& ch : chunks) single[t] = ch.n_new == 1, t += size_t(ch.n_new);
    } else {
        run_tiled(tiled, dq.get(), reg.view(), at.view(), nt, a, dout.get(), cuda::AttnRows::kAll);
    }
    sync();
    Vec want(size_t(nt * row));
    Tol tol(want.size());
    const int64_t group = c.n_head / c.n_head_kv;
    parallel_rows(nt, [&](int64_t t) {
        const int64_t n_kv = int64_t(b.pos[size_t(t)]) + 1;
        const int64_t first = window > 0 ? std::max<int64_t>(0, n_kv - window) : 0;
        const cpu::KvRows rows = l.rows(reg, size_t(b.slot[size_t(t)]));
        const float* qt = q.data() + t * row;
        cpu::attention_ref(qt, rows, want.data() + t * row, c.n_head, c.n_head_kv, hd, first, n_kv, a.scale);
        for (int64_t h = 0; h < c.n_head; ++h) {
            const HeadBounds hb = head_bounds(qt + h * hd, rows, (h / group) * hd, hd, n_kv);
            const AttnKernel k = single[size_t(t)] ? AttnKernel::Decode : tiled;
            std::fill_n(tol.begin() + t * row + h * hd, hd,
                        attention_kernel_tol(k, hb, hd, n_kv, a.scale, 1));
        }
    });
    expect_within(dout.download(), want, tol,
                  std::string(split_rows ? "paged, rows split, " : "paged ") + attention_kernel_name(tiled));
}

TEST(CudaPaged, PrefillTilesAcrossSequencesMatchReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4444);
    // Tiles of 32 rows straddling chunks; single decode rows between prefill chunks; a chunk after a
    // long cached prefix; one sequence over several tiles.
    const std::vector<std::vector<Chunk>> batches = {
        {{0, 40}, {100, 1}, {5, 20}, {0, 1}, {300, 70}},
        {{7, 1}, {64, 1}, {200, 1}, {0, 3}, {1000, 1}, {33, 30}, {0, 33}},
        {{0, 96}},
    };
    for (const AttnCase& c : kAttnShapes)
        for (const auto& batch : batches) {
            SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                         ", head_dim " + std::to_string(c.head_dim) + ", " + std::to_string(batch.size()) +
                         " sequences");
            check_prefill_batch(c, batch, false, rng);
            check_prefill_batch(c, batch, true, rng);
            if (c.head_dim != 64 && c.head_dim != 128) continue;
            check_prefill_batch(c, batch, false, rng, AttnKernel::PrefillMma);
            check_prefill_batch(c, batch, true, rng, AttnKernel::PrefillMma);
        }
}

// Sliding windows in paged batches: the tiled kernel on every row, and the decode kernel on the single
// rows beside it, each row against attention_ref over its own window of its sequence's paged rows.
TEST(CudaPaged, SlidingWindowBatchesMatchReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4545);
    const std::vector<Chunk> batch = {{0, 40}, {100, 1}, {5, 20}, {0, 1}, {300, 70}, {33, 30}};
    for (const AttnCase& c : kAttnShapes)
        for (int64_t window : {4, 32, 50}) {
            SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                         ", head_dim " + std::to_string(c.head_dim) + ", window " + std::to_string(window));
            check_prefill_batch(c, batch, false, rng, AttnKernel::Prefill, window);
            check_prefill_batch(c, batch, true, rng, AttnKernel::Prefill, window);
        }
}

// The tensor-core prefill kernel's promise: a row's bits depend on its query and its sequence's keys
// only. A chunk run alone equals, row for row (memcmp), the same chunk at other offsets of a batch,
// where its rows share 64-row tiles with other sequences' rows and with decode rows.
TEST(CudaPaged, MmaPrefillRowsEqualAloneAndInABatch) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4646);
    const Chunk mine{100, 90};
    const std::vector<std::vector<Chunk>> batches = {
        {{0, 40}, mine}, {{5, 1}, {300, 30}, {0, 1}, mine, {64, 7}}, {mine, {2000, 100}}};
    for (const AttnCase& c : {AttnCase{14, 2, 64}, AttnCase{28, 4, 128}}) {
        const int64_t hd = c.head_dim, row = c.n_head * hd, n_embd = c.n_head_kv * hd;
        const cuda::AttnShape a{c.n_head, c.n_head_kv, hd, row, float(1.0 / std::sqrt(double(hd)))};
        for (const auto& batch : batches) {
            const auto at = std::find_if(batch.begin(), batch.end(), [&](const Chunk& ch) {
                return ch.past == mine.past && ch.n_new == mine.n_new;
            });
            const size_t s = size_t(at - batch.begin());
            const PagedLayout l = scatter(batch, 5, 80, rng);
            TestRegion reg(n_embd, l.n_blocks * l.block(), rng);
            poison(reg, l);
            const BatchRows b = batch_rows(batch);
            const auto nt = int64_t(b.pos.size());
            const Vec q = uniform(rng, nt * row, -1.0f, 1.0f);
            const int64_t first = std::find(b.slot.begin(), b.slot.end(), int32_t(s)) - b.slot.begin();
            BatchRows alone;
            alone.pos.assign(b.pos.begin() + first, b.pos.begin() + first + mine.n_new);
            alone.slot.assign(size_t(mine.n_new), int32_t(s));
            const DeviceSlots all_at(b, l), alone_at(alone, l);
            DeviceBuffer<float> dq(q), out(size_t(nt * row)), out1(size_t(mine.n_new * row));
            cuda::attention_prefill_mma(dq.get(), reg.view(), all_at.view(), nt, a, out.get(), nullptr);
            cuda::attention_prefill_mma(dq.get() + first * row, reg.view(), alone_at.view(), mine.n_new, a,
                                        out1.get(), nullptr);
            sync();
            const Vec got = out.download(), want = out1.download();
            SCOPED_TRACE("head_dim " + std::to_string(hd) + ", chunk at row " + std::to_string(first));
            EXPECT_EQ(std::memcmp(got.data() + first * row, want.data(), want.size() * sizeof(float)), 0)
                << "a row's bits depend on the rows beside it";
            EXPECT_FALSE(std::isnan(want[0]));
        }
    }
}

// Blocks serving every query head of a KV head give the per-head blocks' bits, row for row: contexts of 1
// key to several tiles per warp and past a whole block, rows alone and (AttnRows::kSingle) beside chunks
// the launch leaves out, every head layout that takes them.
TEST(CudaPaged, BlocksPerKvHeadEqualPerHeadOnes) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4545);
    const std::vector<Chunk> chunks = {{0, 1}, {6, 1},   {7, 1},    {63, 1}, {64, 1}, {100, 1},
                                       {0, 5}, {700, 1}, {2047, 1}, {31, 1}, {40, 9}, {5, 1}};
    int covered = 0;
    for (const AttnCase& c : kAttnShapes) {
        const int64_t hd = c.head_dim, row = c.n_head * hd, n_embd = c.n_head_kv * hd;
        const cuda::AttnShape a{c.n_head, c.n_head_kv, hd, row, float(1.0 / std::sqrt(double(hd)))};
        const PagedLayout l = scatter(chunks, 5, 80, rng);
        const BatchRows b = batch_rows(chunks);
        const auto nt = int64_t(b.pos.size());
        if (!cuda::attention_blocks_per_kv_head(a, nt, l.n_blocks * l.block())) continue;
        ++covered;
        SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + ", head_dim " +
                     std::to_string(hd));
        TestRegion reg(n_embd, l.n_blocks * l.block(), rng);
        poison(reg, l);
        const DeviceSlots at(b, l);
        DeviceBuffer<float> dq(uniform(rng, nt * row, -1.0f, 1.0f));
        for (const cuda::AttnRows rows : {cuda::AttnRows::kAll, cuda::AttnRows::kSingle}) {
            DeviceBuffer<float> per_head(size_t(nt * row)), per_kv(size_t(nt * row));
            fill_nan(per_head, nt * row);
            fill_nan(per_kv, nt * row);
            cuda::attention(dq.get(), reg.view(), at.view(), nt, a, per_head.get(), nullptr, rows,
                            cuda::AttnBlocks::PerHead);
            cuda::attention(dq.get(), reg.view(), at.view(), nt, a, per_kv.get(), nullptr, rows,
                            cuda::AttnBlocks::PerKvHead);
            sync();
            const Vec want = per_head.download(), got = per_kv.download();
            for (int64_t t = 0; t < nt; ++t)
                ASSERT_EQ(
                    std::memcmp(got.data() + t * row, want.data() + t * row, size_t(row) * sizeof(float)), 0)
                    << "row " << t << " (position " << b.pos[size_t(t)] << ")";
            EXPECT_FALSE(std::isnan(want[0])) << "row 0 is alone in its chunk: it must be served";
        }
    }
    EXPECT_GE(covered, 4) << "head layouts that take blocks per KV head";
    const cuda::AttnShape one_head_a_kv_head{16, 16, 64, 16 * 64, 0.125f};  // no group to serve
    DeviceBuffer<float> q(size_t(16 * 64)), out(size_t(16 * 64));
    const DeviceBuffer<int32_t> pos(Pos{3});
    TestRegion reg(16 * 64, 8, rng);
    EXPECT_THROW(cuda::attention(q.get(), reg.view(), pos.get(), 1, one_head_a_kv_head, out.get(), nullptr,
                                 cuda::AttnRows::kAll, cuda::AttnBlocks::PerKvHead),
                 Error);
}

}  // namespace
}  // namespace minfer::test
