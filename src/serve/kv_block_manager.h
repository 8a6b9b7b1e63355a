#pragma once
// The KV cache's block accounting for serving: one pool of fixed-size blocks shared by every
// sequence, handed out from a free list and reference-counted so sequences with a common
// prompt prefix share blocks. A full block, once computed, is registered under a hash
// chained from its predecessor's (the whole prefix up to and including it); when its last
// user lets go it stays cached (LRU order) until the pool needs it back.
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace llmrun {

// Hash of the empty prefix: where every sequence's chain starts.
inline constexpr uint64_t kPrefixChainSeed = 0x6a09e667f3bcc909ull;

// One sequence's block table and how much of it is registered for reuse.
struct SeqBlocks {
  std::vector<int32_t> blocks;             // block of tokens [i*block_size, (i+1)*block_size)
  int published = 0;                       // leading full blocks registered in the prefix cache
  uint64_t chain_hash = kPrefixChainSeed;  // hash of the prefix up to block `published`
};

class KvBlockManager {
 public:
  KvBlockManager(int num_blocks, int block_size, bool prefix_caching);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks an allocation can take now: never used, plus cached ones nobody references.
  int num_free() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int num_referenced() const { return num_blocks() - num_free(); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }

  // For a sequence with no blocks yet: takes a reference on the cached blocks equal to the
  // longest prefix of `tokens` made of whole blocks, at most max_tokens tokens long, and puts
  // them in its table. Returns the tokens covered (already computed). `seed` starts the hash
  // chain: sequences with different seeds (LoRA adapters) never share blocks.
  int acquire_prefix(SeqBlocks& seq, const std::vector<int32_t>& tokens, int max_tokens,
                     uint64_t seed = kPrefixChainSeed);
  // Grows seq's table to cover `tokens` token slots; returns false and changes nothing when
  // the pool is short.
  bool ensure(SeqBlocks& seq, int tokens);
  // Registers seq's full blocks among its first `computed` tokens for reuse.
  void publish(SeqBlocks& seq, const std::vector<int32_t>& tokens, int computed);
  // Drops seq's references (cached blocks stay reusable until evicted) and empties it.
  void release(SeqBlocks& seq);
  // Gives back the blocks past the first `tokens` token slots (a speculative step's rejected
  // tokens); registered blocks are never among them.
  void trim(SeqBlocks& seq, int tokens);

  // Prefix-cache counters in tokens: looked up, and found cached.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

 private:
  struct Block {
    int refs = 0;
    bool hashed = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;  // its tokens, so a hash collision can never share wrongly
    std::list<int32_t>::iterator lru;
    bool in_lru = false;
  };
  int32_t take_block();  // from the free list, else evicts the least recently used cached block
  void unref(int32_t b);
  uint64_t hash_block(uint64_t parent, const int32_t* tokens) const;

  int block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;     // never-hashed blocks, unreferenced
  std::list<int32_t> evictable_;  // hashed and unreferenced, oldest first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace llmrun
