#!/usr/bin/env python3
"""A self-draft for speculative decoding (issue 23): copies a GPT-2/Llama model directory
keeping only its first N transformer layers (embeddings, final norm and head kept), so the
draft shares the target's tokenizer and weights and costs about N/L of a target step.
Usage: bench/truncate_layers.py SRC_DIR DST_DIR N"""
import json, os, re, shutil, struct, sys

src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for f in os.listdir(src):
    if f not in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), dst)
cfg = json.load(open(os.path.join(src, "config.json")))
key = "n_layer" if "n_layer" in cfg else "num_hidden_layers"
if not 1 <= keep <= cfg[key]:
    sys.exit(f"truncate_layers: N must be 1..{cfg[key]}")
cfg[key] = keep
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
layer = re.compile(r"\.(?:h|layers)\.(\d+)\.")
out_header, chunks, off = {}, [], 0
for name, t in header.items():
    if name == "__metadata__":
        out_header[name] = t
        continue
    m = layer.search(name)
    if m and int(m.group(1)) >= keep:
        continue
    b, e = t["data_offsets"]
    chunks.append(data[b:e])
    out_header[name] = dict(t, data_offsets=[off, off + e - b])
    off += e - b
h = json.dumps(out_header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
