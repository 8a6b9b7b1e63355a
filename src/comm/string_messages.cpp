#include "comm/string_messages.h"

#include <cstdint>

namespace llmrun {

namespace {

constexpr int kLengthTag = 7001, kBytesTag = 7002;

// Byte-sized elements are transported as raw bytes (no arithmetic is done on them).
Tensor bytes_tensor(std::string& s) {
  return Tensor(s.data(), DType::fp8_e4m3, {int64_t(s.size())});
}
Tensor length_tensor(int32_t& n) { return Tensor(&n, DType::i32, {1}); }

}  // namespace

std::string broadcast_string(Communicator& comm, const std::string& s, int root) {
  if (comm.size() == 1) return s;
  int32_t n = comm.rank() == root ? int32_t(s.size()) : 0;
  comm.broadcast(length_tensor(n), root);
  std::string out = comm.rank() == root ? s : std::string(size_t(n), '\0');
  if (n > 0) comm.broadcast(bytes_tensor(out), root);
  return out;
}

std::vector<std::string> gather_strings(Communicator& comm, const std::string& s) {
  if (comm.rank() != 0) {
    int32_t n = int32_t(s.size());
    comm.send(length_tensor(n), 0, kLengthTag);
    std::string copy = s;
    if (n > 0) comm.send(bytes_tensor(copy), 0, kBytesTag);
    return {};
  }
  std::vector<std::string> all(size_t(comm.size()));
  all[0] = s;
  for (int r = 1; r < comm.size(); ++r) {
    int32_t n = 0;
    comm.recv(length_tensor(n), r, kLengthTag);
    all[size_t(r)].assign(size_t(n), '\0');
    if (n > 0) comm.recv(bytes_tensor(all[size_t(r)]), r, kBytesTag);
  }
  return all;
}

}  // namespace llmrun
