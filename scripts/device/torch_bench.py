#!/usr/bin/env python3
"""PyTorch peers of run-checks.sh's GPU benchmarks (needs torch with CUDA).

  torch_bench.py attention --batch B --heads H --seq T --head-dim D
      causal scaled_dot_product_attention forward and forward+backward, fp32 and bf16:
      median milliseconds (the peer of `llmrun bench kernels`' attention rows)
  torch_bench.py train --layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 1024 --batch B
      GPT-2 training steps (bf16 autocast, fp32 master weights, fused AdamW, torch.compile
      unless --no-compile): median tokens/s (the peer of `llmrun bench train`)
  torch_bench.py decode --model DIR --batches 1,32 --input-len 128 --new-tokens 128
      Hugging Face transformers' `generate` (greedy, bf16, its default cache and attention) on a
      model dir: per batch size, generated tokens/s over the whole call (prefill included, as
      `llmrun bench serve`'s output throughput counts them) and decode-only tokens/s
      (batch x (N - 1) over the time of N new tokens minus that of 1) (the peer of
      run-checks.sh's decode_vs_transformers)

Prints one JSON object. Exit 77 with "SKIPPED: ..." when torch, CUDA or transformers is missing.
"""
import argparse
import json
import statistics
import sys
import time


def cuda_or_skip():
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch not importable")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA device")
        sys.exit(77)
    return torch


def timed(torch, fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def attention(a):
    torch = cuda_or_skip()
    import torch.nn.functional as F
    out = {"bench": "attention", "shape": [a.batch, a.heads, a.seq, a.head_dim], "torch": torch.__version__,
           "device": torch.cuda.get_device_name()}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        torch.backends.cuda.matmul.allow_tf32 = False
        q, k, v = (torch.randn(a.batch, a.heads, a.seq, a.head_dim, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        g = torch.randn_like(q)
        fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.repeat)

        def fwd_bwd():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(y, (q, k, v), g)

        both = timed(torch, fwd_bwd, a.repeat)
        out[name] = {"fwd_ms": fwd, "fwd_bwd_ms": both, "bwd_ms": both - fwd}
    print(json.dumps(out))


def train(a):
    torch = cuda_or_skip()
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
            q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(a.vocab, a.d_model), nn.Embedding(a.seq, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.d_model)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = self.ln(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    n_params = sum(p.numel() for p in model.parameters())

    def step():
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ms = timed(torch, step, a.steps, warmup=a.warmup)
    tokens = a.batch * a.seq
    flops = 6 * n_params * tokens + 12 * a.layers * a.d_model * a.seq * tokens
    print(json.dumps({"bench": "train", "params": n_params, "batch": a.batch, "seq": a.seq,
                      "compiled": not a.no_compile, "median_step_ms": ms, "tokens_per_s": tokens / (ms / 1e3),
                      "tflops": flops / (ms / 1e3) / 1e12, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name()}))


def load_bf16_model(torch, model_dir):
    """AutoModelForCausalLM in bf16 on the GPU, across transformers versions (4.56 renamed
    torch_dtype to dtype; older ones reject dtype)."""
    from transformers import AutoModelForCausalLM
    last = None
    for kw in ("dtype", "torch_dtype"):
        try:
            return AutoModelForCausalLM.from_pretrained(model_dir, **{kw: torch.bfloat16}).to("cuda").eval()
        except TypeError as e:  # the keyword is unknown to this version
            last = e
    raise last


def decode(a):
    torch = cuda_or_skip()
    try:
        import transformers
    except ImportError:
        print("SKIPPED: transformers not importable")
        sys.exit(77)
    model = load_bf16_model(torch, a.model)
    vocab = int(getattr(model.config, "vocab_size", 256) or 256)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in (int(x) for x in a.batches.split(",") if x.strip()):
        # Printable byte ids, as llmrun's random prompts are (byte-level vocabulary).
        ids = torch.randint(32, min(vocab, 127), (b, a.input_len), generator=gen).to("cuda")
        mask = torch.ones_like(ids)

        def run(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                     do_sample=False, num_beams=1, pad_token_id=0)
            torch.cuda.synchronize()
            seq = out.sequences if hasattr(out, "sequences") else out
            return time.perf_counter() - t0, int(seq.shape[1]) - a.input_len

        run(4)  # warm-up: kernels, allocator, cache
        t1 = min(run(1)[0] for _ in range(3))
        tn, got = min(run(a.new_tokens) for _ in range(2))
        rows.append({"batch": b, "new_tokens": got, "generate_s": tn, "one_token_s": t1,
                     "tokens_per_s": b * got / tn,
                     "decode_tokens_per_s": b * (got - 1) / (tn - t1) if tn > t1 and got > 1 else None})
    print(json.dumps({"bench": "decode", "model": a.model, "dtype": "bf16", "input_len": a.input_len,
                      "transformers": transformers.__version__, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(), "rows": rows}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("attention")
    for k, v in (("--batch", 4), ("--heads", 12), ("--seq", 1024), ("--head-dim", 64), ("--repeat", 20)):
        p.add_argument(k, type=int, default=v)
    p = sub.add_parser("train")
    for k, v in (("--layers", 12), ("--d-model", 768), ("--heads", 12), ("--vocab", 50257), ("--seq", 1024),
                 ("--batch", 8), ("--steps", 10), ("--warmup", 3)):
        p.add_argument(k, type=int, default=v)
    p.add_argument("--no-compile", action="store_true")
    p = sub.add_parser("decode")
    p.add_argument("--model", required=True, help="a model dir (config.json, model.safetensors)")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    a = ap.parse_args()
    {"attention": attention, "train": train, "decode": decode}[a.cmd](a)


if __name__ == "__main__":
    main()
