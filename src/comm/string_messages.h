// Small text messages between ranks (paths, JSON fragments of a checkpoint index), carried as
// raw bytes over a Communicator.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace llmrun {

// Root's `s` on every rank (a collective).
std::string broadcast_string(Communicator& comm, const std::string& s, int root = 0);

// Every rank's `s` on rank 0, in rank order; empty on the other ranks (a collective).
std::vector<std::string> gather_strings(Communicator& comm, const std::string& s);

}  // namespace llmrun
