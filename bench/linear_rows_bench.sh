#!/usr/bin/env bash
# Decode-path timing of CpuBackend::linear_rows (bench/linear_rows_bench.cpp): links the
# harness against BUILD's llmrun_core (default build/, after `cmake --build build --target
# llmrun`), optionally with another build's cpu_linear_rows object to compare two versions.
# Usage: bench/linear_rows_bench.sh [BUILD] [THREADS] [REPEAT] [KERNEL_OBJECT] [W_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-1}
repeat=${3:-9}
obj=${4:-}
out=$build/linear_rows_bench
libs=$(sed -e 's/.* -o llmrun //' "$build/CMakeFiles/llmrun.dir/link.txt")
(cd "$build" && c++ -O3 -march=native -fopenmp -std=gnu++20 -I ../src -isystem /usr/local/cuda/include \
  -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED -DSPDLOG_SHARED_LIB \
  ../bench/linear_rows_bench.cpp $obj -o linear_rows_bench $libs)
"$out" "$threads" "$repeat" "${5:-100}"
