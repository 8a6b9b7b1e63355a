#include "bench/train_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <tuple>

#include "bench/train_flops.h"
#include "train/trainer.h"
#include "util/error.h"

namespace llmrun {

namespace {

// What each rank measures about itself; gathered to rank 0 in this order.
enum RankField {
  f_tokens_per_s,  // this rank's share of the tokens over the median step time
  f_step_median,
  f_step_mean,
  f_forward,  // breakdown parts: means over the measured steps, so they add up to the mean step
  f_backward,
  f_optimizer,
  f_comm_wait,
  f_pipeline_idle,
  f_grad_reduce,  // gradient reductions in flight, and the part hidden behind compute
  f_grad_hidden,
  f_gather,  // parameter all-gathers (ZeRO-1/2 after the optimizer, ZeRO-3 before each use)
  f_gather_hidden,
  f_offload,  // offloaded state's reads and write-backs, or device copies of it
  f_offload_hidden,
  f_mem_params,
  f_mem_grads,
  f_mem_optimizer,
  f_mem_buffers,
  f_mem_staging,  // offload's device slots and ZeRO-3's shards fetched ahead
  f_mem_activations,
  f_peak_rss,
  f_count
};

const char* const kRankFieldNames[f_count] = {
    "tokens_per_s",  "step_s_median",        "step_s_mean",    "forward_s",
    "backward_s",    "optimizer_s",          "comm_wait_s",    "pipeline_idle_s",
    "grad_reduce_s", "grad_reduce_hidden_s", "param_gather_s", "param_gather_hidden_s",
    "offload_s",     "offload_hidden_s",     "mem_params",     "mem_grads",
    "mem_optimizer", "mem_buffers",          "mem_staging",    "mem_activations",
    "peak_rss"};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;  // Linux reports kilobytes
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

std::vector<double> summarise_rank(const std::vector<StepReport>& measured,
                                   double rank_tokens_per_step) {
  std::vector<double> out(f_count, 0.0);
  auto column = [&](auto get) {
    std::vector<double> v;
    for (const StepReport& r : measured) v.push_back(get(r));
    return v;
  };
  const std::vector<double> step = column([](const StepReport& r) { return r.step_seconds; });
  out[f_step_median] = median(step);
  out[f_step_mean] = mean(step);
  out[f_tokens_per_s] = rank_tokens_per_step / out[f_step_median];
  out[f_forward] = mean(column([](const StepReport& r) { return r.stats.forward_s; }));
  out[f_backward] = mean(column([](const StepReport& r) { return r.stats.backward_s; }));
  out[f_optimizer] = mean(column([](const StepReport& r) { return r.stats.optimizer_s; }));
  out[f_comm_wait] = mean(column([](const StepReport& r) { return r.stats.comm_wait_s; }));
  out[f_pipeline_idle] = mean(column([](const StepReport& r) { return r.stats.pipeline_idle_s; }));
  out[f_grad_reduce] = mean(column([](const StepReport& r) { return r.stats.grad_reduce_s; }));
  out[f_grad_hidden] =
      mean(column([](const StepReport& r) { return r.stats.grad_reduce_hidden_s; }));
  out[f_gather] = mean(column([](const StepReport& r) { return r.stats.param_gather_s; }));
  out[f_gather_hidden] =
      mean(column([](const StepReport& r) { return r.stats.param_gather_hidden_s; }));
  out[f_offload] = mean(column([](const StepReport& r) { return r.stats.offload_s; }));
  out[f_offload_hidden] =
      mean(column([](const StepReport& r) { return r.stats.offload_hidden_s; }));
  const StepReport& last = measured.back();
  out[f_mem_params] = double(last.memory.params);
  out[f_mem_grads] = double(last.memory.grads);
  out[f_mem_optimizer] = double(last.memory.optimizer);
  out[f_mem_buffers] = double(last.memory.buffers);
  out[f_mem_staging] = double(last.memory.staging);
  out[f_mem_activations] = double(last.activation_bytes);
  out[f_peak_rss] = peak_rss_bytes();
  return out;
}

// Every rank's fields on every rank. Doubles travel bit for bit as pairs of 32-bit words.
std::vector<double> gather_ranks(Communicator& world, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * size_t(world.size()));
  const int64_t words = int64_t(mine.size()) * 2;
  world.all_gather(Tensor(const_cast<double*>(mine.data()), DType::i32, {words}),
                   Tensor(all.data(), DType::i32, {words * world.size()}));
  return all;
}

// One kind of transfer, summed over the ranks: time in flight per step, the part hidden behind
// compute, the rest (exposed) and the hidden share.
nlohmann::json overlap_part(const std::vector<double>& all, int world, RankField flight_field,
                            RankField hidden_field, const char* what) {
  double flight = 0, hidden = 0;
  for (int k = 0; k < world; ++k) {
    flight += all[size_t(k) * f_count + flight_field];
    hidden += all[size_t(k) * f_count + hidden_field];
  }
  return {{"what", what},
          {"comm_s", flight},
          {"hidden_s", hidden},
          {"exposed_s", flight - hidden},
          {"hidden_share", flight > 0 ? hidden / flight : 0.0}};
}

// The gradient reductions at the top level (as before), the other transfers beside them.
nlohmann::json overlap_json(const std::vector<double>& all, int world) {
  nlohmann::json j = overlap_part(all, world, f_grad_reduce, f_grad_hidden,
                                  "data-parallel gradient reductions, per step, all ranks");
  j["param_gathers"] =
      overlap_part(all, world, f_gather, f_gather_hidden,
                   "ZeRO parameter all-gathers (stage 3 before each bucket's use, stages 1-2 "
                   "after the optimizer), per step, all ranks");
  j["offload"] = overlap_part(all, world, f_offload, f_offload_hidden,
                              "offloaded state's transfers: nvme reads and write-backs, and on a "
                              "device the copy-stream copies to and from host memory, per step, "
                              "all ranks");
  return j;
}

}  // namespace

