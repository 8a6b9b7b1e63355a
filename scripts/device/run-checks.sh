#!/usr/bin/env bash
# Verifies an llmrun bundle (made by scripts/device/bundle.sh) on this machine: doctor, the
# unit tests (the backend conformance suite included), GPU-vs-CPU training parity, the
# benchmarks next to their PyTorch peers, and `llmrun generate` against Hugging Face
# transformers token for token. Prints one summary table (check, result, figure) and writes
# RESULTS/results.json (+ checks.jsonl and every log). A check that cannot run here says why
# ("SKIPPED: no CUDA device"). Exit status: 1 when a check failed, else 0.
#   DIR/run-checks.sh [RESULTS]      RESULTS defaults to $OUT, else DIR/results
# Environment: CHECKS=name,name (run only these; names in the table), PYTHON=python with torch.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RES=${1:-${OUT:-$HERE/results}}
mkdir -p "$RES" && RES=$(cd "$RES" && pwd)
rm -f "$RES/checks.jsonl"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SHARE=$HERE/share
# bin/ and lib/ travel in payload.tar.xz (bundle.sh); a bundle may also hold them unpacked.
PAYLOAD=$HERE
if [ -f "$HERE/payload.tar.xz" ]; then
  PAYLOAD=$WORK/payload
  mkdir -p "$PAYLOAD"
  tar -xJf "$HERE/payload.tar.xz" -C "$PAYLOAD" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$HERE/payload.tar.xz" "$PAYLOAD" ||
    { echo "run-checks.sh: cannot unpack $HERE/payload.tar.xz (needs tar with xz, or python3)" >&2; exit 2; }
