#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "parallel/layout_rules.h"
#include "recipe/recipe_internal.h"
#include "recipe/recipe_layout.h"

namespace llmrun::recipe_detail {
namespace fs = std::filesystem;

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Kernel filesystems where access(W_OK) says yes to root but mkdir always fails.
bool is_pseudo_fs(const fs::path& p) {
  struct statfs st {};
  if (statfs(p.c_str(), &st) != 0) return false;
  switch (static_cast<unsigned long>(st.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case DEBUGFS_MAGIC:
    case SECURITYFS_MAGIC:
    case TRACEFS_MAGIC:
      return true;
    default:
      return false;
  }
}

// Why a directory could not be created at (or written inside) `dir`, "" when it can.
// Nothing is created: a recipe that fails later must leave no trace on disk.
std::string dir_problem(const fs::path& dir) {
  std::error_code ec;
  fs::path p = dir;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) {
    return p == dir ? " is not a directory" : " cannot be created (" + p.string() + " is a file)";
  }
  if (access(p.c_str(), W_OK) != 0) {
    return " is not writable (" + p.string() + ": " + std::strerror(errno) + ")";
  }
  if (is_pseudo_fs(p)) return " is not writable (" + p.string() + " is a kernel filesystem)";
  return "";
}

void check_model(const ModelConfig& c, const Locator& loc) {
  if (c.d_model % c.heads != 0) {
    loc.fail(
        "model.heads",
        std::to_string(c.heads) + " does not divide model.d_model=" + std::to_string(c.d_model),
        "model.d_model");
  }
  if (c.heads % c.kv_heads != 0) {
    loc.fail("model.kv_heads",
             std::to_string(c.kv_heads) + " does not divide model.heads=" + std::to_string(c.heads),
             "model.heads");
  }
  if (c.arch == Arch::llama && c.head_dim() % 2 != 0) {
    loc.fail("model.heads",
             "head dimension d_model/heads=" + std::to_string(c.head_dim()) +
                 " must be even: RoPE rotates pairs of channels",
             "model.d_model");
  }
  if (!(c.norm_eps > 0)) loc.fail("model.norm_eps", "must be > 0, got " + num(c.norm_eps));
  if (c.arch == Arch::llama && !(c.rope_theta > 0)) {
    loc.fail("model.rope_theta", "must be > 0, got " + num(c.rope_theta));
  }
}

void check_data(const Recipe& r, const Locator& loc) {
  std::error_code ec;
  if (r.data.tokenizer == "byte") {
    if (r.model.vocab < 256) {
      loc.fail("model.vocab",
               std::to_string(r.model.vocab) + " is too small for the byte tokenizer (256 tokens)",
               "data.tokenizer");
    }
  } else if (!fs::is_regular_file(r.data.tokenizer, ec)) {
    loc.fail("data.tokenizer", r.data.tokenizer +
                                   " is not a file (expected \"byte\" or the path "
                                   "of a tokenizer.json)");
  }
  auto check_sources = [&](const std::vector<DataSource>& sources, const std::string& key) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string prefix = key + "." + std::to_string(i);
      const DataSource& s = sources[i];
      if (!(s.weight > 0)) loc.fail(prefix + ".weight", "must be > 0, got " + num(s.weight));
      // An indexed dataset is named by its prefix: PREFIX.bin and PREFIX.idx are the files.
      const std::string file = fs::exists(s.path + ".idx", ec) ? s.path + ".idx" : s.path;
      if (!fs::exists(file, ec))
        loc.fail(prefix + ".path", s.path +
                                       " does not exist (neither a text file or directory nor " +
                                       s.path + ".bin/.idx)");
      if (access(file.c_str(), R_OK) != 0) {
        loc.fail(prefix + ".path", file + " is not readable: " + std::strerror(errno));
      }
    }
  };
  check_sources(r.data.train, "data.train");
  check_sources(r.data.valid, "data.valid");
  if (r.train.eval_every > 0 && r.data.valid.empty())
    loc.fail("train.eval_every",
             "validation every " + std::to_string(r.train.eval_every) +
                 " steps needs data.valid (a text file, directory or dataset prefix)");
}

void check_train(const TrainSection& t, const Locator& loc) {
  if (t.global_batch % t.micro_batch != 0) {
    loc.fail("train.global_batch",
             std::to_string(t.global_batch) +
                 " is not a multiple of train.micro_batch=" + std::to_string(t.micro_batch),
             "train.micro_batch");
  }
  if (!(t.lr > 0)) loc.fail("train.lr", "must be > 0, got " + num(t.lr));
  if (t.min_lr < 0) loc.fail("train.min_lr", "must be >= 0, got " + num(t.min_lr));
  if (t.min_lr > t.lr) {
    loc.fail("train.min_lr", num(t.min_lr) + " is above the peak train.lr=" + num(t.lr),
             "train.lr");
  }
  if (t.warmup > t.steps) {
    loc.fail("train.warmup",
             std::to_string(t.warmup) + " is more than train.steps=" + std::to_string(t.steps),
             "train.steps");
  }
  if (t.weight_decay < 0)
    loc.fail("train.weight_decay", "must be >= 0, got " + num(t.weight_decay));
  if (t.beta1 < 0 || t.beta1 >= 1)
    loc.fail("train.betas.0", "must be in [0, 1), got " + num(t.beta1));
  if (t.beta2 < 0 || t.beta2 >= 1)
    loc.fail("train.betas.1", "must be in [0, 1), got " + num(t.beta2));
  if (!(t.eps > 0)) loc.fail("train.eps", "must be > 0, got " + num(t.eps));
  if (t.clip < 0) loc.fail("train.clip", "must be >= 0 (0 disables clipping), got " + num(t.clip));
}

// The tp x pp x dp layout must fit the model and batch (the planner's rules, so `llmrun plan
// --search` and a recipe agree on what is valid).
void check_layout(const Recipe& r, const Locator& loc) {
  if (const auto problem = layout_problem(training_shape(r), training_layout(r)))
    loc.fail(problem->key, problem->reason);
}

void check_outputs(const Recipe& r, const Locator& loc) {
  std::error_code ec;
  if (!r.checkpoint.dir.empty()) {
    const std::string why = dir_problem(r.checkpoint.dir);
    if (!why.empty()) loc.fail("checkpoint.dir", r.checkpoint.dir + why);
  }
  if (!r.logging.metrics.empty()) {
    const fs::path m = r.logging.metrics;
    if (fs::is_directory(m, ec)) loc.fail("logging.metrics", m.string() + " is a directory");
    if (fs::exists(m, ec) && access(m.c_str(), W_OK) != 0) {
      loc.fail("logging.metrics", m.string() + " is not writable: " + std::strerror(errno));
    }
    const std::string why = dir_problem(m.parent_path());
    if (!why.empty()) {
      loc.fail("logging.metrics",
               "cannot write " + m.string() + ": " + m.parent_path().string() + why);
    }
  }
}

}  // namespace

void validate_recipe(const Recipe& r, const Locator& loc) {
  check_model(r.model, loc);
  check_data(r, loc);
  check_train(r.train, loc);
  check_layout(r, loc);
  check_outputs(r, loc);
  // The experts' GEMMs run outside the linear seam that FP8 recipes replace.
  if (r.model.moe.enabled() && r.precision.fp8.enabled)
    loc.fail("precision.fp8.enabled",
             "FP8 training does not cover mixture-of-experts layers; use precision.compute "
             "fp32 or bf16 with model.moe");
}

}  // namespace llmrun::recipe_detail
