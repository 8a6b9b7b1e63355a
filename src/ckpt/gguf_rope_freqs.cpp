// rope_freqs.weight: llama3 factors out and back (see the header).
#include "ckpt/gguf_rope_freqs.h"

#include <cmath>
#include <cstring>

#include "util/error.h"

namespace llmrun {

namespace {
const char* const kFactor = "llmrun.rope.llama3.factor";
const char* const kLow = "llmrun.rope.llama3.low_freq_factor";
const char* const kHigh = "llmrun.rope.llama3.high_freq_factor";
const char* const kOrig = "llmrun.rope.llama3.original_context_length";

// The unscaled frequencies, as llmrun rotates with them.
std::vector<double> base_wavelengths(float theta, int head_dim) {
  const std::vector<float> inv = rope_inv_freq(theta, head_dim, RopeScaling{});
  std::vector<double> wl;
  for (float f : inv) wl.push_back(2.0 * M_PI / double(f));
  return wl;
}

double number(const GgufReader& r, const std::string& key) {
  const nlohmann::json& v = r.get(key);
  if (!v.is_number())
    throw UserError(r.path().string() + ": metadata key " + key + " is not a number");
  return v.get<double>();
}

// Whether factors f are those of s (relative 1e-5: the f32 factors of the file against ours).
bool matches(const std::vector<float>& f, float theta, int head_dim, const RopeScaling& s) {
  const std::vector<float> want = llama3_rope_factors(theta, head_dim, s);
  for (size_t i = 0; i < f.size(); ++i)
    if (!(std::fabs(f[i] - want[i]) <= 1e-5 * std::fabs(want[i]))) return false;
  return true;
}
}  // namespace

std::vector<float> llama3_rope_factors(float theta, int head_dim, const RopeScaling& s) {
  // convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors), in Python's double precision.
  const double old = s.original_max_positions, low = s.low_freq_factor, high = s.high_freq_factor,
               factor = s.factor;
  const double low_wl = old / low, high_wl = old / high;
  std::vector<float> out;
  for (double wl : base_wavelengths(theta, head_dim)) {
    if (wl < high_wl) {
      out.push_back(1.0f);
    } else if (wl > low_wl) {
      out.push_back(float(factor));
    } else {
      const double smooth = (old / wl - low) / (high - low);
      out.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

void write_gguf_rope_freqs(GgufWriter& w, const std::string& p, float theta, int head_dim,
                           const RopeScaling& s) {
  LLMRUN_CHECK(s.type == RopeScaling::Type::llama3, "write_gguf_rope_freqs: not llama3");
  const std::vector<float> f = llama3_rope_factors(theta, head_dim, s);
  w.set(kFactor, GgufType::f32, s.factor);
  w.set(kLow, GgufType::f32, s.low_freq_factor);
  w.set(kHigh, GgufType::f32, s.high_freq_factor);
  w.set(kOrig, GgufType::u32, s.original_max_positions);
  w.set(p + "rope.scaling.original_context_length", GgufType::u32, s.original_max_positions);
  w.add_tensor(
      "rope_freqs.weight", quant::QType::f32, {int64_t(f.size())},
      [f](std::vector<uint8_t>& bytes) { std::memcpy(bytes.data(), f.data(), f.size() * 4); });
}

RopeScaling read_gguf_rope_freqs(const GgufReader& r, const std::string& p, float theta,
                                 int head_dim) {
  const std::string where = r.path().string() + ": tensor rope_freqs.weight";
  const GgufTensorInfo& t = r.tensor("rope_freqs.weight");
  if (t.type != quant::QType::f32 || t.ne.size() != 1 || t.ne[0] != head_dim / 2)
    throw UserError(where + " must be F32 [" + std::to_string(head_dim / 2) +
                    "] (one factor per frequency)");
  std::vector<float> f(size_t(head_dim / 2));
  std::memcpy(f.data(), r.data(t), f.size() * 4);
  RopeScaling s;
  s.type = RopeScaling::Type::llama3;
  if (r.has(kFactor)) {  // written by llmrun: the parameters themselves
    s.factor = float(number(r, kFactor));
    s.low_freq_factor = float(number(r, kLow));
    s.high_freq_factor = float(number(r, kHigh));
    s.original_max_positions = int(number(r, kOrig));
    if (!matches(f, theta, head_dim, s))
      throw UserError(where + " disagrees with the llmrun.rope.llama3.* parameters");
    return s;
  }
  // Recover them. Factors of 1 keep a frequency, the largest (the scaling factor) divides the
  // low ones, and in between 1/f = (1 - smooth)/factor + smooth with smooth linear in
  // 1/wavelength: smooth = (old/wl - low)/(high - low). Given old, two blended frequencies fix
  // low and high (a least-squares line through them all).
  double factor = 1.0;
  for (float x : f) factor = std::max(factor, double(x));
  if (factor <= 1.0) return RopeScaling{};  // every factor 1: no scaling
  s.factor = float(factor);
  const double old = r.has(p + "rope.scaling.original_context_length")
                         ? number(r, p + "rope.scaling.original_context_length")
                         : 8192.0;
  s.original_max_positions = int(old);
  const std::vector<double> wl = base_wavelengths(theta, head_dim);
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::fabs(f[i] - 1.0) < 1e-6 || std::fabs(f[i] - factor) < 1e-6 * factor) continue;
    const double x = 1.0 / wl[i], y = (1.0 / f[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  if (n < 2)
    throw UserError(where + " has " + std::to_string(int(n)) +
                    " blended frequencies; llmrun needs two to tell its llama3 parameters");
  const double a = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = (sy - a * sx) / n;
  // smooth = a x + b with a = old / (high - low), b = -low / (high - low).
  const double span = old / a;
  s.low_freq_factor = float(-b * span);
  s.high_freq_factor = float(-b * span + span);
  if (!(a > 0) || !matches(f, theta, head_dim, s))
    throw UserError(where +
                    " is not a llama3 frequency table (its factors fit no low/high "
                    "frequency factors for an original context of " +
                    std::to_string(int(old)) + ")");
  return s;
}

}  // namespace llmrun
