# A Mistral-style model dir (config model_type mistral with a sliding window, a tokenizer.json
# converted from SentencePiece, an [INST] chat template) served by `llmrun serve`: prompts get
# the post-processor's <s> once, the context is capped at the window, chat renders Mistral's
# template and refuses what it refuses, /detokenize decodes like transformers, streamed,
# whole and `llmrun generate` texts agree (the stream keeps each token's leading space), and
# generation_config.json's eos_token_id list and a request's stop_token_ids end generation.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"

"$MAKE_MODEL" "$WORK/m" llama 2 64 4 128 400 6
/usr/bin/python3 - "$WORK/m" <<'PY'
import json, sys
d = sys.argv[1]
sp = "\u2581"
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    vocab["<0x%02X>" % b] = 3 + b
for t in [sp] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("[]/.,!?ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
    vocab[t] = len(vocab)
merges = [(sp, "t"), (sp + "t", "h"), (sp + "th", "e"), ("l", "l"), (sp, "h"), (sp + "h", "e"), (sp + "he", "ll"),
          (sp + "hell", "o"), (sp, "w"), ("o", "r"), (sp + "w", "or"), ("[", "I"), ("[I", "N"), ("[IN", "S"), ("[INS", "T")]
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))
assert len(vocab) <= 400, len(vocab)
added = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True}
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": sp},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": sp}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
              "merges": [a + " " + b for a, b in merges]},
}
json.dump(tok, open(d + "/tokenizer.json", "w"), ensure_ascii=False)
json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
           "chat_template": "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                            "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}"
                            "{% endif %}{% endfor %}"}, open(d + "/tokenizer_config.json", "w"))
cfg = json.load(open(d + "/config.json"))
cfg.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=64, bos_token_id=1, eos_token_id=2)
json.dump(cfg, open(d + "/config.json", "w"))
# Like Llama 3 Instruct's <|eot_id|>: a second end token, here "▁wor".
json.dump({"eos_token_id": [2, vocab[sp + "w" + "or"]]}, open(d + "/generation_config.json", "w"))
PY

# The reference ids of a text without <s>: the same tokenizer through `llmrun data tokenize`
# (which tests/tokenizer/oracle.mjs holds to transformers' tokenizers on real vocabularies).
ids_of() { printf '%s\n' "$1" | "$LLMRUN" data tokenize --tokenizer "$WORK/m" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["ids"]))'; }
PROMPT="the hello world"
prompt_ids=$(ids_of '"the hello world"')
inst_ids=$(ids_of '"[INST] hello [/INST]"')
generated=$("$LLMRUN" generate "$WORK/m" --prompt "$PROMPT" --max-tokens 10 --temperature 0 --threads 2) ||
  fail "llmrun generate failed on the mistral dir"

start_server "$WORK/server.log" "$WORK/m" --threads 2
trap 'stop_server; rm -rf "$WORK"' EXIT
/usr/bin/python3 - "$PORT" "$PROMPT" "$prompt_ids" "$inst_ids" "$generated" <<'PY' || { tail -n 20 "$WORK/server.log"; fail "sentencepiece serving checks failed"; }
import http.client, json, sys
port, prompt, prompt_ids, inst_ids, generated = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
def post(path, body):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode()

assert prompt_ids and prompt_ids[0] != 1, prompt_ids
st, body = post("/tokenize", {"prompt": prompt})
t = json.loads(body)
assert st == 200 and t["tokens"] == [1] + prompt_ids, (st, body, prompt_ids)
assert t["max_model_len"] == 64, t   # the sliding window caps the context
st, body = post("/tokenize", {"prompt": "<s>" + prompt})   # a written <s> is not doubled
assert json.loads(body)["tokens"] == [1] + prompt_ids, body
st, body = post("/detokenize", {"tokens": [1] + prompt_ids})
assert json.loads(body)["prompt"] == "<s> " + prompt, body   # transformers: "▁the" after <s> keeps its space
st, body = post("/detokenize", {"tokens": prompt_ids})
assert json.loads(body)["prompt"] == prompt, body            # the leading "▁" is stripped

# Chat renders Mistral's template: <s>[INST] ... [/INST], with <s> once.
st, body = post("/tokenize", {"messages": [{"role": "user", "content": "hello"}]})
assert st == 200 and json.loads(body)["tokens"] == [1] + inst_ids, (body, inst_ids)
st, body = post("/v1/chat/completions", {"model": "m", "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]})
assert st == 400 and "only user and assistant" in body, (st, body)
st, body = post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
assert st == 400 and "alternate" in body, (st, body)
st, body = post("/v1/completions", {"model": "m", "prompt": "a " * 70, "max_tokens": 1})
assert st == 400, (st, body)   # past the 64-token window

# Greedy text: whole, streamed and `llmrun generate` (prompt + continuation) agree.
req = {"model": "m", "prompt": prompt, "max_tokens": 10, "temperature": 0}
st, body = post("/v1/completions", req)
whole = json.loads(body)["choices"][0]["text"]
st, body = post("/v1/completions", dict(req, stream=True))
streamed = "".join(json.loads(l[6:])["choices"][0]["text"] for l in body.splitlines()
                   if l.startswith("data: {") and json.loads(l[6:])["choices"])
assert whole == streamed, (whole, streamed)
# generate writes the raw bytes (random weights pick byte tokens); the server sends U+FFFD
# for bytes that are not UTF-8, as Python's decoder does.
generated = generated.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
assert generated == prompt + whole, (generated, prompt, whole)
assert whole.strip(), whole
# Forced by logit_bias to "▁hello" three times: every token keeps its space, whole or streamed.
st, body = post("/tokenize", {"prompt": "hello"})
hello = json.loads(body)["tokens"][1:]
assert len(hello) == 1, body
req = {"model": "m", "prompt": prompt, "max_tokens": 3, "temperature": 0, "logit_bias": {str(hello[0]): 100}}
st, body = post("/v1/completions", req)
assert json.loads(body)["choices"][0]["text"] == " hello hello hello", body
st, body = post("/v1/completions", dict(req, stream=True))
pieces = [json.loads(l[6:])["choices"][0]["text"] for l in body.splitlines() if l.startswith("data: {") and json.loads(l[6:])["choices"]]
assert "".join(pieces) == " hello hello hello", pieces
# "▁wor" is generation_config.json's second end token: it stops (unless ignore_eos), unseen.
world = json.loads(post("/tokenize", {"prompt": "world"})[1])["tokens"][1:]
req = dict(req, logit_bias={str(world[0]): 100})
r = json.loads(post("/v1/completions", req)[1])
assert r["choices"][0]["text"] == "" and r["choices"][0]["finish_reason"] == "stop", r
assert r["usage"]["completion_tokens"] == 1, r
r = json.loads(post("/v1/completions", dict(req, ignore_eos=True))[1])
assert r["choices"][0]["text"] == " wor wor wor" and r["choices"][0]["finish_reason"] == "length", r
# A request's own stop_token_ids (vLLM's extension) end it the same way.
r = json.loads(post("/v1/completions", dict(req, logit_bias={str(hello[0]): 100}, stop_token_ids=[hello[0]]))[1])
assert r["choices"][0]["text"] == "" and r["choices"][0]["finish_reason"] == "stop", r
st, body = post("/v1/completions", dict(req, stop_token_ids=[10 ** 6]))
assert st == 400 and "stop_token_ids" in body, (st, body)
print("ok:", repr(whole))
PY
echo "serve sentencepiece: ok"
