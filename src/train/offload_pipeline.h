#pragma once
// Streams host-held arrays (offloaded optimizer state, or parameter shards) through a device
// backend in pieces: each piece is copied into a device slot, handed to the caller's compute,
// and copied back. With copy streams (backend/copy_stream.h) the copies run on them, ordered
// by events: piece k+1's copy in runs while piece k computes, piece k's copy back while piece
// k+1 computes, and the caller may say which host arrays its next run() takes, so that their
// first piece comes in behind this run's last compute (bucket k+1 under bucket k). Copies in
// and copies back have a lane each (a GPU's two DMA engines), so piece k's copy back runs
// beside the copy in of piece k+2 once the copies, not the compute, set the pace. Two slots
// of `piece` elements per array; the order on the streams is
//   in:      [waits out so far] in(k+1)  [waits out(k)] in(k+2) ...
//   compute: [waits in(k)] fn(k)  [waits in(k+1)] fn(k+1) ...
//   out:     [waits computed(k)] out(k)  [waits computed(k+1)] out(k+1) ...
// so a slot is refilled only after its previous piece went back, host memory is read in only
// after an earlier copy back to it landed, and every compute and every copy back waits for
// the copy or compute that produced its data.
// Without a copy stream the copies run on the compute stream, in order with it (nothing to
// hide), as the backend's copy() does.
//
// Host memory passed to run() belongs to the pipeline until settle() (host reads) or
// invalidate() (host writes) says otherwise: copies back may still be under way, and the
// piece copied in for the next run() is dropped when its host memory may change.
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/copy_stream.h"
#include "train/overlap_counter.h"

namespace llmrun {

class OffloadPipeline {
 public:
  // `copies` null: synchronous copies on the compute stream (be.copy).
  OffloadPipeline(Backend& be, std::unique_ptr<CopyStream> copies, int arrays, int64_t piece);
  ~OffloadPipeline();
  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;

  // fn(offset + at, pieces) over consecutive pieces of `host` (one host tensor per array, equal
  // numel): pieces[a] is a device copy of host[a] elements [at, at + piece), written back after
  // fn. `next`: the host arrays the following run() will take (empty when unknown); their
  // first piece is copied in while this run's last piece computes. Ignored when it overlaps
  // `host`.
  using PieceFn = std::function<void(int64_t offset, const std::vector<Tensor>& pieces)>;
  void run(int64_t offset, const std::vector<Tensor>& host, const PieceFn& fn,
           const std::vector<Tensor>& next = {});
  // The host may read every host array run() was given: waits for the copies back.
  void settle();
  // The host may also write them: settle() and drop the piece copied in ahead.
  void invalidate();
  // Device work issued on the compute stream from now on runs after every copy issued so far,
  // without the host waiting (a device read of the host arrays).
  void order_compute_after_copies();
  // Copies host memory `src` (pinned: a host array run() takes, say) into device memory `dst`
  // on the copy-in lane, behind every copy back issued so far, and returns at once (without a
  // copy stream: copies now). A ZeRO-3 gather's parameter shard, fetched a bucket ahead.
  void fetch(const Tensor& dst, const Tensor& src);
  // Device work issued on the compute stream from now on runs after the oldest fetch into
  // `dst` not waited for yet; the host does not wait. Counted in transfers() like a piece's
  // copy in: the compute waits from here to the fetch's end.
  void compute_waits_fetch(const Tensor& dst);

  bool asynchronous() const { return copies_ != nullptr; }
  int64_t piece() const { return piece_; }
  // Device memory of the slots, as allocated: two slots of `piece` floats per array with a copy
  // stream, one without (each copy finishes before the next piece starts).
  size_t device_bytes() const;
  // Copies of finished pieces (in and back) since construction: time in flight on the copy
  // stream, and the part of it the compute stream did not stand waiting for it (a piece's
  // wait is from the compute reaching it to its copy in ending; settle()'s host wait counts
  // as waited too). Polls, never blocks: pieces still under way count once finished. Zero
  // without a copy stream.
  // Thread-safe with settle() and invalidate() (checkpoint writers read on several threads).
  OverlapCounter transfers();

 private:
  struct Piece {
    int slot = 0;
    std::vector<Tensor> host;  // the host ranges it came from and goes back to
    StreamEventPtr start_in, end_in, arrive, computed, start_out, end_out;
  };
  Piece copy_in(const std::vector<Tensor>& host, int64_t at, int64_t len, int slot);
  std::vector<Tensor> slot_views(int slot, int64_t len) const;
  void finish(Piece& p);        // counts a piece whose copy back completed
  void resolve(double waited);  // counts completed pieces; all of them when waited >= 0
  void run_synchronously(int64_t offset, const std::vector<Tensor>& host, const PieceFn& fn);
  void settle_locked();
  struct Fetch {
    const void* dst = nullptr;
    StreamEventPtr start, end, arrive;  // arrive: set by compute_waits_fetch
  };
  std::deque<Fetch> fetches_;  // issued, not yet counted

  Backend& be_;
  std::unique_ptr<CopyStream> copies_;
  int arrays_;
  int64_t piece_;
  std::vector<Buffer> slots_[2];  // one device buffer per array in each slot
  std::unique_ptr<Piece> ahead_;  // copied in for the next run(), not yet computed
  int last_slot_ = 1;             // the slot of the last piece computed
  std::deque<Piece> pending_;     // computed, copy back issued, not yet counted
  OverlapCounter counted_;
  std::mutex mu_;
};

}  // namespace llmrun
