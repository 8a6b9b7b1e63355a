// The emulated NCCL's shared memory (emulated_nccl.cpp): a communicator's ranks are separate
// processes, so what they share lives in POSIX shared memory (/dev/shm). One control segment
// per communicator, named from its unique id, holds a slot per rank (joined, the sequence
// number of the collective it has posted and of the one it has finished reading, and what that
// collective is); data travels in short-lived segments named after the control one
// (NAME-c<seq>-r<rank>: a rank's input to collective <seq>; NAME-m<from>-<to>-<n>: the n-th
// message from rank <from> to rank <to>). The last rank to detach removes every segment whose
// name starts with NAME; what killed processes leave behind goes when the next process joins a
// communicator (remove_abandoned).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace emu_nccl {

constexpr int kMaxRanks = 256;

// What a rank posted as its collective `arrived` (all ranks must agree on it).
struct OpDesc {
  int32_t kind = 0;  // OpKind in emulated_nccl.cpp
  int32_t dtype = 0, op = 0, root = 0;
  uint64_t count = 0;
  int32_t color = 0, key = 0;  // ncclCommSplit's arguments
};

struct alignas(64) RankSlot {
  std::atomic<uint32_t> joined;
  int32_t pid;
  char identity[96];               // host name and PCI bus id of the rank's device
  std::atomic<uint64_t> arrived;   // the last collective posted (its input segment is written)
  std::atomic<uint64_t> finished;  // the last collective whose inputs this rank has read
  OpDesc desc;                     // of collective `arrived`
};

struct Control {
  std::atomic<int32_t> nranks;      // set by the first rank to join
  std::atomic<int32_t> attached;    // ranks holding the communicator
  std::atomic<int32_t> aborted_by;  // rank + 1 of a rank that called ncclCommAbort, else 0
  RankSlot slots[kMaxRanks];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics in shared memory");

// A mapped shared-memory segment; unmapped (not removed) on destruction.
class Segment {
 public:
  Segment() = default;
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Creates (or, unless `exclusive`, opens an existing) segment of `bytes` (zero-filled when
  // new). On failure returns false and says why in `error`.
  bool create(const std::string& name, size_t bytes, bool exclusive, std::string& error);
  // Maps an existing segment; false (error empty) when there is none yet.
  bool open(const std::string& name, std::string& error);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void reset();
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void remove_segment(const std::string& name);
// Removes every segment whose name is `name` or starts with `name` + "-".
void remove_segments(const std::string& name);

bool process_alive(pid_t pid);

// Removes the communicators (and their segments) left in /dev/shm by processes that were killed
// (MPI_Abort, a signal) before they could leave: those whose joined ranks are all dead.
void remove_abandoned();

}  // namespace emu_nccl
