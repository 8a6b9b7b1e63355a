// Pipeline schedules as data: every (P, M, V) in the matrix below is checked for complete
// and ordered work, matched point-to-point traffic, the in-flight bound, deadlock freedom
// and the bubble formula. Most checks read the op lists directly; the simulator is the
// second, independent witness.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/pipeline_sim.h"
#include "parallel/pipeline_timeline.h"
#include "parallel/schedule.h"
#include "util/error.h"

namespace llmrun {
namespace {

const PipelineSchedule kSchedules[] = {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                       PipelineSchedule::interleaved};

struct Case {
  PipelineSchedule s;
  PipelineShape shape;
  std::string name() const {
    return std::string(schedule_name(s)) + " P=" + std::to_string(shape.stages) +
           " M=" + std::to_string(shape.micro_batches) +
           " V=" + std::to_string(shape.virtual_stages);
  }
};

// Every valid case of P in {1,2,3,4,8}, M in 1..16, V in {1} (gpipe, 1f1b) or {2,3,4}
// (interleaved); invalid ones must be refused with a UserError.
std::vector<Case> valid_cases() {
  std::vector<Case> out;
  for (PipelineSchedule s : kSchedules)
    for (int P : {1, 2, 3, 4, 8})
      for (int M = 1; M <= 16; ++M)
        for (int V : {1, 2, 3, 4}) {
          const bool valid =
              s == PipelineSchedule::interleaved ? (P >= 2 && V >= 2 && M % P == 0) : V == 1;
          const Case c{s, {P, M, V}};
          if (!valid) {
            EXPECT_THROW(check_pipeline_shape(s, c.shape), UserError) << c.name();
            continue;
          }
          EXPECT_NO_THROW(check_pipeline_shape(s, c.shape)) << c.name();
          out.push_back(c);
        }
  return out;
}

bool is_compute(PipeOpKind k) { return k == PipeOpKind::forward || k == PipeOpKind::backward; }
bool is_send(PipeOpKind k) {
  return k == PipeOpKind::send_forward || k == PipeOpKind::send_backward;
}
bool is_backward_dir(PipeOpKind k) {
  return k == PipeOpKind::send_backward || k == PipeOpKind::recv_backward;
}

std::vector<PipeOp> compute_only(const std::vector<PipeOp>& ops) {
  std::vector<PipeOp> out;
  for (const PipeOp& op : ops)
    if (is_compute(op.kind)) out.push_back(op);
  return out;
}

TEST(PipelineSchedule, NamesRoundTripAndBadNamesAreUserErrors) {
  for (PipelineSchedule s : kSchedules) EXPECT_EQ(parse_pipeline_schedule(schedule_name(s)), s);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineSchedule::one_f_one_b);
  try {
    parse_pipeline_schedule("zigzag");
    FAIL() << "accepted an unknown schedule";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("zigzag"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("interleaved"), std::string::npos);
  }
}

TEST(PipelineSchedule, ShapeChecksNameTheReason) {
  auto reason = [](PipelineSchedule s, PipelineShape sh) {
    try {
      check_pipeline_shape(s, sh);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(reason(PipelineSchedule::interleaved, {4, 6, 2}).find("multiple of parallel.pp"),
            std::string::npos);
  EXPECT_NE(reason(PipelineSchedule::interleaved, {4, 8, 1}).find("virtual_stages >= 2"),
            std::string::npos);
  EXPECT_NE(reason(PipelineSchedule::interleaved, {1, 8, 2}).find("parallel.pp >= 2"),
            std::string::npos);
  EXPECT_NE(reason(PipelineSchedule::one_f_one_b, {4, 8, 2}).find("interleaved"),
            std::string::npos);
  EXPECT_NE(reason(PipelineSchedule::gpipe, {2, 0, 1}).find("micro-batch"), std::string::npos);
  EXPECT_NE(reason(PipelineSchedule::gpipe, {0, 1, 1}).find("parallel.pp"), std::string::npos);
  EXPECT_EQ(reason(PipelineSchedule::interleaved, {4, 8, 2}), "accepted");
}

// Megatron's non-interleaved 1F1B written out by hand for P = 3, M = 4.
TEST(PipelineSchedule, OneFOneBMatchesMegatronOrder) {
  const PipelineShape sh{3, 4, 1};
  auto F = [](int m) { return PipeOp{PipeOpKind::forward, m, 0}; };
  auto B = [](int m) { return PipeOp{PipeOpKind::backward, m, 0}; };
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::one_f_one_b, sh, 0)),
            (std::vector<PipeOp>{F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)}));
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::one_f_one_b, sh, 1)),
            (std::vector<PipeOp>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::one_f_one_b, sh, 2)),
            (std::vector<PipeOp>{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::gpipe, sh, 1)),
            (std::vector<PipeOp>{F(0), F(1), F(2), F(3), B(0), B(1), B(2), B(3)}));
  // The full list of the middle stage, communication included.
  const auto R = PipeOpKind::recv_forward, S = PipeOpKind::send_forward,
             RB = PipeOpKind::recv_backward, SB = PipeOpKind::send_backward;
  const std::vector<PipeOp> mid = pipeline_ops(PipelineSchedule::one_f_one_b, {3, 2, 1}, 1);
  EXPECT_EQ(mid, (std::vector<PipeOp>{{R, 0, 0},
                                      F(0),
                                      {S, 0, 0},
                                      {R, 1, 0},
                                      F(1),
                                      {S, 1, 0},
                                      {RB, 0, 0},
                                      B(0),
                                      {SB, 0, 0},
                                      {RB, 1, 0},
                                      B(1),
                                      {SB, 1, 0}}));
}

