# FP8 (precision.fp8, CPU emulation) under tensor, sequence and pipeline parallelism through
# the real binary: tp2 + sequence parallel, pp2 (1f1b) and tp2 x dp2 each reproduce the
# one-rank FP8 loss curve within 1e-5 (relative, every step of 10) and end with the same scales,
# because every amax is max-reduced over all ranks (a shard's amax alone would give another
# scale: the lm_head and every block linear run in FP8 here, so sharded weights, inputs and
# output gradients all matter). Checkpoints hold every layer's scales and amax histories
# whatever the layout: saved at tp2 or pp2 and resumed at one rank, or saved at one rank and
# resumed at pp2, the next losses are the one-rank run's; a pp2 resume of a pp2 checkpoint is
# the uninterrupted pp2 run bit for bit (each stage reads its own layers' state).
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/fp8_layout_common.bash"
cd "$WORK"
fp8_layout_setup "fp8 model parallel"
run base 1
# Every tensor has been scaled by step 5 (scale 1 would mean a layer's state was not saved).
/usr/bin/python3 - <<'PY' || fail "one-rank FP8 state incomplete"
import json
t = json.load(open("base/step-0000005/index.json"))["fp8"]["tensors"]
assert len(t) == 2 * 4 * 3 + 3 and all(v["scale"] != 1.0 for v in t.values()), t
PY

run tp2-sp 2 parallel.tp=2 parallel.sequence_parallel=true
run pp2 2 parallel.pp=2 parallel.pp_schedule=1f1b
run tp2-dp2 4 parallel.tp=2
for name in tp2-sp pp2 tp2-dp2; do compare base $name 1 1e-5; done

# Checkpoints across layouts: step 5 of one layout, steps 6..10 under another.
run tp2-to-1 1 checkpoint.resume=$WORK/tp2-sp/step-0000005
run pp2-to-1 1 checkpoint.resume=$WORK/pp2/step-0000005
run 1-to-pp2 2 checkpoint.resume=$WORK/base/step-0000005 parallel.pp=2
run pp2-to-pp2 2 checkpoint.resume=$WORK/pp2/step-0000005 parallel.pp=2
for name in tp2-to-1 pp2-to-1 1-to-pp2 pp2-to-pp2; do
  grep -q "resumed from .*step-0000005" $name.log || { cat $name.log; fail "$name did not resume at step 5"; }
done
for name in tp2-to-1 pp2-to-1 1-to-pp2; do compare base $name 6 1e-5; done
# Same layout: bit for bit, losses and every saved scale and amax history.
compare pp2 pp2-to-pp2 6 0
/usr/bin/python3 - <<'PY' || fail "pp2 resume is not the uninterrupted pp2 run"
import json
a = json.load(open("pp2/step-0000010/index.json"))["fp8"]
b = json.load(open("pp2-to-pp2/step-0000010/index.json"))["fp8"]
assert a == b
PY
echo "fp8 model parallel: tp2+sp, pp2, tp2xdp2 and resumes across layouts match one rank"
