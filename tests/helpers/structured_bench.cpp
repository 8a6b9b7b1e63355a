// Benchmark helper for structured outputs (bench/structured.sh): for every schema of a suite,
// the compile time (JSON Schema -> GBNF -> automaton) and the mask time over a tokenizer's
// vocabulary for the first state (a cold walk of the whole vocabulary) and again (a cache
// hit), then a decode of random allowed tokens timing mask + accept per step, cold and warm.
// Prints one JSON object with medians and maxima.
//   llmrun_structured_bench SCHEMAS_JSON TOKENIZER_JSON_OR_DIR
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "data/tokenizer.h"
#include "serve/structured/json_schema.h"
#include "serve/structured/token_mask.h"

using namespace llmrun;
using namespace llmrun::structured;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
nlohmann::json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {{"median_ms", v[v.size() / 2]}, {"max_ms", v.back()}, {"n", v.size()}};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SCHEMAS_JSON TOKENIZER\n", argv[0]);
    return 2;
  }
  const auto suite = nlohmann::json::parse(std::ifstream(argv[1]));
  const auto tok = load_tokenizer(argv[2]);
  auto t0 = Clock::now();
  auto vocab = std::make_shared<TokenVocabulary>(*tok, tok->vocab_size());
  const double vocab_ms = ms_since(t0);
  std::vector<double> compile, first_mask, hit_mask, step_cold, step_warm;
  std::mt19937 rng(1);
  std::vector<float> logits(size_t(vocab->size()));
  for (const auto& entry : suite) {
    t0 = Clock::now();
    ConstraintCache cache(vocab);
    auto c = cache.get(json_schema_to_gbnf(entry["schema"]));
    compile.push_back(ms_since(t0));
    TokenMask m;
    t0 = Clock::now();
    c->fill_mask(GrammarState(c->grammar()), -1, m);
    first_mask.push_back(ms_since(t0));
    t0 = Clock::now();
    c->fill_mask(GrammarState(c->grammar()), -1, m);
    hit_mask.push_back(ms_since(t0));
    // Two decodes of the same token sequence: the first meets every state cold, the second
    // (the next request of this schema) finds them cached.
    std::vector<int32_t> picked;
    for (int pass = 0; pass < 2; ++pass) {
      ConstraintMatcher matcher(c);
      for (size_t step = 0; step < 64; ++step) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        t0 = Clock::now();
        matcher.mask_logits(logits.data(), vocab->size(), 256 - int64_t(step), {tok->eos_id()});
        int32_t t = -1;
        if (pass == 0) {
          std::vector<int32_t> ok;
          for (int v = 0; v < vocab->size(); ++v)
            if (logits[size_t(v)] > -INFINITY && v != tok->eos_id()) ok.push_back(v);
          if (ok.empty()) break;
          t = ok[rng() % ok.size()];
          picked.push_back(t);
        } else {
          if (step >= picked.size()) break;
          t = picked[step];
        }
        matcher.accept(t);
        (pass == 0 ? step_cold : step_warm).push_back(ms_since(t0));
        if (matcher.complete()) break;
      }
    }
  }
  nlohmann::json out = {{"schemas", suite.size()},
                        {"vocab", vocab->size()},
                        {"vocab_build_ms", vocab_ms},
                        {"compile", stats(compile)},
                        {"first_mask", stats(first_mask)},
                        {"cached_mask", stats(hit_mask)},
                        {"decode_step_first_request", stats(step_cold)},
                        {"decode_step_later_requests", stats(step_warm)}};
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