// Megatron's interleaved schedule for P = 2, M = 4, V = 2, derived by hand from
// forward_backward_pipelining_with_interleaving: stage 0 warms up with
// (P-0-1)*2 + (V-1)*P = 4 units, stage 1 with 2; units walk micro-batches in groups of P.
TEST(PipelineSchedule, InterleavedMatchesMegatronOrder) {
  const PipelineShape sh{2, 4, 2};
  auto F = [](int m, int c) { return PipeOp{PipeOpKind::forward, m, c}; };
  auto B = [](int m, int c) { return PipeOp{PipeOpKind::backward, m, c}; };
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::interleaved, sh, 0)),
            (std::vector<PipeOp>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1), F(3, 0),
                                 B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0), B(2, 1), B(3, 1),
                                 B(2, 0), B(3, 0)}));
  EXPECT_EQ(compute_only(pipeline_ops(PipelineSchedule::interleaved, sh, 1)),
            (std::vector<PipeOp>{F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0),
                                 B(0, 0), F(3, 0), B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1),
                                 B(2, 0), B(3, 0)}));
  EXPECT_EQ(max_in_flight(PipelineSchedule::interleaved, sh, 0), 5);
  EXPECT_EQ(max_in_flight(PipelineSchedule::interleaved, sh, 1), 3);
  // M == P: Megatron runs every forward first.
  const auto all_warm = compute_only(pipeline_ops(PipelineSchedule::interleaved, {2, 2, 2}, 1));
  EXPECT_EQ(all_warm, (std::vector<PipeOp>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), B(0, 1), B(1, 1),
                                           B(0, 0), B(1, 0)}));
}

