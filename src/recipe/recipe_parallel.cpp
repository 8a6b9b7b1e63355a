// The parallel, launch and memory sections: how many ranks, how they split the work, and
// where the optimizer state and parameter shards live.
#include <unistd.h>

#include <climits>

#include "parallel/schedule.h"
#include "recipe/recipe_internal.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace llmrun::recipe_detail {

namespace {
void read_memory(const MapReader& top, Locator& loc, const std::filesystem::path& base, Recipe& r) {
  const MapReader mem(top.node("memory"), "memory", loc, {"offload", "recompute", "budget_bytes"});
  if (mem.has("budget_bytes")) {
    const YAML::Node b = mem.node("budget_bytes");
    if (!b.IsScalar())
      loc.fail("memory.budget_bytes",
               "expected a size such as 80GB or 80000000000, got " + show(b));
    try {
      r.memory.budget_bytes = int64_t(parse_byte_size(b.Scalar(), "memory.budget_bytes"));
    } catch (const UserError&) {
      loc.fail("memory.budget_bytes",
               "'" + b.Scalar() + "' is not a size such as 80GB, 512MB, 1GiB or a byte count");
    }
  }
  const std::string recompute = mem.string("recompute").value_or("none");
  const std::optional<Recompute> parsed_recompute = recompute_from_name(recompute);
  if (!parsed_recompute)
    loc.fail("memory.recompute", "'" + recompute + "' is not one of none, selective, full");
  r.memory.recompute = *parsed_recompute;
  const MapReader o(mem.has("offload") ? mem.node("offload") : YAML::Node(), "memory.offload", loc,
                    {"optimizer", "params", "nvme_path", "buffer_mb"});
  for (const auto& [key, where] : {std::pair{"optimizer", &r.memory.offload_optimizer},
                                   std::pair{"params", &r.memory.offload_params}}) {
    const std::string kind = o.string(key).value_or("none");
    const std::optional<Offload> parsed = offload_from_name(kind);
    if (!parsed)
      loc.fail(std::string("memory.offload.") + key,
               "'" + kind + "' is not one of none, cpu, nvme");
    *where = *parsed;
  }
  r.memory.offload_buffer_mb =
      o.integer("buffer_mb", 1, 1 << 20).value_or(r.memory.offload_buffer_mb);
  if (o.has("nvme_path")) {
    std::filesystem::path p = o.string("nvme_path").value_or("");
    if (p.is_relative()) p = base / p;
    r.memory.nvme_path = p.lexically_normal().string();
  }
  if (r.memory.offload_optimizer == Offload::nvme || r.memory.offload_params == Offload::nvme) {
    const std::string who = r.memory.offload_optimizer == Offload::nvme ? "optimizer" : "params";
    if (r.memory.nvme_path.empty())
      loc.fail("memory.offload.nvme_path",
               "missing: " + who + ": nvme needs a directory for its files");
    if (!std::filesystem::is_directory(r.memory.nvme_path) ||
        access(r.memory.nvme_path.c_str(), W_OK) != 0)
      loc.fail("memory.offload.nvme_path", r.memory.nvme_path + " is not a writable directory");
  }
}
}  // namespace

