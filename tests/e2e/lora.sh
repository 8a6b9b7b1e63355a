# LoRA fine-tuning through the real binary (finetune: lora over model.from), for GPT-2 and
# Llama with GQA: dp2 + ZeRO-1, tp2 and pp2 (and for Llama ZeRO-3 and tp2 with sequence
# parallelism) reproduce the one-rank loss curve (relative 1e-5) and adapters, tp2 and pp2
# with finetune.dropout too; 3 steps + resume + 3 steps equal 6 steps exactly; the run writes
# a PEFT adapter dir (format checked against PEFT's layout); `convert --merge-lora` writes a
# model whose weights are base + (alpha/r) B A and whose logits equal base + adapter in
# PyTorch; a run continuing the adapter (finetune.init_adapter) starts from exactly the merged
# model's loss; an unknown target is refused with the valid names; a bf16 frozen base
# (finetune.base_dtype) holds the bytes plan shows.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 150); do printf 'lora sample %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt

run() {  # NAME RECIPE NPROC SETTINGS...
  local name=$1 recipe=$2 nproc=$3; shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$LLMRUN" train $recipe --nproc $nproc --set logging.metrics=$name.jsonl --set checkpoint.dir=$name "${sets[@]}" \
    >$name.log 2>&1 || { cat $name.log; fail "$name"; }
}

