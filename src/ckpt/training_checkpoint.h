// Training checkpoints: DIR/step-NNNNNNN/ holds the whole training state (fp32 weights,
// AdamW moments, step, data position, seed, resolved recipe, tokenizer) as safetensors
// files plus index.json; DIR/latest names the newest complete one. See
// docs/ARCHITECTURE.md "Checkpoints" for the layout, the index schema and why a crash at
// any moment leaves a `latest` that loads.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "data/tokenizer.h"
#include "model/bucket_store.h"
#include "model/config.h"

namespace llmrun {

// The tensor groups of a step dir; each is one safetensors file and one name prefix in
// index.json ("params/transformer.wte.weight").
inline constexpr const char* kParamsGroup = "params";
inline constexpr const char* kExpAvgGroup = "optim/exp_avg";
inline constexpr const char* kExpAvgSqGroup = "optim/exp_avg_sq";

struct CheckpointState {
  int64_t step = 0;              // optimizer steps taken
  nlohmann::json recipe;         // the resolved recipe (checkpoint_recipe.h), {"model": ...} at least
  nlohmann::json data;           // TrainingData::state(); null: none (converted from a model dir)
  uint64_t seed = 0;             // train.seed: initialisation and the data sampler streams
  // The {tp, pp, dp, zero} layout of the run that wrote it (informational: tensors are stored
  // unsharded, so any data-parallel layout and ZeRO stage loads them).
  nlohmann::json layout = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"zero", 0}};
  // FP8 scales and amax histories (Fp8Linears::state()); null: the run trained without FP8.
  nlohmann::json fp8;
};

// Where a group's tensors come from at write time: the f32 data of layout tensor (b, p) in
// llmrun's layout, valid until the next call. Lets a conversion stream tensor by tensor.
using TensorSource = std::function<const float*(int bucket, int param, const ParamSpec& spec)>;

// Reads tensors straight out of a BucketStore (staged through host memory when the store
// lives on a device).
TensorSource bucket_source(Backend& be, const BucketStore& store);

// The groups are written at once, each source called from its own thread: sources must not
// share mutable state.
struct CheckpointTensors {
  const std::vector<BucketLayout>* layout = nullptr;
  TensorSource params;
  TensorSource exp_avg;     // empty: zeros (a fresh optimizer)
  TensorSource exp_avg_sq;  // empty: zeros
};

// "step-0000042"
std::string step_dir_name(int64_t step);

// Writes DIR/step-NNNNNNN atomically (temp dir, fsync, rename), then points DIR/latest at
// it (atomic file replace), then deletes all but the newest `keep` step dirs (keep <= 0:
// none deleted). Returns the step dir.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& dir, int keep,
                                               const CheckpointState& state, const CheckpointTensors& tensors,
                                               const Tokenizer& tokenizer, const ModelConfig& cfg);

// The step dir DIR/latest names, or an empty path when DIR has no `latest`. UserError when
// `latest` exists but is malformed or names a missing dir.
std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

// A step dir given either itself or a checkpoint dir holding `latest`.
std::filesystem::path resolve_checkpoint_path(const std::filesystem::path& path);

// When a CheckpointReader checks the XXH64 of the tensor files.
enum class CheckpointVerify {
  // At open, before anything is read: a damaged checkpoint fails before a single tensor is
  // used (conversions, which write what they read elsewhere).
  before_reading,
  // In the same pass that copies the tensors into a BucketStore (read_group), so each byte is
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
  bool has_group(const std::string& group) const;

  // Fills every tensor of `store` from "<group>/<name>" pieces.
  void read_group(const std::string& group, BucketStore& store, Backend& be) const;
  // One tensor, in llmrun's layout, into `dst` (spec.numel() floats).
  void read_tensor(const std::string& group, const ParamSpec& spec, float* dst) const;

 private:
  struct TensorFile {
    std::unique_ptr<SafetensorsFile> st;
    std::string xxh64;              // as index.json lists it
    mutable bool verified = false;
  };
  struct Piece {
    const TensorFile* file;
    std::string tensor;
    std::vector<std::pair<int64_t, int64_t>> slice;  // [begin, end) per dimension
  };
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;
  };
  [[noreturn]] void fail(const std::string& what) const;
  void parse_index(const nlohmann::json& index);
  void ensure_verified(const TensorFile& f) const;
  // Streams the files holding `group`'s unverified whole-tensor pieces straight into the host
  // tensors of `store`, verifying each file in the same pass; marks the tensors it filled.
  void stream_group(const std::string& group, BucketStore& store, std::vector<std::vector<bool>>& filled) const;

  std::filesystem::path dir_;
  CheckpointVerify verify_;
  CheckpointState state_;
  std::map<std::string, TensorFile> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace llmrun
