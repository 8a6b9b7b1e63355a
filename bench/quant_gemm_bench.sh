#!/usr/bin/env bash
# Quantized GEMM kernels by SIMD level (issue 19): QuantPlan::run over one weight matrix of
# seeded random values, per type, at avx512 (Q8_0/Q4_0/Q4_K/Q6_K in the x16 layout there) and
# avx2 (set_simd_level), one thread; the best of
# 30 runs in thread CPU time (CLOCK_THREAD_CPUTIME_ID), so other load on a shared machine
# costs less than in wall time. Builds a small program against BUILD's libllmrun_core.a.
#   bash bench/quant_gemm_bench.sh BUILD_DIR ["OUT IN N" ...]
# Defaults: 3072 x 768 at N = 256 (prompt processing) and N = 1 (decode), and 50257 x 768 at
# N = 1 (GPT-2's LM head, streamed from DRAM).
set -euo pipefail
BUILD=$(realpath "$1")
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=("3072 768 256" "3072 768 1" "50257 768 1")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/bench.cpp" <<'CPP'
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/quant_matmul.h"
using namespace llmrun::quant;
static double cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
int main(int argc, char** argv) {
  const int64_t out = atoll(argv[1]), in = atoll(argv[2]), n = atoll(argv[3]);
  const std::string ts = argv[4];
  const QType t = ts == "q8_0" ? QType::q8_0 : ts == "q4_0" ? QType::q4_0
                : ts == "q6_k" ? QType::q6_k : QType::q4_k;
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::vector<float> row(static_cast<size_t>(in));
  std::vector<uint8_t> w(row_bytes(t, in) * size_t(out));
  for (int64_t r = 0; r < out; ++r) {
    for (auto& v : row) v = g(rng);
    quantize_row(t, row.data(), w.data() + size_t(r) * row_bytes(t, in), in);
  }
  std::vector<float> x(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
  for (auto& v : x) v = g(rng);
  QuantPlan plan({{t, out, in, w.data()}});
  double ms[2];
  const SimdLevel levels[2] = {SimdLevel::avx512, SimdLevel::avx2};
  for (int k = 0; k < 2; ++k) {
    if (!simd_level_supported(levels[k])) return 0;
    set_simd_level(levels[k]);
    plan.run(x.data(), n, y.data(), out, nullptr, false);
    double best = 1e9;
    for (int rep = 0; rep < 30; ++rep) {
      const double t0 = cpu();
      plan.run(x.data(), n, y.data(), out, nullptr, false);
      best = std::min(best, cpu() - t0);
    }
    ms[k] = best * 1e3;
  }
  std::printf("| %s | %ld x %ld | %ld | %.3f | %.1f | %.3f | %.1f | %.2f |\n", ts.c_str(),
              long(out), long(in), long(n), ms[0], double(out * in * n) / ms[0] * 1e-6, ms[1],
              double(out * in * n) / ms[1] * 1e-6, ms[1] / ms[0]);
}
CPP
g++ -std=c++20 -O3 -march=native -fopenmp -I"$SRC/src" "$TMP/bench.cpp" "$BUILD/libllmrun_core.a" \
  -o "$TMP/bench"
echo "| type | matrix | N | avx512 ms | avx512 GMAC/s | avx2 ms | avx2 GMAC/s | avx512 speed-up |"
echo "|---|---|---|---|---|---|---|---|"
for s in "${SHAPES[@]}"; do
  for t in q8_0 q4_0 q4_k q6_k; do OMP_NUM_THREADS=1 "$TMP/bench" $s $t; done
done