TEST(PipelineSchedule, EveryStageDoesAllItsWorkOnceForwardBeforeBackward) {
  for (const Case& c : valid_cases()) {
    const int P = c.shape.stages, M = c.shape.micro_batches, V = c.shape.virtual_stages;
    const int last_virtual = P * V - 1;
    for (int p = 0; p < P; ++p) {
      const std::vector<PipeOp> ops = pipeline_ops(c.s, c.shape, p);
      std::map<std::pair<int, int>, int> forward_at, backward_at;
      int in_flight = 0, peak = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        const PipeOp& op = ops[i];
        ASSERT_TRUE(op.micro >= 0 && op.micro < M && op.chunk >= 0 && op.chunk < V) << c.name();
        const int v = virtual_stage(c.shape, p, op.chunk);
        const auto key = std::make_pair(op.micro, op.chunk);
        if (op.kind == PipeOpKind::forward) {
          ASSERT_EQ(forward_at.count(key), 0u) << c.name() << " stage " << p << " forward twice";
          forward_at[key] = static_cast<int>(i);
          peak = std::max(peak, ++in_flight);
          // recv_forward right before unless virtual stage 0; send_forward right after unless last.
          const bool recv_before =
              i > 0 && ops[i - 1] == PipeOp{PipeOpKind::recv_forward, op.micro, op.chunk};
          const bool send_after =
              i + 1 < ops.size() &&
              ops[i + 1] == PipeOp{PipeOpKind::send_forward, op.micro, op.chunk};
          EXPECT_EQ(recv_before, v != 0) << c.name() << " stage " << p;
          EXPECT_EQ(send_after, v != last_virtual) << c.name() << " stage " << p;
        } else if (op.kind == PipeOpKind::backward) {
          ASSERT_EQ(backward_at.count(key), 0u) << c.name() << " stage " << p << " backward twice";
          ASSERT_EQ(forward_at.count(key), 1u)
              << c.name() << " stage " << p << " backward before forward";
          backward_at[key] = static_cast<int>(i);
          --in_flight;
          const bool recv_before =
              i > 0 && ops[i - 1] == PipeOp{PipeOpKind::recv_backward, op.micro, op.chunk};
          const bool send_after =
              i + 1 < ops.size() &&
              ops[i + 1] == PipeOp{PipeOpKind::send_backward, op.micro, op.chunk};
          EXPECT_EQ(recv_before, v != last_virtual) << c.name() << " stage " << p;
          EXPECT_EQ(send_after, v != 0) << c.name() << " stage " << p;
        }
      }
      EXPECT_EQ(forward_at.size(), static_cast<size_t>(M * V)) << c.name() << " stage " << p;
      EXPECT_EQ(backward_at.size(), static_cast<size_t>(M * V)) << c.name() << " stage " << p;
      EXPECT_EQ(in_flight, 0);
      // The bound is never exceeded and is reached (it is the tight bound the planner uses).
      EXPECT_EQ(peak, max_in_flight(c.s, c.shape, p)) << c.name() << " stage " << p;
      if (c.s == PipelineSchedule::one_f_one_b) {
        EXPECT_EQ(peak, std::min(P - p, M)) << c.name();
      }
      if (c.s == PipelineSchedule::gpipe) {
        EXPECT_EQ(peak, M) << c.name();
      }
      if (c.s == PipelineSchedule::interleaved && M > P) {
        EXPECT_EQ(peak, std::min((P - p - 1) * 2 + (V - 1) * P + 1, M * V)) << c.name();
      }
    }
  }
}

// Each (sender stage, receiver stage, direction) channel carries, in order, exactly the
// messages its receiver expects: sender's micro-batch equal, virtual stages adjacent.
TEST(PipelineSchedule, SendsMatchReceivesInOrder) {
  for (const Case& c : valid_cases()) {
    const int P = c.shape.stages;
    using Key = std::tuple<int, int, bool>;
    std::map<Key, std::vector<std::pair<int, int>>> sent,
        received;  // (micro, virtual stage of the other end)
    for (int p = 0; p < P; ++p)
      for (const PipeOp& op : pipeline_ops(c.s, c.shape, p)) {
        if (is_compute(op.kind)) continue;
        const int peer = pipe_peer_stage(c.shape, p, op);
        const int v = virtual_stage(c.shape, p, op.chunk);
        const bool back = is_backward_dir(op.kind);
        if (is_send(op.kind)) {
          const int to_virtual = back ? v - 1 : v + 1;
          ASSERT_EQ(to_virtual % P, peer) << c.name();
          sent[{p, peer, back}].push_back({op.micro, to_virtual});
        } else {
          received[{peer, p, back}].push_back({op.micro, v});
        }
      }
    EXPECT_EQ(sent, received) << c.name();
    if (P > 1) {
      EXPECT_FALSE(sent.empty()) << c.name();
    }
  }
}

