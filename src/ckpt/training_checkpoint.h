// Training checkpoints: DIR/step-NNNNNNN/ holds the whole training state (fp32 weights,
// AdamW moments, step, data position, seed, resolved recipe, tokenizer) as safetensors
// files plus index.json; DIR/latest names the newest complete one. See
// docs/ARCHITECTURE.md "Checkpoints and model directories" for the layout, the index schema and why
// a crash at any moment leaves a `latest` that loads.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "comm/communicator.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace llmrun {

class AtomicDir;

// The tensor groups of a step dir; each is one safetensors file and one name prefix in
// index.json ("params/transformer.wte.weight").
inline constexpr const char* kParamsGroup = "params";
inline constexpr const char* kExpAvgGroup = "optim/exp_avg";
inline constexpr const char* kExpAvgSqGroup = "optim/exp_avg_sq";

struct CheckpointState {
  int64_t step = 0;       // optimizer steps taken
  nlohmann::json recipe;  // the resolved recipe (checkpoint_recipe.h), {"model": ...} at least
  nlohmann::json data;    // TrainingData::state(); null: none (converted from a model dir)
  uint64_t seed = 0;      // train.seed: initialisation and the data sampler streams
  // The {tp, pp, dp, zero} layout of the run that wrote it (informational: the index maps every
  // piece to its place in the full tensor, so any layout loads any other's checkpoint).
  nlohmann::json layout = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"zero", 0}};
  // FP8 scales and amax histories (Fp8Linears::state()); null: the run trained without FP8.
  nlohmann::json fp8;
};

// Where a piece's data comes from at write time: elements [first, first + count) of layout
// tensor (bucket, param)'s local tensor, f32 in llmrun's layout, valid until the next call.
using RangeSource =
    std::function<const float*(int bucket, int param, int64_t first, int64_t count)>;

// What one rank writes of a checkpoint. Together the ranks' ranges must cover every element of
// every full tensor exactly once (the writer of a replicated tensor is one of its holders).
struct CheckpointShard {
  struct Range {
    int bucket = 0, param = 0;
    int64_t first = 0, last = 0;  // elements [first, last) of the local tensor
  };
  const std::vector<BucketLayout>* layout = nullptr;  // this rank's tensors
  std::vector<Range> ranges;
  // The groups are written at once, each source called from its own thread: sources must not
  // share mutable state.
  RangeSource params;
  RangeSource exp_avg;     // empty: zeros (a fresh optimizer)
  RangeSource exp_avg_sq;  // empty: zeros
};

// Every tensor of `layout` whole (a single writer: conversions).
std::vector<CheckpointShard::Range> whole_tensor_ranges(const std::vector<BucketLayout>& layout);

// "step-0000042"
std::string step_dir_name(int64_t step);

// A collective over `world`: every rank writes its shard's files (params[.rank-NNNNN].safetensors
// and the two moment files) into one temporary step dir; rank 0 gathers their index entries,
// writes index.json and the tokenizer, renames the dir to DIR/step-NNNNNNN (after fsyncing
// everything), points DIR/latest at it (atomic file replace) and deletes all but the newest
// `keep` step dirs (keep <= 0: none). `state` counts on rank 0 only. A failure on any rank is a
// UserError on every rank, and leaves DIR as it was. Returns the step dir.
// = begin_training_checkpoint + write_checkpoint_shard + finish_training_checkpoint.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& dir, int keep,
                                               const CheckpointState& state,
                                               const CheckpointShard& shard,
                                               const Tokenizer& tokenizer, const ModelConfig& cfg,
                                               Communicator& world);

// The three phases of a save, for writing in the background: begin (a collective: rank 0 makes
// the temporary step dir), write (this rank's files; any thread, no communication), finish
// (a collective: publish, or fail on every rank).
class CheckpointInProgress {
 public:
  ~CheckpointInProgress();  // an unfinished one leaves nothing behind
  int64_t step() const { return state_.step; }

