# What a step costs a GPU beyond its arithmetic, counted on the emulated GPU (the runtime's
# LLMRUN_EMULATED_STATS: kernel launches, cuBLASLt calls, host waits, allocations), where no
# timing can show it. Host waits drain the GPU's queue (it idles while the host refills it) and
# allocations synchronise the device, so in steady state a training step must allocate nothing
# and wait at most once per micro-batch (its loss; uploads of ids and positions must not wait,
# backend/cuda/cuda_upload_ring.h) plus twice per step (measured: once); one more token of
# `generate` at most twice (measured: twice). Counts are differences
# between two runs that differ only in steps (or tokens), so start-up and the final export
# cancel out.
source "$(dirname "$0")/common.bash"

# stats NAME CMD...: runs CMD with the counters going to NAME.stats.
stats() {
  local name=$1; shift
  rm -f "$name.stats"
  LLMRUN_EMULATED_STATS=$WORK/$name.stats "$@" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name"; }
}
# per A B N FIELD: (B's FIELD - A's FIELD) / N, the runs' counts summed over ranks.
per() {
  /usr/bin/python3 - "$1.stats" "$2.stats" "$3" "$4" <<'PY'
import json, sys
tot = lambda f: sum(json.loads(l)[sys.argv[4]] for l in open(f) if l.strip())
print(f"{(tot(sys.argv[2]) - tot(sys.argv[1])) / int(sys.argv[3]):g}")
PY
}
# at_most NAME VALUE LIMIT
at_most() {
  /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$2" "$3" ||
    fail "$1: $2 per step or token, more than $3"
}

for arch in gpt2 llama; do
  tiny_recipe $arch 6
  # global_batch 4 at micro-batch 2: 2 micro-batches a step; 8: 4.
  runs=("3 4" "6 4")
  [ $arch = gpt2 ] && runs+=("6 8")  # the cost of a micro-batch: once is enough
  for run in "${runs[@]}"; do
    read -r steps batch <<<"$run"
    stats $arch-$steps-$batch "$EMU" train $arch.yaml --set launch.backend=cuda --set train.steps=$steps \
      --set train.global_batch=$batch --set train.eval_every=0 --set checkpoint.every=0 --set checkpoint.dir=ck-$arch-$steps-$batch
  done
  line="$arch step (2 micro-batches):"
  for f in launches library copies host_waits device_allocs device_frees host_allocs host_frees; do
    v=$(per $arch-3-4 $arch-6-4 3 $f)
    line="$line $f $v"
    case $f in device_* | host_allocs | host_frees) at_most "$arch $f" "$v" 0 ;; esac
  done
  waits=$(per $arch-3-4 $arch-6-4 3 host_waits)
  at_most "$arch host waits" "$waits" 4
  echo "$line"
done
# Two more micro-batches a step: at most one more wait each (the loss).
more=$(/usr/bin/python3 -c "import sys; print(float(sys.argv[1]) / 2)" "$(per gpt2-6-4 gpt2-6-8 6 host_waits)")
at_most "host waits per extra micro-batch" "$more" 1
echo "gpt2: $more more host waits per extra micro-batch"

# Decoding: one token more costs no allocation and at most two host waits.
tiny_recipe gpt2 20
train gpt2 "$LLMRUN" cpu gpt2.yaml 1
for n in 8 24; do
  stats gen-$n "$EMU" generate gpt2/model --prompt "the quick" --max-tokens $n --temperature 0 --backend cuda
done
line="generate, per token:"
for f in launches copies host_waits device_allocs; do line="$line $f $(per gen-8 gen-24 16 $f)"; done
at_most "generate device allocations" "$(per gen-8 gen-24 16 device_allocs)" 0
at_most "generate host waits" "$(per gen-8 gen-24 16 host_waits)" 2
echo "$line"
