# Speculative decoding through the real binary: `generate` and `serve` with --speculative
# ngram and --speculative draft give, greedy, exactly the text plain `generate` gives (alone,
# and served to concurrent requests with a KV pool small enough to force preemption and a
# token budget that chunks prefills); /metrics reports the proposals under vLLM's names and
# no KV block stays in use; constrained (structured-output) requests are speculated and give the
# plain server's text; `bench serve` reports the acceptance figures; a draft model with
# another vocabulary is refused with the reason.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
SERVER_PID=
trap 'stop_server; rm -rf "$WORK"' EXIT

LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny" gpt2 2 64 4 128 256 6 >/dev/null
LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/other" gpt2 1 32 2 128 256 3 >/dev/null
"$MAKE_MODEL" "$WORK/wide" gpt2 1 32 2 128 300 1 >/dev/null
PROMPTS=("xyz xyz xyz xyz" "abcabcabcabcabc" "The cat. The cat. The cat." "0101010101" "hello hello hello"
         "ab ab ab ab ab ab" "qq rr qq rr qq rr" "one two one two one two")
G=("$LLMRUN" generate "$WORK/tiny" --max-tokens 40 --threads 2)

# generate: plain, n-gram, draft (a different model, and the target as its own draft).
declare -a WANT
for i in "${!PROMPTS[@]}"; do
  p=${PROMPTS[$i]}
  WANT[$i]=$("${G[@]}" --prompt "$p" 2>/dev/null)
  for spec in "--speculative ngram" "--speculative ngram --ngram-min 2 --num-speculative-tokens 2" \
              "--speculative draft --draft-model $WORK/other" "--speculative draft --draft-model $WORK/tiny"; do
    # shellcheck disable=SC2086
    got=$("${G[@]}" --prompt "$p" $spec --timing 2>"$WORK/gen.err")
    [ "$got" == "${WANT[$i]}" ] || { cat "$WORK/gen.err"; fail "generate $spec differs for '$p': '$got' vs '${WANT[$i]}'"; }
  done
done
# The target drafting for itself: every proposal accepted.
"${G[@]}" --prompt "${PROMPTS[0]}" --speculative draft --draft-model "$WORK/tiny" --no-speculative-backoff --timing >/dev/null 2>"$WORK/gen.err"
grep -qE 'speculative: [1-9][0-9]* drafts, ([0-9]+) of \1 proposed tokens accepted' "$WORK/gen.err" ||
  { cat "$WORK/gen.err"; fail "the target as its own draft should have every proposal accepted"; }

# The back-off's counters: an unrelated draft's proposals fail, and it stops proposing.
grep -qE '^speculative back-off: [0-9]+ steps without proposals, [0-9]+ back-offs$' "$WORK/gen.err" ||
  { cat "$WORK/gen.err"; fail "generate --timing shows no back-off counters"; }

# Refusals: another vocabulary, a missing --draft-model, a bad method.
expect_exit 2 "cannot draft for this model: its vocabulary has 300 rows, the target's 256" \
  "${G[@]}" --prompt "x" --speculative draft --draft-model "$WORK/wide"
expect_exit 2 "needs --draft-model" "${G[@]}" --prompt "x" --speculative draft
expect_exit 2 "must be ngram, draft or none" "${G[@]}" --prompt "x" --speculative medusa

