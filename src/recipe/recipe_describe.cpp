#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "recipe/recipe.h"

namespace llmrun {
namespace {

// 15 significant digits: exact for anything typed into a recipe, and a derived value
// such as the default min_lr = lr/10 prints as 3e-05 rather than 2.9999999999999997e-05.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// Shortest text that reads back as the same float: 1e-05, not 9.99999974737875e-06.
std::string num(float v) {
  std::array<char, 32> buf{};
  const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

// Quotes a string only when YAML would read it as something else, so that the
// output (without `derived:`) loads back as the same recipe.
std::string str(const std::string& s) {
  static const char* const kReserved[] = {"true", "false", "yes", "no", "on",
                                          "off",  "null",  "y",   "n",  "~"};
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '/' ||
                              s[0] == '_' || s[0] == '.');
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '/' && c != '_' && c != '.' &&
        c != '-' && c != '+') {
      plain = false;
    }
  }
  std::string lower;
  for (char c : s) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* r : kReserved) plain = plain && lower != r;
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// 124439808 -> "124.4M"; `units` are the suffixes for 1e3, 1e6, 1e9, ...
std::string human(double v, const std::array<const char*, 5>& units) {
  int i = -1;
  while (i + 1 < int(units.size()) && std::fabs(v) >= 1000.0) {
    v /= 1000.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, i < 0 ? "%.0f" : "%.1f%s", v, i < 0 ? "" : units[size_t(i)]);
  return buf;
}

const std::array<const char*, 5> kCount = {"K", "M", "B", "T", "Q"};
const std::array<const char*, 5> kFlops = {" KFLOP", " MFLOP", " GFLOP", " TFLOP", " PFLOP"};
const std::array<const char*, 5> kBytes = {" KB", " MB", " GB", " TB", " PB"};

}  // namespace

std::string describe_number(double v) { return num(v); }
std::string describe_bytes(double bytes) { return human(bytes, kBytes); }

