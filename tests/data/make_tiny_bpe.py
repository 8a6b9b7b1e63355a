#!/usr/bin/python3
"""Writes a small GPT-2-style byte-level BPE tokenizer.json for tests: the 256-byte alphabet,
merges learned greedily from a sample text, and an <|endoftext|> special token.
usage: make_tiny_bpe.py OUT.json TEXT_FILE [MERGES]"""
import collections, json, re, sys

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))

out, text_file = sys.argv[1], sys.argv[2]
n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 200
b2u = bytes_to_unicode()
text = open(text_file, encoding="utf-8").read()
words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text))
seqs = {w: [b2u[b] for b in w.encode()] for w in words}
vocab = {b2u[b]: b for b in range(256)}
merges = []
for _ in range(n_merges):
    pairs = collections.Counter()
    for w, s in seqs.items():
        for a, b in zip(s, s[1:]):
            pairs[a, b] += words[w]
    if not pairs:
        break
    (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
    merges.append(f"{a} {b}")
    vocab.setdefault(a + b, len(vocab))
    for w, s in seqs.items():
        i, t = 0, []
        while i < len(s):
            if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                t.append(a + b); i += 2
            else:
                t.append(s[i]); i += 1
        seqs[w] = t
eos = len(vocab)
doc = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": eos, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
}
json.dump(doc, open(out, "w", encoding="utf-8"), ensure_ascii=False)
