// Context parallelism's load-balanced causal split: a sequence of seq tokens is cut into 2N
// equal chunks and cp rank i holds chunks i and 2N-1-i, so that every rank's queries see the
// same number of causal keys (an early chunk pairs with a late one). Local token j of rank i
// is global position position(j); training inputs, targets and RoPE all follow it.
#pragma once
#include <optional>
#include <string>

namespace llmrun {

// p2p: ring attention; all_gather: gathered keys and values; a2a: DeepSpeed-Ulysses (an
// all-to-all swaps the sequence split for a head split around a whole-sequence attention).
enum class CpComm { p2p, all_gather, a2a };
const char* cp_comm_name(CpComm c);
std::optional<CpComm> cp_comm_from_name(const std::string& name);

struct CpChunks {
  int seq = 1;   // tokens per full sequence
  int cp = 1;    // ranks the sequence is split over
  int rank = 0;  // this rank's place in the cp group

  int chunk_len() const { return seq / (2 * cp); }
  int local_len() const { return seq / cp; }  // two chunks
  // Global chunk index of local chunk c (0: the early one, 1: the late one) of cp rank r.
  int chunk_of(int r, int c) const { return c == 0 ? r : 2 * cp - 1 - r; }
  // Global position of local token j (0 <= j < local_len()).
  int position(int j) const;
};

// Why seq_len cannot be split over cp ranks (empty when it can).
std::optional<std::string> cp_split_problem(int seq_len, int cp);
// Why a2a cannot split this rank's heads over cp ranks (empty when it can): every cp rank
// takes heads/cp query heads and kv_heads/cp key/value heads of the whole sequence, so both
// (after tp's split: heads/tp, and kv_heads/tp or 1 when tp replicates them) must divide by cp.
std::optional<std::string> cp_heads_problem(int heads, int kv_heads, int tp, int cp);

}  // namespace llmrun
