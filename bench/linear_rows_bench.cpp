// Times CpuBackend::linear_rows on the decode path (m = 1..16 x rows) against a weight matrix
// larger than the caches, so every call streams W from memory (a decode step's situation).
// Not part of the build: bench/linear_rows_bench.sh links it against a build's llmrun_core.
// Prints one line per (k, m): median CPU milliseconds per call and the ratio to m = 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"

using namespace llmrun;

// Process CPU time, not wall time: the shared machine deschedules the benchmark often, and
// CPU time leaves those gaps out (with 1 thread it is the kernel's own time).
static double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int repeat = argc > 2 ? std::atoi(argv[2]) : 9;
  const int64_t w_bytes = int64_t(argc > 3 ? std::atoi(argv[3]) : 100) << 20;
  auto be = make_backend(BackendKind::cpu, threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const int64_t k : {512, 2048}) {
    const int64_t n = w_bytes / (k * 4);
    std::vector<float> w(size_t(n * k));
    for (auto& e : w) e = nd(rng);
    double t1 = 0;
    for (const int64_t m : {1, 2, 4, 5, 8, 16}) {
      std::vector<float> x(size_t(m * k)), y(size_t(m * n));
      for (auto& e : x) e = nd(rng);
      std::vector<double> ms;
      for (int r = 0; r < repeat + 1; ++r) {
        const double t0 = cpu_ms();
        be->linear_rows(Tensor(y.data(), DType::f32, {m, n}), Tensor(x.data(), DType::f32, {m, k}),
                        Tensor(w.data(), DType::f32, {n, k}), nullptr, false);
        const double dt = cpu_ms() - t0;
        if (r > 0) ms.push_back(dt);  // the first call warms the page tables
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      if (m == 1) t1 = med;
      std::printf("k=%-5lld n=%-6lld m=%-3lld %8.3f ms  %5.2fx m=1\n", (long long)k, (long long)n,
                  (long long)m, med, med / t1);
    }
  }
  return 0;
}
