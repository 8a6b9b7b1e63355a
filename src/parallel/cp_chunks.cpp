#include "parallel/cp_chunks.h"

namespace llmrun {

const char* cp_comm_name(CpComm c) {
  switch (c) {
    case CpComm::p2p:
      return "p2p";
    case CpComm::all_gather:
      return "all_gather";
    case CpComm::a2a:
      return "a2a";
  }
  return "p2p";
}

std::optional<CpComm> cp_comm_from_name(const std::string& name) {
  if (name == "p2p") return CpComm::p2p;
  if (name == "all_gather") return CpComm::all_gather;
  if (name == "a2a") return CpComm::a2a;
  return std::nullopt;
}

int CpChunks::position(int j) const {
  const int c = chunk_len();
  return chunk_of(rank, j / c) * c + j % c;
}

std::optional<std::string> cp_split_problem(int seq_len, int cp) {
  if (cp <= 1) return std::nullopt;
  if (seq_len % (2 * cp) != 0)
    return "model.seq_len=" + std::to_string(seq_len) +
           " is not divisible by 2 x cp = " + std::to_string(2 * cp) +
           " (each sequence splits into 2 x cp equal chunks, rank i holding chunks i and "
           "2cp-1-i for a balanced causal load)";
  return std::nullopt;
}

std::optional<std::string> cp_heads_problem(int heads, int kv_heads, int tp, int cp) {
  if (cp <= 1 || tp < 1) return std::nullopt;
  const int local = heads / tp, local_kv = kv_heads >= tp ? kv_heads / tp : 1;
  const std::string per_rank = tp > 1 ? " per tp rank" : "";
  if (local % cp != 0)
    return "cp_comm a2a splits the attention heads over cp ranks: " + std::to_string(local) +
           " query heads" + per_rank + " are not divisible by cp = " + std::to_string(cp) +
           " (use p2p or all_gather, or a cp that divides the heads)";
  if (local_kv % cp != 0)
    return "cp_comm a2a splits the key/value heads over cp ranks too: " + std::to_string(local_kv) +
           " kv heads" + per_rank + " are not divisible by cp = " + std::to_string(cp) +
           " (use p2p or all_gather, or a cp that divides model.kv_heads" + (tp > 1 ? "/tp" : "") +
           ")";
  return std::nullopt;
}

}  // namespace llmrun
