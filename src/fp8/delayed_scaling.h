// Transformer Engine's delayed scaling for one FP8 tensor: the scale a cast uses comes from
// the amaxes of earlier steps, never from the tensor being cast.
#pragma once
#include <vector>

namespace llmrun {

enum class AmaxCompute { max, most_recent };

// Per tensor: amax_history[0] collects this step's amax (a running max over every cast of
// the step: micro-batches, forward and backward); update() at the end of the step turns the
// history into the scale the next step casts with.
//
// The rule, as Transformer Engine documents it (DelayedScaling recipe and
// nvte_delayed_scaling_recipe_amax_and_scale_update, transformer_engine/common/recipe):
//   amax  = max(amax_history)                      amax_compute_algo "max"
//         = amax_history[0]                         "most_recent"
//   amax_history rotated by -1 (entry 0 moves to the end, entry 1 becomes 0) and entry 0 set
//   to zero, so the window holds the last `length` steps' amaxes;
//   scale = (FP8_MAX * 2^-margin) / amax  when amax is finite and > 0, else unchanged
//   (the docs write it (FP8_MAX / amax) / 2^margin: the same float, as 2^-margin is exact);
//   scale_inv = 1 / scale.
// Scales start at 1, as Transformer Engine's do. A scale that would overflow fp32 (amax
// below ~1e-36) is clamped to FLT_MAX, as TE's compute_scale_from_amax does. Unlike TE's
// fmaxf-based "max" (which skips NaN), a NaN anywhere in the window keeps the scale: a scale
// is never derived from a window that saw a non-finite value.
class DelayedScaling {
 public:
  explicit DelayedScaling(int history_length);

  float scale() const { return scale_; }
  float scale_inv() const { return scale_inv_; }
  const std::vector<float>& amax_history() const { return history_; }

  // Folds one cast's amax into this step's entry (NaN sticks).
  void record(float amax);
  // Replaces this step's entry (with the amax reduced over the run's ranks).
  void set_step_amax(float amax) { history_[0] = amax; }
  // End of step: the rule above.
  void update(AmaxCompute algo, float fp8_max, int margin);
  // Restores a saved state (checkpoint resume); history must have the configured length.
  void restore(float scale, const std::vector<float>& history);
  // Back to the state of a fresh run.
  void reset();

 private:
  std::vector<float> history_;
  float scale_ = 1.0f, scale_inv_ = 1.0f;
};

}  // namespace llmrun
