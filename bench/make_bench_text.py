#!/usr/bin/python3
"""Writes OUT.jsonl of about MB megabytes: the machine's license and copyright texts as
~4 KB documents, repeated (each repetition numbered so documents differ).
usage: make_bench_text.py OUT.jsonl MB"""
import glob, json, sys

out, mb = sys.argv[1], float(sys.argv[2])
paras = []
for f in sorted(glob.glob("/usr/share/common-licenses/*") + glob.glob("/usr/share/doc/*/copyright")):
    try:
        paras += open(f, encoding="utf-8").read().split("\n\n")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        pass
docs, cur = [], ""
for p in paras:
    cur += p + "\n\n"
    if len(cur) > 4000:
        docs.append(cur); cur = ""
written, rep = 0, 0
with open(out, "w", encoding="utf-8") as f:
    while written < mb * 1e6:
        for d in docs:
            line = json.dumps({"text": f"[{rep}] " + d}, ensure_ascii=False) + "\n"
            f.write(line); written += len(line.encode())
        rep += 1
