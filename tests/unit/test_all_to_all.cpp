// Communicator::iall_to_allv: the portable default (one send and one receive per peer) over
// in-process ranks that pass messages through a shared mailbox, with uneven and zero counts;
// the single-rank group; and the argument checks. (MPI's MPI_Ialltoallv override is driven
// through the real binary by e2e.expert_parallel.)
#include <gtest/gtest.h>

#include <thread>

#include "comm/communicator.h"
#include "thread_comm.h"

namespace llmrun {
namespace {

using testing::Mailbox;
using testing::ThreadComm;

// Rank s sends count(s, r) elements to rank r, valued 1000 s + 100 r + i.
int64_t count(int s, int r) { return (s * 3 + r * 5) % 4; }  // includes zeros
float value(int s, int r, int64_t i) { return float(1000 * s + 100 * r + i); }

TEST(AllToAll, DefaultDeliversEveryRanksPartsInRankOrder) {
  constexpr int P = 3;
  Mailbox box;
  std::vector<std::thread> ranks;
  std::vector<std::vector<float>> got(P);
  std::vector<int> sends(P);
  for (int me = 0; me < P; ++me)
    ranks.emplace_back([&, me] {
      ThreadComm comm(box, me, P);
      std::vector<int64_t> send, recv;
      std::vector<float> in;
      for (int r = 0; r < P; ++r) {
        send.push_back(count(me, r));
        recv.push_back(count(r, me));
        for (int64_t i = 0; i < count(me, r); ++i) in.push_back(value(me, r, i));
      }
      in.push_back(-1);  // a tensor longer than the counts: the rest is not sent
      std::vector<float> out(size_t(recv[0] + recv[1] + recv[2]) + 2, -7.0f);
      comm.all_to_allv(Tensor(in.data(), DType::f32, {int64_t(in.size())}), send,
                       Tensor(out.data(), DType::f32, {int64_t(out.size())}), recv);
      got[size_t(me)] = out;
      sends[size_t(me)] = comm.sends;
    });
  for (auto& t : ranks) t.join();
  for (int me = 0; me < P; ++me) {
    std::vector<float> want;
    int peers = 0;
    for (int s = 0; s < P; ++s)
      for (int64_t i = 0; i < count(s, me); ++i) want.push_back(value(s, me, i));
    for (int r = 0; r < P; ++r) peers += r != me && count(me, r) > 0;
    want.push_back(-7.0f);  // untouched beyond the received elements
    want.push_back(-7.0f);
    EXPECT_EQ(got[size_t(me)], want) << "rank " << me;
    EXPECT_EQ(sends[size_t(me)], peers) << "rank " << me << ": one send per peer with data";
  }
}

TEST(AllToAll, SingleRankCopiesItsOwnPart) {
  auto self = make_self_communicator("ep");
  std::vector<float> in = {1, 2, 3, 4}, out(4, 0);
  self->all_to_allv(Tensor(in.data(), DType::f32, {4}), {3}, Tensor(out.data(), DType::f32, {4}),
                    {3});
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 0}));
}

TEST(AllToAll, RefusesCountsThatDoNotFit) {
  auto self = make_self_communicator("ep");
  std::vector<float> in(4), out(2);
  const Tensor i(in.data(), DType::f32, {4}), o(out.data(), DType::f32, {2});
  EXPECT_ANY_THROW(self->all_to_allv(i, {3}, o, {3}));     // more than out holds
  EXPECT_ANY_THROW(self->all_to_allv(i, {1, 1}, o, {1}));  // one count per rank
  EXPECT_ANY_THROW(self->all_to_allv(i, {2}, o, {1}));     // own send != own receive
}

}  // namespace
}  // namespace llmrun
