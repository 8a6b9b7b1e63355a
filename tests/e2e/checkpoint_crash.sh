# kill -9 at random moments while checkpoints are being written (every step, a model big
# enough that saving takes a good share of the time): after every kill, `latest` must name a
# checkpoint that loads (checksums verified) and training must resume from it.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 200); do printf 'the quick brown fox %d jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 4, d_model: 256, heads: 4, seq_len: 16}
data: {tokenizer: byte, train: [{path: text.txt}]}
train: {steps: 100000, micro_batch: 1, lr: 1.0e-4, seed: 2}
checkpoint: {dir: run, every: 1, keep: 2, resume: auto}
logging: {every: 1}
YAML
prev=0
for round in 1 2 3 4 5; do
  "$LLMRUN" train r.yaml 2>"train$round.log" & pid=$!
  # wait for the first save of this process (up to 60 s: a loaded machine starts slowly; killed
  # before it, latest could not have moved on) ...
  for _ in $(seq 3000); do
    grep -q "checkpoint .*step-" "train$round.log" && break
    kill -0 $pid 2>/dev/null || { cat "train$round.log"; fail "round $round: training exited"; }
    sleep 0.02
  done
  grep -q "checkpoint .*step-" "train$round.log" || { kill -9 $pid; cat "train$round.log"; fail "round $round: no save in 60 s"; }
  # ... then kill at a random point of the following saves
  sleep "0.$(( RANDOM % 9 + 1 ))$(( RANDOM % 10 ))"
  kill -9 $pid; wait $pid 2>/dev/null || true
  [ -f run/latest ] || fail "round $round: no latest after kill -9"
  step=$(sed 's/step-0*//' run/latest)
  [ "$step" -gt "$prev" ] || fail "round $round: latest went from $prev to $step"
  "$LLMRUN" convert run --to hf "hf$round" 2>"convert$round.log" || { cat "convert$round.log"; fail "round $round: latest ($step) does not load"; }
  if [ "$round" -gt 1 ]; then
    grep -q "resumed from .*step-0*$prev at step $prev" "train$round.log" || { cat "train$round.log"; fail "round $round did not resume from $prev"; }
  fi
  echo "round $round: killed, latest = step $step ($(ls run | tr '\n' ' '))"
  prev=$step
done
# Stale temporaries of killed writers are cleaned up by the next save.
"$LLMRUN" train r.yaml --set train.steps=$((prev + 1)) 2>final.log || { cat final.log; fail "final resume failed"; }
leftover=$(ls run | grep -E 'tmp-|deleting|old-' || true)
[ -z "$leftover" ] || fail "temporaries left behind: $leftover"
[ "$(ls -d run/step-* | wc -l)" -le 2 ] || fail "keep: 2 left $(ls run)"
echo "crash test: 5 kills, every latest loaded and resumed"
