// BlockPool: allocation order, reference counts, prefix-cache publish/lookup with chained keys, LRU
// eviction of unreferenced cached blocks, and a randomized run against a linear-scan reference model.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "util/error.h"

namespace minfer::kv {
namespace {

using Tokens = std::vector<int32_t>;

// n_free + n_used always covers the pool; the rest is checked per test.
void expect_counts(const BlockPool& p, int32_t n_free, int32_t n_used, int32_t n_cached) {
    EXPECT_EQ(p.n_free(), n_free);
    EXPECT_EQ(p.n_used(), n_used);
    EXPECT_EQ(p.n_cached(), n_cached);
    EXPECT_EQ(p.n_free() + p.n_used(), p.n_blocks());
}

TEST(BlockPool, RejectsBadSizes) {
    EXPECT_THROW(BlockPool(0, 16), Error);
    EXPECT_THROW(BlockPool(4, 0), Error);
    EXPECT_THROW(BlockPool(-1, -1), Error);
    const BlockPool p(3, 16);
    EXPECT_EQ(p.n_blocks(), 3);
    EXPECT_EQ(p.block_size(), 16);
    expect_counts(p, 3, 0, 0);
}

TEST(BlockPool, FreshPoolAllocatesAscendingThenRunsOut) {
    BlockPool p(4, 2);
    for (BlockId want = 0; want < 4; ++want) {
        EXPECT_EQ(p.allocate(), want);
        EXPECT_EQ(p.refcount(want), 1);
        EXPECT_FALSE(p.published(want));
        expect_counts(p, 3 - want, want + 1, 0);
    }
    EXPECT_EQ(p.allocate(), -1);
    expect_counts(p, 0, 4, 0);
    p.release(2);
    EXPECT_EQ(p.refcount(2), 0);
    expect_counts(p, 1, 3, 0);
    EXPECT_EQ(p.allocate(), 2);  // the only free block
    expect_counts(p, 0, 4, 0);
    EXPECT_EQ(p.evictions(), 0);
}

TEST(BlockPool, RetainAndReleaseCountReferences) {
    BlockPool p(2, 2);
    const BlockId a = p.allocate();
    p.retain(a);
    p.retain(a);
    EXPECT_EQ(p.refcount(a), 3);
    expect_counts(p, 1, 1, 0);
    p.release(a);
    p.release(a);
    EXPECT_EQ(p.refcount(a), 1);
    expect_counts(p, 1, 1, 0);
    // Still referenced: allocate must hand out the other block, then nothing.
    const BlockId b = p.allocate();
    EXPECT_NE(b, a);
    EXPECT_EQ(p.allocate(), -1);
    p.release(a);
    expect_counts(p, 1, 1, 0);
    EXPECT_EQ(p.allocate(), a);
}

TEST(BlockPool, BadIdsAndUnreferencedBlocksThrow) {
    BlockPool p(2, 2);
    for (BlockId bad : {-1, 2, 1000}) {
        EXPECT_THROW(p.retain(bad), Error);
        EXPECT_THROW(p.release(bad), Error);
        EXPECT_THROW(p.refcount(bad), Error);
        EXPECT_THROW(p.key_of(bad), Error);
    }
    EXPECT_THROW(p.release(0), Error);  // refcount already 0
    EXPECT_THROW(p.retain(0), Error);
    const BlockId a = p.allocate();
    p.release(a);
    EXPECT_THROW(p.release(a), Error);
    EXPECT_EQ(p.refcount(a), 0);
    expect_counts(p, 2, 0, 0);
}

TEST(BlockPool, PublishThenLookupReturnsTheSameBlockRetained) {
    BlockPool p(4, 3);
    const Tokens t = {7, 8, 9};
    const BlockId a = p.allocate();
    const uint64_t key = p.publish(a, kRootHash, t);
    EXPECT_EQ(key, BlockPool::chain_hash(kRootHash, t));
    EXPECT_NE(key, 0u);
    EXPECT_TRUE(p.published(a));
    EXPECT_EQ(p.key_of(a), key);
    expect_counts(p, 3, 1, 1);
    EXPECT_EQ(p.lookup(kRootHash, t), a);
    EXPECT_EQ(p.refcount(a), 2);
    EXPECT_EQ(p.lookups(), 1);
    EXPECT_EQ(p.hits(), 1);
    expect_counts(p, 3, 1, 1);
}

TEST(BlockPool, LookupMissesOnOtherTokensOrParent) {
    BlockPool p(4, 3);
    const BlockId a = p.allocate();
    p.publish(a, kRootHash, Tokens{1, 2, 3});
    EXPECT_EQ(p.lookup(kRootHash, Tokens{1, 2, 4}), -1);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{3, 2, 1}), -1);
    EXPECT_EQ(p.lookup(kRootHash + 1, Tokens{1, 2, 3}), -1);
    EXPECT_EQ(p.lookups(), 3);
    EXPECT_EQ(p.hits(), 0);
    EXPECT_EQ(p.refcount(a), 1);
}