compare() {  # BASE RUN EXACT(0|1): losses per step and the exported adapters
  /usr/bin/python3 - "$1" "$2" "$3" "$SRC/tests/oracle" <<'PY' || fail "$2 differs from $1"
import json, sys
import numpy as np
base, run, exact, oracle = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
sys.path.insert(0, oracle)
import safetensors_np
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(base + ".jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(run + ".jsonl")}
assert len(a) == 6 and set(b) <= set(a) and len(b) >= 3, (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
assert (worst == 0) if exact else worst < 1e-5, f"loss differs by {worst:.2e}"
assert a[6] < a[1], f"LoRA did not train: loss {a[1]} -> {a[6]}"
wa, _ = safetensors_np.load(base + "/adapter/adapter_model.safetensors")
wb, _ = safetensors_np.load(run + "/adapter/adapter_model.safetensors")
assert wa.keys() == wb.keys(), set(wa) ^ set(wb)
off = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
assert (off == 0) if exact else off < 1e-5, f"adapters differ by {off:.2e}"
print(f"{run}: losses within {worst:.1e}, adapters within {off:.1e}")
PY
}

for arch in gpt2 llama; do
  kv=""; [ $arch = llama ] && kv=", kv_heads: 2"
  targets="[c_attn, c_proj, c_fc]"; [ $arch = llama ] && targets="[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"
  cat > $arch-base.yaml <<YAML
model: {arch: $arch, layers: 4, d_model: 32, heads: 4$kv, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2, global_batch: 4, lr: 1.0e-3, warmup: 0, seed: 5}
YAML
  "$LLMRUN" train $arch-base.yaml --set checkpoint.dir=$arch-pre >$arch-pre.log 2>&1 || { cat $arch-pre.log; fail "base model"; }
  cat > $arch.yaml <<YAML
model: {from: $arch-pre/model}
data: {train: [{path: text.txt}]}
train: {steps: 6, micro_batch: 2, global_batch: 8, lr: 1.0e-2, warmup: 0, seed: 5}
finetune: {method: lora, rank: 4, alpha: 8, targets: $targets}
logging: {every: 1}
YAML
  run $arch-r1 $arch.yaml 1
  grep -q "LoRA rank 4 alpha 8" $arch-r1.log || fail "no LoRA line in the log"
  /usr/bin/python3 - $arch-pre/model $arch-r1/adapter "$SRC/tests/oracle" <<'PY' || fail "$arch adapter format"
import json, sys
sys.path.insert(0, sys.argv[3])
import check_lora_against_torch as c, safetensors_np
config = json.load(open(sys.argv[1] + "/config.json"))
weights, _ = safetensors_np.load(sys.argv[1] + "/model.safetensors")
cfg = json.load(open(sys.argv[2] + "/adapter_config.json"))
adapter, _ = safetensors_np.load(sys.argv[2] + "/adapter_model.safetensors")
bad = c.check_format(config, weights, cfg, adapter)
assert not bad, bad
assert cfg["r"] == 4 and cfg["lora_alpha"] == 8, cfg
print(f"format OK: {len(adapter)} tensors")
PY
  run $arch-dp2 $arch.yaml 2 parallel.zero=1
  compare $arch-r1 $arch-dp2 0
  run $arch-tp2 $arch.yaml 2 parallel.tp=2
  compare $arch-r1 $arch-tp2 0
  run $arch-pp2 $arch.yaml 2 parallel.pp=2
  compare $arch-r1 $arch-pp2 0
done
# Dropout masks come from the tokens and the whole input's columns: tp2 (a row-parallel
# linear's input split) and pp2 (micro-batches in 1F1B order) reproduce the one-rank curve.
run llama-drop llama.yaml 1 finetune.dropout=0.3
run llama-drop-tp2 llama.yaml 2 parallel.tp=2 finetune.dropout=0.3
compare llama-drop llama-drop-tp2 0
run llama-drop-pp2 llama.yaml 2 parallel.pp=2 finetune.dropout=0.3
compare llama-drop llama-drop-pp2 0
/usr/bin/python3 - llama-r1.jsonl llama-drop.jsonl <<'PY' || fail "dropout did not change the run"
import json, sys
a, b = ({json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p)} for p in sys.argv[1:])
assert max(abs(a[s] - b[s]) / a[s] for s in a) > 1e-4, (a, b)  # 10x the tolerance
PY
# Adapters sharded (ZeRO-3) and tensor parallel with sequence parallelism.
run llama-zero3 llama.yaml 2 parallel.zero=3
compare llama-r1 llama-zero3 0
run llama-tp2-sp llama.yaml 2 parallel.tp=2 parallel.sequence_parallel=true
compare llama-r1 llama-tp2-sp 0

# Exact resume: steps 4-6 resumed from step 3's checkpoint equal the uninterrupted run's.
run llama-ck llama.yaml 1 checkpoint.every=3 checkpoint.keep=0
run llama-res llama.yaml 1 checkpoint.resume=$WORK/llama-ck/step-0000003
compare llama-r1 llama-res 1
/usr/bin/python3 - llama-ck/step-0000003 <<'PY' || fail "the checkpoint holds more than adapters"
import json, sys
text = json.dumps(json.load(open(sys.argv[1] + "/index.json")))
assert "lora_A" in text and "embed_tokens" not in text and "q_proj.weight\"" not in text
PY

# Merge, then: the merged weights are base + scale B A, its logits base + adapter (PyTorch).
"$LLMRUN" convert --merge-lora llama-r1/adapter --base llama-pre/model --to hf merged >merge.log 2>&1 || { cat merge.log; fail "merge"; }
/usr/bin/python3 - llama-pre/model llama-r1/adapter merged "$SRC/tests/oracle" <<'PY' || fail "merged model"
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[4])
import check_lora_against_torch as c, safetensors_np, torch_models
config = json.load(open(sys.argv[1] + "/config.json"))
base, _ = safetensors_np.load(sys.argv[1] + "/model.safetensors")
adapter, _ = safetensors_np.load(sys.argv[2] + "/adapter_model.safetensors")
cfg = json.load(open(sys.argv[2] + "/adapter_config.json"))
merged, _ = safetensors_np.load(sys.argv[3] + "/model.safetensors")
assert merged.keys() == base.keys()
s = cfg["lora_alpha"] / cfg["r"]
changed = 0
for n, w in base.items():
    m = n[:-len(".weight")]
    a = adapter.get("base_model.model." + m + ".lora_A.weight")
    want = w if a is None else w + s * adapter["base_model.model." + m + ".lora_B.weight"] @ a
    changed += a is not None
    assert np.abs(merged[n] - want).max() < 1e-6, n
assert changed == 7 * config["num_hidden_layers"], changed
tokens = torch.as_tensor(np.arange(2 * 16).reshape(2, 16) % 97)
model, _ = c.build(config, base, adapter, cfg)
ref = model.forward(tokens).detach().numpy()
got = torch_models.build_model(config, torch_models.make_params(config, merged)).forward(tokens).detach().numpy()
err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
assert err < 1e-5, err
print(f"merged logits = base + adapter within {err:.1e}")
PY
# The continued adapter starts where the merged model is: same first loss.
run cont llama.yaml 1 train.steps=1 finetune.init_adapter=$WORK/llama-r1/adapter
sed "s#from: llama-pre/model#from: merged#; /^finetune/d" llama.yaml > full.yaml
run full full.yaml 1 train.steps=1
/usr/bin/python3 - <<'PY' || fail "init_adapter does not continue the adapter"
import json
a = json.loads(open("cont.jsonl").readline())["loss"]
b = json.loads(open("full.jsonl").readline())["loss"]
assert abs(a - b) / b < 1e-5, (a, b)
print(f"continued adapter's first loss {a:.6f} = merged model's {b:.6f}")
PY

