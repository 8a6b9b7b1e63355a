#!/usr/bin/env bash
# Speculative decoding, llmrun against llama.cpp on the very same GGUF files (issue 23):
#   bash bench/speculative_llamacpp.sh LLAMA_BIN_DIR LLMRUN TARGET_DIR DRAFT_DIR WORKDIR [ROUNDS] [K] [NPROMPTS]
# LLAMA_BIN_DIR: an already built llama.cpp bin/ (llama-cli, llama-lookup, llama-speculative);
# nothing of llama.cpp is part of this repository. TARGET_DIR, DRAFT_DIR: llmrun model dirs
# sharing a tokenizer (e.g. runs/demo-big/model and runs/demo/model); both are written to f32
# GGUF by `llmrun convert` and every run below reads those files.
# Workloads (NPROMPTS prompts each, default 3, of 48 tokens of a byte-level vocabulary, 64
# generated, greedy; seeded, the same every run):
#   repeat: a random 4-12 byte unit repeated (the summarise/code shape where prompt lookup pays)
#   text:   48 bytes of GPL-3 at a random offset
# Per round and workload, alternated in a fixed order, one thread each:
#   llmrun    generate FILE --threads 1 --temperature 0 --timing --speculative none|ngram|draft
#             (k = K proposals, n-gram 1..4, draft = DRAFT's GGUF)
#   llama.cpp llama-cli -no-cnv (plain), llama-lookup --draft K (prompt lookup, n-gram 1..4),
#             llama-speculative -md DRAFT --draft K (draft model), -t 1 [-td 1] --temp 0
# Decode ms/token: llmrun's "decode 64 tokens X ms", llama-cli's "eval time", lookup and
# speculative's "decoded N tokens in X seconds". Prints every run, then medians over rounds and
# prompts. llmrun's "none" is generate's plain (non-paged) decode path.
set -euo pipefail
LB=$(realpath "$1") L=$(realpath "$2") TARGET=$3 DRAFT=$4 WORK=$5
ROUNDS=${6:-5} K=${7:-4} NPROMPTS=${8:-3}
mkdir -p "$WORK"
[ -f "$WORK/target.gguf" ] || "$L" convert "$TARGET" --to gguf "$WORK/target.gguf" --quantize f32 2>/dev/null
[ -f "$WORK/draft.gguf" ] || "$L" convert "$DRAFT" --to gguf "$WORK/draft.gguf" --quantize f32 2>/dev/null
exec /usr/bin/python3 - "$LB" "$L" "$WORK" "$ROUNDS" "$K" "$NPROMPTS" <<'PY'
import os, random, re, statistics, subprocess, sys
lb, llmrun, work, rounds, k, NP = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
T, D = f"{work}/target.gguf", f"{work}/draft.gguf"
rng = random.Random(3)
gpl = open("/usr/share/common-licenses/GPL-3", "rb").read().decode()
prompts = {"repeat": [], "text": []}
for _ in range(NP):
    unit = "".join(chr(32 + rng.randrange(95)) for _ in range(4 + rng.randrange(9)))
    prompts["repeat"].append((unit * 12)[:48])
    at = rng.randrange(len(gpl) - 48)
    prompts["text"].append(gpl[at:at + 48])

def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{out[-2000:]}")
    return out

def llmrun_run(prompt, method):
    cmd = [llmrun, "generate", T, "--prompt", prompt, "--max-tokens", "65", "--temperature", "0",
           "--threads", "1", "--timing", "--speculative", method, "--num-speculative-tokens", k]
    if method == "draft": cmd += ["--draft-model", D]
    out = run(cmd)
    m = re.search(r"decode (\d+) (?:tokens|steps) ([0-9.]+) ms", out)
    a = re.search(r"acceptance rate ([0-9.]+), mean acceptance length ([0-9.]+)", out)
    return float(m[2]) / int(m[1]), (float(a[1]) if a else None)

def llama_run(prompt, method):
    common = ["-p", prompt, "-n", "64", "-t", "1", "--temp", "0", "-c", "128", "--seed", "1"]
    if method == "plain":
        out = run([f"{lb}/llama-cli", "-m", T, "-no-cnv", "--no-display-prompt"] + common)
        m = re.search(r"eval time =\s*([0-9.]+) ms /\s*(\d+) runs", out)
        return float(m[1]) / int(m[2]), None
    if method == "lookup":
        out = run([f"{lb}/llama-lookup", "-m", T, "--draft", k] + common)
    else:
        out = run([f"{lb}/llama-speculative", "-m", T, "-md", D, "--draft", k, "-td", "1"] + common)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", out)
    a = re.search(r"accept\s*=\s*([0-9.]+)%", out)
    return float(m[2]) * 1e3 / int(m[1]), (float(a[1]) / 100 if a else None)

runs = [("llmrun", "none"), ("llmrun", "ngram"), ("llmrun", "draft"),
        ("llama.cpp", "plain"), ("llama.cpp", "lookup"), ("llama.cpp", "draft")]
load = lambda: " ".join(open("/proc/loadavg").read().split()[:3])
print("load average before: " + load(), flush=True)
res = {}
for r in range(1, rounds + 1):
    for ds, plist in prompts.items():
        for pi, prompt in enumerate(plist):
            for eng, meth in runs:
                ms, acc = (llmrun_run if eng == "llmrun" else llama_run)(prompt, meth)
                res.setdefault((ds, eng, meth), []).append((ms, acc))
                print(f"round {r} {ds:6} prompt {pi} {eng:9} {meth:6} {ms:8.3f} ms/token"
                      + (f"  acceptance {acc:.3f}" if acc is not None else ""), flush=True)
print("load average after: " + load())
print("workload engine    method  median ms/token  tokens/s  vs own plain  median acceptance")
for ds in prompts:
    for eng, meth in runs:
        v = res[(ds, eng, meth)]
        ms = statistics.median(x for x, _ in v)
        base = statistics.median(x for x, _ in res[(ds, eng, "none" if eng == "llmrun" else "plain")])
        accs = [a for _, a in v if a is not None]
        print(f"{ds:8} {eng:9} {meth:6} {ms:14.3f} {1e3 / ms:9.1f} {base / ms:10.2f}x"
              + (f" {statistics.median(accs):10.3f}" if accs else ""))
PY
