#!/usr/bin/python3
"""PyTorch fp32 CPU training benchmark: the peer llmrun is compared against.

Trains the same GPT-2 / Llama shapes as llmrun, using the reference models in
tests/oracle/torch_models.py, on random tokens: each timed step is a full
forward + cross-entropy + backward + clip_grad_norm_ + AdamW step.  Prints one
line per step and, last, one JSON line:
  {"tokens_per_s": ..., "median_step_s": ..., "threads": ..., "config": {...}, ...}
where tokens_per_s = batch * seq / median_step_s over the post-warmup steps.

Examples:
  /usr/bin/python3 bench/torch_train_bench.py --arch gpt2 --layers 2 --d-model 64 \
      --heads 4 --vocab 256 --seq 64 --batch 4 --steps 10 --warmup 2 --threads 2
  /usr/bin/python3 bench/torch_train_bench.py --arch llama --layers 2 --d-model 64 \
      --heads 4 --kv-heads 2 --ffn 176 --vocab 256 --seq 64 --batch 4 --best

Threads: OpenMP reads OMP_WAIT_POLICY (and OMP_NUM_THREADS) once, when the
runtime starts inside `import torch`, so setting them from Python here is too
late: the caller must set them in the environment before python starts, e.g.
  OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 /usr/bin/python3 bench/... --threads 2
On a small shared machine (2 cores) spinning OpenMP workers can hurt, so the
"best configuration" is the faster of
  (a) --threads 2 with OMP_WAIT_POLICY=PASSIVE, and
  (b) --threads 1.
--best does exactly that: it re-runs this script under both environments in
subprocesses and reports the one with the better median step time (the final
JSON line then also lists both candidates).

Default FFN width when --ffn is omitted: 4*d for GPT-2; for Llama 8/3*d
rounded up to a multiple of 32.  Pass --ffn explicitly to match llmrun.
Attention uses F.scaled_dot_product_attention when this torch has it
(torch >= 2.0), otherwise explicit masked softmax attention.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
import torch_models  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=("gpt2", "llama"), required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=None, help="Llama only; default = heads")
    ap.add_argument("--ffn", type=int, default=None, help="default 4*d (gpt2) or ~8/3*d (llama)")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--positions", type=int, default=None, help="GPT-2 n_positions; default = seq")
    ap.add_argument("--tied", type=int, choices=(0, 1), default=None,
                    help="Llama tie_word_embeddings (GPT-2 is always tied); default 0")
    ap.add_argument("--moe-experts", type=int, default=0,
                    help="Llama only: a Mixtral model with this many experts per layer")
    ap.add_argument("--moe-top-k", type=int, default=2)
    ap.add_argument("--moe-ffn", type=int, default=None, help="expert width; default --ffn")
    ap.add_argument("--moe-aux", type=float, default=0.01, help="load-balancing loss coefficient")
    ap.add_argument("--moe-z", type=float, default=0.001, help="router z-loss coefficient")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads; default = torch's")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--best", action="store_true",
                    help="run threads=2+OMP_WAIT_POLICY=PASSIVE and threads=1, report the faster")
    args = ap.parse_args(argv)
    if args.d_model % args.heads:
        ap.error("--d-model must be divisible by --heads")
    if args.arch == "llama" and args.kv_heads and args.heads % args.kv_heads:
        ap.error("--heads must be divisible by --kv-heads")
    return args


def hf_config(args):
    d = args.d_model
    if args.arch == "gpt2":
        return {
            "model_type": "gpt2", "n_layer": args.layers, "n_embd": d, "n_head": args.heads,
            "n_inner": args.ffn or 4 * d, "n_positions": args.positions or args.seq,
            "vocab_size": args.vocab, "layer_norm_epsilon": 1e-5,
            "activation_function": "gelu_new", "tie_word_embeddings": True,
        }
    ffn = args.ffn or 32 * -(-(8 * d // 3) // 32)
    if args.moe_experts:  # Mixtral: every MLP a routed layer of SwiGLU experts
        return {
            "model_type": "mixtral", "num_hidden_layers": args.layers, "hidden_size": d,
            "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads or args.heads,
            "intermediate_size": args.moe_ffn or ffn, "max_position_embeddings": args.seq,
            "vocab_size": args.vocab, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": bool(args.tied), "num_local_experts": args.moe_experts,
            "num_experts_per_tok": args.moe_top_k,
        }
    return {
        "model_type": "llama", "num_hidden_layers": args.layers, "hidden_size": d,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads or args.heads,
        "intermediate_size": ffn, "max_position_embeddings": args.seq,
        "vocab_size": args.vocab, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": bool(args.tied),
    }


def run_bench(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    config = hf_config(args)
    params = torch_models.make_params(config, torch_models.random_weights(config, args.seed))
    use_sdpa = hasattr(F, "scaled_dot_product_attention")
    model = torch_models.build_model(config, params, use_sdpa=use_sdpa)
    if args.moe_experts:  # the same router losses as the llmrun recipe
        model.moe_aux, model.moe_z = args.moe_aux, args.moe_z
    n_params = sum(p.numel() for p in params.values())

    # Same optimizer setup as the correctness oracle: decay only 2+-dim tensors.
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    try:
        # The multi-tensor path is PyTorch's fastest CPU AdamW here.
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    except TypeError:  # very old torch without the foreach argument
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    all_params = list(params.values())

    gen = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.batch * args.seq
    times = []
    print(f"# arch={args.arch} params={n_params} threads={torch.get_num_threads()} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')} sdpa={use_sdpa} "
          f"torch={torch.__version__}", flush=True)
    for step in range(args.warmup + args.steps):
        # Fresh random batch each step, drawn outside the timed region.
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch_models.cross_entropy_loss(model.forward(inputs), targets)
        if args.moe_experts:
            loss = loss + model.router_loss
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(all_params, args.clip)
        opt.step()
        dt = time.perf_counter() - t0
        timed = step >= args.warmup
        if timed:
            times.append(dt)
        print(f"step {step:4d} {'timed ' if timed else 'warmup'} loss {loss.item():.4f} "
              f"time {dt * 1e3:9.2f} ms  {tokens_per_step / dt:10.1f} tok/s", flush=True)

    median = statistics.median(times) if times else float("nan")
    return {
        "tokens_per_s": tokens_per_step / median,
        "median_step_s": median,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "config": dict(config, batch=args.batch, seq=args.seq, params=n_params,
                       steps=args.steps, warmup=args.warmup, sdpa=use_sdpa,
                       torch=torch.__version__),
    }


def run_best(argv):
    """Re-run this script in both thread configurations; return the faster result."""
    base = [a for a in argv if a != "--best"]
    # Drop any --threads the caller gave: --best decides it.
    cleaned, skip = [], False
    for a in base:
        if skip:
            skip = False
            continue
        if a == "--threads":
            skip = True
            continue
        if a.startswith("--threads="):
            continue
        cleaned.append(a)
    candidates = [
        (2, {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"}),
        (1, {"OMP_NUM_THREADS": "1"}),
    ]
    results = []
    for threads, extra_env in candidates:
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)
        env.update(extra_env)
        cmd = [sys.executable, os.path.abspath(__file__)] + cleaned + ["--threads", str(threads)]
        print(f"# --best: running threads={threads} env={extra_env}", flush=True)
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, universal_newlines=True)
        lines = proc.stdout.strip().splitlines()
        for line in lines[:-1]:
            print("  " + line)
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"candidate threads={threads} failed (rc={proc.returncode})")
        res = json.loads(lines[-1])
        print("  " + lines[-1], flush=True)
        results.append(res)
    best = dict(min(results, key=lambda r: r["median_step_s"]))
    best["candidates"] = [{"threads": r["threads"], "omp_wait_policy": r["omp_wait_policy"],
                           "median_step_s": r["median_step_s"], "tokens_per_s": r["tokens_per_s"]}
                          for r in results]
    return best


def main(argv):
    args = parse_args(argv)
    result = run_best(argv) if args.best else run_bench(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
