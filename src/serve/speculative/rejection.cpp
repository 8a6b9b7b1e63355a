// verify_proposal: the accept/resample step of speculative sampling (see the header).
#include "serve/speculative/rejection.h"

#include <algorithm>

#include "serve/sampler.h"

namespace llmrun {

Verdict verify_proposal(const std::vector<double>& p, int32_t proposed,
                        const std::vector<double>* q, TokenSampler& sampler,
                        const std::function<bool(double, double, double)>& accept) {
  const double px = p[size_t(proposed)];
  const double qx = q ? (*q)[size_t(proposed)] : 1.0;
  const double u = sampler.uniform();
  if (accept ? accept(px, qx, u) : u * qx < px) return {true, proposed};
  std::vector<double> residual(p.size());
  double total = 0;
  for (size_t v = 0; v < p.size(); ++v)
    total += residual[v] =
        std::max(0.0, p[v] - (q ? (*q)[v] : (int32_t(v) == proposed ? 1.0 : 0.0)));
  // p == q leaves no residual mass; then a rejection has probability 0 and p itself is the
  // right law (this only guards rounding).
  if (total <= 0) return {false, sampler.draw(p)};
  return {false, sampler.draw(residual)};
}

}  // namespace llmrun