TEST(PipelineSchedule, SimulatedBubbleEqualsTheFormula) {
  // With every stage equally fast, t_b = 2 t_f and free point-to-point, each schedule's
  // simulated makespan is exactly (M + (P-1)/V) (t_f + t_b) (V = 1 outside interleaved),
  // so the idle share equals the formula up to floating-point rounding of sums of
  // multiples of 1/V over a few hundred ops: 1e-12 is far above that and far below any
  // schedule error (one misplaced op moves the share by >= 1 / (3 * (M V + P)) > 1e-3).
  for (const Case& c : valid_cases()) {
    PipelineSimulation sim;
    ASSERT_NO_THROW(sim = simulate_pipeline(c.s, c.shape, 1.0, 2.0, 0.0)) << c.name();
    EXPECT_NEAR(sim.bubble_fraction, bubble_fraction(c.s, c.shape), 1e-12) << c.name();
    const double V = c.s == PipelineSchedule::interleaved ? c.shape.virtual_stages : 1;
    EXPECT_NEAR(sim.makespan, (c.shape.micro_batches + (c.shape.stages - 1) / V) * 3.0, 1e-9)
        << c.name();
    for (int p = 0; p < c.shape.stages; ++p)
      EXPECT_EQ(sim.peak_in_flight[p], max_in_flight(c.s, c.shape, p)) << c.name();
    // Costly messages only add idle time; the schedule still completes.
    const PipelineSimulation slow = simulate_pipeline(c.s, c.shape, 1.0, 2.0, 0.25);
    if (c.shape.stages > 1) {
      EXPECT_GT(slow.makespan, sim.makespan) << c.name();
    }
  }
}

TEST(PipelineSchedule, BubbleFormulas) {
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineSchedule::one_f_one_b, {4, 8, 1}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineSchedule::gpipe, {4, 8, 1}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineSchedule::interleaved, {4, 8, 2}), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(PipelineSchedule::one_f_one_b, {1, 8, 1}), 0.0);
}

TEST(PipelineSimulator, StagesOfDifferentSpeedsWaitOnEachOther) {
  // P = 2, M = 1, stage 1 twice as slow (it has the head): F0 on stage 0 [0, 1]; stage 1 waits
  // 1, runs F0 [1, 3] and B0 [3, 7]; stage 0 waits from 1 to 7, runs B0 [7, 9].
  const PipelineSimulation sim = simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 1, 1},
                                                   StageTimes{{1.0, 2.0}, {2.0, 4.0}}, 0.0);
  EXPECT_DOUBLE_EQ(sim.makespan, 9.0);
  EXPECT_EQ(sim.waiting, (std::vector<double>{6.0, 1.0}));
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 1.0 - (3.0 + 6.0) / 18.0);
  // Equal stages, M = 4: makespan (M + P - 1) * 3 = 15 of which 12 busy; stage 0 waits the
  // whole bubble (3), the last stage only for its first input (1) and is done at 13.
  const PipelineSimulation even =
      simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 4, 1}, 1.0, 2.0, 0.0);
  EXPECT_EQ(even.waiting, (std::vector<double>{3.0, 1.0}));
  EXPECT_THROW(
      simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 1, 1}, StageTimes{{1.0}, {2.0}}, 0.0),
      std::logic_error);
}