nlohmann::json run_train_bench(Recipe r, const LaunchEnvironment& env, const TrainBenchOptions& o) {
  if (o.steps < 1) throw UserError("bench train: --steps must be at least 1");
  if (o.warmup < 0) throw UserError("bench train: --warmup must not be negative");
  r.train.steps = o.warmup + o.steps;
  r.train.warmup = std::min(r.train.warmup, r.train.steps);  // the LR warm-up must fit in the run
  // Nothing is written or read back: no checkpoints, no resume, no final model, no metrics.
  r.checkpoint = CheckpointSection{};
  r.logging.metrics.clear();
  r.data.valid.clear();
  r.logging.every = int(std::max<int64_t>(1, o.steps / 4));
  const double load_before = load_average();

  std::vector<StepReport> reports;
  nlohmann::json result;
  TrainingObserver observer;
  observer.on_step = [&](const StepReport& rep) {
    reports.push_back(rep);
    return true;
  };
  observer.on_finish = [&](const TrainingRunInfo& info) {
    const int world = info.world.size();
    LLMRUN_CHECK(int64_t(reports.size()) == r.train.steps, "bench train: a step report is missing");
    const std::vector<StepReport> measured(reports.begin() + o.warmup, reports.end());
    const std::vector<double> all =
        gather_ranks(info.world, summarise_rank(measured, double(r.tokens_per_step()) / world));
    if (info.world.rank() != 0) return;

    std::vector<double> tps;
    for (const StepReport& rep : measured) tps.push_back(rep.tokens_per_s);
    const Recompute recompute = r.memory.recompute;
    const TrainFlops flops = train_flops(r.model, r.model.seq_len, recompute);
    const double tps_median = median(tps);
    const double mfu = flops.model_per_token * tps_median / (info.peak_flops * world);
    const double* r0 = all.data();

    nlohmann::json ranks = nlohmann::json::array();
    for (int k = 0; k < world; ++k) {
      nlohmann::json j{{"rank", k}};
      for (int f = 0; f < f_count; ++f) j[kRankFieldNames[f]] = all[size_t(k) * f_count + f];
      ranks.push_back(j);
    }
    const ModelConfig& m = r.model;
    result = {
        {"recipe", r.source},
        {"model",
         {{"arch", arch_name(m.arch)},
          {"layers", m.layers},
          {"d_model", m.d_model},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"ffn", m.ffn},
          {"vocab", m.vocab},
          {"seq_len", m.seq_len},
          {"params", m.param_count()}}},
        {"ranks", world},
        {"threads_per_rank", info.threads},
        {"parallel",
         {{"tp", r.parallel.tp},
          {"pp", r.parallel.pp},
          {"dp", r.parallel.dp},
          {"zero", r.parallel.zero}}},
        {"micro_batch", r.train.micro_batch},
        {"global_batch", r.train.global_batch},
        {"tokens_per_step", r.tokens_per_step()},
        {"warmup_steps", o.warmup},
        {"measured_steps", o.steps},
        {"tokens_per_s",
         {{"median", tps_median},
          {"min", *std::min_element(tps.begin(), tps.end())},
          {"max", *std::max_element(tps.begin(), tps.end())}}},
        {"tokens_per_s_per_rank", tps_median / world},
        {"step_s", {{"median", r0[f_step_median]}, {"mean", r0[f_step_mean]}}},
        {"flops",
         {{"formula",
           "Megatron: 6 x (layer matmul params + vocab x d_model) + 12 x layers x d_model x seq "
           "per token"},
          {"model_per_token", flops.model_per_token},
          {"hardware_per_token", flops.hardware_per_token},
          {"recompute", recompute_name(recompute)}}},
        {"peak_flops_per_rank", info.peak_flops},
        {"mfu", mfu},
        // The ratio first: it is exactly 1 without recompute, so HFU then equals MFU to the bit.
        {"hfu", mfu * (flops.hardware_per_token / flops.model_per_token)},
        {"breakdown_s",
         {{"forward", r0[f_forward]},
          {"backward", r0[f_backward]},
          {"optimizer", r0[f_optimizer]},
          {"comm_wait", r0[f_comm_wait]},
          {"pipeline_idle", r0[f_pipeline_idle]},
          {"other", r0[f_step_mean] - r0[f_forward] - r0[f_backward] - r0[f_optimizer] -
                        r0[f_comm_wait] - r0[f_pipeline_idle]}}},
        // Communication hidden behind compute: the data-parallel gradient reductions (bucket by
        // bucket, posted as each bucket's backward ends), summed over the ranks.
        {"overlap", overlap_json(all, world)},
        {"per_rank", ranks},
        {"load_average", {{"before", load_before}, {"after", load_average()}}},
    };
  };
  run_training(r, env, observer);
  if (reports.size() < size_t(r.train.steps))
    throw UserError("bench train: stopped by a signal after step " +
                    std::to_string(reports.size()) + " of " + std::to_string(r.train.steps) +
                    "; no results");
  return result;
}

