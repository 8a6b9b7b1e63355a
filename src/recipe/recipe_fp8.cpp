// precision.fp8: {enabled, format, amax_history, amax_compute, margin, skip}.
#include <algorithm>

#include "recipe/recipe_internal.h"

namespace llmrun::recipe_detail {

namespace {
// What `skip` may name: the linears that can run in FP8, and the embedding, which is a table
// lookup (no GEMM) and so always stays in fp32; Transformer Engine style recipes list it.
const std::vector<std::string> kSkippable = {"qkv", "out", "up", "down", "lm_head", "embedding"};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

void read_fp8(const MapReader& precision, Locator& loc, Fp8Section& fp8) {
  const MapReader f(precision.has("fp8") ? precision.node("fp8") : YAML::Node(), "precision.fp8",
                    loc, {"enabled", "format", "amax_history", "amax_compute", "margin", "skip"});
  fp8.enabled = f.boolean("enabled").value_or(fp8.enabled);
  const std::string format = f.string("format").value_or(fp8_scheme_name(fp8.format));
  const std::optional<Fp8Scheme> scheme = fp8_scheme_from_name(format);
  if (!scheme)
    loc.fail("precision.fp8.format",
             "'" + format +
                 "' is not one of hybrid (E4M3 forward, E5M2 gradients), e4m3 (E4M3 everywhere)");
  fp8.format = *scheme;
  fp8.amax_history = int(f.integer("amax_history", 1, 1 << 16).value_or(fp8.amax_history));
  const std::string amax = f.string("amax_compute").value_or(amax_compute_name(fp8.amax_compute));
  const std::optional<AmaxCompute> compute = amax_compute_from_name(amax);
  if (!compute)
    loc.fail("precision.fp8.amax_compute", "'" + amax + "' is not one of max, most_recent");
  fp8.amax_compute = *compute;
  // A scale is fp8_max / amax / 2^margin: beyond 2^64 the margin only loses the whole range.
  fp8.margin = int(f.integer("margin", 0, 64).value_or(fp8.margin));
  if (f.has("skip")) {
    const YAML::Node list = f.node("skip");
    if (!list.IsSequence())
      loc.fail("precision.fp8.skip",
               "expected a list of layer names (" + joined(kSkippable) + "), got " + show(list));
    fp8.skip.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string key = "precision.fp8.skip." + std::to_string(i);
      loc.note(key, list[i].Mark());
      const std::string name = read_string(list[i], key, loc);
      if (std::find(kSkippable.begin(), kSkippable.end(), name) == kSkippable.end())
        loc.fail(key, "'" + name + "' is not a layer name (expected one of: " + joined(kSkippable) +
                          ")");
      if (std::find(fp8.skip.begin(), fp8.skip.end(), name) != fp8.skip.end())
        loc.fail(key, "'" + name + "' is listed twice");
      fp8.skip.push_back(name);
    }
    if (std::find(fp8.skip.begin(), fp8.skip.end(), "embedding") == fp8.skip.end())
      loc.fail("precision.fp8.skip",
               "must list embedding: the embedding is a table lookup, not a GEMM, and always runs "
               "in fp32");
  }
}

}  // namespace llmrun::recipe_detail