TEST(PipelineSimulator, PointToPointCostAndBusyIntervals) {
  // P = 2, M = 1: F on stage 0, message, F then B on stage 1, message, B on stage 0.
  const PipelineSimulation sim =
      simulate_pipeline(PipelineSchedule::one_f_one_b, {2, 1, 1}, 1.0, 2.0, 0.5);
  EXPECT_DOUBLE_EQ(sim.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  ASSERT_EQ(sim.busy[0].size(), 2u);
  EXPECT_DOUBLE_EQ(sim.busy[0][1].start, 5.0);
  EXPECT_EQ(sim.busy[0][1].op, (PipeOp{PipeOpKind::backward, 0, 0}));
  EXPECT_DOUBLE_EQ(sim.busy[1][0].start, 1.5);
  EXPECT_NEAR(sim.bubble_fraction, 1.0 - 6.0 / (2 * 7.0), 1e-12);
}

TEST(PipelineSimulator, DetectsDeadlockAndWrongMessages) {
  const PipelineShape sh{2, 1, 1};
  const auto F = PipeOpKind::forward, B = PipeOpKind::backward, SF = PipeOpKind::send_forward,
             RF = PipeOpKind::recv_forward, SB = PipeOpKind::send_backward,
             RB = PipeOpKind::recv_backward;
  // Stage 0 waits for a gradient before it has sent its activation.
  const std::vector<std::vector<PipeOp>> deadlock = {
      {{RB, 0, 0}, {B, 0, 0}, {F, 0, 0}, {SF, 0, 0}},
      {{RF, 0, 0}, {F, 0, 0}, {B, 0, 0}, {SB, 0, 0}}};
  try {
    simulate_pipeline_ops(sh, deadlock, 1, 2, 0);
    FAIL() << "deadlock not detected";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage 0 recv_backward micro 0"), std::string::npos)
        << e.what();
  }
  // Stage 1 expects micro-batch 1 first but stage 0 sends 0 first.
  const PipelineShape sh2{2, 2, 1};
  std::vector<std::vector<PipeOp>> swapped = {pipeline_ops(PipelineSchedule::gpipe, sh2, 0),
                                              pipeline_ops(PipelineSchedule::gpipe, sh2, 1)};
  for (PipeOp& op : swapped[1])
    if (op.kind == RF || op.kind == F) op.micro = 1 - op.micro;
  EXPECT_THROW(simulate_pipeline_ops(sh2, swapped, 1, 2, 0), std::logic_error);
  // A message nobody receives.
  std::vector<std::vector<PipeOp>> orphan = {{{F, 0, 0}, {SF, 0, 0}}, {}};
  EXPECT_THROW(simulate_pipeline_ops(sh, orphan, 1, 2, 0), std::logic_error);
}

TEST(PipelineTimeline, RendersCellsLegendAndBubble) {
  const PipelineShape sh{2, 2, 1};
  const std::string text = render_pipeline_timeline(
      simulate_pipeline(PipelineSchedule::one_f_one_b, sh, 1, 2, 0), PipelineSchedule::one_f_one_b);
  EXPECT_NE(text.find("stage 0 | F0 F1 .  .  B0 B0 .  B1 B1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 | .  F0 B0 B0 F1 B1 B1 .  .\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bubble (idle share of the step): 33.3% simulated, 33.3% from (P-1)/(M+P-1)"),
            std::string::npos)
      << text;
  // Chunks get letters; too wide a timeline falls back to one character per column.
  const std::string inter =
      render_pipeline_timeline(simulate_pipeline(PipelineSchedule::interleaved, {2, 2, 2}, 2, 4, 0),
                               PipelineSchedule::interleaved, 1000);
  EXPECT_NE(inter.find("stage 0 | F0a F1a F0b F1b"), std::string::npos) << inter;
  const std::string compact =
      render_pipeline_timeline(simulate_pipeline(PipelineSchedule::interleaved, {2, 2, 2}, 2, 4, 0),
                               PipelineSchedule::interleaved, 20);
  EXPECT_NE(compact.find("stage 0 | FFff"), std::string::npos) << compact;
  EXPECT_NE(compact.find("f / b of chunks 1, 3"), std::string::npos) << compact;
}

}  // namespace
}  // namespace llmrun