TEST(BlockPool, ChainedKeysDependOnTheParent) {
    BlockPool p(4, 2);
    const Tokens first = {10, 11}, second = {12, 13};
    const BlockId b0 = p.allocate(), b1 = p.allocate(), b2 = p.allocate();
    const uint64_t k0 = p.publish(b0, kRootHash, first);
    const uint64_t k1 = p.publish(b1, k0, second);
    // The same tokens as b1's at the start of a sequence are a different entry.
    const uint64_t k2 = p.publish(b2, kRootHash, second);
    EXPECT_EQ(k1, BlockPool::chain_hash(k0, second));
    EXPECT_NE(k1, k2);
    EXPECT_TRUE(p.published(b1));
    EXPECT_TRUE(p.published(b2));
    expect_counts(p, 1, 3, 3);
    EXPECT_EQ(p.lookup(k0, second), b1);
    EXPECT_EQ(p.lookup(kRootHash, second), b2);
    EXPECT_EQ(p.lookup(k2, second), -1);
}

TEST(BlockPool, ChainHashIsPureAndSensitive) {
    const Tokens t = {1, 2, 3, 4};
    EXPECT_EQ(BlockPool::chain_hash(kRootHash, t), BlockPool::chain_hash(kRootHash, t));
    EXPECT_NE(BlockPool::chain_hash(kRootHash, t), BlockPool::chain_hash(kRootHash, Tokens{1, 2, 3, 5}));
    EXPECT_NE(BlockPool::chain_hash(kRootHash, t), BlockPool::chain_hash(kRootHash, Tokens{2, 1, 3, 4}));
    EXPECT_NE(BlockPool::chain_hash(kRootHash, Tokens{0}), BlockPool::chain_hash(kRootHash, Tokens{0, 0}));
    EXPECT_NE(BlockPool::chain_hash(kRootHash, Tokens{-1}), BlockPool::chain_hash(kRootHash, Tokens{0}));
}

TEST(BlockPool, ReleasedPublishedBlockStaysFindableUntilEvicted) {
    BlockPool p(2, 2);
    const Tokens t = {5, 6};
    const BlockId a = p.allocate();
    p.publish(a, kRootHash, t);
    p.release(a);
    expect_counts(p, 2, 0, 1);
    EXPECT_TRUE(p.published(a));
    EXPECT_EQ(p.lookup(kRootHash, t), a);  // revived from the LRU
    EXPECT_EQ(p.refcount(a), 1);
    expect_counts(p, 1, 1, 1);
    p.release(a);
    // The free block goes first; only then is the cached one evicted.
    const BlockId b = p.allocate();
    EXPECT_NE(b, a);
    EXPECT_EQ(p.evictions(), 0);
    EXPECT_EQ(p.allocate(), a);
    EXPECT_EQ(p.evictions(), 1);
    EXPECT_FALSE(p.published(a));
    EXPECT_EQ(p.key_of(a), 0u);
    expect_counts(p, 0, 2, 0);
    EXPECT_EQ(p.lookup(kRootHash, t), -1);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedFirst) {
    BlockPool p(3, 1);
    const BlockId a = p.allocate(), b = p.allocate(), c = p.allocate();
    p.publish(a, kRootHash, Tokens{1});
    p.publish(b, kRootHash, Tokens{2});
    p.publish(c, kRootHash, Tokens{3});
    // Released in the order b, a, c: allocation age does not matter, release order does.
    p.release(b);
    p.release(a);
    p.release(c);
    expect_counts(p, 3, 0, 3);
    EXPECT_EQ(p.allocate(), b);
    EXPECT_EQ(p.allocate(), a);
    EXPECT_EQ(p.evictions(), 2);
    expect_counts(p, 1, 2, 1);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{3}), c);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{1}), -1);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{2}), -1);
}

