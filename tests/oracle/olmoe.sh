# OLMoE (Hugging Face model_type olmoe) against the independent PyTorch model in torch_models.py:
#  - a tiny OLMoE-style model (q/k norms, every MLP routed, top-k not renormalised): llmrun's
#    logits, loss with router losses, every gradient (q_norm/k_norm included) and two AdamW
#    steps equal PyTorch's on identical weights (check_against_torch.py);
#  - an OLMoE dir written here (HF names: self_attn.q_norm.weight, mlp.gate.weight,
#    mlp.experts.E.{gate,up,down}_proj.weight) converts to a checkpoint and back tensor for
#    tensor, `llmrun eval` equals PyTorch's loss, `llmrun generate` equals PyTorch's greedy
#    tokens, and `model.from` the dir fine-tunes;
#  - the dir trains under ep2 and pp2 with the one-rank loss curve;
#  - clip_qkv and tensor parallelism are refused with the reason.
# Usage: olmoe.sh ORACLE_DUMP LLMRUN SOURCE_DIR
source "$(dirname "$0")/../e2e/common.bash" "$2" "$3"
DUMP="$1"
cd "$WORK"
PY="/usr/bin/python3 $SRC/tests/oracle/hf_interop.py"

"$DUMP" olmoe oracle >/dev/null || fail "oracle dump failed"
/usr/bin/python3 "$SRC/tests/oracle/check_against_torch.py" oracle || fail "llmrun differs from PyTorch"
grep -q '"model_type": "olmoe"' oracle/model/config.json || fail "the oracle model did not export as olmoe"

$PY make hf-olmoe olmoe
cp oracle/model/tokenizer.json oracle/model/tokenizer_config.json hf-olmoe/
"$LLMRUN" convert hf-olmoe --to checkpoint ck 2>/dev/null || fail "olmoe import failed"
"$LLMRUN" convert ck --to hf back 2>/dev/null || fail "olmoe export failed"
$PY same hf-olmoe back || fail "olmoe round trip changed tensors"
/usr/bin/python3 - back/config.json <<'PY' || fail "exported config.json"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "olmoe", "num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32,
        "norm_topk_prob": False, "clip_qkv": None, "router_aux_loss_coef": 0.01}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
PY

for i in $(seq 20); do printf 'OLMoE check %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
ours=$("$LLMRUN" eval back --text text.txt --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['loss'])")
torch=$($PY loss text.txt back | cut -d' ' -f2)
/usr/bin/python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-5*abs(b) else 1)" "$ours" "$torch" \
  || fail "eval loss: llmrun $ours, PyTorch $torch"
echo "eval loss: llmrun $ours, PyTorch $torch"

# Greedy generation: the bytes llmrun prints after the prompt are PyTorch's greedy tokens.
"$LLMRUN" generate back --prompt "The quick" --max-tokens 12 --temperature 0 > gen.txt 2>/dev/null \
  || fail "generate failed"
$PY greedy back 12 "The quick" > greedy.txt
/usr/bin/python3 - gen.txt greedy.txt "The quick" <<'PY' || fail "generate differs from PyTorch's greedy tokens"
import sys
out = open(sys.argv[1], "rb").read()
prompt = sys.argv[3].encode()
assert out.startswith(prompt) and out.endswith(b"\n"), out
ours = list(out[len(prompt):-1])
want = [int(t) for t in open(sys.argv[2]).read().split()]
assert ours == want, (ours, want)
print("generate: greedy tokens equal PyTorch's", ours)
PY

cat > ft.yaml <<YAML
model: {from: back, moe: {z_loss: 0.001}}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2}
checkpoint: {dir: ft}
YAML
"$LLMRUN" train ft.yaml 2>ft.log || { cat ft.log; fail "model.from an OLMoE dir: fine-tune failed"; }
$PY same back ft/model >/dev/null && fail "fine-tuning did not change the weights"
grep -q '"model_type": "olmoe"' ft/model/config.json || fail "fine-tuned model did not export as olmoe"
expect_exit 2 "parallel.tp: OLMoE's q/k norms" "$LLMRUN" train ft.yaml --nproc 2 --set parallel.tp=2

# OLMoE (q/k norms, every MLP routed) under expert and pipeline parallelism: ep2 (each rank
# holds 2 of the 4 experts, tokens cross by all-to-all) and pp2 (one layer per stage)
# reproduce the one-rank loss curve within 1e-5 relative.
cat > lay.yaml <<YAML
model: {from: back}
data: {train: [{path: text.txt}]}
train: {steps: 6, micro_batch: 2, global_batch: 4, lr: 3.0e-3, warmup: 0, seed: 5}
logging: {every: 1}
YAML
for layout in "one 1" "ep2 2 parallel.ep=2" "pp2 2 parallel.pp=2"; do
  set -- $layout
  name=$1 nproc=$2; shift 2
  sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$LLMRUN" train lay.yaml --nproc $nproc --set logging.metrics=lay-$name.jsonl \
    --set checkpoint.dir=lay-$name "${sets[@]}" > lay-$name.log 2>&1 || { cat lay-$name.log; fail "OLMoE under $name"; }
done
for name in ep2 pp2; do
  /usr/bin/python3 - lay-one.jsonl lay-$name.jsonl <<'PY' || fail "OLMoE under $name: loss curve differs from one rank"
import json, sys
a, b = ({r["step"]: r["loss"] for r in map(json.loads, open(f)) if "loss" in r} for f in sys.argv[1:])
assert len(a) == 6 and sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
assert worst < 1e-5, f"{sys.argv[2]}: loss differs by {worst:.2e}"
print(f"OLMoE {sys.argv[2]}: losses of steps 1-6 within {worst:.1e} of one rank")
PY
done

/usr/bin/python3 -c 'import json; c=json.load(open("back/config.json")); c["clip_qkv"]=8.0; json.dump(c, open("back/config.json","w"))'
expect_exit 2 '"clip_qkv": .*not supported' "$LLMRUN" eval back --text text.txt
echo "oracle.olmoe: ok"
