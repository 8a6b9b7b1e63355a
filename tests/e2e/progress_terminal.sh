# Long commands show a progress line on a terminal and nothing when piped: `convert` both ways,
# model loading (generate / serve / train's model.from), checkpoint save and resume, `bench
# kernels` and `plan --search`. Under a pseudo-terminal (util-linux `script`) each redraws
# "what: done / total unit (100%)" in place; with stderr redirected only summary lines remain.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
cd "$WORK"
command -v script >/dev/null || fail "script (util-linux) is required for this test"
"$MAKE_MODEL" hf gpt2 2 64 4 64 256 4
# On a terminal: the line is drawn with carriage returns and ends at 100%.
script -qec "$LLMRUN convert hf --to checkpoint ck" /dev/null > tty1.txt || { cat tty1.txt; fail "convert on a tty"; }
grep -q $'\r\033\\[Kreading hf: .* MB (100%)' tty1.txt || { cat -A tty1.txt; fail "no progress line for convert --to checkpoint"; }
script -qec "$LLMRUN convert ck --to hf hf2" /dev/null > tty2.txt || { cat tty2.txt; fail "convert --to hf on a tty"; }
grep -q $'\r\033\\[Kwriting hf2: .* MB (100%)' tty2.txt || { cat -A tty2.txt; fail "no progress line for convert --to hf"; }
# Piped: the summary only.
rm -rf ck hf2
"$LLMRUN" convert hf --to checkpoint ck 2>piped1.txt | cat
"$LLMRUN" convert ck --to hf hf2 2>piped2.txt | cat
! grep -qE $'reading|writing hf2|\r' piped1.txt piped2.txt || { cat -A piped1.txt piped2.txt; fail "progress printed into a pipe"; }
grep -q "wrote .*hf2" piped2.txt || fail "no summary line: $(cat piped2.txt)"

# Model loading (generate and serve share load_model_dir), bench kernels, plan --search.
on_tty() {  # on_tty NAME PATTERN COMMAND...: COMMAND on a pseudo-terminal draws PATTERN at 100%
  local name=$1 pattern=$2; shift 2
  script -qec "$*" /dev/null > "$name.tty" || { cat "$name.tty"; fail "$name on a tty"; }
  grep -qE $'\r\033\\[K'"$pattern"' \(100%\)' "$name.tty" || { cat -A "$name.tty"; fail "no progress line for $name"; }
}
on_tty generate 'loading .*model.safetensors: .* MB' "$LLMRUN generate hf --prompt hi --max-tokens 2"
for i in $(seq 40); do echo "some text for the recipe, line $i"; done > text.txt
cat > r.yaml <<'YAML'
model: {from: hf}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2, global_batch: 2, lr: 1.0e-3, warmup: 1}
checkpoint: {dir: ckpt, every: 2}
YAML
on_tty kernels 'bench kernels: .* kernels' "$LLMRUN bench kernels r.yaml --repeat 1 --threads 1"
on_tty search 'searching layouts: .* layouts' "$LLMRUN plan r.yaml --search --nproc 4 --peak-flops 1e11"
# Training from model.from: loading the weights, saving the checkpoint; then a resume loads it.
on_tty train_save 'saving step-0000002: .* MB' "$LLMRUN train r.yaml"
grep -qE $'\r\033\\[Kloading .*model.safetensors: .* MB \(100%\)' train_save.tty || { cat -A train_save.tty; fail "no progress line for model.from"; }
on_tty train_resume 'loading step-0000002: .* MB' "$LLMRUN train r.yaml --set train.steps=3 --set checkpoint.resume=auto"
# Piped: none of them draws.
"$LLMRUN" train r.yaml --set train.steps=4 --set checkpoint.resume=auto 2>piped3.txt | cat
"$LLMRUN" plan r.yaml --search --nproc 4 --peak-flops 1e11 2>piped4.txt >/dev/null
! grep -qE $'\r|saving step|loading step|searching' piped3.txt piped4.txt || { cat -A piped3.txt piped4.txt; fail "progress printed into a pipe"; }
echo "progress_terminal: ok"