void read_parallel(const MapReader& top, Locator& loc, const std::filesystem::path& base,
                   Recipe& r) {
  read_memory(top, loc, base, r);
  const MapReader l(top.node("launch"), "launch", loc,
                    {"nproc", "mpirun_args", "timeout_s", "backend"});
  r.launch.nproc = int(l.integer("nproc", 1, 1 << 20).value_or(1));
  r.launch.timeout_s = l.number("timeout_s").value_or(r.launch.timeout_s);
  if (r.launch.timeout_s <= 0) loc.fail("launch.timeout_s", "must be positive (seconds)");
  r.launch.backend = l.string("backend").value_or(r.launch.backend);
  if (r.launch.backend != "auto" && r.launch.backend != "cpu" && r.launch.backend != "cuda")
    loc.fail("launch.backend", "'" + r.launch.backend + "' is not one of auto, cpu, cuda");
  if (l.has("mpirun_args")) {
    const YAML::Node args = l.node("mpirun_args");
    if (!args.IsSequence())
      loc.fail("launch.mpirun_args", "expected a list of strings, got " + show(args));
    for (size_t i = 0; i < args.size(); ++i)
      r.launch.mpirun_args.push_back(
          read_string(args[i], "launch.mpirun_args." + std::to_string(i), loc));
  }

  const MapReader p(top.node("parallel"), "parallel", loc,
                    {"tp", "pp", "dp", "zero", "sequence_parallel", "pp_schedule", "virtual_stages",
                     "pp_layers", "cp", "cp_comm", "ep"});
  ParallelSection& par = r.parallel;
  par.tp = int(p.integer("tp", 1, 1 << 20).value_or(1));
  par.pp = int(p.integer("pp", 1, 1 << 20).value_or(1));
  par.zero = int(p.integer("zero", 0, 3).value_or(0));
  par.sequence_parallel = p.boolean("sequence_parallel").value_or(false);
  try {
    par.pp_schedule = parse_pipeline_schedule(p.string("pp_schedule").value_or("1f1b"));
  } catch (const UserError& e) {
    loc.fail("parallel.pp_schedule", e.what());
  }
  par.virtual_stages = int(p.integer("virtual_stages", 1, 1 << 10).value_or(1));
  if (p.has("pp_layers")) {
    const YAML::Node layers = p.node("pp_layers");
    if (!layers.IsSequence())
      loc.fail("parallel.pp_layers", "expected a list of block counts, one per stage");
    for (size_t i = 0; i < layers.size(); ++i)
      par.pp_layers.push_back(
          int(read_integer(layers[i], "parallel.pp_layers." + std::to_string(i), loc, 1, 1 << 20)));
  }
  par.cp = int(p.integer("cp", 1, 1 << 20).value_or(1));
  par.ep = int(p.integer("ep", 1, 1 << 20).value_or(1));
  const std::string cp_comm = p.string("cp_comm").value_or("p2p");
  if (const auto parsed = cp_comm_from_name(cp_comm))
    par.cp_comm = *parsed;
  else
    loc.fail("parallel.cp_comm", "'" + cp_comm + "' is not one of p2p, all_gather, a2a");
  const int model_ranks = r.parallel.tp * r.parallel.pp * r.parallel.cp;
  const bool dp_auto = !p.has("dp") || (p.node("dp").IsScalar() && p.node("dp").Scalar() == "auto");
  if (dp_auto) {
    if (r.launch.nproc % model_ranks != 0)
      loc.fail("launch.nproc",
               std::to_string(r.launch.nproc) +
                   " ranks do not divide into tp x pp x cp = " + std::to_string(model_ranks));
    r.parallel.dp = r.launch.nproc / model_ranks;
  } else {
    r.parallel.dp = int(p.integer("dp", 1, 1 << 20).value_or(1));
    if (model_ranks * r.parallel.dp != r.launch.nproc)
      loc.fail("parallel.dp",
               "tp x pp x cp x dp = " + std::to_string(model_ranks * r.parallel.dp) +
                   " but launch.nproc is " + std::to_string(r.launch.nproc) +
                   " (set dp: auto, or launch.nproc / --nproc to match)",
               "launch.nproc");
  }
  // Only ZeRO-3 shards the parameters, and a shard is what parameter offload moves out.
  if (r.memory.offload_params != Offload::none && r.parallel.zero != 3)
    loc.fail("memory.offload.params",
             std::string(offload_name(r.memory.offload_params)) +
                 " needs parallel.zero: 3 (parameters are offloaded as ZeRO-3 shards); "
                 "parallel.zero is " +
                 std::to_string(r.parallel.zero),
             "parallel.zero");
  const int64_t per_step = int64_t(r.train.micro_batch) * r.parallel.dp;
  // (A batch that micro_batch alone does not divide is reported by validate_recipe.)
  if (r.train.global_batch % r.train.micro_batch == 0 && r.train.global_batch % per_step != 0)
    loc.fail(
        "train.global_batch",
        std::to_string(r.train.global_batch) +
            " is not a multiple of train.micro_batch x parallel.dp = " + std::to_string(per_step),
        "train.micro_batch");
}

}  // namespace llmrun::recipe_detail
