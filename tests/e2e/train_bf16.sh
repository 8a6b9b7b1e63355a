# precision.compute: bf16 (GEMM operands rounded to bf16, fp32 accumulation) trains like fp32:
# the same short run of the GPT-2 and Llama tiny recipes, once in each precision, gives loss
# curves within 1% of each other after step 5, yet not identical (the bf16 path is taken).
# Bad values of precision.compute and launch.backend are refused with their location.
source "$(dirname "$0")/common.bash"
LINE="llmrun remembers: the quick brown fox jumps over the lazy dog. "
for i in $(seq 100); do printf '%s' "$LINE"; done > "$WORK/text.txt"

for arch in gpt2 llama; do
  for compute in fp32 bf16; do
    cat > "$WORK/$arch-$compute.yaml" <<YAML
model: {arch: $arch, layers: 2, d_model: 64, heads: 4, seq_len: 32, ffn: 128}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 12, micro_batch: 4, lr: 3.0e-3, warmup: 3, seed: 3}
precision: {compute: $compute}
launch: {backend: cpu}
logging: {every: 1, metrics: $arch-$compute.jsonl}
YAML
    "$LLMRUN" train "$WORK/$arch-$compute.yaml" 2>"$WORK/train.log" || { cat "$WORK/train.log"; fail "$arch $compute training failed"; }
    grep -q "info: backend cpu with .* $compute GEMMs" "$WORK/train.log" || { cat "$WORK/train.log"; fail "$arch $compute: no backend line"; }
  done
  /usr/bin/python3 - "$WORK/$arch-fp32.jsonl" "$WORK/$arch-bf16.jsonl" "$arch" <<'PY' || fail "$arch bf16 does not track fp32"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a[5:], b[5:]))
print(f"{sys.argv[3]}: fp32 {a[0]:.4f} -> {a[-1]:.4f}, bf16 {b[0]:.4f} -> {b[-1]:.4f}, worst rel diff after step 5 {worst:.2e}")
assert a != b, "bf16 losses equal fp32 ones bit for bit: the bf16 path did not run"
assert worst < 0.01, worst
assert a[-1] < a[0] - 0.5, "fp32 did not learn"
PY
done

expect_exit 2 "precision.compute: 'fp16' is not one of fp32, bf16" "$LLMRUN" train "$WORK/gpt2-fp32.yaml" --set precision.compute=fp16
expect_exit 2 "launch.backend: 'tpu' is not one of auto, cpu, cuda" "$LLMRUN" train "$WORK/gpt2-fp32.yaml" --set launch.backend=tpu
echo "OK"
