# Writes a run depends on are checked. The decision: a metrics line that cannot be written
# warns (with the cause, at the first loss and at 10, 100, ... lost lines, and a count at the
# end) and training goes on, exit 0; the metrics file never holds half a line. The exported
# model, checkpoints and data prepare's output fail the command (exit 2, the path and the
# system's reason) and publish nothing.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/reliability_common.bash"

# Metrics to a device that is always full: training finishes, the loss is said loudly.
timed "$LLMRUN" train r.yaml --set logging.metrics=/dev/full --set train.steps=12 --set checkpoint.dir=ok
expect_job 0 "warn.*logging.metrics: cannot write /dev/full: No space left on device; 1 line lost so far; training goes on" 60 "metrics on a full device"
grep -q "logging.metrics: cannot write /dev/full: .*; 10 lines lost so far" err.log || { cat err.log; fail "no warning at 10 lost lines"; }
grep -q "logging.metrics: 12 of 12 lines could not be written to /dev/full" err.log || { cat err.log; fail "no count of lost lines at the end"; }
[ "$(grep -c 'cannot write /dev/full' err.log)" = 2 ] || fail "metrics warnings should come at 1 and 10 lost lines only"
[ -f ok/model/model.safetensors ] || fail "metrics on a full device: the model was not exported"

# Exports past a file size limit (SIGXFSZ ignored: writes fail with EFBIG): exit 2, nothing published.
timed bash -c "trap '' XFSZ; ulimit -f 16; exec \"$LLMRUN\" train r.yaml --set checkpoint.dir=lim"
expect_job 2 "lim/.*: (cannot write|cannot close|cannot fsync): File too large" 30 "export past a file size limit"
[ ! -e lim/model ] && [ ! -e lim/latest ] || { ls -R lim; fail "export past a file size limit: something was published"; }
[ -z "$(find lim -name '*.tmp*' 2>/dev/null | head -n 1)" ] || { find lim; fail "export past a file size limit: temporary files left"; }
cp text.txt t2.txt; cp text.txt t3.txt
timed bash -c "trap '' XFSZ; ulimit -f 4; exec \"$LLMRUN\" data prepare --tokenizer byte --output big --input text.txt t2.txt t3.txt"
expect_job 2 "big.bin.tmp: cannot write: File too large" 30 "data prepare past a file size limit"
[ -z "$(ls big.* 2>/dev/null)" ] || fail "data prepare past a file size limit left $(ls big.*)"

if mkdir -p full && mount -t tmpfs -o size=48k tmpfs full 2>/dev/null; then
  trap 'umount "$WORK/full" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  # Metrics on a filesystem that fills up mid-run: whole lines only, training goes on.
  head -c 45000 /dev/zero > full/filler
  timed "$LLMRUN" train r.yaml --set logging.metrics=full/m.jsonl --set train.steps=16
  expect_job 0 "logging.metrics: cannot write .*full/m.jsonl: No space left on device" 60 "metrics on a filling tmpfs"
  [ -s full/m.jsonl ] || fail "no metrics written before the disk filled"
  [ "$(tail -c 1 full/m.jsonl | od -An -c | tr -d ' ')" = '\n' ] || fail "the metrics file ends in half a line"
  python3 -c "import json,sys; [json.loads(l) for l in open('full/m.jsonl')]" || fail "a metrics line is not JSON"
  rm -f full/filler full/m.jsonl
  # The exported model on a full tmpfs: exit 2 with the cause, nothing published.
  timed "$LLMRUN" train r.yaml --set checkpoint.dir=full/ck --set "model.d_model=64" --set model.ffn=256
  expect_job 2 "full/ck/.*No space left on device" 30 "export to a full tmpfs"
  [ ! -e full/ck/model ] && [ ! -e full/ck/latest ] || { ls -R full; fail "export to a full tmpfs: something was published"; }
  [ -z "$(find full -name '*.tmp*' | head -n 1)" ] || { find full; fail "export to a full tmpfs: temporary files left"; }
  umount full
else
  echo "tmpfs cases skipped (cannot mount one here)"
fi
echo "writes: ok"
