#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo, CPU, fp32) training throughput: the peer of llmrun's
data-parallel runs. Same model shapes and optimizer step as bench/torch_train_bench.py (whose
argument parser and model config it reuses), plus --world N processes on this machine, each
with cores / N threads and OMP_WAIT_POLICY=PASSIVE, each taking batch / N sequences of every
global batch of --batch sequences. Prints one JSON line: global tokens/s from the median step.

  /usr/bin/python3 bench/torch_ddp_bench.py --world 2 --arch llama --layers 4 --d-model 256 \
      --heads 8 --kv-heads 4 --ffn 688 --vocab 8192 --seq 256 --batch 8 --tied 0
"""
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def worker(rank, world, argv, init_file, out_path):
    import torch
    import torch.distributed as dist
    import torch_train_bench as tb
    torch_models = tb.torch_models

    args = tb.parse_args(argv)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    config = tb.hf_config(args)
    params = torch_models.make_params(config, torch_models.random_weights(config, args.seed))

    class Wrapped(torch.nn.Module):
        # DDP needs a Module that owns the parameters; the reference model reads the same tensors.
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterList([torch.nn.Parameter(t) for t in params.values()])
            self.model = torch_models.build_model(config, dict(zip(params.keys(), self.p)))

        def forward(self, tokens):
            return self.model.forward(tokens)

    module = Wrapped()
    ddp = torch.nn.parallel.DistributedDataParallel(module)
    decay = [p for p in module.p if p.dim() >= 2]
    no_decay = [p for p in module.p if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    local = args.batch // world
    gen = torch.Generator().manual_seed(args.seed + rank)
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, args.vocab, (local, args.seq + 1), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch_models.cross_entropy_loss(ddp(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(module.p), args.clip)
        opt.step()
        dist.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        median = statistics.median(times)
        with open(out_path, "w") as f:
            json.dump({"world": world, "threads_per_rank": torch.get_num_threads(),
                       "median_step_s": median, "tokens_per_s": args.batch * args.seq / median}, f)
    dist.destroy_process_group()


def main(argv):
    world = 1
    if "--world" in argv:
        i = argv.index("--world")
        world = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    # OpenMP reads this when torch loads, in the children too: set it before any import of torch.
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        mp.spawn(worker, args=(world, argv, os.path.join(d, "init"), out), nprocs=world, join=True)
        print(open(out).read())


if __name__ == "__main__":
    main(sys.argv[1:])