 private:
  friend CheckpointInProgress begin_training_checkpoint(const std::filesystem::path&, int,
                                                        const CheckpointState&, Communicator&);
  friend void write_checkpoint_shard(CheckpointInProgress&, const CheckpointShard&);
  friend std::filesystem::path finish_training_checkpoint(CheckpointInProgress&, const Tokenizer&,
                                                          const ModelConfig&, Communicator&);
  CheckpointInProgress() = default;
  std::filesystem::path dir_, final_dir_;
  int keep_ = 0, rank_ = 0, world_size_ = 1;
  CheckpointState state_;
  std::string tmp_;    // the temporary step dir every rank writes into; empty: it could not be made
  std::string error_;  // this rank's failure, if any
  nlohmann::json fragment_;
  std::unique_ptr<AtomicDir> out_;  // rank 0

 public:
  CheckpointInProgress(CheckpointInProgress&&) noexcept;
};
CheckpointInProgress begin_training_checkpoint(const std::filesystem::path& dir, int keep,
                                               const CheckpointState& state, Communicator& world);
// Records a failure instead of throwing: finish reports it on every rank.
void write_checkpoint_shard(CheckpointInProgress& c, const CheckpointShard& shard);
std::filesystem::path finish_training_checkpoint(CheckpointInProgress& c,
                                                 const Tokenizer& tokenizer, const ModelConfig& cfg,
                                                 Communicator& world);

// The step dir DIR/latest names, or an empty path when DIR has no `latest`. UserError when
// `latest` exists but is malformed or names a missing dir.
std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

// A step dir given either itself or a checkpoint dir holding `latest`.
std::filesystem::path resolve_checkpoint_path(const std::filesystem::path& path);

// When a CheckpointReader checks the XXH64 of the tensor files.
enum class CheckpointVerify {
  // Every file of a group (params, or a moment) before the first tensor of that group is used:
  // a damaged group fails before any of it is read (conversions, which write what they read
  // elsewhere, and read only the parameters).
  before_reading,
  // In the same pass that copies the tensors into their targets (read), so each byte is
  // read once: a damaged file fails when its pass ends, after some tensors were filled. For
  // callers that drop what they filled on failure (resume). Any other read verifies its file first.
  while_reading,
};

// A step dir opened for reading: index.json parsed and validated, every file's size checked,
// tensor headers validated, checksums verified as `verify` says (UserError naming the file on
// mismatch).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& step_dir,
                            CheckpointVerify verify = CheckpointVerify::before_reading);
  ~CheckpointReader();

  const std::filesystem::path& dir() const { return dir_; }
  const CheckpointState& state() const { return state_; }
  ModelConfig model_config() const;  // from the recipe's model section

  // Elements [first, last) of spec's local tensor (a part of the full tensor "<group>/<hf name>"
  // as spec.shard says) into dst[0, last - first), host memory.
  struct Target {
    std::string group;
    const ParamSpec* spec = nullptr;
    int64_t first = 0, last = 0;
    float* dst = nullptr;
  };
  // Copies every target from the pieces it overlaps. Under while_reading, a file not verified yet
  // whose pieces land whole in targets is read once, front to back, copying and hashing.
  void read(const std::vector<Target>& targets) const;
  // One whole tensor, in llmrun's layout, into `dst` (spec.numel() floats).
  void read_tensor(const std::string& group, const ParamSpec& spec, float* dst) const;

 private:
  struct TensorFile {
    std::unique_ptr<SafetensorsFile> st;
    std::string xxh64;  // as index.json lists it
    mutable bool verified = false;
  };
  struct Piece {
    const TensorFile* file;
    std::string tensor;
    std::vector<std::pair<int64_t, int64_t>> slice;  // [begin, end) per dimension
    int64_t flat_begin = 0, flat_end = 0;            // the elements of the slice it holds
  };
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;
  };
  [[noreturn]] void fail(const std::string& what) const;
  void parse_index(const nlohmann::json& index);
  void ensure_verified(const TensorFile& f) const;
  void verify_group(const std::string& group) const;
  const Entry& entry(const std::string& group, const ParamSpec& spec) const;
  void check_tiling(const std::string& name, const Entry& e) const;

  std::filesystem::path dir_;
  CheckpointVerify verify_;
  CheckpointState state_;
  std::map<std::string, TensorFile> files_;
  std::map<std::string, Entry> tensors_;
  mutable std::set<std::string> verified_groups_;
};

}  // namespace llmrun