TEST(BlockPool, LookupTakesACachedBlockOutOfTheLru) {
    BlockPool p(2, 1);
    const BlockId a = p.allocate(), b = p.allocate();
    p.publish(a, kRootHash, Tokens{1});
    p.publish(b, kRootHash, Tokens{2});
    p.release(a);
    p.release(b);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{1}), a);  // a was next to go
    expect_counts(p, 1, 1, 2);
    EXPECT_EQ(p.allocate(), b);
    EXPECT_EQ(p.allocate(), -1);  // a is referenced again, not evictable
    EXPECT_TRUE(p.published(a));
    EXPECT_EQ(p.evictions(), 1);
    // Released again, a goes to the back of the LRU.
    p.release(a);
    EXPECT_EQ(p.allocate(), a);
}

TEST(BlockPool, DuplicatePublishLeavesTheNewBlockUnpublished) {
    BlockPool p(2, 2);
    const Tokens t = {4, 4};
    const BlockId a = p.allocate(), b = p.allocate();
    const uint64_t key = p.publish(a, kRootHash, t);
    EXPECT_EQ(p.publish(b, kRootHash, t), key);
    EXPECT_FALSE(p.published(b));
    EXPECT_EQ(p.key_of(b), 0u);
    expect_counts(p, 0, 2, 1);
    p.release(a);
    p.release(b);
    expect_counts(p, 2, 0, 1);
    // b went to the free list (allocate prefers it to evicting a), and lookups still find a.
    EXPECT_EQ(p.allocate(), b);
    EXPECT_EQ(p.evictions(), 0);
    EXPECT_EQ(p.lookup(kRootHash, t), a);
}

TEST(BlockPool, RepublishIsANoOp) {
    BlockPool p(2, 2);
    const BlockId a = p.allocate();
    const uint64_t key = p.publish(a, kRootHash, Tokens{1, 2});
    EXPECT_EQ(p.publish(a, kRootHash, Tokens{1, 2}), key);
    EXPECT_EQ(p.publish(a, kRootHash, Tokens{3, 4}), key);
    EXPECT_EQ(p.key_of(a), key);
    expect_counts(p, 1, 1, 1);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{3, 4}), -1);
    EXPECT_EQ(p.lookup(kRootHash, Tokens{1, 2}), a);
}

TEST(BlockPool, BadPublishAndLookupArgumentsThrow) {
    BlockPool p(2, 3);
    const BlockId a = p.allocate();
    EXPECT_THROW(p.publish(a, kRootHash, Tokens{1, 2}), Error);
    EXPECT_THROW(p.publish(a, kRootHash, Tokens{1, 2, 3, 4}), Error);
    EXPECT_THROW(p.publish(1, kRootHash, Tokens{1, 2, 3}), Error);  // unreferenced
    EXPECT_THROW(p.publish(2, kRootHash, Tokens{1, 2, 3}), Error);
    EXPECT_THROW(p.lookup(kRootHash, Tokens{1, 2}), Error);
    EXPECT_EQ(p.n_cached(), 0);
    EXPECT_FALSE(p.published(a));
    p.publish(a, kRootHash, Tokens{1, 2, 3});
    EXPECT_THROW(p.lookup(kRootHash, Tokens{1, 2, 3, 0}), Error);
}

// Inverts the splitmix64 finalizer that chain_hash applies per token, to build a real 64-bit collision.
uint64_t inverse_mod_2_64(uint64_t c) {
    uint64_t x = c;  // correct to 3 bits for odd c; each Newton step doubles that
    for (int i = 0; i < 5; ++i) x *= 2 - c * x;
    return x;
}
uint64_t unxorshift(uint64_t y, int s) {
    uint64_t x = y;
    for (int i = 0; i * s < 64; ++i) x = y ^ (x >> s);
    return x;
}
uint64_t unmix64(uint64_t z) {
    z = unxorshift(z, 31) * inverse_mod_2_64(0x94d049bb133111ebull);
    z = unxorshift(z, 27) * inverse_mod_2_64(0xbf58476d1ce4e5b9ull);
    return unxorshift(z, 30) - 0x9e3779b97f4a7c15ull;
}

