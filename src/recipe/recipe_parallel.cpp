// The parallel, launch and memory sections: how many ranks, how they split the work, and
// where the optimizer state lives.
#include <unistd.h>

#include <climits>

#include "parallel/schedule.h"
#include "recipe/recipe_internal.h"
#include "util/error.h"

namespace llmrun::recipe_detail {

namespace {
void read_memory(const MapReader& top, Locator& loc, const std::filesystem::path& base, Recipe& r) {
  const MapReader mem(top.node("memory"), "memory", loc, {"offload", "recompute"});
  r.memory.recompute = mem.string("recompute").value_or("none");
  if (r.memory.recompute != "none" && r.memory.recompute != "selective" && r.memory.recompute != "full")
    loc.fail("memory.recompute", "'" + r.memory.recompute + "' is not one of none, selective, full");
  const MapReader o(mem.has("offload") ? mem.node("offload") : YAML::Node(), "memory.offload", loc, {"optimizer", "nvme_path", "buffer_mb"},
                    {{"params", "parameter offload is not in this build yet"}});
  r.memory.offload_optimizer = o.string("optimizer").value_or("none");
  const std::string& kind = r.memory.offload_optimizer;
  if (kind != "none" && kind != "cpu" && kind != "nvme")
    loc.fail("memory.offload.optimizer", "'" + kind + "' is not one of none, cpu, nvme");
  r.memory.offload_buffer_mb = o.integer("buffer_mb", 1, 1 << 20).value_or(r.memory.offload_buffer_mb);
  if (o.has("nvme_path")) {
    std::filesystem::path p = o.string("nvme_path").value_or("");
    if (p.is_relative()) p = base / p;
    r.memory.nvme_path = p.lexically_normal().string();
  }
  if (kind == "nvme") {
    if (r.memory.nvme_path.empty())
      loc.fail("memory.offload.nvme_path", "missing: optimizer: nvme needs a directory for its files");
    if (!std::filesystem::is_directory(r.memory.nvme_path) || access(r.memory.nvme_path.c_str(), W_OK) != 0)
      loc.fail("memory.offload.nvme_path", r.memory.nvme_path + " is not a writable directory");
  }
}
}  // namespace

// Whether the model splits the way parallel.tp / pp ask; every refusal says why.
void check_model_parallel(const Recipe& r, Locator& loc) {
  const ParallelSection& p = r.parallel;
  const ModelConfig& m = r.model;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) loc.fail("parallel.tp", what);
  };
  const std::string tp = "tp=" + std::to_string(p.tp);
  need(m.heads % p.tp == 0, tp + " does not divide model.heads=" + std::to_string(m.heads));
  need(m.kv_heads % p.tp == 0 || p.tp % m.kv_heads == 0,
       tp + " and model.kv_heads=" + std::to_string(m.kv_heads) + ": one must divide the other");
  need(m.ffn % p.tp == 0, tp + " does not divide model.ffn=" + std::to_string(m.ffn));
  need(m.vocab >= p.tp, tp + " exceeds model.vocab");
  if (p.sequence_parallel && (int64_t(r.train.micro_batch) * m.seq_len) % p.tp != 0)
    loc.fail("parallel.sequence_parallel", "train.micro_batch x model.seq_len = " +
                                               std::to_string(int64_t(r.train.micro_batch) * m.seq_len) +
                                               " tokens do not divide by " + tp);
  if (p.pp_schedule != "gpipe" && p.pp_schedule != "1f1b" && p.pp_schedule != "interleaved")
    loc.fail("parallel.pp_schedule", "'" + p.pp_schedule + "' is not one of gpipe, 1f1b, interleaved");
  if (p.pp_schedule == "interleaved" && p.virtual_stages < 2)
    loc.fail("parallel.virtual_stages", "the interleaved schedule needs virtual_stages >= 2");
  if (p.pp_schedule != "interleaved" && p.virtual_stages != 1)
    loc.fail("parallel.virtual_stages", "only the interleaved schedule runs several model chunks per stage");
  const int chunks = p.pp * p.virtual_stages;
  if (m.layers < chunks)
    loc.fail("parallel.pp", std::to_string(m.layers) + " blocks cannot fill pp x virtual_stages = " +
                                std::to_string(chunks) + " pipeline stages");
  if (!p.pp_layers.empty()) {
    if (p.virtual_stages != 1) loc.fail("parallel.pp_layers", "uneven splits work with one model chunk per stage");
    int total = 0;
    for (int n : p.pp_layers) total += n;
    if (int(p.pp_layers.size()) != p.pp || total != m.layers)
      loc.fail("parallel.pp_layers", "needs " + std::to_string(p.pp) + " block counts summing to model.layers=" +
                                         std::to_string(m.layers));
  }
  if (p.pp > 1 && p.zero >= 2)
    loc.fail("parallel.zero", "ZeRO-" + std::to_string(p.zero) +
                                  " shards gradients or parameters per layer, which pipeline stages cannot do; "
                                  "use zero: 0 or 1 with pp > 1");
}

