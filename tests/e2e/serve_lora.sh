# Multi-LoRA serving through the real binary: `serve BASE --lora a=DIR --lora b=DIR` with a
# LoRA adapter llmrun trained (a) and one derived from it with a different nonzero B (b).
# Greedy text from model=a (and b) equals `generate` on the `convert --merge-lora` merged
# model; a concurrent batch mixing the base and both adapters gives every request its text
# alone; the prefix cache never shares a prompt's blocks across adapters; /v1/models lists the
# adapters; unknown models get 404; /v1/load_lora_adapter and /v1/unload_lora_adapter (curl)
# load and unload at runtime, and refuse bad paths, ranks and targets with 400 while serving on;
# --max-loras caps the distinct adapters of a step (vLLM's meaning), --max-cpu-loras the loaded.
source "$(dirname "$0")/common.bash"
cd "$WORK"
for i in $(seq 80); do printf 'lora serve %d: the quick brown fox jumps over the lazy dog. ' $i; done > text.txt
# The adapter learns other text, so its greedy output differs from the base's.
for i in $(seq 80); do printf 'zebra %d sings: green apples fall from tall trees at night. ' $i; done > other.txt

cat > base.yaml <<YAML
model: {arch: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, seq_len: 64, ffn: 64}
data: {train: [{path: text.txt}]}
train: {steps: 60, micro_batch: 4, global_batch: 4, lr: 1.0e-2, warmup: 0, seed: 3}
YAML
"$LLMRUN" train base.yaml --set checkpoint.dir=pre >pre.log 2>&1 || { cat pre.log; fail "base model"; }
cat > lora.yaml <<YAML
model: {from: pre/model}
data: {train: [{path: other.txt}]}
train: {steps: 30, micro_batch: 4, global_batch: 4, lr: 3.0e-2, warmup: 0, seed: 3}
finetune: {method: lora, rank: 4, alpha: 8, targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}
YAML
"$LLMRUN" train lora.yaml --set checkpoint.dir=ft >ft.log 2>&1 || { cat ft.log; fail "LoRA run"; }

# b: a's A with B scaled by -3 (nonzero, different); bad copies for the refusals.
/usr/bin/python3 - ft/adapter "$SRC/tests/oracle" <<'PY' || fail "derived adapters"
import json, os, shutil, sys
sys.path.insert(0, sys.argv[2])
import safetensors_np
src = sys.argv[1]
w, _ = safetensors_np.load(src + "/adapter_model.safetensors")
cfg = json.load(open(src + "/adapter_config.json"))
assert any(k.endswith("lora_B.weight") and abs(v).max() > 0 for k, v in w.items())
def make(name, tensors, config):
    os.makedirs(name)
    safetensors_np.save(name + "/adapter_model.safetensors", tensors)
    json.dump(config, open(name + "/adapter_config.json", "w"))
make("b", {k: (v * -3 if "lora_B" in k else v) for k, v in w.items()}, cfg)
make("rank8", w, dict(cfg, r=8))
make("badtarget", w, dict(cfg, target_modules=["c_attn"]))
PY

"$LLMRUN" convert --merge-lora ft/adapter --base pre/model --to hf merged-a >ma.log 2>&1 || { cat ma.log; fail "merge a"; }
"$LLMRUN" convert --merge-lora b --base pre/model --to hf merged-b >mb.log 2>&1 || { cat mb.log; fail "merge b"; }
P1="lora serve 7: the quick"
P2="the lazy dog. lora"
for m in pre merged-a merged-b; do
  dir=$m; [ $m = pre ] && dir=pre/model
  for p in 1 2; do
    prompt=P$p
    "$LLMRUN" generate $dir --prompt "${!prompt}" --max-tokens 24 --temperature 0 \
      > "gen-$m-$p.txt" 2>gen.err || { cat gen.err; fail "generate $m"; }
  done
done

"$LLMRUN" serve pre/model --served-model-name tiny --lora a=ft/adapter --lora b=b --block-size 4 \
  --max-lora-rank 4 --host 127.0.0.1 --port 0 2>server.log &
SERVER_PID=$!
stop_server() { kill $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true; }
trap 'stop_server; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do  # up to 60 s: a loaded machine starts slowly
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' server.log | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  kill -0 $SERVER_PID 2>/dev/null || { cat server.log; fail "server exited during startup"; }
  sleep 0.1
done
[ -n "$PORT" ] || { cat server.log; fail "server did not start"; }
URL=http://127.0.0.1:$PORT

