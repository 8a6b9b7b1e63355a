#include "parallel/pipeline_sim.h"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace llmrun {

namespace {

struct Message {
  int sender_virtual;
  int micro;
  double arrival;
};

// (sender stage, receiver stage, backward?) -> messages in send order.
using ChannelKey = std::tuple<int, int, bool>;

std::string describe(const PipelineShape& shape, int stage, const PipeOp& op) {
  return "stage " + std::to_string(stage) + " " + pipe_op_kind_name(op.kind) + " micro " +
         std::to_string(op.micro) + " chunk " + std::to_string(op.chunk) + " (virtual stage " +
         std::to_string(virtual_stage(shape, stage, op.chunk)) + ")";
}

bool is_backward_message(PipeOpKind k) {
  return k == PipeOpKind::send_backward || k == PipeOpKind::recv_backward;
}

}  // namespace

PipelineSimulation simulate_pipeline_ops(const PipelineShape& shape,
                                         const std::vector<std::vector<PipeOp>>& ops,
                                         double t_forward, double t_backward, double t_p2p) {
  return simulate_pipeline_ops(shape, ops, StageTimes::uniform(shape.stages, t_forward, t_backward),
                               t_p2p);
}

PipelineSimulation simulate_pipeline_ops(const PipelineShape& shape,
                                         const std::vector<std::vector<PipeOp>>& ops,
                                         const StageTimes& times, double t_p2p) {
  const int P = shape.stages;
  if (static_cast<int>(ops.size()) != P)
    throw std::logic_error("simulate_pipeline: one op list per stage needed");
  if (static_cast<int>(times.forward.size()) != P || static_cast<int>(times.backward.size()) != P)
    throw std::logic_error("simulate_pipeline: one forward and one backward time per stage needed");
  const double V = shape.virtual_stages;
  PipelineSimulation sim;
  sim.shape = shape;
  sim.busy.assign(P, {});
  sim.peak_in_flight.assign(P, 0);
  sim.waiting.assign(P, 0.0);
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0.0);
  std::vector<int> in_flight(P, 0);
  std::map<ChannelKey, std::deque<Message>> channels;

  // Runs stage p until it blocks on a receive or finishes; returns whether it moved.
  auto advance = [&](int p) {
    bool moved = false;
    while (next[p] < ops[p].size()) {
      const PipeOp& op = ops[p][next[p]];
      const int v = virtual_stage(shape, p, op.chunk);
      if (op.kind == PipeOpKind::forward || op.kind == PipeOpKind::backward) {
        const bool fwd = op.kind == PipeOpKind::forward;
        const double d = (fwd ? times.forward[size_t(p)] : times.backward[size_t(p)]) / V;
        sim.busy[p].push_back({clock[p], clock[p] + d, op});
        clock[p] += d;
        in_flight[p] += fwd ? 1 : -1;
        sim.peak_in_flight[p] = std::max(sim.peak_in_flight[p], in_flight[p]);
      } else {
        const int peer = pipe_peer_stage(shape, p, op);
        const bool back = is_backward_message(op.kind);
        if (op.kind == PipeOpKind::send_forward || op.kind == PipeOpKind::send_backward) {
          channels[{p, peer, back}].push_back({v, op.micro, clock[p] + t_p2p});
        } else {
          auto& q = channels[{peer, p, back}];
          if (q.empty()) return moved;
          const Message m = q.front();
          const int expected_sender = back ? v + 1 : v - 1;
          if (m.sender_virtual != expected_sender || m.micro != op.micro)
            throw std::logic_error("pipeline schedule: " + describe(shape, p, op) +
                                   " received micro " + std::to_string(m.micro) +
                                   " from virtual stage " + std::to_string(m.sender_virtual));
          q.pop_front();
          sim.waiting[size_t(p)] += std::max(0.0, m.arrival - clock[p]);
          clock[p] = std::max(clock[p], m.arrival);
        }
      }
      ++next[p];
      moved = true;
    }
    return moved;
  };

  for (;;) {
    bool moved = false, done = true;
    for (int p = 0; p < P; ++p) {
      moved = advance(p) || moved;
      done = done && next[p] == ops[p].size();
    }
    if (done) break;
    if (!moved) {
      std::string blocked;
      for (int p = 0; p < P; ++p)
        if (next[p] < ops[p].size())
          blocked += (blocked.empty() ? "" : "; ") + describe(shape, p, ops[p][next[p]]);
      throw std::logic_error("pipeline schedule deadlocks: " + blocked);
    }
  }
  for (const auto& [key, q] : channels)
    if (!q.empty())
      throw std::logic_error("pipeline schedule: stage " + std::to_string(std::get<0>(key)) +
                             " sent micro " + std::to_string(q.front().micro) + " that stage " +
                             std::to_string(std::get<1>(key)) + " never receives");

  double busy = 0;
  for (int p = 0; p < P; ++p) {
    sim.makespan = std::max(sim.makespan, clock[p]);
    for (const auto& iv : sim.busy[p]) busy += iv.end - iv.start;
  }
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - busy / (P * sim.makespan) : 0.0;
  return sim;
}

PipelineSimulation simulate_pipeline(PipelineSchedule s, const PipelineShape& shape,
                                     double t_forward, double t_backward, double t_p2p) {
  return simulate_pipeline(s, shape, StageTimes::uniform(shape.stages, t_forward, t_backward),
                           t_p2p);
}

PipelineSimulation simulate_pipeline(PipelineSchedule s, const PipelineShape& shape,
                                     const StageTimes& times, double t_p2p) {
  std::vector<std::vector<PipeOp>> ops;
  for (int p = 0; p < shape.stages; ++p) ops.push_back(pipeline_ops(s, shape, p));
  return simulate_pipeline_ops(shape, ops, times, t_p2p);
}

}  // namespace llmrun
