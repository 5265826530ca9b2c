#include "kv/block_pool.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace minfer::kv {

namespace {

// splitmix64: a bijective mixer whose every output bit depends on every input bit.
uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {
    if (n_blocks < 1 || block_size < 1)
        throw Error("BlockPool: n_blocks (" + std::to_string(n_blocks) + ") and block_size (" +
                    std::to_string(block_size) + ") must be at least 1");
    const auto n = size_t(n_blocks);
    ref_.assign(n, 0);
    key_.assign(n, 0);
    parent_.assign(n, 0);
    tokens_.assign(n * size_t(block_size), 0);
    free_.resize(n);
    for (size_t i = 0; i < n; ++i) free_[i] = BlockId(n - 1 - i);  // pops 0 first
    prev_.assign(n + 1, n_blocks);
    next_.assign(n + 1, n_blocks);
}

void BlockPool::check_id(BlockId b) const {
    if (b < 0 || b >= n_blocks_)
        throw Error("BlockPool: block id " + std::to_string(b) + " out of range [0, " +
                    std::to_string(n_blocks_) + ")");
}

void BlockPool::check_tokens(std::span<const int32_t> tokens) const {
    if (tokens.size() != size_t(block_size_))
        throw Error("BlockPool: a block holds " + std::to_string(block_size_) + " tokens, got " +
                    std::to_string(tokens.size()));
}

std::span<const int32_t> BlockPool::tokens_of(BlockId b) const {
    return std::span(tokens_).subspan(size_t(b) * size_t(block_size_), size_t(block_size_));
}

void BlockPool::lru_push_back(BlockId b) {
    const BlockId last = prev_[size_t(n_blocks_)];
    prev_[size_t(b)] = last;
    next_[size_t(b)] = n_blocks_;
    next_[size_t(last)] = b;
    prev_[size_t(n_blocks_)] = b;
    ++n_lru_;
}

void BlockPool::lru_unlink(BlockId b) {
    next_[size_t(prev_[size_t(b)])] = next_[size_t(b)];
    prev_[size_t(next_[size_t(b)])] = prev_[size_t(b)];
    --n_lru_;
}

void BlockPool::evict(BlockId b) {
    lru_unlink(b);
    cache_.erase(key_[size_t(b)]);
    key_[size_t(b)] = 0;
    ++evictions_;
}

BlockId BlockPool::allocate() {
    BlockId b = -1;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if (n_lru_ > 0) {
        b = next_[size_t(n_blocks_)];
        evict(b);
    } else {
        return -1;
    }
    ref_[size_t(b)] = 1;
    ++n_used_;
    return b;
}

void BlockPool::retain(BlockId b) {
    check_id(b);
    if (ref_[size_t(b)] == 0) throw Error("BlockPool: retain of unreferenced block " + std::to_string(b));
    ++ref_[size_t(b)];
}

void BlockPool::release(BlockId b) {
    check_id(b);
    if (ref_[size_t(b)] == 0) throw Error("BlockPool: release of unreferenced block " + std::to_string(b));
    if (--ref_[size_t(b)] > 0) return;
    --n_used_;
    if (published(b))
        lru_push_back(b);
    else
        free_.push_back(b);
}

int32_t BlockPool::refcount(BlockId b) const {
    check_id(b);
    return ref_[size_t(b)];
}

uint64_t BlockPool::key_of(BlockId b) const {
    check_id(b);
    return key_[size_t(b)];
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
    uint64_t h = parent;
    for (int32_t t : tokens) h = mix64(h ^ uint32_t(t));
    return h != 0 ? h : 1;  // 0 marks an unpublished block
}

uint64_t BlockPool::publish(BlockId b, uint64_t parent, std::span<const int32_t> tokens) {
    check_id(b);
    if (ref_[size_t(b)] == 0) throw Error("BlockPool: publish of unreferenced block " + std::to_string(b));
    check_tokens(tokens);
    if (published(b)) return key_[size_t(b)];
    const uint64_t key = chain_hash(parent, tokens);
    // The block already cached under `key` keeps serving lookups; b is simply never shared.
    if (!cache_.emplace(key, b).second) return key;
    key_[size_t(b)] = key;
    parent_[size_t(b)] = parent;
    std::copy(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(b) * size_t(block_size_)));
    return key;
}

BlockId BlockPool::lookup(uint64_t parent, std::span<const int32_t> tokens) {
    check_tokens(tokens);
    ++lookups_;
    const auto it = cache_.find(chain_hash(parent, tokens));
    if (it == cache_.end()) return -1;
    const BlockId b = it->second;
    if (parent_[size_t(b)] != parent || !std::ranges::equal(tokens_of(b), tokens)) return -1;
    ++hits_;
    if (ref_[size_t(b)]++ == 0) {
        lru_unlink(b);
        ++n_used_;
    }
    return b;
}

}  // namespace minfer::kv
