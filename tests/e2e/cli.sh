# The command line surface: version, help on every subcommand, dry-run.
source "$(dirname "$0")/common.bash"
"$LLMRUN" --version | grep -E '^llmrun [0-9]+\.[0-9]+' >/dev/null || fail "--version"
for sub in train generate; do
  "$LLMRUN" $sub --help | grep -i usage >/dev/null || fail "$sub --help"
done
expect_exit 2 'subcommand' "$LLMRUN"
out=$("$LLMRUN" train "$SRC/recipes/gpt2-124m.yaml" --dry-run)
for key in parameters tokens_per_step grad_accum_steps flops_per_token; do
  grep -q "$key" <<<"$out" || fail "--dry-run lacks $key"
done
grep -qE 'parameters: 12[0-9]{7}' <<<"$out" || fail "--dry-run: GPT-2 124M parameter count wrong: $(grep parameters <<<"$out")"
echo "cli: basics ok"

# A model whose embedding table is wider than its tokenizer (vocab 1000, 256 byte tokens):
# generation samples only ids the tokenizer can decode.
"$(dirname "$LLMRUN")/tests/llmrun_make_model_dir" "$WORK/wide" gpt2 2 32 4 64 1000 1 >/dev/null
for t in 0 1.5; do
  "$LLMRUN" generate "$WORK/wide" --prompt "hi" --max-tokens 40 --temperature $t --seed 3 >/dev/null ||
    fail "generate on a padded vocabulary (temperature $t)"
done
echo "cli: generate on a padded vocabulary ok"

# --timing reports prefill and decode time on stderr and leaves the generated text alone.
plain=$("$LLMRUN" generate "$WORK/wide" --prompt "hi" --max-tokens 12 --temperature 0)
timed=$("$LLMRUN" generate "$WORK/wide" --prompt "hi" --max-tokens 12 --temperature 0 --timing 2>"$WORK/timing.err")
[ "$plain" = "$timed" ] || fail "generate --timing changed stdout: '$timed' vs '$plain'"
grep -qE '^timing: prefill 2 tokens [0-9.]+ ms; decode [0-9]+ steps [0-9.]+ ms \([0-9.]+ ms/token, [0-9.]+ tokens/s\)$' \
  "$WORK/timing.err" || fail "generate --timing: $(cat "$WORK/timing.err")"
echo "cli: generate --timing ok"

# GPT-2 cannot go past its context (64 here): generate stops there and says so on stderr; a
# run inside the context says nothing.
"$LLMRUN" generate "$WORK/wide" --prompt "hi" --max-tokens 100 --temperature 0 >/dev/null 2>"$WORK/ctx.err" ||
  fail "generate past the context"
grep -qx "note: stopped after 62 of 100 tokens: the model's context length is 64 tokens (prompt 2)" "$WORK/ctx.err" ||
  fail "generate past the context: stderr '$(cat "$WORK/ctx.err")'"
! grep -q 'note: stopped' "$WORK/timing.err" || fail "generate inside the context printed a note"
echo "cli: generate at the context length ok"
