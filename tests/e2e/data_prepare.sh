# `llmrun data prepare` / `data inspect`: Megatron MMIDIDX output read back by an independent
# Python reader, worker-count independence, and every bad-input path (error or --skip-bad).
source "$(dirname "$0")/common.bash"
cd "$WORK"
PY=/usr/bin/python3
READ="$PY $SRC/tests/data/read_mmididx.py"

# JSONL with unicode, escapes and an empty line; byte tokenizer: ids must be the UTF-8 bytes.
$PY - <<'PY'
import json
docs = [f"document {i}: h\u00e9llo w\u00f6rld \U0001F600 " + "x" * (i % 7) + "\n\tend" for i in range(300)]
with open("docs.jsonl", "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "text": d}) + "\n")
        if i == 5: f.write("\n")
json.dump(docs, open("expected.json", "w"))
PY
"$LLMRUN" data prepare --input docs.jsonl --format jsonl --tokenizer byte --output ds1 --workers 1 2>log1
"$LLMRUN" data prepare --input 'doc*.jsonl' --format jsonl --tokenizer byte --output ds2 --workers 3 2>log2
grep -q "300 documents" log1 || { cat log1; fail "summary lacks the document count"; }
cmp ds1.bin ds2.bin && cmp ds1.idx ds2.idx || fail "1 and 3 workers wrote different datasets"
$READ ds1 > read.jsonl
$PY - <<'PY' || fail "independent reader disagrees"
import json
lines = open("read.jsonl").read().splitlines()
head = json.loads(lines[0])
assert head == {"dtype_code": 8, "sequences": 300, "documents": 300}, head
expected = json.load(open("expected.json"))
for got, text in zip(lines[1:], expected):
    assert json.loads(got) == list(text.encode()), text
PY
"$LLMRUN" data inspect ds1 > inspect.txt
grep -q "documents: 300" inspect.txt && grep -q "dtype:     uint16" inspect.txt && grep -q "document 0:" inspect.txt \
  || { cat inspect.txt; fail "inspect output"; }

# A BPE tokenizer over text files with --append-eos: documents are what `data tokenize` gives, plus EOS.
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > sample.txt
$PY "$SRC/tests/data/make_tiny_bpe.py" tok.json sample.txt 300
mkdir texts && cp /usr/share/common-licenses/GPL-3 texts/a.txt && cp /usr/share/common-licenses/Apache-2.0 texts/b.txt
"$LLMRUN" data prepare --input texts --format text --tokenizer tok.json --output bpe --append-eos --workers 2 2>/dev/null
$READ bpe > bpe_read.jsonl
for f in a b; do $PY -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' texts/$f.txt; done \
  | "$LLMRUN" data tokenize --tokenizer tok.json > bpe_ids.jsonl
$PY - <<'PY' || fail "BPE dataset documents differ from data tokenize"
import json
got = [json.loads(l) for l in open("bpe_read.jsonl").read().splitlines()[1:]]
want = [json.loads(l)["ids"] for l in open("bpe_ids.jsonl")]
eos = max(max(d) for d in got)
assert len(got) == 2 and all(g == w + [eos] for g, w in zip(got, want))
assert all(len(w) < len(json.dumps(w)) for w in want)
PY
"$LLMRUN" data inspect bpe | grep "GNU GENERAL PUBLIC LICENSE" >/dev/null || fail "inspect does not decode the BPE sample"

# Bad input: one error line naming file and line, exit 2, and no PREFIX.idx left behind.
printf '{"text": "ok"}\n{"text": "fine"}\n{"text": broken\n' > bad_json.jsonl
printf '{"text": "ok"}\n{"body": "no text key"}\n' > no_key.jsonl
printf '{"text": 3}\n' > not_string.jsonl
printf 'line one\nline two \xff\xfe bad\n' > bad_utf8.txt
expect_exit 2 'bad_json.jsonl:3: malformed JSON' "$LLMRUN" data prepare --input bad_json.jsonl --format jsonl --tokenizer byte --output ds1
[ ! -e ds1.idx ] && [ ! -e ds1.bin.tmp ] && [ ! -e ds1.idx.tmp ] || fail "a failed run left an index or temp files"
expect_exit 2 'no_key.jsonl:2: no "text" key' "$LLMRUN" data prepare --input no_key.jsonl --format jsonl --tokenizer byte --output x
expect_exit 2 'not_string.jsonl:1: "text" is not a string' "$LLMRUN" data prepare --input not_string.jsonl --format jsonl --tokenizer byte --output x
expect_exit 2 'bad_utf8.txt:2: invalid UTF-8' "$LLMRUN" data prepare --input bad_utf8.txt --tokenizer byte --output x
expect_exit 2 'nowhere.txt: no such file' "$LLMRUN" data prepare --input nowhere.txt --tokenizer byte --output x
expect_exit 2 'matches no files' "$LLMRUN" data prepare --input 'none*.txt' --tokenizer byte --output x
expect_exit 2 'no_dir.*does not exist' "$LLMRUN" data prepare --input docs.jsonl --tokenizer byte --output no_dir/x
expect_exit 2 'no end-of-text token' "$LLMRUN" data prepare --input docs.jsonl --tokenizer byte --output x --append-eos
expect_exit 2 'no x.idx' "$LLMRUN" data inspect x
[ "$(grep -c '^error:' "$WORK/cmd.stderr")" = 1 ] || fail "expected exactly one error line"
ls x.* 2>/dev/null && fail "failed runs left x.* behind"

# --skip-bad: bad documents are counted and skipped, the good ones written.
cat bad_json.jsonl no_key.jsonl not_string.jsonl > mixed.jsonl
"$LLMRUN" data prepare --input mixed.jsonl --format jsonl --tokenizer byte --output mixed --skip-bad 2>skip.log
grep -q "skipped 3 bad documents.*mixed.jsonl:3: malformed JSON" skip.log || { cat skip.log; fail "skip report"; }
[ "$($READ mixed | head -1)" = '{"dtype_code": 8, "sequences": 3, "documents": 3}' ] || fail "skip-bad dataset"

# Killed mid-run (blocked on a FIFO input): the old complete dataset's index is gone, not stale.
mkfifo pipe.txt
"$LLMRUN" data prepare --input pipe.txt --tokenizer byte --output ds2 2>/dev/null & pid=$!
for _ in $(seq 600); do [ -e ds2.idx ] || break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done  # up to 60 s (loaded machine)
kill -9 $pid; wait $pid 2>/dev/null || true
[ ! -e ds2.idx ] || fail "an interrupted run left a complete-looking ds2.idx"
echo "data prepare: format, workers, bad inputs all ok"