fi
BIN=$PAYLOAD/bin
LLMRUN=$BIN/llmrun
# The CUDA libraries come from this machine: its loader path, the toolkit, or PyTorch's wheels.
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && cuda_libs="$cuda_libs:$d"; done
export LD_LIBRARY_PATH="$PAYLOAD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$cuda_libs"
if ldd "$LLMRUN" 2>/dev/null | grep -q 'not found'; then
  for c in ${PYTHON:-} python3; do
    site=$("$c" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || continue
    for d in $site; do for l in "$d"/nvidia/*/lib; do [ -d "$l" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$l"; done; done
    break
  done
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The bundle's own OpenMPI launcher (payload mpi/): first on PATH, OpenMPI and PMIx pointed at
# its components, so the multi-rank checks run on a machine without OpenMPI.
[ -f "$SHARE/scripts/mpi-env.sh" ] && . "$SHARE/scripts/mpi-env.sh" "$PAYLOAD"
RECIPES=$SHARE/recipes
DATA=$SHARE/data

# The python that runs the helpers: $PYTHON, else the first of python3 and /usr/bin/python3
# that imports torch, else python3.
pick_python() {
  local c
  for c in ${PYTHON:-} python3 /usr/bin/python3; do
    command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1 && { echo "$c"; return; }
  done
  for c in ${PYTHON:-} python3 /usr/bin/python3; do command -v "$c" >/dev/null 2>&1 && { echo "$c"; return; }; done
}
PY=$(pick_python)
[ -n "$PY" ] || { echo "run-checks.sh needs python3" >&2; exit 2; }
CHECKS_PY="$PY $SHARE/scripts/checks.py"

wanted() { [ -z "${CHECKS:-}" ] || [[ ",$CHECKS," == *",$1,"* ]]; }
record() { $CHECKS_PY record "$RES" "$@"; echo "  $1: $2${3:+ ($3)}" >&2; }
# py_field FILE EXPR: a value of the JSON object on FILE's last line (EXPR uses j).
py_field() { "$PY" -c "import json,sys; j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print($2)" "$1"; }

has_torch=0; "$PY" -c 'import torch' >/dev/null 2>&1 && has_torch=1
torch_cuda=0; [ $has_torch = 1 ] && "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && torch_cuda=1
VERSION=$("$LLMRUN" --version 2>&1 | head -n 1)
built_cuda=0; grep -qi cuda <<<"$VERSION" && built_cuda=1
gpus=0
command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
DEVICE="no CUDA device"
[ "$gpus" -gt 0 ] && DEVICE=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
# Recipes pick the backend with launch.backend; a build that predates it is CPU-only.
has_backend_key=0
"$LLMRUN" train "$RECIPES/demo.yaml" --dry-run --set launch.backend=cpu >/dev/null 2>&1 && has_backend_key=1
# backend_set BACKEND: the --set that selects it (nothing where the key does not exist).
backend_set() { [ $has_backend_key = 1 ] && echo "--set launch.backend=$1"; }
gpu_ok=0; GPU_WHY=""
if [ "$gpus" -eq 0 ]; then GPU_WHY="SKIPPED: no CUDA device"
elif [ $built_cuda = 0 ]; then GPU_WHY="SKIPPED: this llmrun was built without CUDA ($VERSION)"
elif [ $has_backend_key = 0 ]; then GPU_WHY="SKIPPED: this llmrun has no launch.backend recipe key"
else gpu_ok=1; fi
echo "llmrun bundle checks: $VERSION; device: $DEVICE; python: $PY (torch: $has_torch, cuda: $torch_cuda)" >&2
echo "results: $RES" >&2

# --- version and doctor -------------------------------------------------------------------
if wanted version; then
  need=$(py_field "$HERE/MANIFEST.json" "j.get('needs_glibc', '')" 2>/dev/null)
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if "$LLMRUN" --version >"$RES/version.log" 2>&1; then record version PASS "$VERSION (glibc $have, needs ${need#GLIBC_})"
  else
    missing=$(ldd "$LLMRUN" 2>&1 | grep -E 'not found' | awk '{print $1}' | paste -sd, -)
    record version FAIL "llmrun does not start: ${missing:+missing $missing; }glibc $have, bundle needs ${need#GLIBC_}"
  fi
fi
if wanted doctor; then
  if ! "$LLMRUN" --help 2>/dev/null | grep -qE '^ +doctor'; then
    record doctor "SKIPPED: this build has no doctor command" ""
  elif "$LLMRUN" doctor >"$RES/doctor.log" 2>&1; then
    record doctor PASS "$(grep -ciE '\bpass' "$RES/doctor.log") pass rows; $(grep -m1 -iE 'no cuda|device' "$RES/doctor.log" | head -c 80)"
  else
    record doctor FAIL "exit $?; $(grep -m1 -iE 'fail' "$RES/doctor.log" | head -c 100)"
  fi
fi

# --- unit tests (conformance suite included) ------------------------------------------------
if wanted unit_tests; then
  # Tests that find the source tree (LLMRUN_SOURCE_DIR, __FILE__: paths of the build machine)
  # cannot run from a bundle: they are left out, and counted.
  filter="*"
  [ -s "$SHARE/unit-tests-need-source.txt" ] && filter="*-$(paste -sd: "$SHARE/unit-tests-need-source.txt")"
  (cd "$WORK" && OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} "$BIN/llmrun_unit_tests" --gtest_filter="$filter" >"$RES/unit_tests.log" 2>&1)
  rc=$?
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$RES/unit_tests.log" | grep -oE '[0-9]+$' || echo 0)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$RES/unit_tests.log" | grep -oE '[0-9]+' || echo 0)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$RES/unit_tests.log" | grep -oE '[0-9]+' || echo 0)
  nodev=$(grep -c 'no CUDA device' "$RES/unit_tests.log" || true)
  fig="${passed:-0} passed, ${skipped:-0} skipped (${nodev} say no CUDA device), ${failed:-0} failed"
  [ "$filter" != "*" ] && fig="$fig; excluded (need the source tree): $(wc -l <"$SHARE/unit-tests-need-source.txt")"
  if [ $rc -eq 0 ]; then record unit_tests PASS "$fig"; else record unit_tests FAIL "$fig; exit $rc"; fi
fi

# --- GPU-vs-CPU training parity ----------------------------------------------------------
# train NAME RECIPE BACKEND PRECISION STEPS [--set ...]: metrics in $WORK/NAME.jsonl.
train() {
  local name=$1 recipe=$2 backend=$3 prec=$4 steps=$5; shift 5
  "$LLMRUN" train "$recipe" --set train.steps="$steps" --set logging.every=1 \
    --set logging.metrics="$WORK/$name.jsonl" --set checkpoint.dir="$WORK/ck-$name" --set data.train="$DATA" \
    $(backend_set "$backend") --set precision.compute="$prec" "$@" >"$RES/train-$name.log" 2>&1
}
for arch in gpt2 llama; do
  recipe=$RECIPES/demo.yaml; [ $arch = llama ] && recipe=$RECIPES/llama-small.yaml
  for prec in fp32 bf16; do
    name=parity_${arch}_$prec
    wanted "$name" || continue
    if [ $gpu_ok = 0 ]; then record "$name" "$GPU_WHY" ""; continue; fi
    tol=1e-4 after=0; [ $prec = bf16 ] && tol=0.01 after=5
    if ! train "$name-cuda" "$recipe" cuda $prec 50; then record "$name" FAIL "cuda run failed: $(tail -n 1 "$RES/train-$name-cuda.log")"; continue; fi
    if ! train "$name-cpu" "$recipe" cpu $prec 50; then record "$name" FAIL "cpu run failed: $(tail -n 1 "$RES/train-$name-cpu.log")"; continue; fi
    cp "$WORK/$name-cuda.jsonl" "$WORK/$name-cpu.jsonl" "$RES/"
    $CHECKS_PY parity "$WORK/$name-cuda.jsonl" "$WORK/$name-cpu.jsonl" --tol $tol --after $after --steps 50 >"$WORK/p.json"
    rc=$?
    fig=$(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e} at step {j['worst_step']} (tol {j['tol']:g} after step {j['after_step']})\"")
    if [ $rc -eq 0 ]; then record "$name" PASS "$fig"; else record "$name" FAIL "$fig"; fi
  done
done

# --- FP8 on the GPU (issue 18) ------------------------------------------------------------
# The conformance tests (cast kernel bit for bit, cuBLASLt FP8 GEMM vs the emulation on the
# same quantised inputs, the FP8 linears' native path vs the CPU emulation), then training:
# FP8 on the GPU against FP8's exact emulation on the CPU, and against bf16 on the GPU.
if wanted fp8_conformance; then
  if [ $gpu_ok = 0 ]; then record fp8_conformance "$GPU_WHY" ""
  else
    (cd "$WORK" && "$BIN/llmrun_unit_tests" --gtest_filter='CudaFp8*:Fp8NativePath*:Fp8Support*' >"$RES/fp8_conformance.log" 2>&1)
    rc=$?
    worst=$(grep -oE 'fp8 GEMM [0-9x]+: worst error [0-9.e+-]+' "$RES/fp8_conformance.log" | sed 's/ worst error/:/' | paste -sd, -)
    skip=$(grep -m1 -oE 'SKIPPED: .*' "$RES/fp8_conformance.log")
    if [ $rc -ne 0 ]; then record fp8_conformance FAIL "$(grep -m1 -E '^\[  FAILED' "$RES/fp8_conformance.log")"
    elif [ -n "$skip" ]; then record fp8_conformance "$skip" ""
    else record fp8_conformance PASS "$(grep -oE '^\[  PASSED  \] [0-9]+' "$RES/fp8_conformance.log" | grep -oE '[0-9]+$') tests; GEMM error/tolerance $worst"; fi
  fi
fi
for pair in fp8_vs_cpu_emulation fp8_vs_bf16; do
  wanted "$pair" || continue
  if [ $gpu_ok = 0 ]; then record "$pair" "$GPU_WHY" ""; continue; fi
  fp8_sets=(--set precision.fp8.enabled=true --set train.micro_batch=8 --set train.global_batch=16)
  [ -f "$WORK/fp8-cuda.jsonl" ] || train fp8-cuda "$RECIPES/llama-small.yaml" cuda bf16 50 "${fp8_sets[@]}" ||
    { record "$pair" FAIL "fp8 cuda run failed: $(tail -n 1 "$RES/train-fp8-cuda.log")"; continue; }
  if [ $pair = fp8_vs_cpu_emulation ]; then
    peer=fp8-cpu; train fp8-cpu "$RECIPES/llama-small.yaml" cpu bf16 50 "${fp8_sets[@]}"
  else
    peer=bf16-cuda; train bf16-cuda "$RECIPES/llama-small.yaml" cuda bf16 50 --set train.micro_batch=8 --set train.global_batch=16
  fi || { record "$pair" FAIL "$peer run failed: $(tail -n 1 "$RES/train-$peer.log")"; continue; }
  grep -q 'native FP8 GEMMs' "$RES/train-fp8-cuda.log" || { record "$pair" FAIL "the cuda run did not use native FP8 GEMMs"; continue; }
  cp "$WORK/fp8-cuda.jsonl" "$WORK/$peer.jsonl" "$RES/"
  $CHECKS_PY parity "$WORK/fp8-cuda.jsonl" "$WORK/$peer.jsonl" --tol 0.02 --after 5 --steps 50 >"$WORK/p.json"
  rc=$?
  fig=$(py_field "$WORK/p.json" "f\"FP8 cuda vs $peer: max rel loss diff {j['max_rel_diff']:.2e} at step {j['worst_step']} (tol {j['tol']:g} after step {j['after_step']})\"")
  if [ $rc -eq 0 ]; then record "$pair" PASS "$fig"; else record "$pair" FAIL "$fig"; fi
done

# The GEMM-only FP8 speedup at the Llama-3 8B shapes (d 4096, ffn 14336; bench kernels' FP8
# rows next to its bf16 rows, same run).
if wanted bench_fp8_gemm; then
  if [ $gpu_ok = 0 ]; then record bench_fp8_gemm "$GPU_WHY" ""
  elif "$LLMRUN" bench kernels "$RECIPES/llama-small.yaml" --backend cuda --dtype bf16 --set model.d_model=4096 \
      --set model.heads=32 --set model.kv_heads=8 --set model.ffn=14336 --set model.seq_len=2048 \
      --set train.micro_batch=2 --repeat 10 --json "$RES/bench_fp8_gemm.json" >"$RES/bench_fp8_gemm.log" 2>&1; then
    if fig=$("$PY" -c "
import json,sys; r={k['kernel']:k for k in json.load(open(sys.argv[1]))['kernels']}
print(', '.join(f\"{p}: bf16 {r[p+' fwd']['gflops']/1e3:.0f} / fp8 {r[p+' fp8 fwd']['gflops']/1e3:.0f} TFLOP/s ({r[p+' fp8 fwd']['gflops']/r[p+' fwd']['gflops']:.2f}x)\" for p in ('qkv','up','down')))" "$RES/bench_fp8_gemm.json" 2>>"$RES/bench_fp8_gemm.log"); then
      record bench_fp8_gemm PASS "$fig"
    else record bench_fp8_gemm FAIL "no FP8 rows in bench kernels (see bench_fp8_gemm.log)"; fi
  else record bench_fp8_gemm FAIL "exit $?: $(tail -n 1 "$RES/bench_fp8_gemm.log")"; fi
fi

# --- several ranks on one GPU (issue 17) --------------------------------------------------
# The layouts train demo.yaml for 20 steps (warm-up 5: the recipe's 30 would not fit) at
# micro-batch 4 (global batch 16: dp2 accumulates 2, pp2 runs 4 micro-batches); the one-rank
# GPU run they reproduce (dp1-cuda) does the same.
LAYOUT=(--set train.micro_batch=4 --set train.warmup=5)
# dp2 on one card: NCCL refuses two ranks on one GPU, so the run must choose MPI with host
# staging by itself (logged) and reproduce the one-rank loss curve (fp32: 1e-5 relative).
if wanted ranks_share_gpu; then
  if [ $gpu_ok = 0 ]; then record ranks_share_gpu "$GPU_WHY" ""
  elif ! command -v mpirun >/dev/null 2>&1; then record ranks_share_gpu "SKIPPED: no mpirun on this machine (this bundle carries none)" ""
  elif ! train dp2-cuda "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" --nproc 2 --set parallel.dp=2; then
    record ranks_share_gpu FAIL "2-rank cuda run failed: $(tail -n 1 "$RES/train-dp2-cuda.log")"
  elif ! train dp1-cuda "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}"; then
    record ranks_share_gpu FAIL "1-rank cuda run failed: $(tail -n 1 "$RES/train-dp1-cuda.log")"
  else
    how=$(grep -m1 -oE 'dp group \(2 ranks\): [^(]*' "$RES/train-dp2-cuda.log")
    $CHECKS_PY parity "$WORK/dp2-cuda.jsonl" "$WORK/dp1-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p.json"
    rc=$?
    fig="$how; $(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e}\"")"
    if [ $rc -eq 0 ] && [[ $how == *"host staging"* ]]; then record ranks_share_gpu PASS "$fig"; else record ranks_share_gpu FAIL "$fig"; fi
  fi
fi

# --- fused GEMM epilogues, device sampling, pipeline over NCCL, hidden communication ---------
# The cuBLASLt GELU_AUX_BIAS / DGELU epilogues against naive math, and the device sampler
# against the host math TokenSampler uses (the same uniforms must give the same tokens).
if wanted gelu_epilogue_and_sampler; then
  if [ $gpu_ok = 0 ]; then record gelu_epilogue_and_sampler "$GPU_WHY" ""
  else
    (cd "$WORK" && "$BIN/llmrun_unit_tests" --gtest_filter='Conformance.MatmulGeluEpiloguesMatchNaive/cuda:CudaSampling*:SamplingMath*' >"$RES/gelu_epilogue_and_sampler.log" 2>&1)
    rc=$?
    skip=$(grep -m1 -oE 'SKIPPED: .*' "$RES/gelu_epilogue_and_sampler.log")
    if [ $rc -ne 0 ]; then record gelu_epilogue_and_sampler FAIL "$(grep -m1 -E '^\[  FAILED' "$RES/gelu_epilogue_and_sampler.log")"
    elif [ -n "$skip" ]; then record gelu_epilogue_and_sampler "$skip" ""
    else record gelu_epilogue_and_sampler PASS "$(grep -oE '^\[  PASSED  \] [0-9]+' "$RES/gelu_epilogue_and_sampler.log" | grep -oE '[0-9]+$') tests"; fi
  fi
fi
# Serve's batch sampling on the device (serve/device_sampler.h): a batch of mixed rows (greedy,
# temperature, top-k/p, min-p, penalties, logit_bias, logprobs, padded vocabulary) sampled by
# CudaBackend::sample_processed_rows must give the host path's tokens and generator streams,
# and its logprobs to 1e-4; plus the CPU-compiled math it shares with the host, bit for bit,
# and the serving engine's tests on the CUDA backend (seeded sampling under batching must give
# the single-sequence host sampler's tokens), where the engine samples on the device.
if wanted serve_device_sampling; then
  if [ $gpu_ok = 0 ]; then record serve_device_sampling "$GPU_WHY" ""
  else
    (cd "$WORK" && LLMRUN_TEST_BACKEND=cuda "$BIN/llmrun_unit_tests" --gtest_filter='CudaProcessedSampling*:SamplingRowsMath*:ServeEngine.*' >"$RES/serve_device_sampling.log" 2>&1)
    rc=$?
    skip=$(grep -m1 -oE 'SKIPPED: .*' "$RES/serve_device_sampling.log")
    if [ $rc -ne 0 ]; then record serve_device_sampling FAIL "$(grep -m1 -E '^\[  FAILED' "$RES/serve_device_sampling.log")"
    elif [ -n "$skip" ]; then record serve_device_sampling "$skip" ""
    else record serve_device_sampling PASS "$(grep -oE '^\[  PASSED  \] [0-9]+' "$RES/serve_device_sampling.log" | grep -oE '[0-9]+$') tests"; fi
  fi
fi
# ep2 over NCCL (two or more GPUs): llama-small with 8 routed experts (top-2), the experts split
# over two ranks whose token all-to-alls run as grouped ncclSend/ncclRecv on the ep group; the
# loss curve must equal one rank's (1e-4: routing on a GPU may reorder sums). One card cannot
# hold two NCCL ranks; the NCCL all-to-all's single-rank path runs in unit_tests
# (NcclAllToAll.OneRankSendsItsOwnPartThroughNcclOnTheGpu).
if wanted ep2_nccl; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  moe=(--set 'model.moe={experts: 8, top_k: 2, expert_ffn: 688, aux_loss: 0.01, z_loss: 0.001}')
  if [ $gpu_ok = 0 ]; then record ep2_nccl "$GPU_WHY" ""
  elif ! command -v mpirun >/dev/null 2>&1; then record ep2_nccl "SKIPPED: no mpirun on this machine (this bundle carries none)" ""
  elif [ "${gpus:-0}" -lt 2 ]; then record ep2_nccl "SKIPPED: needs 2 GPUs (this machine has ${gpus:-0}); NCCL refuses two ranks on one GPU" ""
  elif ! train ep1-moe-cuda "$RECIPES/llama-small.yaml" cuda fp32 10 "${moe[@]}"; then
    record ep2_nccl FAIL "1-rank MoE run failed: $(tail -n 1 "$RES/train-ep1-moe-cuda.log")"
  elif ! train ep2_nccl "$RECIPES/llama-small.yaml" cuda fp32 10 "${moe[@]}" --nproc 2 --set parallel.ep=2; then
    record ep2_nccl FAIL "ep2 run failed: $(tail -n 1 "$RES/train-ep2_nccl.log")"
  else
    how=$(grep -m1 -oE 'ep group \(2 ranks\): [^(]*' "$RES/train-ep2_nccl.log")
    $CHECKS_PY parity "$WORK/ep2_nccl.jsonl" "$WORK/ep1-moe-cuda.jsonl" --tol 1e-4 --after 0 --steps 10 >"$WORK/p.json"
    rc=$?
    fig="$how; $(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e}\"")"
    if [ $rc -eq 0 ] && [[ $how == *NCCL* ]]; then record ep2_nccl PASS "$fig"; else record ep2_nccl FAIL "$fig"; fi
  fi
fi
# pp2 on one card (ranks share it: MPI with host staging, chosen by itself) and, with two or
# more GPUs, pp2 over NCCL (each directed ring edge its own two-rank communicator): both must
# reproduce the one-rank GPU loss curve (fp32: 1e-5 relative).
for name in pp2_share_gpu pp2_nccl; do
  wanted "$name" || continue
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ $gpu_ok = 0 ]; then record "$name" "$GPU_WHY" ""; continue; fi
  if ! command -v mpirun >/dev/null 2>&1; then record "$name" "SKIPPED: no mpirun on this machine (this bundle carries none)" ""; continue; fi
  if [ $name = pp2_nccl ] && [ "${gpus:-0}" -lt 2 ]; then record "$name" "SKIPPED: needs 2 GPUs (this machine has ${gpus:-0}); NCCL refuses two ranks on one GPU" ""; continue; fi
  [ -f "$WORK/dp1-cuda.jsonl" ] || train dp1-cuda "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" ||
    { record "$name" FAIL "1-rank cuda run failed: $(tail -n 1 "$RES/train-dp1-cuda.log")"; continue; }
  # Sharing: both ranks see the same one card.
  if [ $name = pp2_share_gpu ]; then
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} train $name "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" --nproc 2 --set parallel.pp=2
  else
    train $name "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" --nproc 2 --set parallel.pp=2
  fi
  if [ $? -ne 0 ]; then
    record "$name" FAIL "2-rank pp run failed: $(tail -n 1 "$RES/train-$name.log")"; continue
  fi
  how=$(grep -m1 -oE 'pp group \(2 ranks\): [^(]*' "$RES/train-$name.log")
  $CHECKS_PY parity "$WORK/$name.jsonl" "$WORK/dp1-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p.json"
  rc=$?
  fig="$how; $(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e}\"")"
  want_how="host staging"; [ $name = pp2_nccl ] && want_how="NCCL"
  if [ $rc -eq 0 ] && [[ $how == *"$want_how"* ]]; then record "$name" PASS "$fig"; else record "$name" FAIL "$fig"; fi
done
# The layout matrix on one card (issue 17's proof): each layout's ranks share the GPU (MPI with
# host staging for every group, chosen by itself) and must reproduce the one-rank GPU loss
# curve at every step (fp32: 1e-5 relative), as the CPU layout tests (model_parallel.sh,
# data_parallel.sh) do against one CPU rank. NAME NPROC SETTINGS...
LAYOUTS=(
  "dp2_zero1_share_gpu 2 parallel.zero=1"
  "dp2_zero2_share_gpu 2 parallel.zero=2"
  "dp2_zero3_share_gpu 2 parallel.zero=3"
  "tp2_sp_share_gpu 2 parallel.tp=2 parallel.sequence_parallel=true"
  "pp2_interleaved_share_gpu 2 parallel.pp=2 parallel.pp_schedule=interleaved parallel.virtual_stages=2"
  "tp2_pp2_dp2_share_gpu 8 parallel.tp=2 parallel.pp=2 parallel.zero=1 parallel.sequence_parallel=true"
)
for layout in "${LAYOUTS[@]}"; do
  read -r name nproc settings <<<"$layout"
  wanted "$name" || continue
  if [ $gpu_ok = 0 ]; then record "$name" "$GPU_WHY" ""; continue; fi
  if ! command -v mpirun >/dev/null 2>&1; then record "$name" "SKIPPED: no mpirun on this machine (this bundle carries none)" ""; continue; fi
  [ -f "$WORK/dp1-cuda.jsonl" ] || train dp1-cuda "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" ||
    { record "$name" FAIL "1-rank cuda run failed: $(tail -n 1 "$RES/train-dp1-cuda.log")"; continue; }
  sets=(); for kv in $settings; do sets+=(--set "$kv"); done
  if ! CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} train "$name" "$RECIPES/demo.yaml" cuda fp32 20 "${LAYOUT[@]}" --nproc "$nproc" "${sets[@]}"; then
    record "$name" FAIL "$nproc-rank run failed: $(tail -n 1 "$RES/train-$name.log")"; continue
  fi
  cp "$WORK/$name.jsonl" "$RES/"
  how=$(grep -oE '(dp|tp|pp) group \([0-9]+ ranks\): [^(]*' "$RES/train-$name.log" | sort -u | paste -sd';' -)
  $CHECKS_PY parity "$WORK/$name.jsonl" "$WORK/dp1-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p.json"
  rc=$?
  fig="$settings; ${how:-no group log}; $(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e} at step {j['worst_step']}\"")"
  if [ $rc -eq 0 ] && [[ $how == *"host staging"* ]] && [[ $how != *NCCL* ]]; then record "$name" PASS "$fig"; else record "$name" FAIL "$fig"; fi
done
# cp2 on one card (issue 27): context parallelism's ring attention blocks on the GPU
# (kernels/attention_block.cu), two ranks sharing the card (MPI with host staging, chosen by
# itself), Llama with GQA (llama-small: seq 256 in 4 chunks of 64). Its loss curve must track the
# CPU's one-rank run as the GPU-vs-CPU parity does (fp32: 1e-4 relative), and the one-rank GPU
# run as every other layout does (1e-5).
if wanted cp2_share_gpu; then
  if [ $gpu_ok = 0 ]; then record cp2_share_gpu "$GPU_WHY" ""
  elif ! command -v mpirun >/dev/null 2>&1; then record cp2_share_gpu "SKIPPED: no mpirun on this machine (this bundle carries none)" ""
  elif ! CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} train cp2-cuda "$RECIPES/llama-small.yaml" cuda fp32 20 --nproc 2 --set parallel.cp=2; then
    record cp2_share_gpu FAIL "2-rank cp2 cuda run failed: $(tail -n 1 "$RES/train-cp2-cuda.log")"
  elif ! train cp1-cpu "$RECIPES/llama-small.yaml" cpu fp32 20; then
    record cp2_share_gpu FAIL "1-rank cpu run failed: $(tail -n 1 "$RES/train-cp1-cpu.log")"
  elif ! train cp1-cuda "$RECIPES/llama-small.yaml" cuda fp32 20; then
    record cp2_share_gpu FAIL "1-rank cuda run failed: $(tail -n 1 "$RES/train-cp1-cuda.log")"
  else
    cp "$WORK/cp2-cuda.jsonl" "$WORK/cp1-cpu.jsonl" "$WORK/cp1-cuda.jsonl" "$RES/"
    how=$(grep -m1 -oE 'cp group \(2 ranks\): [^(]*' "$RES/train-cp2-cuda.log")
    $CHECKS_PY parity "$WORK/cp2-cuda.jsonl" "$WORK/cp1-cpu.jsonl" --tol 1e-4 --after 0 --steps 20 >"$WORK/p.json"
    rc_cpu=$?
    vs_cpu=$(py_field "$WORK/p.json" "f\"vs cpu cp1: max rel loss diff {j['max_rel_diff']:.2e}\"")
    $CHECKS_PY parity "$WORK/cp2-cuda.jsonl" "$WORK/cp1-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p.json"
    rc_gpu=$?
    vs_gpu=$(py_field "$WORK/p.json" "f\"vs cuda cp1: {j['max_rel_diff']:.2e}\"")
    fig="$how; $vs_cpu; $vs_gpu"
    if [ $rc_cpu -eq 0 ] && [ $rc_gpu -eq 0 ]; then record cp2_share_gpu PASS "$fig"; else record cp2_share_gpu FAIL "$fig"; fi
  fi
fi
# bench train at dp2 on one card (shared, so overhead, not scaling): the communication share
# of the step, the share of the gradient reductions hidden behind the backward and, at ZeRO-3,
# of the parameter all-gathers hidden behind the layers before them (the next bucket's
# prefetched).
for name in bench_train_overlap bench_train_overlap_zero3; do
  wanted "$name" || continue
  zero=0; [ $name = bench_train_overlap_zero3 ] && zero=3
  if [ $gpu_ok = 0 ]; then record "$name" "$GPU_WHY" ""
  elif ! command -v mpirun >/dev/null 2>&1; then record "$name" "SKIPPED: no mpirun on this machine (this bundle carries none)" ""
  elif "$LLMRUN" bench train "$RECIPES/llama-small.yaml" $(backend_set cuda) --set data.train="$DATA" --nproc 2 \
      --set parallel.dp=2 --set parallel.zero=$zero --steps 10 --warmup 2 --json "$RES/$name.json" >"$RES/$name.log" 2>&1; then
    record "$name" PASS "$("$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); o=j['overlap']; g=o['param_gathers']; b=j['breakdown_s']; print(f\"dp2 ZeRO-$zero: {j['tokens_per_s']['median']:,.0f} tokens/s, comm wait {100*b['comm_wait']/j['step_s']['mean']:.1f}% of the step, gradient reductions {100*o['hidden_share']:.1f}% hidden ({o['hidden_s']:.4f} of {o['comm_s']:.4f} s), parameter gathers {100*g['hidden_share']:.1f}% hidden ({g['hidden_s']:.4f} of {g['comm_s']:.4f} s)\")" "$RES/$name.json")"
  else record "$name" FAIL "exit $?: $(tail -n 1 "$RES/$name.log")"; fi
done

# Optimizer offload to pinned host memory on the GPU (memory.offload.optimizer: cpu): AdamW's
# moments live in page-locked host memory and stream through the device on two copy streams
# (copies in and copies back, one per DMA engine), the next piece or bucket copied in while
# this one updates (train/offload_pipeline.h). The loss curve must equal the non-offloaded GPU
# run's (fp32: 1e-5 relative; 1 MB of staging, so buckets go in several pieces), and so must
# ZeRO-3's with its parameter shards in host memory too (memory.offload.params: cpu: each
# gather's shard fetched on the copy stream two buckets ahead, no host wait). bench train
# (default staging) reports the share of the copies hidden behind the compute (its
# overlap.offload block), for the moments alone and for ZeRO-3 with both offloaded.
if wanted offload_cpu_optimizer; then
  Z3=(--set parallel.zero=3 --set memory.offload.params=cpu --set memory.offload.optimizer=cpu)
  hidden_of() {  # JSON: the overlap.offload figures of a bench train result
    "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); o=j['overlap']['offload']; print(f\"copies {100*o['hidden_share']:.1f}% hidden ({o['hidden_s']:.4f} of {o['comm_s']:.4f} s per step, {o['exposed_s']:.4f} s exposed), {j['tokens_per_s']['median']:,.0f} tokens/s\")" "$1" 2>>"$RES/offload_cpu_optimizer.log"
  }
  counted_in() { "$PY" -c "import json,sys; print(int(json.load(open(sys.argv[1]))['overlap']['offload']['comm_s'] > 0))" "$1" 2>/dev/null || echo 0; }
  if [ $gpu_ok = 0 ]; then record offload_cpu_optimizer "$GPU_WHY" ""
  elif ! train offload-none-cuda "$RECIPES/llama-small.yaml" cuda fp32 20; then
    record offload_cpu_optimizer FAIL "non-offloaded cuda run failed: $(tail -n 1 "$RES/train-offload-none-cuda.log")"
  elif ! train offload-cpu-cuda "$RECIPES/llama-small.yaml" cuda fp32 20 --set memory.offload.optimizer=cpu --set memory.offload.buffer_mb=1; then
    record offload_cpu_optimizer FAIL "offloaded cuda run failed: $(tail -n 1 "$RES/train-offload-cpu-cuda.log")"
  elif ! train offload-z3-cuda "$RECIPES/llama-small.yaml" cuda fp32 20 "${Z3[@]}" --set memory.offload.buffer_mb=1; then
    record offload_cpu_optimizer FAIL "ZeRO-3 offloaded cuda run failed: $(tail -n 1 "$RES/train-offload-z3-cuda.log")"
  elif ! "$LLMRUN" bench train "$RECIPES/llama-small.yaml" $(backend_set cuda) --set data.train="$DATA" \
      --set memory.offload.optimizer=cpu --steps 10 --warmup 2 --json "$RES/offload_cpu_optimizer.json" >"$RES/offload_cpu_optimizer.log" 2>&1; then
    record offload_cpu_optimizer FAIL "bench train with offload failed: $(tail -n 1 "$RES/offload_cpu_optimizer.log")"
  elif ! "$LLMRUN" bench train "$RECIPES/llama-small.yaml" $(backend_set cuda) --set data.train="$DATA" \
      "${Z3[@]}" --steps 10 --warmup 2 --json "$RES/offload_cpu_z3.json" >>"$RES/offload_cpu_optimizer.log" 2>&1; then
    record offload_cpu_optimizer FAIL "bench train with ZeRO-3 offload failed: $(tail -n 1 "$RES/offload_cpu_optimizer.log")"
  else
    cp "$WORK/offload-none-cuda.jsonl" "$WORK/offload-cpu-cuda.jsonl" "$WORK/offload-z3-cuda.jsonl" "$RES/"
    $CHECKS_PY parity "$WORK/offload-cpu-cuda.jsonl" "$WORK/offload-none-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p.json"
    rc=$?
    $CHECKS_PY parity "$WORK/offload-z3-cuda.jsonl" "$WORK/offload-none-cuda.jsonl" --tol 1e-5 --after 0 --steps 20 >"$WORK/p3.json"
    rc3=$?
    fig="$(py_field "$WORK/p.json" "f\"max rel loss diff {j['max_rel_diff']:.2e} at step {j['worst_step']}\"")"
    fig3="$(py_field "$WORK/p3.json" "f\"ZeRO-3 params+moments: max rel loss diff {j['max_rel_diff']:.2e} at step {j['worst_step']}\"")"
    hidden=$(hidden_of "$RES/offload_cpu_optimizer.json")
    hidden3=$(hidden_of "$RES/offload_cpu_z3.json")
    # The copies must have been counted: a run whose offload block is empty did not overlap.
    if [ $rc -eq 0 ] && [ $rc3 -eq 0 ] && [ "$(counted_in "$RES/offload_cpu_optimizer.json")" = 1 ] &&
      [ "$(counted_in "$RES/offload_cpu_z3.json")" = 1 ]; then
      record offload_cpu_optimizer PASS "$fig; $hidden; $fig3; ZeRO-3 $hidden3"
    else record offload_cpu_optimizer FAIL "$fig; ${hidden:-no overlap.offload block}; $fig3; ZeRO-3 ${hidden3:-no overlap.offload block}"; fi
  fi
fi

# --- benchmarks ---------------------------------------------------------------------------
# On a GPU: GPT-2 124M at seq 1024 on CUDA (bf16) next to PyTorch's peers. Without one, the
# same commands run on the CPU at the demo recipe's size, so the plumbing is exercised.
if [ $gpu_ok = 1 ]; then
  BENCH_BACKEND=cuda BENCH_RECIPE=$RECIPES/gpt2-124m.yaml BENCH_BATCH=8 BENCH_SEQ=1024 BENCH_STEPS=10
else
  BENCH_BACKEND=cpu BENCH_RECIPE=$RECIPES/demo.yaml BENCH_BATCH=4 BENCH_SEQ=128 BENCH_STEPS=2
fi
bench_sets=($(backend_set $BENCH_BACKEND) --set model.seq_len=$BENCH_SEQ --set train.micro_batch=$BENCH_BATCH
  --set train.global_batch=$BENCH_BATCH --set data.train="$DATA")
if wanted bench_kernels; then
  if "$LLMRUN" bench kernels "$BENCH_RECIPE" "${bench_sets[@]}" --repeat 5 --json "$RES/bench_kernels.json" >"$RES/bench_kernels.log" 2>&1; then
    fig=$("$PY" -c "
import json,sys; r={k['kernel']:k for k in json.load(open(sys.argv[1]))['kernels']}
print(f\"$BENCH_BACKEND: attention fwd {r['attention fwd']['median_ms']:.3f} ms, bwd {r['attention bwd']['median_ms']:.3f} ms, qkv fwd {r['qkv fwd']['gflops']:.0f} GFLOP/s\")" "$RES/bench_kernels.json")
    record bench_kernels PASS "$fig"
  else record bench_kernels FAIL "exit $?: $(tail -n 1 "$RES/bench_kernels.log")"; fi
fi
if wanted bench_train; then
  if "$LLMRUN" bench train "$BENCH_RECIPE" "${bench_sets[@]}" --set precision.compute=$([ $gpu_ok = 1 ] && echo bf16 || echo fp32) \
      --steps $BENCH_STEPS --warmup 1 --json "$RES/bench_train.json" >"$RES/bench_train.log" 2>&1; then
    record bench_train PASS "$BENCH_BACKEND: $("$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{j['tokens_per_s']['median']:,.0f} tokens/s\")" "$RES/bench_train.json")"
  else record bench_train FAIL "exit $?: $(tail -n 1 "$RES/bench_train.log")"; fi
fi
torch_skip=""
[ $has_torch = 0 ] && torch_skip="SKIPPED: torch not importable"
[ -z "$torch_skip" ] && [ $torch_cuda = 0 ] && torch_skip="SKIPPED: torch sees no CUDA device"
[ -z "$torch_skip" ] && [ $gpu_ok = 0 ] && torch_skip="$GPU_WHY"
if wanted bench_torch_attention; then
  if [ -n "$torch_skip" ]; then record bench_torch_attention "$torch_skip" ""
  elif "$PY" "$SHARE/scripts/torch_bench.py" attention --batch $BENCH_BATCH --heads 12 --seq $BENCH_SEQ --head-dim 64 >"$RES/bench_torch_attention.json" 2>"$RES/bench_torch_attention.log"; then
    fig=$(py_field "$RES/bench_torch_attention.json" "f\"SDPA fwd+bwd fp32 {j['fp32']['fwd_bwd_ms']:.3f} ms, bf16 {j['bf16']['fwd_bwd_ms']:.3f} ms\"")
    if [ -f "$RES/bench_kernels.json" ]; then
      fig="$fig; llmrun $("$PY" -c "import json,sys; r={k['kernel']:k for k in json.load(open(sys.argv[1]))['kernels']}; print(f\"{r['attention fwd']['median_ms']+r['attention bwd']['median_ms']:.3f} ms\")" "$RES/bench_kernels.json")"
    fi
    record bench_torch_attention PASS "$fig"
  else record bench_torch_attention FAIL "$(tail -n 1 "$RES/bench_torch_attention.log")"; fi
fi
if wanted bench_torch_train; then
  if [ -n "$torch_skip" ]; then record bench_torch_train "$torch_skip" ""
  elif "$PY" "$SHARE/scripts/torch_bench.py" train --batch $BENCH_BATCH --seq $BENCH_SEQ >"$RES/bench_torch_train.json" 2>"$RES/bench_torch_train.log"; then
    fig=$(py_field "$RES/bench_torch_train.json" "f\"torch.compile bf16 {j['tokens_per_s']:,.0f} tokens/s\"")
    if [ -f "$RES/bench_train.json" ]; then
      fig="$fig; llmrun/torch $("$PY" -c "import json,sys; a=json.load(open(sys.argv[1]))['tokens_per_s']['median']; b=json.loads(open(sys.argv[2]).read().splitlines()[-1])['tokens_per_s']; print(f'{a/b:.2f}x')" "$RES/bench_train.json" "$RES/bench_torch_train.json")"
    fi
    record bench_torch_train PASS "$fig"
  else record bench_torch_train FAIL "$(tail -n 1 "$RES/bench_torch_train.log")"; fi
fi

# --- generate vs transformers --------------------------------------------------------------
# Model dirs written by llmrun's exporter (llmrun_make_model_dir: seeded random weights scaled
# up, so greedy choices are diverse and decided by margins far above float rounding; the
# byte-level tokenizer, so ids are bytes), generated greedily by llmrun (on the GPU when
# there is one) and by the reference.
GEN_BACKEND=cpu; [ $gpu_ok = 1 ] && GEN_BACKEND=cuda
gen_args=()
gen_where="its default backend"
"$LLMRUN" generate --help 2>/dev/null | grep -q -- '--backend' && gen_args=(--backend "$GEN_BACKEND") && gen_where=$GEN_BACKEND
for arch in gpt2 llama; do
  for ref in transformers oracle; do
    name=generate_${arch}_vs_$ref
    [ $ref = oracle ] && name=generate_${arch}_vs_torch_oracle
    wanted "$name" || continue
    model=$WORK/gen-$arch
    if [ ! -d "$model" ]; then
      "$BIN/llmrun_make_model_dir" "$model" $arch 2 128 4 64 256 6 >"$RES/make-gen-$arch.log" 2>&1 ||
        { record "$name" FAIL "llmrun_make_model_dir failed: $(tail -n 1 "$RES/make-gen-$arch.log")"; continue; }
    fi
    "$PY" "$SHARE/scripts/compare_transformers.py" --llmrun "$LLMRUN" --model "$model" --reference $ref \
      --oracle-dir "$SHARE/oracle" --prompt "The licence " --max-tokens 48 --json "$RES/$name.json" \
      -- "${gen_args[@]}" >"$RES/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 77 ]; then record "$name" "$(grep -m1 '^SKIPPED' "$RES/$name.log")" ""; continue; fi
    fig=$(py_field "$RES/$name.log" "f\"{j.get('matched', 0)}/{j.get('tokens', 0)} tokens equal (min reference margin {j.get('min_margin') or 0:.3g}), llmrun on $gen_where\" + (f\"; first mismatch at {j['first_mismatch']} (reference margin {j['margin_at_mismatch']})\" if 'first_mismatch' in j else '')" 2>/dev/null || tail -n 1 "$RES/$name.log")
    if [ $rc -eq 0 ]; then record "$name" PASS "$fig"; else record "$name" FAIL "$fig"; fi
  done
done

echo >&2
commit=$(py_field "$HERE/MANIFEST.json" "j['commit']" 2>/dev/null || echo unknown)
$CHECKS_PY summary "$RES" --commit "$commit" --device "$DEVICE"
