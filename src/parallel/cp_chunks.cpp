#include "parallel/cp_chunks.h"

namespace llmrun {

const char* cp_comm_name(CpComm c) { return c == CpComm::p2p ? "p2p" : "all_gather"; }

std::optional<CpComm> cp_comm_from_name(const std::string& name) {
  if (name == "p2p") return CpComm::p2p;
  if (name == "all_gather") return CpComm::all_gather;
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

}  // namespace llmrun
