# Bad input gets one readable line: YAML nested past yaml-cpp's limit, binary garbage as a
# recipe (no raw control bytes reach the terminal), --nproc 0 and other bad rank counts, a
# bad LLMRUN_PEAK_FLOPS.
source "$(dirname "$0")/common.bash"
cd "$WORK"

# one_line CODE PATTERN CMD...: exit CODE, stderr one line matching PATTERN, printable, short.
one_line() {
  local want=$1 pattern=$2; shift 2
  expect_exit "$want" "$pattern" "$@"
  local lines; lines=$(grep -c . "$WORK/cmd.stderr")
  [ "$lines" = 1 ] || { cat -A "$WORK/cmd.stderr" >&2; fail "'$*': $lines lines of errors, expected 1"; }
  if LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <"$WORK/cmd.stderr"); then
    cat -A "$WORK/cmd.stderr" >&2; fail "'$*': control bytes in the error"
  fi
  local len; len=$(wc -c <"$WORK/cmd.stderr")
  [ "$len" -le 600 ] || { cat "$WORK/cmd.stderr" >&2; fail "'$*': a $len-byte error line"; }
  echo "$(head -c 160 "$WORK/cmd.stderr")"
}

python3 -c "print('model: ' + '[' * 20000 + ']' * 20000)" > deep.yaml
one_line 2 "deep.yaml:1: nested more than [0-9]+ levels deep" "$LLMRUN" train deep.yaml
python3 -c "print('model:\n' + ''.join(' ' * i + 'a:\n' for i in range(3000)))" > deepmap.yaml
one_line 2 "deepmap.yaml:[0-9]+: nested more than [0-9]+ levels deep" "$LLMRUN" train deepmap.yaml

printf 'model: {arch: \x1b[31mllama\x07}\ntrain: {steps: 1}\n\x00\x01\x02garbage: \x9b\xff\xfe\n' > garbage.yaml
one_line 2 "garbage.yaml" "$LLMRUN" train garbage.yaml
head -c 3000 /dev/urandom > random.yaml
expect_exit 2 "random.yaml" "$LLMRUN" train random.yaml
if LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <cmd.stderr); then cat -A cmd.stderr >&2; fail "random bytes: control bytes in the error"; fi
printf 'model: {arch: llama}\n\x1b]0;title\x07: 1\n' > key.yaml
one_line 2 'key.yaml:2:1: .*\\x1B\]0;title\\x07' "$LLMRUN" train key.yaml

for n in 0 -1 abc 99999999999 1.5; do
  one_line 2 "nproc" "$LLMRUN" train deep.yaml --nproc "$n"
done
printf 'some text for the recipe. %.0s' $(seq 50) > text.txt
cat > ok.yaml <<'YAML'
model: {arch: llama, layers: 2, d_model: 32, heads: 4, seq_len: 32, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 1, micro_batch: 1, global_batch: 1}
YAML
one_line 2 "LLMRUN_PEAK_FLOPS=fast: expected a positive number" env LLMRUN_PEAK_FLOPS=fast "$LLMRUN" plan ok.yaml
echo "messages: ok"
