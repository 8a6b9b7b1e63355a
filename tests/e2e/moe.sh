# Mixture-of-experts models through the real binary:
#  - Mixtral and Qwen2-MoE Hugging Face dirs: convert to a checkpoint and back (identical
#    tensors), `llmrun eval` equal to an independent PyTorch MoE on the same text;
#  - `llmrun generate` and `llmrun serve`: concurrent requests (continuous batching) give each
#    prompt the greedy text it gets alone;
#  - a native model.moe recipe trains (loss falls), logs the router statistics, exports as
#    Mixtral and reloads; model.from an MoE dir fine-tunes; invalid recipes are refused;
#  - dp2 (ZeRO-2), pp2 and full recompute reproduce the one-rank loss curve within 1e-5
#    (the router losses are per micro-batch, and every layout runs the same micro-batches),
#    and a dp2 checkpoint of step 5 resumes under pp2 with the one-rank losses of steps 6-10.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/moe_common.bash"
source "$(dirname "$0")/serve_common.bash"
cd "$WORK"
PY="/usr/bin/python3 $SRC/tests/oracle/hf_interop.py"
for i in $(seq 30); do printf 'Expert check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
close() { /usr/bin/python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-5*abs(b) else 1)" "$1" "$2"; }
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

# A native MoE recipe: trains, logs router statistics, writes a Mixtral dir (also the
# tokenizer files for the Hugging Face dirs below).
cat > moe.yaml <<'YAML'
model:
  arch: llama
  layers: 2
  d_model: 32
  heads: 4
  kv_heads: 2
  seq_len: 32
  moe: {experts: 4, top_k: 2, expert_ffn: 32, aux_loss: 0.01, z_loss: 0.001, capacity_factor: null}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 20, micro_batch: 4, lr: 3.0e-3, warmup: 0}
logging: {every: 1, metrics: metrics.jsonl}
checkpoint: {dir: run}
YAML
"$LLMRUN" train moe.yaml 2>train.log || { cat train.log; fail "MoE training failed"; }
/usr/bin/python3 - <<'PY' || fail "MoE training metrics"
import json
rows = [json.loads(l) for l in open("metrics.jsonl") if '"loss"' in l]
first, last = rows[0], rows[-1]
assert last["loss"] < first["loss"] - 0.5, (first["loss"], last["loss"])
for k in ("moe_aux_loss", "moe_z_loss", "moe_dropped", "moe_load_min", "moe_load_max"):
    assert k in last, k
assert last["moe_dropped"] == 0  # dropless
assert 0 < last["moe_load_min"] <= 0.25 <= last["moe_load_max"] <= 1
assert 0.005 < last["moe_aux_loss"] < 0.04, last["moe_aux_loss"]  # 0.01 when balanced
print("moe training: loss", first["loss"], "->", last["loss"], "aux", last["moe_aux_loss"])
PY
grep -q '"model_type": "mixtral"' run/model/config.json || fail "native MoE did not export as Mixtral"
# With a capacity factor the metrics count dropped slots.
"$LLMRUN" train moe.yaml --set train.steps=2 --set model.moe.capacity_factor=0.5 \
  --set checkpoint.dir=run-cap 2>cap.log || { cat cap.log; fail "capacity run failed"; }
/usr/bin/python3 -c 'import json; r=[json.loads(l) for l in open("metrics.jsonl") if "moe_dropped" in l][-1]; assert r["moe_dropped"] > 0, r' \
  || fail "capacity_factor 0.5 dropped no slots"

# Hugging Face dirs: round trip, eval against PyTorch.
$PY make hf-mixtral mixtral:2 hf-qwen2_moe qwen2_moe
: > ours.txt
for kind in mixtral qwen2_moe; do
  cp run/model/tokenizer.json run/model/tokenizer_config.json "hf-$kind/"
  "$LLMRUN" convert "hf-$kind" --to checkpoint "ck-$kind" 2>/dev/null || fail "$kind: import failed"
  "$LLMRUN" convert "ck-$kind" --to hf "back-$kind" 2>/dev/null || fail "$kind: export failed"
  $PY same "hf-$kind" "back-$kind" >/dev/null || fail "$kind: round trip changed tensors"
  grep -q "\"model_type\": \"$kind\"" "back-$kind/config.json" || fail "$kind: exported model_type"
  echo "back-$kind $("$LLMRUN" eval "back-$kind" --text text.txt --json | field loss)" >> ours.txt
