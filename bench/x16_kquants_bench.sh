#!/usr/bin/env bash
# The x16 Q4_K / Q6_K kernels against QuantPlan on 3072 x 768 and 768 x 3072 matrices at 1, 8
# and 32 activation rows, one thread (bench/x16_kquants_bench.cpp). Links against BUILD's
# libllmrun_core.a (build it first: cmake --build BUILD --target llmrun_core).
#   bash bench/x16_kquants_bench.sh BUILD_DIR [REPS]
set -euo pipefail
BUILD=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
g++ -std=c++20 -O3 -march=native -fopenmp -I"$SRC/src" "$SRC/bench/x16_kquants_bench.cpp" \
  "$BUILD/libllmrun_core.a" -o "$TMP/bench"
OMP_NUM_THREADS=1 "$TMP/bench" "${2:-20}"
