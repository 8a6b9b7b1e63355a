#!/usr/bin/python3
"""PyTorch fp32 single-stream greedy decode of a GPT-2 model directory: the peer of
`llmrun generate DIR --prompt a --max-tokens N --temperature 0 --timing --threads T`.

Reads DIR/config.json and DIR/model.safetensors (fp32, parsed here: no transformers or
safetensors package needed), runs one prompt token, then N-1 greedy decode steps with a KV
cache (torch.no_grad, F.linear per layer, the tied LM head), and prints the decode rate of
the timed steps as one JSON line. Set OMP_NUM_THREADS before python starts (see
bench/torch_train_bench.py).

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_gpt2_decode.py DIR --tokens 65 --threads 1
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, this peer reads F32 only")
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", type=int, default=65)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    w = load_safetensors(os.path.join(a.model_dir, "model.safetensors"))
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in w.items()}
    L, d, H = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
    hd, eps = d // H, cfg.get("layer_norm_epsilon", 1e-5)
    # HF GPT-2 Conv1D weights are [in, out]: transpose once, contiguous, for F.linear.
    lin = {}
    for i in range(L):
        for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            lin[f"h.{i}.{n}"] = (w[f"h.{i}.{n}.weight"].t().contiguous(), w[f"h.{i}.{n}.bias"])
    wte, wpe = w["wte.weight"], w["wpe.weight"]
    head = w["lm_head.weight"] if "lm_head.weight" in w else wte
    ks = [torch.zeros(H, a.tokens, hd) for _ in range(L)]
    vs = [torch.zeros(H, a.tokens, hd) for _ in range(L)]

    def ln(x, p):
        return F.layer_norm(x, (d,), w[p + ".weight"], w[p + ".bias"], eps)

    def step(tok, pos):
        x = wte[tok : tok + 1] + wpe[pos : pos + 1]  # [1, d]: F.linear runs sgemm, not sgemv
        for i in range(L):
            h = ln(x, f"h.{i}.ln_1")
            q, k, v = F.linear(h, *lin[f"h.{i}.attn.c_attn"])[0].split(d)
            ks[i][:, pos] = k.view(H, hd)
            vs[i][:, pos] = v.view(H, hd)
            s = torch.einsum("hd,htd->ht", q.view(H, hd), ks[i][:, : pos + 1]) / math.sqrt(hd)
            o = torch.einsum("ht,htd->hd", s.softmax(-1), vs[i][:, : pos + 1]).reshape(1, d)
            x = x + F.linear(o, *lin[f"h.{i}.attn.c_proj"])
            h = F.gelu(F.linear(ln(x, f"h.{i}.ln_2"), *lin[f"h.{i}.mlp.c_fc"]), approximate="tanh")
            x = x + F.linear(h, *lin[f"h.{i}.mlp.c_proj"])
        return F.linear(ln(x, "ln_f"), head).argmax().item()

    with torch.no_grad():
        tok = step(64, 0)  # "a" in GPT-2's vocabulary
        t0 = time.perf_counter()
        for pos in range(1, a.tokens):
            tok = step(tok, pos)
        dt = time.perf_counter() - t0
    steps = a.tokens - 1
    print(json.dumps({"decode_steps": steps, "ms_per_token": 1e3 * dt / steps,
                      "tokens_per_s": steps / dt, "threads": a.threads}))


if __name__ == "__main__":
    main()