# serve: all prompts at once, 4-token blocks, 26 blocks (preemption), 16-token steps (chunks).
check_served() {  # METHOD ARGS...: serves with these options and checks every text and /metrics
  local what=$1; shift
  start_server "$WORK/server.log" "$WORK/tiny" --threads 2 --block-size 4 --kv-blocks 26 \
    --max-model-len 96 --max-batched-tokens 16 --speculative-disable-by-batch-size 0 \
    --no-speculative-backoff "$@"
  printf '%s\n' "${PROMPTS[@]}" > "$WORK/prompts.txt"
  printf '%s\0' "${WANT[@]}" > "$WORK/want.bin"
  /usr/bin/python3 - "$PORT" "$WORK/prompts.txt" "$WORK/want.bin" <<'PY' || { tail -n 20 "$WORK/server.log"; fail "$what: served text differs"; }
import json, sys, urllib.request
port, prompts, want = sys.argv[1], open(sys.argv[2]).read().splitlines(), open(sys.argv[3]).read().split("\0")[:-1]
# One request with the prompt list: the engine schedules all of it from its first step, so the
# small pool preempts however fast the server runs (separate concurrent requests could each
# finish before the next one arrived).
body = json.dumps({"prompt": prompts, "max_tokens": 40, "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
out = [None] * len(prompts)
for c in json.load(urllib.request.urlopen(req, timeout=120))["choices"]:
    out[c["index"]] = c["text"]
bad = [(p, o, w) for p, o, w in zip(prompts, out, want) if p + o != w]
for b in bad: print("differs:", repr(b), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  local m
  m=$(curl -sf "http://127.0.0.1:$PORT/metrics")
  grep -qE '^llmrun:num_preemptions_total [1-9]' <<<"$m" || { echo "metrics: ${#m} bytes"; echo "$m" | grep -E "preempt|requests_total"; tail -5 "$WORK/server.log"; fail "$what: the pool was meant to force preemption"; }
  grep -q '^llmrun:kv_cache_blocks_used 0$' <<<"$m" || { echo "$m" | grep kv_cache; fail "$what: KV blocks still in use"; }
  grep -qE '^llmrun:spec_decode_num_drafts_total [1-9]' <<<"$m" || fail "$what: nothing proposed"
  # An unrelated random draft may see none of its guesses accepted, depending on which steps
  # the back-off lets it propose on; the others always have some.
  if [ "$what" != "draft (other)" ]; then
    grep -qE '^llmrun:spec_decode_num_accepted_tokens_total [1-9]' <<<"$m" || fail "$what: no proposal accepted"
    grep -qE '^llmrun:spec_decode_num_accepted_tokens_per_pos_total\{position="0"\} [1-9]' <<<"$m" || fail "$what: per-position counter"
    grep -qE '^llmrun:spec_decode_draft_acceptance_rate 0\.[0-9]+|^llmrun:spec_decode_draft_acceptance_rate 1$' <<<"$m" || fail "$what: acceptance rate"
  fi
  grep -qE '^llmrun:spec_decode_mean_acceptance_length [1-9]' <<<"$m" || fail "$what: mean acceptance length"
  grep -qE '^llmrun:spec_decode_num_backoffs_total [0-9]+$' <<<"$m" || fail "$what: back-off counter"
  stop_server
}
check_served ngram --speculative ngram --num-speculative-tokens 3
check_served "draft (self)" --speculative draft --draft-model "$WORK/tiny"
check_served "draft (other)" --speculative draft --draft-model "$WORK/other" --no-prefix-caching

# Structured outputs are speculated too: constrained greedy requests (a regex and a JSON schema,
# in batches, preempting) give on speculative servers the text a plain server gives, valid,
# with proposals accepted (the grammar's forced text is what prompt lookup guesses).
constrained() {  # OUT_FILE ARGS...: serves with these options and writes the constrained texts
  local out=$1; shift
  start_server "$WORK/server.log" "$WORK/tiny" --threads 2 --block-size 4 --kv-blocks 40 \
    --max-model-len 128 --max-batched-tokens 32 "$@"
  /usr/bin/python3 - "$PORT" "$out" <<'PY' || { tail -n 20 "$WORK/server.log"; fail "constrained requests failed: $*"; }
import json, re, sys, threading, urllib.request
port, out_file = sys.argv[1], sys.argv[2]
regex = r"(item[0-9] ){2,5}end"
schema = {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "object",
          "properties": {"k": {"enum": ["ab", "cd"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["k", "n"], "additionalProperties": False}}
# Two concurrent requests, each a list of 4 prompts under one constraint: a list is scheduled
# as one batch, and the schema list alone outgrows the 40-block pool, so preemption happens
# however fast the server runs.
asks = [{"prompt": [f"item{i} item{i + 1} end item{i}" for i in range(4)], "guided_regex": regex},
        {"prompt": [f'[{{"k":"ab","n":{i}}},{{"k":"cd","n":1}}]' for i in range(4)],
         "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}]
texts = [None] * len(asks)
def ask(i):
    body = dict(asks[i], max_tokens=60, temperature=0)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    choices = json.load(urllib.request.urlopen(req, timeout=120))["choices"]
    texts[i] = [c["text"] for c in sorted(choices, key=lambda c: c["index"])]
ts = [threading.Thread(target=ask, args=(i,)) for i in range(len(asks))]
for t in ts: t.start()
for t in ts: t.join()
out = texts[0] + texts[1]
for a, o in zip([asks[0]] * 4 + [asks[1]] * 4, out):
    if "guided_regex" in a:
        assert re.fullmatch(regex, o), ("regex", o)
    else:
        v = json.loads(o)
        assert isinstance(v, list) and 2 <= len(v) <= 3, o
        assert all(set(x) == {"k", "n"} and x["k"] in ("ab", "cd") and 0 <= x["n"] <= 9 for x in v), o
json.dump(out, open(out_file, "w"))
PY
}
constrained "$WORK/constrained_plain.json"
stop_server
for spec in "--speculative ngram" "--speculative draft --draft-model $WORK/tiny"; do
  # shellcheck disable=SC2086
  constrained "$WORK/constrained_spec.json" $spec --speculative-disable-by-batch-size 0 --no-speculative-backoff
  cmp -s "$WORK/constrained_plain.json" "$WORK/constrained_spec.json" ||
    { diff <(tr ',' '\n' <"$WORK/constrained_plain.json") <(tr ',' '\n' <"$WORK/constrained_spec.json"); fail "$spec: constrained text differs from the plain server's"; }
  m=$(curl -sf "http://127.0.0.1:$PORT/metrics")
  grep -qE '^llmrun:spec_decode_num_accepted_tokens_total [1-9]' <<<"$m" || { echo "$m" | grep spec_decode; fail "$spec: no constrained proposal accepted"; }
  grep -qE '^llmrun:num_preemptions_total [1-9]' <<<"$m" || fail "$spec: the pool was meant to force preemption"
  grep -q '^llmrun:kv_cache_blocks_used 0$' <<<"$m" || fail "$spec: KV blocks still in use"
  stop_server
done

# bench serve: the acceptance figures, on the repeating workload.
"$LLMRUN" bench serve --model-dir "$WORK/tiny" --threads 2 --num-prompts 4 --max-concurrency 1 \
  --input-len 24 --output-len 24 --dataset repeat --speculative ngram --no-speculative-backoff --json "$WORK/bench.json" >"$WORK/bench.out" 2>/dev/null
grep -q "Acceptance rate:" "$WORK/bench.out" || { cat "$WORK/bench.out"; fail "bench serve shows no acceptance rate"; }
/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["spec_decode"]; assert s["num_drafts"] > 0 and 0 <= s["acceptance_rate"] <= 1 and s["mean_acceptance_length"] >= 1 and len(s["per_position_acceptance_rate"]) == 4, s' "$WORK/bench.json" ||
  fail "bench serve --json spec_decode figures"
echo "speculative decoding e2e: ok"