TEST(BlockPool, HashCollisionIsAMissNotAWrongBlock) {
    const Tokens t1 = {1, 2, 3, 4}, t2 = {5, 6, 7, 8};
    const uint64_t key = BlockPool::chain_hash(kRootHash, t1);
    uint64_t parent2 = key;  // the parent under which t2 hashes to `key`
    for (size_t i = t2.size(); i-- > 0;) parent2 = unmix64(parent2) ^ uint32_t(t2[i]);
    ASSERT_EQ(BlockPool::chain_hash(parent2, t2), key) << "chain_hash is no longer splitmix64 per token";

    BlockPool p(2, 4);
    const BlockId a = p.allocate(), b = p.allocate();
    EXPECT_EQ(p.publish(a, kRootHash, t1), key);
    EXPECT_EQ(p.lookup(parent2, t2), -1);
    EXPECT_EQ(p.refcount(a), 1);
    EXPECT_EQ(p.publish(b, parent2, t2), key);
    EXPECT_FALSE(p.published(b));
    EXPECT_EQ(p.lookup(parent2, t2), -1);
    EXPECT_EQ(p.lookup(kRootHash, t1), a);
    EXPECT_EQ(p.hits(), 1);
}

// The reference model: plain per-block state, every question answered by a scan.
struct Model {
    struct Block {
        int32_t ref = 0;
        bool published = false;
        uint64_t key = 0, parent = 0;
        Tokens tokens;
        int64_t released_at = 0;  // orders the unreferenced published blocks
    };
    std::vector<Block> blocks;
    int64_t clock = 0, lookups = 0, hits = 0, evictions = 0;

    explicit Model(int32_t n) : blocks(size_t(n)) {}
    bool is_free(const Block& b) const { return b.ref == 0 && !b.published; }
    bool in_lru(const Block& b) const { return b.ref == 0 && b.published; }
    BlockId oldest_lru() const {
        BlockId best = -1;
        for (size_t i = 0; i < blocks.size(); ++i)
            if (in_lru(blocks[i]) && (best < 0 || blocks[i].released_at < blocks[size_t(best)].released_at))
                best = BlockId(i);
        return best;
    }
    BlockId find(uint64_t parent, const Tokens& t) const {
        for (size_t i = 0; i < blocks.size(); ++i)
            if (blocks[i].published && blocks[i].parent == parent && blocks[i].tokens == t) return BlockId(i);
        return -1;
    }
    bool key_taken(uint64_t key) const {
        return std::ranges::any_of(blocks, [&](const Block& b) { return b.published && b.key == key; });
    }
};

void expect_same(const BlockPool& p, const Model& m) {
    int32_t n_free = 0, n_used = 0, n_cached = 0;
    for (size_t i = 0; i < m.blocks.size(); ++i) {
        const Model::Block& mb = m.blocks[i];
        ASSERT_EQ(p.refcount(BlockId(i)), mb.ref) << "block " << i;
        ASSERT_EQ(p.published(BlockId(i)), mb.published) << "block " << i;
        ASSERT_EQ(p.key_of(BlockId(i)), mb.published ? mb.key : 0) << "block " << i;
        n_free += mb.ref == 0;
        n_used += mb.ref > 0;
        n_cached += mb.published;
    }
    ASSERT_EQ(p.n_free(), n_free);
    ASSERT_EQ(p.n_used(), n_used);
    ASSERT_EQ(p.n_cached(), n_cached);
    ASSERT_EQ(p.lookups(), m.lookups);
    ASSERT_EQ(p.hits(), m.hits);
    ASSERT_EQ(p.evictions(), m.evictions);
}

// One random operation on both; small token alphabet and few parents so that hits, duplicate publishes
// and evictions are all common.
class Stress {
  public:
    Stress(int32_t n_blocks, int32_t block_size) : pool_(n_blocks, block_size), model_(n_blocks) {
        parents_.push_back(kRootHash);
    }
    void step() {
        const int op = pick(100);
        if (op < 20)
            allocate();
        else if (op < 55)
            with_referenced([&](BlockId b) { release(b); });
        else if (op < 62)
            with_referenced([&](BlockId b) { retain(b); });
        else if (op < 78)
            with_referenced([&](BlockId b) { publish(b); });
        else if (op < 98)
            lookup();
        else
            misuse();
    }
    const BlockPool& pool() const { return pool_; }
    const Model& model() const { return model_; }

