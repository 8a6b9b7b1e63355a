#include "serve/kv_block_manager.h"

#include <algorithm>

#include "util/error.h"

namespace llmrun {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

KvBlockManager::KvBlockManager(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      blocks_(static_cast<size_t>(num_blocks)) {
  LLMRUN_CHECK(num_blocks > 0 && block_size > 0, "KvBlockManager: sizes must be positive");
  // Lowest ids first out: makes block placement easy to follow in tests and logs.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t KvBlockManager::hash_block(uint64_t parent, const int32_t* tokens) const {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < block_size_; ++i)
    h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x100000000ull * i));
  return h;
}

int32_t KvBlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    LLMRUN_CHECK(!evictable_.empty(), "KvBlockManager: pool exhausted");
    b = evictable_.front();
    evictable_.pop_front();
    Block& blk = blocks_[b];
    blk.in_lru = false;
    by_hash_.erase(blk.hash);
    blk.hashed = false;
    blk.tokens.clear();
  }
  blocks_[b].refs = 1;
  return b;
}

int KvBlockManager::acquire_prefix(SeqBlocks& seq, const std::vector<int32_t>& tokens,
                                   int max_tokens, uint64_t seed) {
  LLMRUN_CHECK(seq.blocks.empty(), "acquire_prefix: sequence already has blocks");
  seq.published = 0;
  seq.chain_hash = seed;
  if (!prefix_caching_) return 0;
  const int limit = std::min<int>(max_tokens, static_cast<int>(tokens.size())) / block_size_;
  prefix_queries_ += static_cast<int64_t>(tokens.size());
  for (int i = 0; i < limit; ++i) {
    const int32_t* t = tokens.data() + static_cast<size_t>(i) * block_size_;
    const uint64_t h = hash_block(seq.chain_hash, t);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    Block& blk = blocks_[it->second];
    if (blk.parent != seq.chain_hash || !std::equal(blk.tokens.begin(), blk.tokens.end(), t)) break;
    if (blk.in_lru) {
      evictable_.erase(blk.lru);
      blk.in_lru = false;
    }
    ++blk.refs;
    seq.blocks.push_back(it->second);
    seq.chain_hash = h;
    seq.published = i + 1;
  }
  prefix_hits_ += static_cast<int64_t>(seq.published) * block_size_;
  return seq.published * block_size_;
}

bool KvBlockManager::ensure(SeqBlocks& seq, int tokens) {
  const int need = (tokens + block_size_ - 1) / block_size_ - static_cast<int>(seq.blocks.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int i = 0; i < need; ++i) seq.blocks.push_back(take_block());
  return true;
}

void KvBlockManager::publish(SeqBlocks& seq, const std::vector<int32_t>& tokens, int computed) {
  if (!prefix_caching_) return;
  const int full = std::min<int>(computed, static_cast<int>(tokens.size())) / block_size_;
  for (int i = seq.published; i < full && i < static_cast<int>(seq.blocks.size()); ++i) {
    const int32_t* t = tokens.data() + static_cast<size_t>(i) * block_size_;
    const uint64_t h = hash_block(seq.chain_hash, t);
    Block& blk = blocks_[seq.blocks[i]];
    // Another sequence may have registered the same content first: keep that one, and this
    // block simply stays private (freed, not cached, when released).
    if (!blk.hashed && !by_hash_.count(h)) {
      blk.hashed = true;
      blk.hash = h;
      blk.parent = seq.chain_hash;
      blk.tokens.assign(t, t + block_size_);
      by_hash_[h] = seq.blocks[i];
    }
    seq.chain_hash = h;
    seq.published = i + 1;
  }
}

void KvBlockManager::unref(int32_t b) {
  Block& blk = blocks_[b];
  LLMRUN_CHECK(blk.refs > 0, "KvBlockManager: block released twice");
  if (--blk.refs > 0) return;
  if (blk.hashed) {
    blk.lru = evictable_.insert(evictable_.end(), b);
    blk.in_lru = true;
  } else {
    free_.push_back(b);
  }
}

void KvBlockManager::trim(SeqBlocks& seq, int tokens) {
  const size_t keep = size_t(std::max(0, (tokens + block_size_ - 1) / block_size_));
  LLMRUN_CHECK(keep >= size_t(seq.published), "KvBlockManager::trim: would drop registered blocks");
  while (seq.blocks.size() > keep) {
    unref(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

void KvBlockManager::release(SeqBlocks& seq) {
  // Last blocks first into the LRU: a shared prefix's head outlives its tail, so later
  // lookups (which walk from the head) keep matching as long as possible.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) unref(*it);
  seq = SeqBlocks{};
}

}  // namespace llmrun
