#!/usr/bin/env bash
# The x16 layout (the AVX-512 level) against the AVX2 level (issue 19), one thread:
# QuantPlan::run over one weight matrix of seeded random values, "avx2" the plan run at the
# avx2 level (its original rows through the AVX2 tile and one-row kernels, which is also what
# the avx512 level's vec_dot/dot_tile give these types: the AVX-512 tile, panel and one-row
# kernels the x16 layout replaced are gone) and "x16" at avx512 (its rows repacked). The best of
# 20 runs in thread CPU time (CLOCK_THREAD_CPUTIME_ID), so other load on a shared machine
# costs less than in wall time. Builds a small program against BUILD's libllmrun_core.a.
#   bash bench/x16_gemm_bench.sh BUILD_DIR ["OUT IN N" ...]
# Defaults: GPT-2-124M's four linears (qkv 2304 x 768, up 3072 x 768, down 768 x 3072) and its
# LM head (50257 x 768, streamed from DRAM), at N = 1, 8 and 32.
set -euo pipefail
BUILD=$(realpath "$1")
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=("$@")
if [ ${#SHAPES[@]} -eq 0 ]; then
  for n in 1 8 32; do
    SHAPES+=("2304 768 $n" "3072 768 $n" "768 3072 $n" "50257 768 $n")
  done
fi
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
  const QType t = ts == "q8_0" ? QType::q8_0 : QType::q4_0;
  if (!simd_level_supported(SimdLevel::avx512)) return 0;
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
  set_simd_level(SimdLevel::avx512);
  const QuantPlan plan({{t, out, in, w.data()}});
  double ms[2];
  const SimdLevel levels[2] = {SimdLevel::avx2, SimdLevel::avx512};
  for (int k = 0; k < 2; ++k) {
    set_simd_level(levels[k]);
    plan.run(x.data(), n, y.data(), out, nullptr, false);
    double best = 1e9;
    for (int rep = 0; rep < 20; ++rep) {
      const double t0 = cpu();
      plan.run(x.data(), n, y.data(), out, nullptr, false);
      best = std::min(best, cpu() - t0);
    }
    ms[k] = best * 1e3;
  }
  std::printf("| %s | %ld x %ld | %ld | %.3f | %.1f | %.3f | %.1f | %.2f |\n", ts.c_str(),
              long(out), long(in), long(n), ms[0], double(out * in * n) / ms[0] * 1e-6, ms[1],
              double(out * in * n) / ms[1] * 1e-6, ms[0] / ms[1]);
}
CPP
g++ -std=c++20 -O3 -march=native -fopenmp -I"$SRC/src" "$TMP/bench.cpp" "$BUILD/libllmrun_core.a" \
  -o "$TMP/bench"
echo "| type | matrix | N | avx2 ms | avx2 GMAC/s | x16 ms | x16 GMAC/s | x16 speed-up |"
echo "|---|---|---|---|---|---|---|---|"
for s in "${SHAPES[@]}"; do
  for t in q8_0 q4_0; do OMP_NUM_THREADS=1 "$TMP/bench" $s $t; done
done
