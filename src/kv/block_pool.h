// BlockPool: the paged KV cache's host-side block allocator. KV memory is split into n_blocks blocks of
// block_size token slots; sequences hold tables of block ids and blocks are shared through reference
// counts. A full block can be published into a prefix cache under a chained hash of its tokens (the key
// of the block before it is the parent), so a later sequence whose prompt starts with the same tokens
// finds and reuses it. Unreferenced published blocks stay findable until allocate() needs the space and
// evicts them, least recently released first. Every operation is O(1) or O(block_size).
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace minfer::kv {

using BlockId = int32_t;
// Parent key of a sequence's first block.
inline constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;

class BlockPool {
  public:
    // Throws Error if either argument is < 1.
    BlockPool(int32_t n_blocks, int32_t block_size);

    int32_t n_blocks() const { return n_blocks_; }
    int32_t block_size() const { return block_size_; }
    // Blocks allocate() can hand out now: the free list plus the unreferenced published blocks.
    int32_t n_free() const { return int32_t(free_.size()) + n_lru_; }
    int32_t n_used() const { return n_used_; }                   // blocks with refcount > 0
    int32_t n_cached() const { return int32_t(cache_.size()); }  // published blocks, any refcount

    // A block with refcount 1, unpublished: from the free list first (a fresh pool hands out 0, 1, 2,
    // ...), else the least recently released unreferenced published block, whose key is forgotten.
    // -1 when every block is referenced.
    BlockId allocate();
    // Refcount + 1. Throws Error on a bad id or an unreferenced block (lookup() revives cached ones).
    void retain(BlockId b);
    // Refcount - 1. At 0 a published block goes to the back of the LRU (still findable by lookup()),
    // an unpublished one back to the free list. Throws Error on a bad id or a refcount already 0.
    void release(BlockId b);
    int32_t refcount(BlockId b) const;

    // Key of a full block holding `tokens` after the block keyed `parent`: a 64-bit mix of both, never 0.
    static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);
    // Records that referenced block b holds `tokens` (exactly block_size) following the chain `parent`
    // and returns its key, chain_hash(parent, tokens). If another block is cached under that key, b stays
    // unpublished (lookups find the other one). Publishing a published block returns its key, no-op.
    // Throws Error on a bad id, an unreferenced block or a wrong token count.
    uint64_t publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens);
    // The cached block holding exactly `tokens` after `parent`, retained (and taken out of the LRU), or
    // -1. Parent and tokens are compared, so a hash collision is a miss, never a wrong block. Throws Error
    // on a wrong token count.
    BlockId lookup(uint64_t parent, std::span<const int32_t> tokens);
    bool published(BlockId b) const { return key_of(b) != 0; }
    uint64_t key_of(BlockId b) const;  // 0 when unpublished

    // Counters since construction.
    int64_t lookups() const { return lookups_; }
    int64_t hits() const { return hits_; }
    int64_t evictions() const { return evictions_; }

  private:
    void check_id(BlockId b) const;
    void check_tokens(std::span<const int32_t> tokens) const;
    std::span<const int32_t> tokens_of(BlockId b) const;
    void lru_push_back(BlockId b);
    void lru_unlink(BlockId b);
    void evict(BlockId b);

    int32_t n_blocks_, block_size_;
    std::vector<int32_t> ref_;
    std::vector<uint64_t> key_;     // 0: unpublished
    std::vector<uint64_t> parent_;  // of published blocks
    std::vector<int32_t> tokens_;   // block_size per block, of published blocks
    std::vector<BlockId> free_;     // stack, top at the back
    // LRU of unreferenced published blocks as a circular doubly linked list through index n_blocks_
    // (the sentinel): next_[sentinel] is the least recently released.
    std::vector<BlockId> prev_, next_;
    int32_t n_lru_ = 0, n_used_ = 0;
    std::unordered_map<uint64_t, BlockId> cache_;  // key -> published block
    int64_t lookups_ = 0, hits_ = 0, evictions_ = 0;
};

}  // namespace minfer::kv
