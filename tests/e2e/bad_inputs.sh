# Each user mistake exits 2 with one error line naming the problem, and writes nothing.
source "$(dirname "$0")/common.bash"
cd "$WORK"
printf 'some text for training, long enough to cut windows from. %.0s' $(seq 50) > text.txt
good='model: {arch: gpt2, layers: 1, d_model: 32, heads: 4, seq_len: 16}
data: {train: [{path: text.txt}]}
train: {steps: 2, micro_batch: 2}
checkpoint: {dir: out}'

check() {  # check NAME PATTERN YAML
  printf '%s\n' "$3" > "$1.yaml"
  expect_exit 2 "$2" "$LLMRUN" train "$1.yaml"
  [ "$(grep -c '^error:' "$WORK/cmd.stderr")" = 1 ] || fail "$1: expected exactly one error line"
  [ ! -e out ] || fail "$1: left output behind"
}

check malformed 'malformed.yaml:2:[0-9]+' 'model: {arch: gpt2
data: [oops'
check unknown_key 'unknown_key.yaml:1:[0-9]+.*model.depth.*unknown key' \
  "model: {arch: gpt2, depth: 3, d_model: 32, heads: 4}
data: {train: [{path: text.txt}]}"
check wrong_type 'wrong_type.yaml:3:[0-9]+.*train.steps.*integer' "${good/steps: 2/steps: many}"
check heads 'heads.yaml:1:[0-9]+.*model.heads.*d_model' "${good/heads: 4/heads: 5}"
check missing_data 'missing_data.yaml:2:[0-9]+.*nowhere.txt' "${good/text.txt/nowhere.txt}"
check unwritable_ckpt 'checkpoint.dir.*/proc/llmrun' "${good/dir: out/dir: /proc/llmrun/out}"

printf '%s\n' "$good" > good.yaml
expect_exit 2 'train.lr' "$LLMRUN" train good.yaml --set train.lr=-1
expect_exit 2 'recipe' "$LLMRUN" train
expect_exit 2 'no-such-flag' "$LLMRUN" train good.yaml --no-such-flag
expect_exit 2 'nowhere.yaml' "$LLMRUN" train nowhere.yaml
expect_exit 2 'not a model directory' "$LLMRUN" generate nowhere --prompt hi
[ ! -e out ] || fail "bad input left output behind"
echo "bad inputs: all rejected with exit 2"
