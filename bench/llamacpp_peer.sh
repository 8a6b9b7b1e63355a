#!/usr/bin/env bash
# Single-stream speed of llmrun against llama.cpp on the very same GGUF files (issue 19):
#   bash bench/llamacpp_peer.sh LLAMA_BIN_DIR LLMRUN_BUILD_DIR WORKDIR [ROUNDS] [THREADS] [MODELS] [TYPES]
# LLAMA_BIN_DIR is an already built llama.cpp bin/ (llama-bench); nothing of llama.cpp is part
# of this repository. Defaults: ROUNDS 3, THREADS "1 2", MODELS "gpt2 llama", TYPES
# "f32 f16 q8_0 q4_k_m".
# Models (seeded random weights, llmrun_make_model_dir): gpt2 = GPT-2-124M shape (12 layers,
# d 768, 12 heads, vocab 50257); llama = llama-small (recipes/llama-small.yaml: 4 layers, d 256,
# 8 heads, vocab 8192, context 256). Each gets a real byte-level BPE tokenizer.json (make_tiny_bpe.py, padded with
# unused tokens to the model's vocab) so llama.cpp loads its vocabulary; llmrun writes the GGUF.
# Per round, per file and thread count, A/B alternated (the order flips every round):
#   llmrun:    generate FILE --prompt <the first 340 bytes of GPL-3: 128 tokens> --max-tokens 2 --temperature 0 --timing
#              (prefill tokens/s of the prompt), then generate FILE --prompt a --max-tokens 65
#              (decode tokens/s of 64 steps from a one-token context, as tg64 decodes)
#   llama.cpp: llama-bench -m FILE -p 128 -n 64 -t T -r 1 (pp128 and tg64 tokens/s)
# Prints medians over rounds and the llmrun/llama.cpp ratio, with the load average.
set -euo pipefail
LB=$(realpath "$1") BUILD=$(realpath "$2") WORK=$3
ROUNDS=${4:-3} THREADS=${5:-1 2} MODELS=${6:-gpt2 llama} TYPES=${7:-f32 f16 q8_0 q4_k_m}
SRC=$(cd "$(dirname "$0")/.." && pwd)
L=$BUILD/llmrun
mkdir -p "$WORK" && cd "$WORK"
[ -f tok.json ] || /usr/bin/python3 "$SRC/tests/data/make_tiny_bpe.py" tok.json \
  /usr/share/common-licenses/GPL-3 700
pad_tokenizer() {  # pad_tokenizer IN OUT VOCAB: unused tokens up to VOCAB ids
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[3]); v = d["model"]["vocab"]
used = set(v.values()) | {t["id"] for t in d["added_tokens"]}
for i in range(n):
    if i not in used: v["<unused_%d>" % i] = i
json.dump(d, open(sys.argv[2], "w"))
PY
}
for m in $MODELS; do
  case $m in
    gpt2) args="gpt2 12 768 12 1024 50257 1" vocab=50257 ;;
    llama) args="llama 4 256 8 256 8192 1" vocab=8192 ;;
  esac
  if [ ! -d $m-dir ]; then
    "$BUILD/tests/llmrun_make_model_dir" $m-dir $args >/dev/null
    pad_tokenizer tok.json $m-dir/tokenizer.json $vocab
  fi
  for q in $TYPES; do
    [ -f $m-$q.gguf ] || "$L" convert $m-dir --to gguf $m-$q.gguf --quantize $q 2>/dev/null
  done
done
head -c 340 /usr/share/common-licenses/GPL-3 | tr '\n' ' ' >prompt.txt

run_llmrun() {  # prints "prefill_tps decode_tps prompt_tokens"
  # Prefill: the 128-token prompt. Decode: 64 steps after a one-token prompt, the context
  # llama-bench's tg64 decodes in (it starts from an empty cache; decoding after the long
  # prompt would give llmrun 128 more keys per step to attend to than its peer).
  "$L" generate "$1" --prompt "$(cat prompt.txt)" --max-tokens 2 --temperature 0 --timing \
    --threads "$2" 2>timing.txt >/dev/null
  "$L" generate "$1" --prompt "a" --max-tokens 65 --temperature 0 --timing \
    --threads "$2" 2>timing_tg.txt >/dev/null
  /usr/bin/python3 - <<'PY'
import re
pat = r"prefill (\d+) tokens ([0-9.]+) ms; decode (\d+) steps ([0-9.]+) ms"
p = re.search(pat, open("timing.txt").read())
d = re.search(pat, open("timing_tg.txt").read())
n, pms = int(p[1]), float(p[2])
s, dms = int(d[3]), float(d[4])
assert s == 64, s
print("%.2f %.2f %d" % (n / pms * 1e3, s / dms * 1e3, n))
PY
}
run_llama() {  # prints "pp_tps tg_tps"
  "$LB/llama-bench" -m "$1" -p 128 -n 64 -t "$2" -r 1 -o csv 2>/dev/null >bench.csv
  /usr/bin/python3 - <<'PY'
import csv
rows = list(csv.DictReader(open("bench.csv")))
pp = [float(r["avg_ts"]) for r in rows if r["n_prompt"] == "128"][0]
tg = [float(r["avg_ts"]) for r in rows if r["n_gen"] == "64"][0]
print("%.2f %.2f" % (pp, tg))
PY
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A res
for r in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    for q in $TYPES; do
      for t in $THREADS; do
        k="$m $q $t"
        if [ $((r % 2)) -eq 1 ]; then
          res[$k A]+="$(run_llmrun $m-$q.gguf $t);"
          res[$k B]+="$(run_llama $m-$q.gguf $t);"
        else
          res[$k B]+="$(run_llama $m-$q.gguf $t);"
          res[$k A]+="$(run_llmrun $m-$q.gguf $t);"
        fi
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| model | type | threads | llmrun prefill tok/s | llama.cpp pp128 tok/s | ratio | llmrun decode tok/s | llama.cpp tg64 tok/s | ratio |\n|---|---|---|---|---|---|---|---|---|\n'
for m in $MODELS; do
  for q in $TYPES; do
    for t in $THREADS; do
      k="$m $q $t"
      /usr/bin/python3 - "$m" "$q" "$t" "${res[$k A]}" "${res[$k B]}" <<'PY'
import statistics as st, sys
m, q, t, a, b = sys.argv[1:]
A = [list(map(float, x.split())) for x in a.split(";") if x]
B = [list(map(float, x.split())) for x in b.split(";") if x]
ap, ad = st.median(x[0] for x in A), st.median(x[1] for x in A)
bp, bd = st.median(x[0] for x in B), st.median(x[1] for x in B)
print("| %s | %s | %s | %.1f (%d-token prompt) | %.1f | %.2f | %.1f | %.1f | %.2f |"
      % (m, q, t, ap, A[0][2], bp, ap / bp, ad, bd, ad / bd))
PY
    done
  done
done