# plan shows LoRA's memory: the frozen base and the adapters the trainer builds (8192 here).
"$LLMRUN" plan llama.yaml > plan.txt 2>&1 || { cat plan.txt; fail "plan"; }
grep -qE "stage 0: frozen base .* adapters 8192 parameters: params 32.8 KB, grads 32.8 KB, optimizer 65.5 KB" plan.txt ||
  { cat plan.txt; fail "plan lacks LoRA memory"; }
grep -q "0.008M trainable" llama-r1.log || fail "trainer's adapter count differs from plan's"

# finetune.base_dtype: bf16 (GPT-2: tied table; Llama: untied): the base is held in bf16 plus
# fp32 copies of the buckets in use. The run's measured base bytes (mem_params minus the
# adapters) equal plan's byte for byte, below the fp32 base's; it trains, and its losses stay
# near the fp32 base's (they differ by the base's bf16 rounding, which oracle.lora_*-bf16 checks).
for arch in gpt2 llama; do
  run $arch-bf16 $arch.yaml 1 finetune.base_dtype=bf16
  grep -q "frozen base in bf16" $arch-bf16.log || fail "$arch: no bf16 base in the log"
  "$LLMRUN" plan $arch.yaml --set finetune.base_dtype=bf16 > plan-$arch-bf16.txt 2>&1 ||
    { cat plan-$arch-bf16.txt; fail "plan bf16"; }
  "$LLMRUN" plan $arch.yaml > plan-$arch-fp32.txt 2>&1 || { cat plan-$arch-fp32.txt; fail "plan fp32"; }
  /usr/bin/python3 - $arch plan-$arch-bf16.txt plan-$arch-fp32.txt $arch-bf16.jsonl $arch-r1.jsonl <<'PY' ||
import json, re, sys
arch, plan_bf16, plan_fp32, run, fp32_run = sys.argv[1:]
text = open(plan_bf16).read()
m = re.search(r"stage 0: frozen base .*? \(([\d.]+\w?) bf16 weights .*?, (\d+) bytes, no gradients.*?adapters (\d+) parameters", text)
assert m, text
planned, adapters = int(m.group(2)), int(m.group(3))
fp32_line = re.search(r"stage 0: frozen base .*", open(plan_fp32).read()).group(0)
recs = [json.loads(l) for l in open(run) if '"mem_params"' in l]
assert len(recs) == 6, len(recs)
measured = recs[-1]["mem_params"] - 4 * adapters
assert measured == planned, f"{arch}: run holds {measured} base bytes, plan says {planned}"
fp32_measured = [json.loads(l) for l in open(fp32_run) if '"mem_params"' in l][-1]["mem_params"] - 4 * adapters
assert planned < fp32_measured, (planned, fp32_measured, fp32_line)
a = [r["loss"] for r in recs]
b = [json.loads(l)["loss"] for l in open(fp32_run) if '"loss"' in l]
assert a[-1] < a[0], f"bf16 base did not train: {a}"
worst = max(abs(x - y) / y for x, y in zip(a, b))
assert 0 < worst < 1e-2, f"bf16 base losses differ from fp32's by {worst:.2e}"
print(f"{arch} bf16 base: {measured} bytes held = plan (fp32 base {fp32_measured}); losses within {worst:.1e} of fp32's")
PY
    fail "$arch bf16 base"
done

expect_exit 2 "finetune.targets.1.*'qkv' is not a linear module of llama .*q_proj, k_proj" \
  "$LLMRUN" train llama.yaml --dry-run --set 'finetune.targets=[q_proj, qkv]'
expect_exit 2 "finetune.*needs model.from" "$LLMRUN" train llama-base.yaml --dry-run --set finetune.method=lora --set 'finetune.targets=[q_proj]'
echo "PASS"
