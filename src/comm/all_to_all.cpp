// The portable all-to-all with per-rank counts (Communicator::iall_to_allv's default): one
// receive and one send per peer with a nonzero count, and this rank's own part copied in
// place. Communicators with a native collective (MPI_Ialltoallv) override it.
#include <cstring>
#include <numeric>

#include "comm/communicator.h"
#include "comm/device_staging.h"
#include "util/error.h"

namespace llmrun {

namespace {

// Every part's request; done when all of them are.
class AllRequests final : public CommRequest {
 public:
  explicit AllRequests(std::vector<std::unique_ptr<CommRequest>> parts)
      : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& p : parts_) p->wait();
  }
  bool test() override {
    bool done = true;
    for (auto& p : parts_) done = p->test() && done;  // test every part: each drives progress
    return done;
  }

 private:
  std::vector<std::unique_ptr<CommRequest>> parts_;
};

void copy_elements(const Tensor& from, Tensor to) {
  if (from.numel() == 0 || from.data == to.data) return;
  if (from.device == Device::cpu && to.device == Device::cpu) {
    std::memmove(to.data, from.data, from.bytes());
    return;
  }
  Backend* be = comm_backend();
  LLMRUN_CHECK(be != nullptr, "a device tensor reached all_to_allv with no staging backend");
  be->copy(to, from);
}

// The element offsets of each rank's part, checked against the tensor's size.
std::vector<int64_t> part_offsets(const std::vector<int64_t>& counts, int size, const Tensor& t,
                                  const char* which) {
  LLMRUN_CHECK(int(counts.size()) == size,
               std::string("all_to_allv: ") + which + " counts must have one entry per rank");
  std::vector<int64_t> at(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) {
    LLMRUN_CHECK(counts[r] >= 0, "all_to_allv: negative count");
    at[r + 1] = at[r] + counts[r];
  }
  LLMRUN_CHECK(at.back() <= t.numel(),
               std::string("all_to_allv: the ") + which + " counts exceed the tensor");
  return at;
}

}  // namespace

std::unique_ptr<CommRequest> Communicator::iall_to_allv(const Tensor& in,
                                                        const std::vector<int64_t>& send_counts,
                                                        Tensor out,
                                                        const std::vector<int64_t>& recv_counts) {
  const std::vector<int64_t> s = part_offsets(send_counts, size(), in, "send");
  const std::vector<int64_t> r = part_offsets(recv_counts, size(), out, "receive");
  const int me = rank();
  LLMRUN_CHECK(send_counts[size_t(me)] == recv_counts[size_t(me)],
               "all_to_allv: this rank's own send and receive counts differ");
  constexpr int kTag = 0x2A2A;  // one all-to-all in flight per group at a time
  std::vector<std::unique_ptr<CommRequest>> parts;
  for (int p = 0; p < size(); ++p)
    if (p != me && recv_counts[size_t(p)] > 0)
      parts.push_back(irecv(out.flat(r[size_t(p)], recv_counts[size_t(p)]), p, kTag));
  for (int p = 0; p < size(); ++p)
    if (p != me && send_counts[size_t(p)] > 0)
      parts.push_back(isend(in.flat(s[size_t(p)], send_counts[size_t(p)]), p, kTag));
  copy_elements(in.flat(s[size_t(me)], send_counts[size_t(me)]),
                out.flat(r[size_t(me)], recv_counts[size_t(me)]));
  return std::make_unique<AllRequests>(std::move(parts));
}

}  // namespace llmrun