  private:
    int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
    Tokens tokens() {
        Tokens t(size_t(pool_.block_size()));
        for (int32_t& x : t) x = pick(2);
        return t;
    }
    uint64_t parent() { return parents_[size_t(pick(int(parents_.size())))]; }
    template <class F>
    void with_referenced(F f) {
        std::vector<BlockId> held;
        for (size_t i = 0; i < model_.blocks.size(); ++i)
            if (model_.blocks[i].ref > 0) held.push_back(BlockId(i));
        if (!held.empty()) f(held[size_t(pick(int(held.size())))]);
    }

    void allocate() {
        const BlockId got = pool_.allocate();
        bool any_free = false;
        for (const Model::Block& b : model_.blocks) any_free |= model_.is_free(b);
        if (any_free) {
            ASSERT_GE(got, 0);
            ASSERT_TRUE(model_.is_free(model_.blocks[size_t(got)])) << "allocated block " << got;
        } else {
            ASSERT_EQ(got, model_.oldest_lru());
            if (got < 0) return;
            model_.blocks[size_t(got)].published = false;
            ++model_.evictions;
        }
        model_.blocks[size_t(got)].ref = 1;
    }
    void release(BlockId b) {
        pool_.release(b);
        if (--model_.blocks[size_t(b)].ref == 0) model_.blocks[size_t(b)].released_at = ++model_.clock;
    }
    void retain(BlockId b) {
        pool_.retain(b);
        ++model_.blocks[size_t(b)].ref;
    }
    void publish(BlockId b) {
        const uint64_t par = parent();
        const Tokens t = tokens();
        const uint64_t key = pool_.publish(b, par, t);
        Model::Block& mb = model_.blocks[size_t(b)];
        if (mb.published) {
            ASSERT_EQ(key, mb.key);
            return;
        }
        ASSERT_EQ(key, BlockPool::chain_hash(par, t));
        if (!model_.key_taken(key)) mb = {mb.ref, true, key, par, t, 0};
        if (parents_.size() < 6) parents_.push_back(key);
    }
    void lookup() {
        const uint64_t par = parent();
        const Tokens t = tokens();
        const BlockId got = pool_.lookup(par, t);
        ASSERT_EQ(got, model_.find(par, t));
        ++model_.lookups;
        if (got < 0) return;
        ++model_.hits;
        ++model_.blocks[size_t(got)].ref;
    }
    // Calls that must throw and change nothing.
    void misuse() {
        std::vector<BlockId> idle;
        for (size_t i = 0; i < model_.blocks.size(); ++i)
            if (model_.blocks[i].ref == 0) idle.push_back(BlockId(i));
        if (!idle.empty()) {
            const BlockId b = idle[size_t(pick(int(idle.size())))];
            EXPECT_THROW(pool_.release(b), Error);
            EXPECT_THROW(pool_.retain(b), Error);
            EXPECT_THROW(pool_.publish(b, kRootHash, tokens()), Error);
        }
        EXPECT_THROW(pool_.release(pool_.n_blocks()), Error);
        EXPECT_THROW(pool_.lookup(kRootHash, Tokens(size_t(pool_.block_size()) + 1)), Error);
    }

    BlockPool pool_;
    Model model_;
    std::vector<uint64_t> parents_;  // kRootHash and the first keys published
    std::mt19937 rng_{20240611};
};

TEST(BlockPool, RandomizedAgainstReferenceModel) {
    Stress s(12, 3);
    for (int i = 0; i < 100000; ++i) {
        ASSERT_NO_FATAL_FAILURE(s.step()) << "op " << i;
        ASSERT_NO_FATAL_FAILURE(expect_same(s.pool(), s.model())) << "after op " << i;
    }
    // The run must actually have exercised the cache.
    EXPECT_GT(s.pool().hits(), 1000);
    EXPECT_GT(s.pool().evictions(), 1000);
    EXPECT_GT(s.pool().lookups() - s.pool().hits(), 1000);
}

}  // namespace
}  // namespace minfer::kv
