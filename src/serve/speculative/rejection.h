#pragma once
// Verification of proposed tokens that keeps the target's distribution exactly (Leviathan et
// al. 2023, Chen et al. 2023): a token x proposed with probability q(x) is accepted with
// probability min(1, p(x) / q(x)), p being the target's distribution after every sampling
// transform (penalties, logit_bias, temperature, top-k/top-p/min-p); on rejection the token is
// drawn from the normalised residual max(0, p - q). An n-gram guess is a point mass (q = 1 on
// x): accept with probability p(x), else draw from p with x removed. Greedy is the point-mass
// p of the argmax, so it accepts exactly the tokens greedy decoding would pick.
#include <cstdint>
#include <functional>
#include <vector>

namespace llmrun {

class TokenSampler;

struct Verdict {
  bool accepted;
  int32_t token;  // the proposed token, or the residual draw that replaces it
};

// p: the target's probabilities [vocab]; q: the proposer's [vocab], or null for a point mass
// on `proposed`. accept(p, q, u) decides (null: u * q < p). Random numbers from `sampler`.
Verdict verify_proposal(const std::vector<double>& p, int32_t proposed,
                        const std::vector<double>* q, TokenSampler& sampler,
                        const std::function<bool(double, double, double)>& accept);

}  // namespace llmrun