/usr/bin/python3 - "$URL" "$P1" "$P2" <<'PY' || { cat server.log; fail "serving adapters"; }
import json, sys, threading, urllib.error, urllib.request
url, prompts = sys.argv[1], sys.argv[2:]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
def complete(model, p, max_tokens=24):
    st, r = post("/v1/completions", {"model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0})
    assert st == 200, (model, st, r)
    assert r["model"] == model, r["model"]
    return r
files = {"tiny": "pre", "a": "merged-a", "b": "merged-b"}
alone = {}
for m, d in files.items():
    for i, p in enumerate(prompts):
        want = open(f"gen-{d}-{i + 1}.txt", errors="replace").read()
        got = complete(m, p)["choices"][0]["text"]
        # generate prints the prompt then its continuation
        assert want.rstrip("\n").endswith(got) and got, (m, p, want, got)
        alone[m, p] = got
print("model=a/b equal generate on the merged models; base equals the base model")
texts = {m: [alone[m, p] for p in prompts] for m in files}
assert texts["a"] != texts["tiny"] and texts["b"] != texts["a"] and texts["b"] != texts["tiny"], texts

# One batch mixing the base and both adapters: rounds of 6 concurrent requests (every model,
# every prompt). Whether they share steps depends on when their threads run (a loaded or 1-core
# machine can serialize them: then steps == tokens and no step holds both adapters), so the
# threads start together at a barrier and a round repeats, up to 8 times, until the counters
# show both; every round checks every text.
def counters():
    with urllib.request.urlopen(url + "/metrics") as resp:
        lines = resp.read().decode().splitlines()
    get = lambda n: float(next(l.split()[1] for l in lines if l.startswith(n + " ")))
    return get("llmrun:engine_steps_total"), get("llmrun:generation_tokens_total"), get("llmrun:lora_max_adapters_per_step")
for attempt in range(8):
    steps0, tokens0, _ = counters()
    jobs = [(m, p) for m in files for p in prompts]
    out, gate = {}, threading.Barrier(len(jobs))
    def run(m, p):
        gate.wait()
        out[m, p] = complete(m, p)["choices"][0]["text"]
    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads: t.start()
    for t in threads: t.join()
    assert out == alone, {k: (out.get(k), alone[k]) for k in alone if out.get(k) != alone[k]}
    steps1, tokens1, mixed = counters()
    # Batched: fewer steps than generated tokens (one at a time it would be one step per
    # token, plus the prefills), and a step ran a and b together.
    if steps1 - steps0 < tokens1 - tokens0 and mixed == 2: break
assert steps1 - steps0 < tokens1 - tokens0, f"{attempt + 1} rounds of 6 concurrent requests never shared a step: the last took {steps1 - steps0:.0f} steps for {tokens1 - tokens0:.0f} tokens"
assert mixed == 2, f"the default --max-loras 8 ran at most {mixed} adapters in a step ({attempt + 1} rounds)"
print(f"mixed batches give every request its text alone (round {attempt + 1}: {tokens1 - tokens0:.0f} tokens in {steps1 - steps0:.0f} steps)")

# Prefix cache: a long prompt computed under a is never found under b or the base; the same
# adapter finds it.
long = "Quick brown foxes jump over the lazy dogs"  # no earlier prompt starts so
cached = lambda m: complete(m, long, 2)["usage"]["prompt_tokens_details"]["cached_tokens"]
first = cached("a")
assert first == 0, first
assert cached("b") == 0 and cached("tiny") == 0, "a prompt's KV blocks were shared across adapters"
assert cached("a") > 0 and cached("b") > 0, "the prefix cache does not work per adapter"
print("prefix cache isolated per adapter")

st, r = post("/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 1})
assert st == 404 and "nope" in r["error"]["message"] and "'a'" in r["error"]["message"], (st, r)
with urllib.request.urlopen(url + "/v1/models") as resp:
    ids = [m["id"] for m in json.loads(resp.read())["data"]]
assert ids == ["tiny", "a", "b"], ids
PY

# Runtime load/unload with curl.
code() { curl -s -o resp.txt -w '%{http_code}' -X POST "$URL/$1" -H 'Content-Type: application/json' -d "$2"; }
[ "$(code v1/load_lora_adapter '{"lora_name": "c", "lora_path": "'$WORK/ft/adapter'"}')" = 200 ] || { cat resp.txt; fail "load c"; }
grep -q "added successfully" resp.txt || fail "load reply: $(cat resp.txt)"
curl -s "$URL/v1/models" | grep '"id":"c"' >/dev/null || fail "/v1/models lacks c"
curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"c\", \"prompt\": \"$P1\", \"max_tokens\": 24, \"temperature\": 0}" > c.json
/usr/bin/python3 -c "
import json, sys
got = json.load(open('c.json'))['choices'][0]['text']
assert got and open('gen-merged-a-1.txt', errors='replace').read().rstrip('\n').endswith(got), got" || fail "c differs from a"
[ "$(code v1/load_lora_adapter '{"lora_name": "c", "lora_path": "'$WORK/b'"}')" = 400 ] || fail "a second c was loaded"
grep -q "already loaded" resp.txt || fail "duplicate: $(cat resp.txt)"
[ "$(code v1/unload_lora_adapter '{"lora_name": "c"}')" = 200 ] || { cat resp.txt; fail "unload c"; }
[ "$(code v1/completions '{"model": "c", "prompt": "x", "max_tokens": 1}')" = 404 ] || fail "c still served"
[ "$(code v1/unload_lora_adapter '{"lora_name": "c"}')" = 404 ] || fail "unloading twice"
[ "$(code v1/load_lora_adapter '{"lora_name": "d", "lora_path": "'$WORK/nowhere'"}')" = 400 ] || fail "bad path"
grep -q "nowhere is not a directory" resp.txt || fail "bad path: $(cat resp.txt)"
[ "$(code v1/load_lora_adapter '{"lora_name": "d", "lora_path": "'$WORK/rank8'"}')" = 400 ] || fail "rank 8"
grep -q "rank 8 exceeds --max-lora-rank 4" resp.txt || fail "rank: $(cat resp.txt)"
[ "$(code v1/load_lora_adapter '{"lora_name": "d", "lora_path": "'$WORK/badtarget'"}')" = 400 ] || fail "bad target"
grep -q "q_proj" resp.txt || fail "bad target: $(cat resp.txt)"
[ "$(code v1/load_lora_adapter '{"lora_name": "d"}')" = 400 ] || fail "no lora_path"
# Still serving, adapters intact.
curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"b\", \"prompt\": \"$P2\", \"max_tokens\": 24, \"temperature\": 0}" > b.json
/usr/bin/python3 -c "
import json
got = json.load(open('b.json'))['choices'][0]['text']
assert got and open('gen-merged-b-2.txt', errors='replace').read().rstrip('\n').endswith(got), got" || fail "b after refusals"
echo "load/unload endpoints OK"

stop_server

# --max-loras 2 (vLLM's meaning): 4 adapters are loaded (c and d are a and b loaded again, so
# distinct adapters with known texts), but no step runs more than 2 of them; the requests of
# the others wait their turn and every request still gets its text alone. /metrics shows the
# cap (the most adapters in a step) and that admissions waited for it.
"$LLMRUN" serve pre/model --served-model-name tiny --lora a=ft/adapter --lora b=b --lora c=ft/adapter \
  --lora d=b --max-loras 2 --block-size 4 --max-lora-rank 4 --host 127.0.0.1 --port 0 2>server2.log &
SERVER_PID=$!
PORT=
for _ in $(seq 600); do  # up to 60 s: a loaded machine starts slowly
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' server2.log | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  kill -0 $SERVER_PID 2>/dev/null || { cat server2.log; fail "server --max-loras 2 exited during startup"; }
  sleep 0.1
done
[ -n "$PORT" ] || { cat server2.log; fail "server --max-loras 2 did not start"; }
/usr/bin/python3 - "http://127.0.0.1:$PORT" "$P1" "$P2" <<'PY' || { cat server2.log; fail "--max-loras"; }
import json, sys, threading, urllib.request
url, prompts = sys.argv[1], sys.argv[2:]
def complete(model, p):
    body = {"model": model, "prompt": p, "max_tokens": 24, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())["choices"][0]["text"]
merged = {"tiny": "pre", "a": "merged-a", "b": "merged-b", "c": "merged-a", "d": "merged-b"}
want = {(m, i): open(f"gen-{d}-{i + 1}.txt", errors="replace").read().rstrip("\n")
        for m, d in merged.items() for i in range(2)}
# Whether a request finds two other adapters running depends on when its thread is scheduled
# (a loaded 2-core machine can serialize them), so the threads start together at a barrier and
# the round repeats, up to 5 times, until an admission has waited; every round checks the texts.
def metric(n):
    with urllib.request.urlopen(url + "/metrics") as resp:
        lines = resp.read().decode().splitlines()
    return float(next(l.split()[1] for l in lines if l.startswith(n + " ")))
for attempt in range(5):
    jobs = [(m, i, p) for _ in range(2) for m in merged for i, p in enumerate(prompts)]
    out, gate = {}, threading.Barrier(len(jobs))
    def run(m, i, p):
        gate.wait()
        out.setdefault((m, i), []).append(complete(m, p))
    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads: t.start()
    for t in threads: t.join()
    for k, texts in out.items():
        assert len(texts) == 2 and all(t and want[k].endswith(t) for t in texts), (k, texts, want[k])
    if metric("llmrun:lora_admission_waits_total") > 0: break
most, waits = metric("llmrun:lora_max_adapters_per_step"), metric("llmrun:lora_admission_waits_total")
assert most == 2, f"a step ran {most} adapters under --max-loras 2"
assert waits > 0, "5 rounds of 20 concurrent requests over 4 adapters never waited for --max-loras 2"
print(f"--max-loras 2: 4 adapters loaded, at most {most:.0f} per step, {waits:.0f} admission waits; "
      "every request got its text alone")
PY
stop_server
expect_exit 2 "--max-cpu-loras 1 is below --max-loras 2" "$LLMRUN" serve pre/model --lora a=ft/adapter \
  --max-loras 2 --max-cpu-loras 1 --port 0
expect_exit 2 "cannot load LoRA adapter 'b'.*--max-cpu-loras" "$LLMRUN" serve pre/model --lora a=ft/adapter \
  --lora b=b --max-loras 1 --max-cpu-loras 1 --max-lora-rank 4 --port 0

# A bad --lora at startup is a one-line error, exit 2.
expect_exit 2 "rank 8 exceeds --max-lora-rank 4" "$LLMRUN" serve pre/model --lora x=rank8 --max-lora-rank 4 --port 0
expect_exit 2 "expected NAME=DIR" "$LLMRUN" serve pre/model --lora rank8 --port 0
echo OK