std::string format_train_bench(const nlohmann::json& r) {
  std::string s;
  char buf[512];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    s += buf;
  };
  const auto& m = r["model"];
  const auto& p = r["parallel"];
  line("llmrun bench train %s\n", r["recipe"].get<std::string>().c_str());
  line("model %s %d x %d, %d heads / %d kv, ffn %d, vocab %d, seq %d: %.2fM parameters\n",
       m["arch"].get<std::string>().c_str(), m["layers"].get<int>(), m["d_model"].get<int>(),
       m["heads"].get<int>(), m["kv_heads"].get<int>(), m["ffn"].get<int>(), m["vocab"].get<int>(),
       m["seq_len"].get<int>(), m["params"].get<double>() / 1e6);
  line(
      "%d rank(s) x %d thread(s), dp %d, ZeRO-%d; %lld tokens per step; %lld measured steps after "
      "%lld warm-up\n",
      r["ranks"].get<int>(), r["threads_per_rank"].get<int>(), p["dp"].get<int>(),
      p["zero"].get<int>(), r["tokens_per_step"].get<long long>(),
      r["measured_steps"].get<long long>(), r["warmup_steps"].get<long long>());
  s += "\n";
  const auto& t = r["tokens_per_s"];
  line("%-28s %12.1f  (min %.1f, max %.1f)\n", "tokens/s (median)", t["median"].get<double>(),
       t["min"].get<double>(), t["max"].get<double>());
  line("%-28s %12.1f\n", "tokens/s per rank", r["tokens_per_s_per_rank"].get<double>());
  line("%-28s %11.1f%%  (of %.1f GFLOP/s per rank, measured sgemm peak)\n", "MFU",
       100 * r["mfu"].get<double>(), r["peak_flops_per_rank"].get<double>() / 1e9);
  line("%-28s %11.1f%%  (recompute: %s)\n", "HFU", 100 * r["hfu"].get<double>(),
       r["flops"]["recompute"].get<std::string>().c_str());
  line("%-28s %12.4f s  (median %.4f s)\n", "step time, rank 0 (mean)",
       r["step_s"]["mean"].get<double>(), r["step_s"]["median"].get<double>());
  const double step = r["step_s"]["mean"].get<double>();
  for (const char* part :
       {"forward", "backward", "optimizer", "comm_wait", "pipeline_idle", "other"}) {
    const double v = r["breakdown_s"][part].get<double>();
    line("  %-26s %12.4f s  %5.1f%%\n", part, v, 100 * v / step);
  }
  const auto& ov = r["overlap"];
  if (ov["comm_s"].get<double>() > 0)
    line("%-28s %11.1f%%  (%.4f s of %.4f s of gradient reductions per step, all ranks)\n",
         "communication hidden", 100 * ov["hidden_share"].get<double>(),
         ov["hidden_s"].get<double>(), ov["comm_s"].get<double>());
  else
    line("%-28s %12s  (no data-parallel gradient reduction)\n", "communication hidden", "-");
  for (const auto& [key, label, what] :
       {std::tuple{"param_gathers", "  parameter gathers hidden", "ZeRO parameter all-gathers"},
        std::tuple{"offload", "  offload I/O hidden",
                   "reads and write-backs of offloaded state, or device copies of it"}}) {
    const auto& part = ov[key];
    if (part["comm_s"].get<double>() > 0)
      line("%-28s %11.1f%%  (%.4f s of %.4f s of %s per step, all ranks)\n", label,
           100 * part["hidden_share"].get<double>(), part["hidden_s"].get<double>(),
           part["comm_s"].get<double>(), what);
  }
  s += "\nper rank       tok/s   step s    fwd s    bwd s    opt s   comm s  params MB   grads MB  "
       " optim MB  buffers MB  staging MB"
       "  activ MB  peak RSS MB\n";
  for (const auto& k : r["per_rank"]) {
    line(
        "%8d %11.1f %8.4f %8.4f %8.4f %8.4f %8.4f %10.1f %10.1f %10.1f %11.1f %11.1f %9.1f "
        "%12.1f\n",
        k["rank"].get<int>(), k["tokens_per_s"].get<double>(), k["step_s_median"].get<double>(),
        k["forward_s"].get<double>(), k["backward_s"].get<double>(), k["optimizer_s"].get<double>(),
        k["comm_wait_s"].get<double>(), k["mem_params"].get<double>() / 1e6,
        k["mem_grads"].get<double>() / 1e6, k["mem_optimizer"].get<double>() / 1e6,
        k["mem_buffers"].get<double>() / 1e6, k["mem_staging"].get<double>() / 1e6,
        k["mem_activations"].get<double>() / 1e6, k["peak_rss"].get<double>() / 1e6);
  }
  line("\nload average %.2f before, %.2f after (the machine's, all processes)\n",
       r["load_average"]["before"].get<double>(), r["load_average"]["after"].get<double>());
  return s;
}

}  // namespace llmrun
