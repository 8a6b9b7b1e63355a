// `llmrun doctor`: what this build and this machine can run. Prints the built backends, the
// CUDA devices with their driver/runtime/cuBLASLt versions, then checks every backend op on
// each device against the CPU backend (backend/backend_check.h) and prints a pass/fail table.
// Exit 0 when every check passes (or there is no GPU to check), 1 when any op fails.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend_check.h"
#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "comm/collective_transport.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#if LLMRUN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8_support.h"
#endif

namespace llmrun::cli {

std::string built_backends_text() {
  std::string s;
  for (const std::string& b : built_backends()) s += (s.empty() ? "" : ", ") + b;
  return s;
}

namespace {

struct DoctorArgs {
  std::string json_path;
  bool check_cpu = false;
};

struct CheckedBackend {
  std::string name;  // "cuda:0", "cpu"
  std::vector<OpCheck> rows;
  double seconds = 0;
  bool passed() const {
    for (const OpCheck& r : rows)
      if (!r.pass) return false;
    return true;
  }
};

std::string format_err(double e) {
  if (std::isinf(e)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", e);
  return buf;
}

CheckedBackend run_check(const std::string& name, Backend& test, Backend& ref) {
  CheckedBackend c;
  c.name = name;
  const auto t0 = std::chrono::steady_clock::now();
  c.rows = check_backend(test, ref);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

void print_table(const CheckedBackend& c, const std::string& against) {
  std::printf("\n%s against %s: %zu checks in %.2f s\n", c.name.c_str(), against.c_str(),
              c.rows.size(), c.seconds);
  std::printf("  %-44s %-64s %10s %8s  %s\n", "op", "case", "max_rel", "tol", "result");
  int failed = 0;
  for (const OpCheck& r : c.rows) {
    std::printf("  %-44s %-64s %10s %8s  %s\n", r.op.c_str(), r.shape.c_str(),
                format_err(r.max_rel_err).c_str(), format_err(r.tolerance).c_str(),
                r.pass ? "pass" : "FAIL");
    if (!r.note.empty()) std::printf("      %s\n", r.note.c_str());
    failed += r.pass ? 0 : 1;
  }
  if (failed)
    std::printf("  %d of %zu checks FAILED\n", failed, c.rows.size());
  else
    std::printf("  all %zu checks passed\n", c.rows.size());
}

nlohmann::json to_json(const CheckedBackend& c) {
  nlohmann::json rows = nlohmann::json::array();
  for (const OpCheck& r : c.rows)
    rows.push_back({{"op", r.op},
                    {"case", r.shape},
                    {"max_rel_err", std::isfinite(r.max_rel_err) ? nlohmann::json(r.max_rel_err)
                                                                 : nlohmann::json()},
                    {"tolerance", r.tolerance},
                    {"pass", r.pass},
                    {"note", r.note}});
  return {{"backend", c.name}, {"seconds", c.seconds}, {"passed", c.passed()}, {"checks", rows}};
}

int run_doctor(const DoctorArgs& a) {
  if (!a.json_path.empty()) {
    const auto parent = std::filesystem::path(a.json_path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
      throw UserError("--json " + a.json_path + ": directory " + parent.string() +
                      " does not exist");
  }
  nlohmann::json report = {{"version", LLMRUN_VERSION}, {"built_backends", built_backends()}};
  std::printf("llmrun %s\nbuilt backends: %s\n", LLMRUN_VERSION, built_backends_text().c_str());
  report["collectives"] = collective_transports_text();
  std::printf("collectives: %s\n", collective_transports_text().c_str());
  std::vector<CheckedBackend> checked;
  // The all-core CPU backend first: it reads the thread count before the reference pins one.
  std::unique_ptr<Backend> cpu_all = a.check_cpu ? make_backend(BackendKind::cpu, 0) : nullptr;
  auto cpu_ref = make_backend(BackendKind::cpu, 1);

  nlohmann::json devices = nlohmann::json::array();
#if LLMRUN_HAVE_CUDA
  const std::string versions = cuda_versions();
  report["cuda_versions"] = versions;
  const std::vector<CudaDeviceInfo> infos = cuda_devices();
  if (infos.empty()) {
    std::printf("no CUDA device visible (built backends: %s; %s)\n", built_backends_text().c_str(),
                versions.c_str());
  } else {
    std::printf("CUDA: %s\n", versions.c_str());
    for (const CudaDeviceInfo& d : infos) {
      std::printf("device %d: %s, compute capability %d.%d, %.1f GiB (%.1f GiB free), %d SMs\n",
                  d.ordinal, d.name.c_str(), d.cc_major, d.cc_minor,
                  double(d.total_bytes) / (1 << 30), double(d.free_bytes) / (1 << 30), d.sm_count);
      devices.push_back(
          {{"ordinal", d.ordinal},
           {"name", d.name},
           {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
           {"total_bytes", d.total_bytes},
           {"free_bytes", d.free_bytes},
           {"sm_count", d.sm_count},
           {"fp8_gemms", cuda::fp8_gemm_supported(d.cc_major, d.cc_minor)}});
      std::printf("device %d: FP8 GEMMs (precision.fp8): %s\n", d.ordinal,
                  cuda::fp8_gemm_supported(d.cc_major, d.cc_minor)
                      ? "yes"
                      : "no (needs compute capability 8.9 or newer)");
    }
    for (const CudaDeviceInfo& d : infos) {
      auto gpu = make_cuda_backend(d.ordinal);
      checked.push_back(run_check("cuda:" + std::to_string(d.ordinal), *gpu, *cpu_ref));
      print_table(checked.back(), "cpu");
    }
  }
#else
  std::printf("no CUDA device visible (built backends: %s)\n", built_backends_text().c_str());
#endif
  report["devices"] = devices;
  if (a.check_cpu) {
    // The CPU backend on every core against a single-thread one: the same op code, so this
    // checks that results do not depend on the thread count (and exercises the table).
    checked.push_back(
        run_check("cpu (" + std::to_string(cpu_all->threads()) + " threads)", *cpu_all, *cpu_ref));
    print_table(checked.back(), "cpu (1 thread)");
  }
  bool ok = true;
  nlohmann::json checks = nlohmann::json::array();
  for (const CheckedBackend& c : checked) {
    ok = ok && c.passed();
    checks.push_back(to_json(c));
  }
  report["conformance"] = checks;
  report["passed"] = ok;
  if (!a.json_path.empty()) write_file_atomic(a.json_path, report.dump(2) + "\n");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

Command add_doctor_command(CLI::App& root) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* app = root.add_subcommand("doctor",
                                      "Report the built backends and CUDA devices, and check every "
                                      "backend op on each GPU against the CPU");
  app->add_option("--json", args->json_path, "Also write the report as JSON to this file");
  app->add_flag("--cpu", args->check_cpu,
                "Also check the CPU backend on every core against a single-thread CPU backend");
  return {app, [args] { return run_doctor(*args); }};
}

}  // namespace llmrun::cli
