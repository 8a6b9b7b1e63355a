#include "plan/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "parallel/pipeline_timeline.h"
#include "plan/memory_budget.h"

namespace llmrun {

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// 105472 -> "105472 (105.5 KB)"
std::string bytes_cell(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = b;
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, ++i;
  return fixed(b, 0) + (i ? " (" + fixed(v, 1) + " " + units[i] + ")" : "");
}

std::string block_range(const std::vector<int>& blocks) {
  if (blocks.empty()) return "none";
  std::string s;
  size_t i = 0;
  while (i < blocks.size()) {
    size_t j = i;
    while (j + 1 < blocks.size() && blocks[j + 1] == blocks[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(blocks[i]);
    if (j > i) {
      s += '-';
      s += std::to_string(blocks[j]);
    }
    i = j + 1;
  }
  return s;
}

void table_row(std::ostringstream& o, const std::string& label,
               const std::vector<std::string>& cells) {
  std::string line = "  " + label;
  line.resize(44, ' ');
  for (const std::string& c : cells) {
    std::string cell = c;
    if (cell.size() < 26) cell.resize(26, ' ');
    line += cell;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  o << line << "\n";
}

nlohmann::json layout_json(const TrainingLayout& l) {
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"zero", l.zero},
          {"pp_schedule", schedule_name(l.schedule)},
          {"virtual_stages", l.virtual_stages},
          {"sequence_parallel", l.sequence_parallel},
          {"pp_layers", l.pp_layers},
          {"recompute", recompute_name(l.recompute)},
          {"cp", l.cp},
          {"cp_comm", cp_comm_name(l.cp_comm)},
          {"ep", l.ep},
          {"describe", l.describe()}};
}

nlohmann::json step_json(const StepPrediction& s) {
  return {{"forward_s", s.forward_s},
          {"backward_s", s.backward_s},
          {"compute_s", s.compute_s},
          {"tp_comm_s", s.tp_comm_s},
          {"cp_comm_s", s.cp_comm_s},
          {"cp_exposed_s", s.cp_exposed_s},
          {"ep_comm_s", s.ep_comm_s},
          {"pipeline_s", s.pipeline_s},
          {"bubble", s.bubble},
          {"dp_comm_s", s.dp_comm_s},
          {"step_s", s.step_s},
          {"tokens_per_s", s.tokens_per_s},
          {"model_flops", s.model_flops},
          {"mfu", s.mfu},
          {"stage_waiting", s.stage_waiting}};
}

}  // namespace

Plan make_plan(const std::string& source, const TrainingShape& s, const TrainingLayout& l,
               const PerfAssumptions& a, int64_t budget_bytes) {
  Plan p;
  p.source = source;
  p.shape = s;
  p.layout = l;
  p.micro_batches = micro_batches_per_step(s, l);
  p.memory = plan_memory(s, l);
  p.comm = plan_communication(s, l);
  p.assumptions = a;
  p.step = predict_step(s, l, a);
  p.budget_bytes = budget_bytes;
  return p;
}

std::string plan_text(const Plan& p) {
  const ModelConfig& m = p.shape.model;
  const TrainingLayout& l = p.layout;
  std::ostringstream o;
  o << "plan for " << p.source << "\n";
  o << "model: " << arch_name(m.arch) << ", " << m.layers << " layers, d_model " << m.d_model
    << ", " << m.heads << " heads (" << m.kv_heads << " kv), ffn " << m.ffn << ", vocab " << m.vocab
    << ", seq_len " << m.seq_len << ", " << m.param_count() << " parameters, compute "
    << p.shape.compute << "\n";
  o << "layout: " << l.world() << " ranks = tp " << l.tp << " x pp " << l.pp << " x dp " << l.dp
    << ", ZeRO-" << l.zero << ", recompute " << recompute_name(l.recompute)
    << ", sequence_parallel " << (l.sequence_parallel ? "on" : "off");
  if (l.pp > 1)
    o << ", schedule " << schedule_name(l.schedule) << " with " << l.virtual_stages
      << " chunk(s) per stage";
  if (l.cp > 1)
    o << ", context parallel cp " << l.cp << " (" << cp_comm_name(l.cp_comm)
      << "): " << m.seq_len / l.cp << " of each sequence's " << m.seq_len << " tokens per rank";
  o << "\nbatch: " << p.shape.global_batch << " sequences per step = " << p.micro_batches
    << " micro-batches of " << p.shape.micro_batch << " per data-parallel rank x dp " << l.dp
    << "\n\n";

  o << "memory per rank in bytes (tensor-parallel rank 0; every data-parallel rank alike)\n";
  std::vector<std::string> head;
  for (const StageMemory& s : p.memory) head.push_back("stage " + std::to_string(s.stage));
  table_row(o, "", head);
  auto row = [&](const std::string& label, auto cell) {
    std::vector<std::string> cells;
    for (const StageMemory& s : p.memory) cells.push_back(cell(s));
    table_row(o, label, cells);
  };
  row("blocks", [](const StageMemory& s) { return block_range(s.blocks); });
  row("embedding / head", [](const StageMemory& s) {
    return std::string(s.embedding ? "embedding" : "-") + " / " + (s.head ? "head" : "-");
  });
  row("parameters", [](const StageMemory& s) { return bytes_cell(s.params); });
  row("gradients", [](const StageMemory& s) { return bytes_cell(s.grads); });
  row("optimizer (AdamW m+v)", [](const StageMemory& s) { return bytes_cell(s.optimizer); });
  if (p.shape.offload_optimizer != Offload::none)
    row(std::string("optimizer offloaded to ") + offload_name(p.shape.offload_optimizer),
        [](const StageMemory& s) { return bytes_cell(s.optimizer_offloaded); });
  if (p.shape.offload_params != Offload::none)
    row(std::string("parameters offloaded to ") + offload_name(p.shape.offload_params),
        [](const StageMemory& s) { return bytes_cell(s.params_offloaded); });
  if (l.zero >= 2)
    row("ZeRO buffers (upper bound)", [](const StageMemory& s) { return bytes_cell(s.buffers); });
  // Offload's device slots (two pieces per array, copy streams) and ZeRO-3's fetched shards.
  if (p.shape.offload_optimizer != Offload::none)
    row("offload staging: optimizer slots",
        [](const StageMemory& s) { return bytes_cell(s.optimizer_staging); });
  if (p.shape.offload_params != Offload::none && l.zero == 3) {
    row("offload staging: parameter slots",
        [](const StageMemory& s) { return bytes_cell(s.params_staging); });
    row("offload staging: shards fetched ahead",
        [](const StageMemory& s) { return bytes_cell(s.params_fetch); });
  }
  row("activations / micro-batch, none",
      [](const StageMemory& s) { return bytes_cell(s.act_per_micro[0]); });
  row("activations / micro-batch, selective",
      [](const StageMemory& s) { return bytes_cell(s.act_per_micro[1]); });
  row("activations / micro-batch, full",
      [](const StageMemory& s) { return bytes_cell(s.act_per_micro[2]); });
  row(l.virtual_stages > 1 ? "in flight (micro-batch x chunk units)" : "micro-batches in flight",
      [](const StageMemory& s) { return std::to_string(s.max_in_flight); });
  row("activations in flight (" + std::string(recompute_name(l.recompute)) + ")",
      [](const StageMemory& s) { return bytes_cell(s.act_in_flight); });
  row("activation workspace", [](const StageMemory& s) { return bytes_cell(s.act_workspace); });
  row("activations", [](const StageMemory& s) { return bytes_cell(s.activations); });
  row("peak", [](const StageMemory& s) { return bytes_cell(s.peak); });
  if (p.shape.offload_optimizer != Offload::none || p.shape.offload_params != Offload::none)
    row("host memory, pinned (not in the peak)",
        [](const StageMemory& s) { return bytes_cell(s.host_pinned); });
  row("KV cache / sequence (serve, seq_len)",
      [](const StageMemory& s) { return bytes_cell(s.kv_cache_per_sequence); });
  if (p.budget_bytes > 0) {
    const std::string problem = memory_budget_problem(p.memory, l, p.budget_bytes);
    o << "budget: " << format_bytes(double(p.budget_bytes))
      << " per rank: " << (problem.empty() ? "every rank fits" : "does NOT fit") << "\n";
  }

  o << "\ncommunication per step, bytes each rank sends (ring collectives; payload = buffer "
       "bytes)\n";
  bool any = false;
  for (const StageComm& c : p.comm)
    for (const CommItem& i : c.items) {
      any = true;
      o << "  stage " << c.stage << "  " << i.group << "  " << i.what << ": payload "
        << bytes_cell(i.payload) << ", sent " << bytes_cell(i.sent) << "\n";
    }
  if (!any) o << "  none (one rank)\n";

  const PerfAssumptions& a = p.assumptions;
  const StepPrediction& s = p.step;
  o << "\npredicted step (peak " << sci(a.peak_flops) << " FLOP/s per rank from " << a.peak_source
    << "; tp link " << sci(a.tp_bandwidth) << " B/s, dp/pp link " << sci(a.bandwidth) << " B/s";
  if (a.gpus_per_node > 0)
    o << " (" << a.gpus_per_node << " GPUs per node: in-node groups use the tp link; cp "
      << sci(group_bandwidth(a, l, "cp")) << ", pp " << sci(group_bandwidth(a, l, "pp")) << ", dp "
      << sci(group_bandwidth(a, l, "dp")) << " B/s)";
  o << "; no overlap assumed)\n";
  o << "  slowest stage, one micro-batch: forward " << sci(s.forward_s) << " s, backward "
    << sci(s.backward_s) << " s (tensor-parallel collectives " << sci(s.tp_comm_s)
    << " s of the step)\n";
  o << "  pipeline: " << sci(s.pipeline_s) << " s, bubble " << fixed(100 * s.bubble, 1) << "%";
  if (!s.stage_waiting.empty()) {
    o << "; share of the step each stage waits on its neighbours:";
    for (size_t i = 0; i < s.stage_waiting.size(); ++i)
      o << " " << i << ": " << fixed(100 * s.stage_waiting[i], 1) << "%";
  }
  o << "\n";
  if (l.cp > 1)
    o << "  context-parallel ring: " << sci(s.cp_comm_s) << " s of transfers, "
      << sci(s.cp_exposed_s) << " s of them not hidden behind attention (in the compute above); "
      << sci(s.step_s + s.cp_comm_s - s.cp_exposed_s) << " s per step if none overlapped\n";
  if (l.ep > 1)
    o << "  expert-parallel all-to-all: " << sci(s.ep_comm_s) << " s of the step ("
      << fixed(100 * s.ep_comm_s / s.step_s, 1) << "%, in the compute above)\n";
  o << "  data-parallel communication: " << sci(s.dp_comm_s) << " s\n";
  o << "  step: " << sci(s.step_s) << " s, " << sci(s.tokens_per_s) << " tokens/s, MFU "
    << fixed(100 * s.mfu, 1) << "%\n";

  if (l.pp > 1) {
    const PipelineShape shape{l.pp, p.micro_batches, l.virtual_stages};
    // Unit times (backward = 2 forwards, free messages): the schedule's own shape and bubble.
    o << "\n"
      << render_pipeline_timeline(
             simulate_pipeline(l.schedule, shape, l.virtual_stages, 2.0 * l.virtual_stages, 0),
             l.schedule);
  }
  return o.str();
}

nlohmann::json plan_json(const Plan& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& s : p.memory)
    stages.push_back({{"stage", s.stage},
                      {"blocks", s.blocks},
                      {"embedding", s.embedding},
                      {"head", s.head},
                      {"param_elements", s.param_elements},
                      {"params", s.params},
                      {"grads", s.grads},
                      {"optimizer", s.optimizer},
                      {"optimizer_offloaded", s.optimizer_offloaded},
                      {"params_offloaded", s.params_offloaded},
                      {"buffers", s.buffers},
                      {"largest_shard", s.largest_shard},
                      {"offload_staging",
                       {{"optimizer", s.optimizer_staging},
                        {"optimizer_piece", s.optimizer_piece},
                        {"params", s.params_staging},
                        {"params_piece", s.params_piece},
                        {"params_fetch", s.params_fetch},
                        {"total", s.offload_staging}}},
                      {"host_pinned", s.host_pinned},
                      {"act_per_micro",
                       {{"none", s.act_per_micro[0]},
                        {"selective", s.act_per_micro[1]},
                        {"full", s.act_per_micro[2]}}},
                      {"max_in_flight", s.max_in_flight},
                      {"act_in_flight", s.act_in_flight},
                      {"act_workspace", s.act_workspace},
                      {"activations", s.activations},
                      {"peak", s.peak},
                      {"kv_cache_per_sequence", s.kv_cache_per_sequence}});
  nlohmann::json comm = nlohmann::json::array();
  for (const StageComm& c : p.comm) {
    nlohmann::json items = nlohmann::json::array();
    for (const CommItem& i : c.items)
      items.push_back(
          {{"group", i.group}, {"what", i.what}, {"payload", i.payload}, {"sent", i.sent}});
    comm.push_back({{"stage", c.stage},
                    {"dp_sent", c.sent("dp")},
                    {"tp_sent", c.sent("tp")},
                    {"pp_sent", c.sent("pp")},
                    {"cp_sent", c.sent("cp")},
                    {"ep_sent", c.sent("ep")},
                    {"items", items}});
  }
  nlohmann::json j{{"recipe", p.source},
                   {"layout", layout_json(p.layout)},
                   {"micro_batches", p.micro_batches},
                   {"offload",
                    {{"optimizer", offload_name(p.shape.offload_optimizer)},
                     {"params", offload_name(p.shape.offload_params)},
                     {"buffer_bytes", p.shape.offload_buffer_bytes}}},
                   {"stages", stages},
                   {"communication", comm},
                   {"assumptions",
                    {{"peak_flops", p.assumptions.peak_flops},
                     {"peak_source", p.assumptions.peak_source},
                     {"tp_bandwidth", p.assumptions.tp_bandwidth},
                     {"bandwidth", p.assumptions.bandwidth},
                     {"gpus_per_node", p.assumptions.gpus_per_node},
                     {"group_bandwidth",
                      {{"tp", group_bandwidth(p.assumptions, p.layout, "tp")},
                       {"cp", group_bandwidth(p.assumptions, p.layout, "cp")},
                       {"pp", group_bandwidth(p.assumptions, p.layout, "pp")},
                       {"dp", group_bandwidth(p.assumptions, p.layout, "dp")}}}}},
                   {"step", step_json(p.step)},
                   {"peak_bytes", peak_stage(p.memory).peak}};
  if (p.layout.pp > 1)
    j["pipeline"] = {{"bubble_formula",
                      bubble_fraction(p.layout.schedule,
                                      {p.layout.pp, p.micro_batches, p.layout.virtual_stages})}};
  if (p.budget_bytes > 0)
    j["budget"] = {{"bytes", p.budget_bytes},
                   {"fits", memory_budget_problem(p.memory, p.layout, p.budget_bytes).empty()}};
  return j;
}

