#!/usr/bin/env bash
# Multi-LoRA serving throughput: output tokens/s of one `llmrun serve` with 4 LoRA adapters
# (rank 16 on every block linear, random A and B) when every request names an adapter
# (round-robin over the 4: mixed batches) against every request naming the base, at
# concurrency 16. The two workloads alternate ROUNDS times against the same server; prints
# each run and the medians and their ratio.
#   bash bench/serve_lora.sh [build/llmrun] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
LLMRUN=$(realpath "${1:-build/llmrun}")
ROUNDS=${2:-3}
MAKE_MODEL=$(dirname "$LLMRUN")/tests/llmrun_make_model_dir
SRC=$PWD
WORK=$(mktemp -d)
trap 'kill $SERVER_PID 2>/dev/null; rm -rf "$WORK"' EXIT
cd "$WORK"
"$MAKE_MODEL" base llama 4 256 8 512 256 1 >/dev/null
/usr/bin/python3 - base "$SRC/tests/oracle" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import safetensors_np
weights, _ = safetensors_np.load(sys.argv[1] + "/model.safetensors")
targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
rng = np.random.default_rng(0)
for k in range(4):
    tensors = {}
    for name, w in weights.items():
        module = name[: -len(".weight")]
        if w.ndim != 2 or module.split(".")[-1] not in targets:
            continue
        out, inp = w.shape
        p = "base_model.model." + module
        tensors[p + ".lora_A.weight"] = rng.normal(0, 0.02, (16, inp)).astype(np.float32)
        tensors[p + ".lora_B.weight"] = rng.normal(0, 0.02, (out, 16)).astype(np.float32)
    os.makedirs(f"a{k}")
    safetensors_np.save(f"a{k}/adapter_model.safetensors", tensors)
    json.dump({"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": targets,
               "bias": "none"}, open(f"a{k}/adapter_config.json", "w"))
PY
"$LLMRUN" serve base --served-model-name base --lora a0=a0 --lora a1=a1 --lora a2=a2 --lora a3=a3 \
  --max-num-seqs 16 --host 127.0.0.1 --port 0 2>server.log &
SERVER_PID=$!
for _ in $(seq 300); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' server.log | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { cat server.log; exit 1; }
/usr/bin/python3 - "http://127.0.0.1:$PORT" "$ROUNDS" <<'PY'
import json, statistics, sys, threading, time, urllib.request
url, rounds = sys.argv[1], int(sys.argv[2])
CONC, REQS, OUT = 16, 32, 64
def run(models):
    todo = list(range(REQS))
    lock = threading.Lock()
    tokens = [0]
    def worker():
        while True:
            with lock:
                if not todo: return
                i = todo.pop()
            body = {"model": models[i % len(models)], "prompt": "request %d: the quick brown fox" % i,
                    "max_tokens": OUT, "temperature": 0, "ignore_eos": True}
            req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                n = json.loads(r.read())["usage"]["completion_tokens"]
            with lock:
                tokens[0] += n
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(CONC)]
    for t in threads: t.start()
    for t in threads: t.join()
    return tokens[0] / (time.perf_counter() - t0)
run(["base"])  # warm-up
res = {"base": [], "mixed": []}
for r in range(rounds):
    for name, models in (("base", ["base"]), ("mixed", ["a0", "a1", "a2", "a3"])):
        res[name].append(run(models))
        print(f"round {r + 1} {name}: {res[name][-1]:.1f} output tokens/s", flush=True)
b, m = statistics.median(res["base"]), statistics.median(res["mixed"])
print(f"median base {b:.1f} tok/s, 4 adapters mixed {m:.1f} tok/s, ratio {m / b:.3f}")
PY
