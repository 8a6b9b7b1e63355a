#!/usr/bin/python3
"""PyTorch fp32 CPU LoRA training benchmark: the peer of `llmrun train` with finetune: lora.

The same reference models as bench/torch_train_bench.py (tests/oracle/torch_models.py) with
PEFT-style LoRA on every block linear (the oracle's implementation,
tests/oracle/check_lora_against_torch.py): base frozen (no grad), A and B trained with AdamW
and clip_grad_norm_. Takes torch_train_bench.py's shape arguments plus --rank/--alpha; prints
one JSON line {"tokens_per_s", "median_step_s", "threads", "trainable", ...}. Set
OMP_WAIT_POLICY/OMP_NUM_THREADS in the environment (see torch_train_bench.py).
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import check_lora_against_torch as lora  # noqa: E402
import torch_models  # noqa: E402
import torch_train_bench  # noqa: E402


def main(argv):
    rank, alpha = 16, 32.0
    if "--rank" in argv:
        i = argv.index("--rank")
        rank = int(argv[i + 1])
        del argv[i:i + 2]
    if "--alpha" in argv:
        i = argv.index("--alpha")
        alpha = float(argv[i + 1])
        del argv[i:i + 2]
    args = torch_train_bench.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = torch_train_bench.hf_config(args)
    weights = torch_models.random_weights(config, args.seed)
    targets = ["c_attn", "c_proj", "c_fc"] if args.arch == "gpt2" else [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    rng = np.random.default_rng(args.seed)
    adapter = {}
    for module, (fan_in, fan_out) in lora.linear_modules(config, weights).items():
        if lora.targeted(module, targets):
            bound = 1 / np.sqrt(fan_in)
            adapter[lora.PREFIX + module + ".lora_A.weight"] = rng.uniform(-bound, bound, (rank, fan_in)).astype(np.float32)
            adapter[lora.PREFIX + module + ".lora_B.weight"] = np.zeros((fan_out, rank), np.float32)
    cfg = {"r": rank, "lora_alpha": alpha, "target_modules": targets}
    model, adapters = lora.build(config, weights, adapter, cfg)
    trained = list(adapters.values())
    opt = torch.optim.AdamW(trained, lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch_models.cross_entropy_loss(model.forward(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, args.clip)
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(json.dumps({"tokens_per_s": args.batch * args.seq / median, "median_step_s": median,
                      "threads": torch.get_num_threads(),
                      "trainable": sum(p.numel() for p in trained), "rank": rank}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