done
$PY loss text.txt $(cut -d' ' -f1 ours.txt) > torch.txt
while read -r dir ours; do
  torch=$(grep "^$dir " torch.txt | cut -d' ' -f2)
  close "$ours" "$torch" || fail "$dir: llmrun loss $ours, PyTorch $torch"
  echo "$dir: eval loss llmrun $ours, PyTorch $torch"
done < ours.txt

# Serving: four concurrent greedy requests equal `llmrun generate` alone (whose output ends
# with a newline of its own; bytes that are not UTF-8 compare as U+FFFD, as the server sends).
PROMPTS=("The quick" "Expert check 3" "lazy dog. " "0123")
for i in "${!PROMPTS[@]}"; do
  "$LLMRUN" generate back-qwen2_moe --prompt "${PROMPTS[$i]}" --max-tokens 16 --temperature 0 > "alone.$i"
done
start_server server.log back-qwen2_moe --threads 2 --max-num-seqs 8
trap 'stop_server; rm -rf "$WORK"' EXIT
pids=()
for i in "${!PROMPTS[@]}"; do
  body=$(/usr/bin/python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 16, "temperature": 0}))' "${PROMPTS[$i]}")
  curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$body" > "served.$i" &
  pids+=($!)
done
# By pid: bash drops finished jobs from `jobs -p`, and an empty list would wait for the server.
for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "request $i failed (curl exit $?)"; done
for i in "${!PROMPTS[@]}"; do
  /usr/bin/python3 -c 'import json,sys; p=sys.argv[1]; a=open(sys.argv[2], "rb").read().decode("utf-8", "replace")[:-1]; s=json.load(open(sys.argv[3]))["choices"][0]["text"]; sys.exit(0 if p + s == a else f"served {p + s!r} != alone {a!r}")' \
    "${PROMPTS[$i]}" "alone.$i" "served.$i" || fail "prompt $i: batched serving differs from generate alone"
done
stop_server

# model.from an MoE dir fine-tunes; training-only MoE keys may be set, shape keys may not.
cat > ft.yaml <<YAML
model: {from: hf-mixtral, moe: {z_loss: 0.001}}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 1}
checkpoint: {dir: ft}
YAML
"$LLMRUN" train ft.yaml 2>ft.log || { cat ft.log; fail "model.from MoE fine-tune failed"; }
expect_exit 2 "model.moe.experts: comes from config.json" "$LLMRUN" train ft.yaml --set model.moe.experts=8
expect_exit 2 "model.moe.top_k: .*5" "$LLMRUN" train moe.yaml --set model.moe.top_k=5
expect_exit 2 "model.moe.every: must be 1 without shared experts" "$LLMRUN" train moe.yaml --set model.moe.every=2
expect_exit 2 "model.moe.router: expected softmax_topk" "$LLMRUN" train moe.yaml --set model.moe.router=sinkhorn
expect_exit 2 "model.moe.shared_experts: .*qkv_bias" "$LLMRUN" train moe.yaml --set model.moe.shared_experts=1
expect_exit 2 "precision.fp8.enabled: FP8 training does not cover mixture-of-experts" \
  "$LLMRUN" train moe.yaml --set precision.fp8.enabled=true
expect_exit 2 "parallel.sequence_parallel: mixture-of-experts layers run whole on every tensor-parallel rank" \
  "$LLMRUN" train moe.yaml --nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true
expect_exit 2 "mixture of experts needs model.arch llama" "$LLMRUN" train moe.yaml --set model.arch=gpt2 --set model.kv_heads=4
# Layouts: dp2 and pp2 against one rank, ten steps of a Qwen2-MoE-style model (a dense layer,
# routed layers with a shared expert, a capacity limit that drops slots).
write_moe_layout_recipe
for layout in "base 1" "dp2 2 parallel.dp=2 parallel.zero=2 checkpoint.every=5" \
  "pp2 2 parallel.pp=2" "recompute 1 memory.recompute=full" \
  "resumed 2 parallel.pp=2 checkpoint.resume=$WORK/dp2/step-0000005"; do
  set -- $layout
  name=$1 nproc=$2; shift 2
  sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$LLMRUN" train lay.yaml --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name \
    "${sets[@]}" > $name.log 2>&1 || { cat $name.log; fail "layout $name"; }
done
grep -q "resumed from .*step-0000005" resumed.log || { cat resumed.log; fail "no resume at step 5"; }
compare_moe_losses dp2 pp2 recompute resumed
echo "moe e2e: ok"