std::string search_text(const LayoutSearch& s, int nproc, int top) {
  std::ostringstream o;
  o << "layouts for " << nproc << " ranks: " << s.considered << " considered, " << s.ranked.size()
    << " valid, " << s.considered - static_cast<int>(s.ranked.size()) << " excluded\n";
  size_t width = 6;
  for (int i = 0; i < static_cast<int>(s.ranked.size()) && i < top; ++i)
    width = std::max(width, s.ranked[i].layout.describe().size() + 2);
  std::string header = "rank  layout";
  header.resize(6 + width, ' ');
  o << header << "step s      tokens/s    MFU    bubble  peak bytes/rank\n";
  for (int i = 0; i < static_cast<int>(s.ranked.size()) && i < top; ++i) {
    const RankedLayout& r = s.ranked[i];
    std::string line = std::to_string(i + 1);
    line.resize(6, ' ');
    line += r.layout.describe();
    line.resize(6 + width, ' ');
    auto col = [&](const std::string& c, size_t w) {
      line += c;
      line.resize(line.size() + (c.size() < w ? w - c.size() : 1), ' ');
    };
    col(sci(r.step.step_s), 12);
    col(sci(r.step.tokens_per_s), 12);
    col(fixed(100 * r.step.mfu, 1) + "%", 7);
    col(fixed(100 * r.step.bubble, 1) + "%", 8);
    line += bytes_cell(r.peak_bytes);
    o << line << "\n";
  }
  if (static_cast<int>(s.ranked.size()) > top)
    o << "(" << s.ranked.size() - top << " more valid layouts; --top N shows more)\n";
  if (!s.excluded.empty()) o << "excluded:\n";
  for (const ExcludedLayouts& e : s.excluded) {
    o << "  " << e.layouts.size() << " x " << e.reason << "\n      e.g. "
      << e.layouts.front().describe();
    if (e.layouts.size() > 1) o << "; " << e.layouts.back().describe();
    o << "\n";
  }
  return o.str();
}

nlohmann::json search_json(const LayoutSearch& s) {
  nlohmann::json ranked = nlohmann::json::array(), excluded = nlohmann::json::array();
  for (const RankedLayout& r : s.ranked)
    ranked.push_back({{"layout", layout_json(r.layout)},
                      {"step", step_json(r.step)},
                      {"peak_bytes", r.peak_bytes}});
  for (const ExcludedLayouts& e : s.excluded) {
    nlohmann::json layouts = nlohmann::json::array();
    for (const TrainingLayout& l : e.layouts) layouts.push_back(l.describe());
    excluded.push_back({{"reason", e.reason}, {"layouts", layouts}});
  }
  return {{"considered", s.considered}, {"ranked", ranked}, {"excluded", excluded}};
}

}  // namespace llmrun
