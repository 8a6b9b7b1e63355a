# `llmrun plot`: curves from a real training run's metrics (and a second run overlaid) as a
# well-formed SVG whose series match the logged steps; PNG through rsvg-convert; one clear
# error naming the file and line for missing, empty and malformed input, and no output then.
source "$(dirname "$0")/common.bash"
cd "$WORK"
CHECK="/usr/bin/python3 $SRC/tests/plot/check_svg.py"
for i in $(seq 200); do printf 'the quick brown fox %d jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 1, d_model: 32, heads: 2, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}], valid: [{path: text.txt}]}
train: {steps: 12, micro_batch: 4, global_batch: 4, lr: 3.0e-3, warmup: 2, seed: 3, eval_every: 5, eval_batches: 1}
logging: {every: 2, metrics: a/metrics.jsonl}
YAML
"$LLMRUN" train r.yaml 2>train.log || { cat train.log; fail "training run failed"; }
"$LLMRUN" train r.yaml --set logging.metrics=b/metrics.jsonl --set train.lr=1e-3 2>>train.log || fail "second run failed"
# steps 1, 2, 4, ..., 12 -> 7 training lines; validation at 5, 10, 12
[ "$(grep -c '"loss"' a/metrics.jsonl)" = 7 ] && [ "$(grep -c val_loss a/metrics.jsonl)" = 3 ] ||
  fail "unexpected metrics file: $(cat a/metrics.jsonl)"

# One file: loss + val_loss, tokens/s and MFU panels, no file legend.
"$LLMRUN" plot a/metrics.jsonl -o one.svg 2>plot.log || { cat plot.log; fail "plot one file"; }
grep -q "wrote one.svg (1 file, 7 logged steps)" plot.log || fail "plot summary: $(cat plot.log)"
$CHECK one.svg =a/metrics.jsonl || fail "one.svg does not match a/metrics.jsonl"
# The checker itself must notice a wrong picture: the other run's numbers do not fit.
! $CHECK one.svg =b/metrics.jsonl >/dev/null || fail "checker accepted the wrong metrics file"

# Two files overlaid, legend names told apart by their directories; a title.
"$LLMRUN" plot a/metrics.jsonl b/metrics.jsonl -o two.svg --title "lr 3e-3 vs 1e-3" 2>plot.log ||
  { cat plot.log; fail "plot two files"; }
$CHECK two.svg a/metrics.jsonl=a/metrics.jsonl b/metrics.jsonl=b/metrics.jsonl || fail "two.svg does not match its inputs"
grep -q "lr 3e-3 vs 1e-3" two.svg || fail "no title"

# PNG: rendered with rsvg-convert; a real PNG of the requested width.
"$LLMRUN" plot a/metrics.jsonl b/metrics.jsonl -o curves.PNG --width 640 2>plot.log || { cat plot.log; fail "plot png"; }
/usr/bin/python3 - curves.PNG <<'PY' || fail "curves.PNG is not a 640-pixel-wide PNG"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR", "not a PNG"
w, h = struct.unpack(">II", b[16:24])
assert w == 640 and h > 400, (w, h)
PY
ls -A | grep '\.tmp-' >/dev/null && fail "temporary files left: $(ls -A)"

# Hand-written files: a NaN loss (null) is left out, an unfinished last line is skipped.
printf '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": null}\n\n{"step": 3, "loss": 2.0}\n{"step": 4, "lo' > live.jsonl
"$LLMRUN" plot live.jsonl -o live.svg 2>plot.log || { cat plot.log; fail "plot live.jsonl"; }
grep -q "live.jsonl:5: skipping the unfinished last line" plot.log || fail "no warning for the unfinished line"
/usr/bin/python3 -c "
import xml.etree.ElementTree as ET, sys
p = [e for e in ET.parse('live.svg').iter('{http://www.w3.org/2000/svg}polyline') if e.get('data-quantity') == 'loss']
sys.exit(0 if len(p) == 1 and len(p[0].get('points').split()) == 2 else 1)" || fail "live.svg: expected 2 loss points"

# Errors: exit 2, one error line naming the file (and line), no picture written.
printf '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n{"step": 3, loss: 2.8}\n{"step": 4, "loss": 2.7}\n' > bad.jsonl
expect_exit 2 'error: bad.jsonl:3: not valid JSON' "$LLMRUN" plot bad.jsonl -o out.svg
printf '{"step": 1, "loss": "high"}\n' > str.jsonl
expect_exit 2 'error: str.jsonl:1: "loss" is "high", expected a number' "$LLMRUN" plot str.jsonl -o out.svg
printf '{"loss": 2.0}\n' > nostep.jsonl
expect_exit 2 'error: nostep.jsonl:1: missing an integer "step"' "$LLMRUN" plot nostep.jsonl -o out.svg
printf '[1, 2]\n' > arr.jsonl
expect_exit 2 'error: arr.jsonl:1: expected a JSON object, found array' "$LLMRUN" plot arr.jsonl -o out.svg
: > empty.jsonl
expect_exit 2 'error: empty.jsonl: file is empty' "$LLMRUN" plot a/metrics.jsonl empty.jsonl -o out.svg
printf '{"step": 1, "tokens": 5}\n' > other.jsonl
expect_exit 2 'error: other.jsonl: no line has "loss" or "val_loss"' "$LLMRUN" plot other.jsonl -o out.svg
expect_exit 2 'error: missing.jsonl: cannot open: No such file' "$LLMRUN" plot missing.jsonl -o out.svg
expect_exit 2 'error: a: is a directory' "$LLMRUN" plot a -o out.svg
expect_exit 2 'error: -o out.pdf: .* use .svg or .png' "$LLMRUN" plot a/metrics.jsonl -o out.pdf
expect_exit 2 'error: -o nodir/out.svg: directory nodir does not exist' "$LLMRUN" plot a/metrics.jsonl -o nodir/out.svg
expect_exit 2 'error: .*metrics' "$LLMRUN" plot -o out.svg
[ ! -e out.svg ] && [ ! -e out.pdf ] || fail "a refused plot wrote a file"
# A failed plot leaves an existing picture as it was.
cp one.svg keep.svg
expect_exit 2 'error: bad.jsonl:3' "$LLMRUN" plot bad.jsonl -o keep.svg
cmp -s one.svg keep.svg || fail "a failed plot changed keep.svg"
# PNG without rsvg-convert on PATH: says how to get it, or to use .svg.
mkdir emptybin
expect_exit 2 'error: writing x.png needs rsvg-convert.*librsvg2-bin.*\.svg' env PATH="$WORK/emptybin" "$LLMRUN" plot a/metrics.jsonl -o x.png
[ ! -e x.png ] && ! ls -A | grep '\.tmp-' >/dev/null || fail "a refused png left files: $(ls -A)"
echo "plot: OK"
