// In-process ranks for communicator tests: each thread holds a ThreadComm of one group, and
// messages pass through a shared Mailbox by (from, to, tag) in posting order. Point-to-point
// and all_gather only; Communicator's default all_to_allv runs on top of them.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/communicator.h"

namespace llmrun::testing {

struct Mailbox {
  std::mutex mu;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> queues;
};

class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class ReceiveRequest final : public CommRequest {
 public:
  ReceiveRequest(Mailbox& box, int from, int to, int tag, Tensor buf)
      : box_(box), key_(from, to, tag), buf_(buf) {}
  bool test() override {
    if (done_) return true;
    std::lock_guard<std::mutex> lock(box_.mu);
    auto& q = box_.queues[key_];
    if (q.empty()) return false;
    EXPECT_EQ(q.front().size(), buf_.bytes());
    std::memcpy(buf_.data, q.front().data(), std::min(q.front().size(), buf_.bytes()));
    q.pop_front();
    return done_ = true;
  }
  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!test()) {
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("in-process receive never arrived");
      std::this_thread::yield();
    }
  }

 private:
  Mailbox& box_;
  std::tuple<int, int, int> key_;
  Tensor buf_;
  bool done_ = false;
};

class WaitAll final : public CommRequest {
 public:
  explicit WaitAll(std::vector<std::unique_ptr<CommRequest>> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& p : parts_) p->wait();
  }
  bool test() override {
    bool done = true;
    for (auto& p : parts_) done = p->test() && done;
    return done;
  }

 private:
  std::vector<std::unique_ptr<CommRequest>> parts_;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Mailbox& box, int rank, int size) : box_(box), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "ep"; }
  std::unique_ptr<CommRequest> isend(const Tensor& buf, int peer, int tag) override {
    std::lock_guard<std::mutex> lock(box_.mu);
    const char* p = static_cast<const char*>(buf.data);
    box_.queues[{rank_, peer, tag}].emplace_back(p, p + buf.bytes());
    ++sends;
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> irecv(Tensor buf, int peer, int tag) override {
    return std::make_unique<ReceiveRequest>(box_, peer, rank_, tag, buf);
  }
  std::unique_ptr<CommRequest> iall_gather(const Tensor& in, Tensor out) override {
    constexpr int kTag = 7;
    const int64_t n = in.numel();
    std::vector<std::unique_ptr<CommRequest>> parts;
    for (int p = 0; p < size_; ++p)
      if (p != rank_) parts.push_back(isend(in, p, kTag));
    std::memmove(out.flat(n * rank_, n).data, in.data, in.bytes());
    for (int p = 0; p < size_; ++p)
      if (p != rank_) parts.push_back(irecv(out.flat(n * p, n), p, kTag));
    return std::make_unique<WaitAll>(std::move(parts));
  }
  std::unique_ptr<CommRequest> iall_reduce(Tensor, ReduceOp) override { unexpected(); }
  std::unique_ptr<CommRequest> ireduce_scatter(const Tensor&, Tensor) override { unexpected(); }
  std::unique_ptr<CommRequest> ibroadcast(Tensor, int) override { unexpected(); }
  void barrier() override { unexpected(); }
  double all_reduce_scalar(double, ReduceOp) override { unexpected(); }
  int sends = 0;

 private:
  [[noreturn]] static void unexpected() { throw std::logic_error("unexpected call"); }
  Mailbox& box_;
  int rank_, size_;
};

}  // namespace llmrun::testing
