# Trains a tiny GPT-2 and a tiny Llama through the real binary on a repeated sentence; the
# loss must fall far below what chance allows (ln 256 = 5.5 for bytes), and greedy
# generation from the saved model dir must reproduce the memorised continuation.
source "$(dirname "$0")/common.bash"
LINE="llmrun remembers: the quick brown fox jumps over the lazy dog. "
for i in $(seq 200); do printf '%s' "$LINE"; done > "$WORK/text.txt"

for arch in gpt2 llama; do
  cat > "$WORK/$arch.yaml" <<YAML
model: {arch: $arch, layers: 2, d_model: 64, heads: 4, seq_len: 64, ffn: 128}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 120, micro_batch: 8, lr: 3.0e-3, warmup: 10, seed: 3}
checkpoint: {dir: out-$arch}
logging: {every: 10, metrics: out-$arch-metrics.jsonl}
YAML
  "$LLMRUN" train "$WORK/$arch.yaml" 2>"$WORK/train.log" || { cat "$WORK/train.log"; fail "$arch training failed"; }
  last_loss=$(tail -n 1 "$WORK/out-$arch-metrics.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
  /usr/bin/python3 -c "import sys; sys.exit(0 if $last_loss < 0.3 else 1)" || fail "$arch final loss $last_loss not below 0.3"
  for f in config.json model.safetensors tokenizer.json; do
    [ -f "$WORK/out-$arch/model/$f" ] || fail "$arch model dir lacks $f"
  done
  out=$("$LLMRUN" generate "$WORK/out-$arch/model" --prompt "the quick brown" --max-tokens 40 --temperature 0)
  case "$out" in
    "the quick brown fox jumps over the lazy dog. llmrun"*) ;;
    *) fail "$arch generated '$out'" ;;
  esac
  echo "$arch: final loss $last_loss; generated: $out"
done
