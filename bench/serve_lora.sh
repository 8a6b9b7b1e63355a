#!/usr/bin/env bash
# Multi-LoRA serving throughput: output tokens/s of one `llmrun serve` with 4 LoRA adapters
# (rank 16 on every block linear, random A and B) when every request names an adapter
# (round-robin over the 4: mixed batches) against every request naming the base, at
# concurrency 16. The two workloads alternate ROUNDS times against the same server; prints
# each run and the medians and their ratio, and the server's CPU time per output token (user +
# system, from /proc: with --threads 1 a measure of the work that the machine's load does not
# move, as wall-clock tokens/s do). Extra `serve` options (e.g. --threads 1) in SERVE_ARGS.
#   [SERVE_ARGS=..] bash bench/serve_lora.sh [build/llmrun] [rounds]
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
  --max-num-seqs 16 --host 127.0.0.1 --port 0 ${SERVE_ARGS:-} 2>server.log &
SERVER_PID=$!
for _ in $(seq 300); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' server.log | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { cat server.log; exit 1; }
/usr/bin/python3 - "http://127.0.0.1:$PORT" "$ROUNDS" "$SERVER_PID" <<'PY'
import json, os, statistics, sys, threading, time, urllib.request
url, rounds, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def cpu_seconds():  # the server's user + system time
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
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
    t0, c0 = time.perf_counter(), cpu_seconds()
    threads = [threading.Thread(target=worker) for _ in range(CONC)]
    for t in threads: t.start()
    for t in threads: t.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return tokens[0] / wall, 1000 * cpu / tokens[0]
run(["base"])  # warm-up
res = {"base": [], "mixed": []}
cpu = {"base": [], "mixed": []}
for r in range(rounds):
    for name, models in (("base", ["base"]), ("mixed", ["a0", "a1", "a2", "a3"])):
        tps, ms = run(models)
        res[name].append(tps)
        cpu[name].append(ms)
        print(f"round {r + 1} {name}: {tps:.1f} output tokens/s, server CPU {ms:.2f} ms/token",
              flush=True)
b, m = statistics.median(res["base"]), statistics.median(res["mixed"])
print(f"median base {b:.1f} tok/s, 4 adapters mixed {m:.1f} tok/s, ratio {m / b:.3f}")
cb, cm = statistics.median(cpu["base"]), statistics.median(cpu["mixed"])
print(f"median server CPU base {cb:.2f} ms/token, mixed {cm:.2f} ms/token, "
      f"CPU-cost ratio base/mixed {cb / cm:.3f}")
PY