namespace {

void describe_model(std::ostream& o, const Recipe& r) {
  const ModelConfig& m = r.model;
  o << "model:\n"
    << "  arch: " << arch_name(m.arch) << "\n"
    << "  layers: " << m.layers << "\n"
    << "  d_model: " << m.d_model << "\n"
    << "  heads: " << m.heads << "\n"
    << "  kv_heads: " << m.kv_heads << "\n"
    << "  ffn: " << m.ffn << "\n"
    << "  vocab: " << m.vocab << "\n"
    << "  seq_len: " << m.seq_len << "\n";
  // GPT-2 has learned positions; printing a RoPE theta for it would be misleading.
  if (m.arch == Arch::llama) o << "  rope_theta: " << num(m.rope_theta) << "\n";
  // Only a model.from dir brings a scaling; shown as a comment, since it is not a recipe key.
  if (m.rope_scaling.type != RopeScaling::Type::none)
    o << "  # rope_scaling: " << rope_scaling_name(m.rope_scaling.type) << ", factor "
      << num(m.rope_scaling.factor)
      << (m.rope_scaling.type == RopeScaling::Type::llama3
              ? ", low_freq_factor " + num(m.rope_scaling.low_freq_factor) + ", high_freq_factor " +
                    num(m.rope_scaling.high_freq_factor) + ", original_max_position_embeddings " +
                    std::to_string(m.rope_scaling.original_max_positions)
              : std::string())
      << " (from the model dir)\n";
  o << "  norm_eps: " << num(m.norm_eps) << "\n"
    << "  tie_embeddings: " << (m.tie_embeddings ? "true" : "false") << "\n";
  if (m.qkv_bias) o << "  qkv_bias: true\n";
  if (m.qk_norm) o << "  # qk_norm: OLMoE's q/k norms (from the model dir)\n";
  if (m.moe.enabled()) {  // with model.from only the training keys are recipe keys
    const MoeConfig& x = m.moe;
    o << "  moe:\n";
    if (r.model_from.empty())
      o << "    experts: " << x.experts << "\n    top_k: " << x.top_k
        << "\n    expert_ffn: " << x.expert_ffn << "\n    shared_experts: " << x.shared_experts
        << "\n    shared_ffn: " << x.shared_ffn << "\n    router: softmax_topk\n"
        << "    norm_topk_prob: " << (x.norm_topk_prob ? "true" : "false")
        << "\n    every: " << x.every << "\n";
    o << "    aux_loss: " << num(x.aux_loss) << "\n    z_loss: " << num(x.z_loss)
      << "\n    capacity_factor: " << (x.capacity_factor > 0 ? num(x.capacity_factor) : "null")
      << "\n";
  }
  if (m.phi3) o << "  # Phi-3 tensor names (fused qkv_proj, gate_up_proj), from the model dir\n";
  if (!r.model_from.empty()) o << "  from: " << str(r.model_from) << "\n";
}

void describe_data_and_train(std::ostream& o, const Recipe& r) {
  const TrainSection& t = r.train;
  o << "data:\n  tokenizer: " << str(r.data.tokenizer) << "\n  train:\n";
  for (const DataSource& s : r.data.train) {
    o << "    - {path: " << str(s.path) << ", weight: " << num(s.weight) << "}\n";
  }
  if (!r.data.valid.empty()) {
    o << "  valid:\n";
    for (const DataSource& s : r.data.valid)
      o << "    - {path: " << str(s.path) << ", weight: " << num(s.weight) << "}\n";
  }
  o << "train:\n"
    << "  steps: " << t.steps << "\n"
    << "  micro_batch: " << t.micro_batch << "\n"
    << "  global_batch: " << t.global_batch << "\n"
    << "  lr: " << num(t.lr) << "\n"
    << "  min_lr: " << num(t.min_lr) << "\n"
    << "  warmup: " << t.warmup << "\n"
    << "  schedule: " << lr_decay_name(t.schedule) << "\n"
    << "  weight_decay: " << num(t.weight_decay) << "\n"
    << "  betas: [" << num(t.beta1) << ", " << num(t.beta2) << "]\n"
    << "  eps: " << num(t.eps) << "\n"
    << "  clip: " << num(t.clip) << "\n"
    << "  seed: " << t.seed << "\n"
    << "  eval_every: " << t.eval_every << "\n"
    << "  eval_batches: " << t.eval_batches << "\n";
}

// precision, checkpoint and logging.
void describe_outputs(std::ostream& o, const Recipe& r) {
  const Fp8Section& f8 = r.precision.fp8;
  o << "precision:\n  compute: " << r.precision.compute << "\n"
    << "  fp8:\n    enabled: " << (f8.enabled ? "true" : "false")
    << "\n    format: " << fp8_scheme_name(f8.format) << "\n    amax_history: " << f8.amax_history
    << "\n    amax_compute: " << amax_compute_name(f8.amax_compute) << "\n    margin: " << f8.margin
    << "\n    skip: [";
  for (size_t i = 0; i < f8.skip.size(); ++i) o << (i ? ", " : "") << f8.skip[i];
  o << "]\n";
  o << "checkpoint:\n  dir: " << str(r.checkpoint.dir) << "\n  every: " << r.checkpoint.every
    << "\n  keep: " << r.checkpoint.keep << "\n  resume: " << str(r.checkpoint.resume)
    << "\n  async: " << (r.checkpoint.async ? "true" : "false") << "\n";
  o << "logging:\n  every: " << r.logging.every << "\n  metrics: " << str(r.logging.metrics)
    << "\n  tensorboard: " << str(r.logging.tensorboard) << "\n";
}

// parallel, memory and launch.
void describe_ranks(std::ostream& o, const Recipe& r) {
  o << "parallel:\n  tp: " << r.parallel.tp << "\n  pp: " << r.parallel.pp
    << "\n  dp: " << r.parallel.dp << "\n  zero: " << r.parallel.zero
    << "\n  sequence_parallel: " << (r.parallel.sequence_parallel ? "true" : "false")
    << "\n  pp_schedule: " << schedule_name(r.parallel.pp_schedule)
    << "\n  virtual_stages: " << r.parallel.virtual_stages << "\n  cp: " << r.parallel.cp
    << "\n  cp_comm: " << cp_comm_name(r.parallel.cp_comm) << "\n";
  if (r.parallel.ep > 1) o << "  ep: " << r.parallel.ep << "\n";  // expert parallel (MoE)
  if (!r.parallel.pp_layers.empty()) {
    o << "  pp_layers: [";
    for (size_t i = 0; i < r.parallel.pp_layers.size(); ++i)
      o << (i ? ", " : "") << r.parallel.pp_layers[i];
    o << "]\n";
  }
  o << "memory:\n  recompute: " << recompute_name(r.memory.recompute) << "\n";
  if (r.memory.budget_bytes > 0) o << "  budget_bytes: " << r.memory.budget_bytes << "\n";
  o << "  offload:\n    optimizer: " << offload_name(r.memory.offload_optimizer)
    << "\n    params: " << offload_name(r.memory.offload_params) << "\n";
  if (!r.memory.nvme_path.empty()) o << "    nvme_path: " << str(r.memory.nvme_path) << "\n";
  o << "    buffer_mb: " << r.memory.offload_buffer_mb << "\n";
  o << "launch:\n  nproc: " << r.launch.nproc << "\n  backend: " << r.launch.backend
    << "\n  timeout_s: " << num(r.launch.timeout_s) << "\n  mpirun_args: [";
  for (size_t i = 0; i < r.launch.mpirun_args.size(); ++i)
    o << (i ? ", " : "") << str(r.launch.mpirun_args[i]);
  o << "]\n";
  if (r.finetune.enabled) {
    const LoraSection& f = r.finetune;
    o << "finetune:\n  method: lora\n  rank: " << f.rank << "\n  alpha: " << num(f.alpha)
      << "\n  dropout: " << num(f.dropout) << "\n  targets: [";
    for (size_t i = 0; i < f.targets.size(); ++i) o << (i ? ", " : "") << f.targets[i];
    o << "]\n  base_dtype: " << f.base_dtype << "\n  init_adapter: " << str(f.init_adapter) << "\n";
  }
}

void describe_derived(std::ostream& o, const Recipe& r) {
  const ModelConfig& m = r.model;
  const TrainSection& t = r.train;
  const double flops_token = m.train_flops_per_token(m.seq_len);
  const double flops_step = flops_token * double(r.tokens_per_step());
  o << "derived:\n"
    << "  parameters: " << m.param_count() << "  # " << human(double(m.param_count()), kCount)
    << "\n"
    << "  matmul_parameters: " << m.matmul_param_count() << "  # "
    << human(double(m.matmul_param_count()), kCount) << "\n"
    << "  head_dim: " << m.head_dim() << "\n"
    << "  grad_accum_steps: " << r.grad_accum_steps() << "\n"
    << "  tokens_per_step: " << r.tokens_per_step() << "\n"
    << "  total_tokens: " << num(double(r.tokens_per_step()) * double(t.steps)) << "\n"
    << "  flops_per_token: " << num(flops_token) << "  # " << human(flops_token, kFlops) << "\n"
    << "  flops_per_step: " << num(flops_step) << "  # " << human(flops_step, kFlops) << "\n";
}

}  // namespace

std::string describe_recipe(const Recipe& r) {
  std::ostringstream o;
  o << "# " << r.source << ", resolved (defaults filled in, paths absolute)\n";
  describe_model(o, r);
  describe_data_and_train(o, r);
  describe_outputs(o, r);
  describe_ranks(o, r);
  describe_derived(o, r);
  return o.str();
}

}  // namespace llmrun
