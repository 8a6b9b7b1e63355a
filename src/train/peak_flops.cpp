#include "train/peak_flops.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace llmrun {

namespace {

std::filesystem::path cache_file(const Backend& be) {
  std::filesystem::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::filesystem::path(h) / ".cache";
  else
    dir = std::filesystem::temp_directory_path();
  return dir / "llmrun" /
         ("peak-" + be.name() + "-" + std::to_string(be.threads()) + "threads.json");
}

double probe(Backend& be) {
  const int64_t n = 1536;
  Buffer a = be.allocate(size_t(n) * n * 4), b = be.allocate(size_t(n) * n * 4),
         c = be.allocate(size_t(n) * n * 4);
  Tensor ta = a.as(DType::f32, {n, n}), tb = b.as(DType::f32, {n, n}),
         tc = c.as(DType::f32, {n, n});
  be.fill(ta, 0.5f);
  be.fill(tb, 0.25f);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    be.matmul(tc, ta, tb, false, true);
    be.synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

void write_cache(const std::filesystem::path& path, const nlohmann::json& j) {
  // Best effort: without a writable cache every run simply probes again.
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  if (out) out << j.dump() << "\n";
}

void write_cache(const std::filesystem::path& path, double flops, const std::string& backend,
                 int threads) {
  write_cache(path, nlohmann::json{{"flops", flops}, {"backend", backend}, {"threads", threads}});
}

}  // namespace

PeakFlops measured_peak_flops(Backend& be) {
  // A known peak (the hardware's datasheet figure) replaces the probe; it is still checked
  // against every step (mfu()).
  if (const char* v = std::getenv("LLMRUN_PEAK_FLOPS"); v && *v) {
    char* end = nullptr;
    const double flops = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(flops > 0) || !std::isfinite(flops))
      throw UserError(std::string("LLMRUN_PEAK_FLOPS=") + v +
                      ": expected a positive number of FLOP/s per rank, e.g. 2.5e12");
    return {flops, "LLMRUN_PEAK_FLOPS", ""};
  }
  // A probe taken while other work shares the cores reads low, so every run probes again
  // (a fraction of a second) and the cache keeps the best value seen on this machine.
  const auto path = cache_file(be);
  double cached = 0;
  if (std::ifstream in(path); in) {
    try {
      cached = nlohmann::json::parse(in).at("flops").get<double>();
    } catch (const std::exception&) {
      cached = 0;  // a damaged cache is simply replaced
    }
  }
  const double now = probe(be);
  if (now <= cached) return {cached, "best sgemm probe cached in " + path.string(), path.string()};
  write_cache(path, now, be.name(), be.threads());
  return {now, "sgemm probe measured now (best so far; cached in " + path.string() + ")",
          path.string()};
}

double PeakFlops::mfu(double achieved) {
  if (!(achieved > 0) || !std::isfinite(achieved)) return 0;
  if (achieved <= flops) return achieved / flops;
  if (!raised)
    spdlog::warn(
        "a training step ran at {:.3g} GFLOP/s per rank, above the peak of {:.3g} it is measured "
        "against "
        "(a probe on a busy machine?): MFU is measured against the faster rate from now on",
        achieved / 1e9, flops / 1e9);
  raised = true;
  flops = achieved;
  source = "the fastest training step (above the sgemm probe)";
  if (!cache_path.empty()) {
    // Keep the other fields of the cache entry; only the peak grows.
    nlohmann::json j;
    if (std::ifstream in(cache_path); in) j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object()) j = nlohmann::json::object();
    j["flops"] = achieved;
    write_cache(cache_path, j);
  }
  return 1.0;
}

}  // namespace llmrun