void read_parallel(const MapReader& top, Locator& loc, const std::filesystem::path& base, Recipe& r) {
  read_memory(top, loc, base, r);
  const MapReader l(top.node("launch"), "launch", loc, {"nproc", "mpirun_args", "timeout_s"});
  r.launch.nproc = int(l.integer("nproc", 1, 1 << 20).value_or(1));
  r.launch.timeout_s = l.number("timeout_s").value_or(r.launch.timeout_s);
  if (r.launch.timeout_s <= 0) loc.fail("launch.timeout_s", "must be positive (seconds)");
  if (l.has("mpirun_args")) {
    const YAML::Node args = l.node("mpirun_args");
    if (!args.IsSequence()) loc.fail("launch.mpirun_args", "expected a list of strings, got " + show(args));
    for (size_t i = 0; i < args.size(); ++i)
      r.launch.mpirun_args.push_back(read_string(args[i], "launch.mpirun_args." + std::to_string(i), loc));
  }

  const MapReader p(top.node("parallel"), "parallel", loc,
                    {"tp", "pp", "dp", "zero", "sequence_parallel", "pp_schedule", "virtual_stages", "pp_layers"});
  ParallelSection& par = r.parallel;
  par.tp = int(p.integer("tp", 1, 1 << 20).value_or(1));
  par.pp = int(p.integer("pp", 1, 1 << 20).value_or(1));
  par.zero = int(p.integer("zero", 0, 3).value_or(0));
  par.sequence_parallel = p.boolean("sequence_parallel").value_or(false);
  par.pp_schedule = p.string("pp_schedule").value_or("1f1b");
  par.virtual_stages = int(p.integer("virtual_stages", 1, 1 << 10).value_or(1));
  if (p.has("pp_layers")) {
    const YAML::Node layers = p.node("pp_layers");
    if (!layers.IsSequence()) loc.fail("parallel.pp_layers", "expected a list of block counts, one per stage");
    for (size_t i = 0; i < layers.size(); ++i)
      par.pp_layers.push_back(int(read_integer(layers[i], "parallel.pp_layers." + std::to_string(i), loc, 1, 1 << 20)));
  }
  check_model_parallel(r, loc);
  const int model_ranks = r.parallel.tp * r.parallel.pp;
  const bool dp_auto = !p.has("dp") || (p.node("dp").IsScalar() && p.node("dp").Scalar() == "auto");
  if (dp_auto) {
    if (r.launch.nproc % model_ranks != 0)
      loc.fail("launch.nproc", std::to_string(r.launch.nproc) + " ranks do not divide into tp x pp = " +
                                   std::to_string(model_ranks));
    r.parallel.dp = r.launch.nproc / model_ranks;
  } else {
    r.parallel.dp = int(p.integer("dp", 1, 1 << 20).value_or(1));
    if (model_ranks * r.parallel.dp != r.launch.nproc)
      loc.fail("parallel.dp",
               "tp x pp x dp = " + std::to_string(model_ranks * r.parallel.dp) + " but launch.nproc is " +
                   std::to_string(r.launch.nproc) + " (set dp: auto, or launch.nproc / --nproc to match)",
               "launch.nproc");
  }
  const int64_t per_step = int64_t(r.train.micro_batch) * r.parallel.dp;
  // (A batch that micro_batch alone does not divide is reported by validate_recipe.)
  if (r.train.global_batch % r.train.micro_batch == 0 && r.train.global_batch % per_step != 0)
    loc.fail("train.global_batch",
             std::to_string(r.train.global_batch) + " is not a multiple of train.micro_batch x parallel.dp = " +
                 std::to_string(per_step),
             "train.micro_batch");
  if (r.parallel.pp > 1 && r.train.global_batch % per_step == 0) {
    // The pipeline's micro-batches are the step's gradient-accumulation steps.
    const PipelineShape shape{r.parallel.pp, int(r.train.global_batch / per_step), r.parallel.virtual_stages};
    try {
      check_pipeline_shape(parse_pipeline_schedule(r.parallel.pp_schedule), shape);
    } catch (const UserError& e) {
      loc.fail("parallel.pp_schedule", std::string(e.what()) + " (micro-batches per step = train.global_batch / "
                                       "(train.micro_batch x parallel.dp) = " + std::to_string(shape.micro_batches) + ")");
    }
  }
}

}  // namespace llmrun::recipe_detail
