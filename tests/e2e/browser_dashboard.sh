# `llmrun dashboard` over real training runs, in Debian's headless chromium (chromedriver):
# curves per run, overlays, live growth of a metrics file, log scale, smoothing, recipe diff
# (tests/browser/dashboard_test.py); the JSON endpoints' errors. LLMRUN_SCREENSHOTS=DIR keeps
# the screenshots.
source "$(dirname "$0")/common.bash"
cd "$WORK"
shots=${LLMRUN_SCREENSHOTS:-$WORK}
mkdir -p "$shots" runs/live
for i in $(seq 200); do printf 'the quick brown fox %d jumps over the lazy dog. ' $i; done > text.txt
cat > r.yaml <<'YAML'
model: {arch: gpt2, layers: 1, d_model: 32, heads: 2, seq_len: 32}
data: {tokenizer: byte, train: [{path: text.txt}], valid: [{path: text.txt}]}
train: {steps: 12, micro_batch: 4, global_batch: 4, lr: 3.0e-3, warmup: 2, seed: 3, eval_every: 4, eval_batches: 1}
checkpoint: {dir: runs/a/ckpt}
logging: {every: 1, metrics: runs/a/metrics.jsonl}
YAML
"$LLMRUN" train r.yaml 2>train.log || { cat train.log; fail "run a failed"; }
"$LLMRUN" train r.yaml --set checkpoint.dir=runs/b/ckpt --set logging.metrics=runs/b/metrics.jsonl \
  --set train.lr=1e-3 2>>train.log || { cat train.log; fail "run b failed"; }
# "live": a run seen while it trains: 5 lines now, the rest appended while the page is open.
head -5 runs/a/metrics.jsonl > runs/live/metrics.jsonl
tail -n +6 runs/a/metrics.jsonl > rest.jsonl
echo '{"not": "metrics"}' > runs/other.jsonl  # JSONL that is not a metrics file: not a run

"$LLMRUN" dashboard runs --port 0 2>dash.log & DASH_PID=$!
trap 'kill $DASH_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do  # up to 60 s: a loaded machine starts slowly
  PORT=$(grep -so 'on http://127.0.0.1:[0-9]*' dash.log | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  kill -0 $DASH_PID 2>/dev/null || { cat dash.log; fail "dashboard exited"; }
  sleep 0.1
done
[ -n "$PORT" ] || fail "dashboard did not start"
URL="http://127.0.0.1:$PORT"

# The endpoints: read-only, no path escapes.
/usr/bin/python3 - "$URL" <<'PY' || fail "dashboard endpoints"
import json, sys, urllib.request, urllib.error
url = sys.argv[1]
def get(path, method="GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, method=method)) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
st, body = get("/api/runs")
runs = json.loads(body)["runs"]
assert st == 200 and [r["id"] for r in runs] == ["a/metrics.jsonl", "b/metrics.jsonl", "live/metrics.jsonl"], runs
assert runs[0]["recipe"]["train"]["lr"] == 0.003 and runs[1]["recipe"]["train"]["lr"] == 0.001, runs
st, body = get("/api/metrics?run=a%2Fmetrics.jsonl&offset=0")
chunk = json.loads(body)
assert st == 200 and len(chunk["records"]) == 15 and not chunk["reset"], chunk  # 12 steps + 3 validations
st, body = get(f"/api/metrics?run=a/metrics.jsonl&offset={chunk['offset']}")
assert json.loads(body)["records"] == [], body
st, body = get("/api/metrics?run=a/metrics.jsonl&offset=99999999")  # the file shrank: start over
assert json.loads(body)["reset"] and len(json.loads(body)["records"]) == 15
for bad in ("../r.yaml", "/etc/passwd", "a/../../text.txt.jsonl", "a/ckpt/latest"):
    st, body = get("/api/metrics?run=" + bad)
    assert st == 404 and "error" in json.loads(body), (bad, st, body)
assert get("/api/runs", "POST")[0] == 405
assert get("/nothing")[0] == 404
st, body = get("/")
assert st == 200 and b"llmrun dashboard" in body
PY

/usr/bin/python3 "$SRC/tests/browser/dashboard_test.py" "$URL" runs rest.jsonl "$shots" || fail "dashboard in chromium"

expect_exit 2 "error: nowhere is not a directory" "$LLMRUN" dashboard nowhere --port 0
expect_exit 2 "error: --host 'localhost:1' is not an IP address" "$LLMRUN" dashboard runs --host localhost:1
echo "dashboard: ok"
