#!/usr/bin/python3
"""Check llmrun's forward/backward/AdamW output against a PyTorch reference.

Usage:  /usr/bin/python3 tests/oracle/check_against_torch.py OUT

OUT is written by llmrun's reference driver and holds:
  OUT/model/config.json          Hugging Face config (gpt2 or llama)
  OUT/model/model.safetensors    initial weights, exact HF names and layouts
  OUT/reference.safetensors      llmrun's results:
      tokens   I32 [B, T+1]   inputs tokens[:, :T], targets tokens[:, 1:]
      logits   F32 [B, T, V]  forward pass of the initial weights
      loss     F32 [1]        mean cross-entropy over all B*T targets
      grad.<n> F32            d loss / d <n> at the initial weights (unclipped)
      step2.<n> F32           <n> after two AdamW steps on the same batch
    metadata: lr, beta1, beta2, eps, weight_decay, clip, arch

We recompute everything in float32 PyTorch (the reference) and compare with
relative error ||a - b||_2 / max(||b||_2, tiny), evaluated in float64, where
b is PyTorch's value.  Exit status 0 on success, 1 on any mismatch, missing
or extra tensor, or malformed input.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402
import torch_models  # noqa: E402

TOL = {"loss": 1e-5, "logits": 1e-4, "grad": 1e-4, "step2": 1e-4}
TINY = 1e-30
HYPER_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay", "clip", "arch")


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), TINY))


def parse_hyper(meta):
    missing = [k for k in HYPER_KEYS if k not in meta]
    if missing:
        raise ValueError(f"reference metadata lacks {missing}")
    hp = {k: float(meta[k]) for k in HYPER_KEYS if k != "arch"}
    hp["arch"] = meta["arch"]
    # Mixture of experts: router loss coefficients and capacity (absent for dense models).
    for k in ("moe_aux_loss", "moe_z_loss", "moe_capacity_factor"):
        hp[k] = float(meta.get(k, 0.0))
    return hp


def build(config, params, hp):
    model = torch_models.build_model(config, params)
    if torch_models.moe_spec(config) is not None:
        model.moe_aux, model.moe_z = hp["moe_aux_loss"], hp["moe_z_loss"]
        model.capacity_factor = hp["moe_capacity_factor"]
    return model


def training_loss(config, model, inputs, targets):
    """Mean cross-entropy plus, for an MoE model, its router losses. llmrun's optimizer steps
    run two micro-batches of two sequences each and its router losses are per micro-batch,
    so an MoE step's loss is the mean of the two micro-batches' losses."""
    if torch_models.moe_spec(config) is None:
        return torch_models.cross_entropy_loss(model.forward(inputs), targets)
    total = 0
    for i in range(0, inputs.shape[0], 2):
        logits = model.forward(inputs[i:i + 2])
        total = total + torch_models.cross_entropy_loss(logits, targets[i:i + 2]) + model.router_loss
    return total / ((inputs.shape[0] + 1) // 2)


def make_optimizer(params, hp):
    """torch.optim.AdamW with decay only on tensors of 2+ dims."""
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": hp["weight_decay"]})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])


def compute_reference(config, weights, tokens, hp):
    """PyTorch float32 results for the contract: name -> float32 numpy array.

    Returns logits, loss, grad.<n> and step2.<n> for every parameter <n>.
    """
    tokens = torch.as_tensor(np.asarray(tokens)).long()
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    out = {}

    # Forward + backward at the initial weights.
    params = torch_models.make_params(config, weights)
    model = build(config, params, hp)
    logits = model.forward(inputs)
    loss = torch_models.cross_entropy_loss(logits, targets)
    if torch_models.moe_spec(config) is not None:
        loss = loss + model.router_loss  # the whole batch as one micro-batch
    loss.backward()
    out["logits"] = logits.detach().numpy().astype(np.float32)
    out["loss"] = np.array([loss.item()], dtype=np.float32)
    for name, p in params.items():
        # A parameter that the loss never touches would have grad None; its gradient is zero.
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = g.detach().numpy().astype(np.float32)

    # Two full optimizer steps from fresh copies of the initial weights.
    params = torch_models.make_params(config, weights)
    model = build(config, params, hp)
    opt = make_optimizer(params, hp)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        loss = training_loss(config, model, inputs, targets)
        loss.backward()
        # An expert no token reached has no gradient in torch, and AdamW would skip it; in
        # llmrun (as in Megatron) its gradient is zero and it still decays and moves by its moments.
        for p in params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if hp["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), hp["clip"])
        opt.step()
    for name, p in params.items():
        out["step2." + name] = p.detach().numpy().astype(np.float32)
    return out


def expected_reference_names(config):
    names = ["tokens", "logits", "loss"]
    for n in torch_models.param_names(config):
        names += ["grad." + n, "step2." + n]
    return set(names)


def check(out_dir):
    """Returns a list of failure strings (empty on success); prints a report."""
    failures = []
    with open(os.path.join(out_dir, "model", "config.json")) as f:
        config = json.load(f)
    arch = torch_models.arch_of(config)
    weights, _ = safetensors_np.load(os.path.join(out_dir, "model", "model.safetensors"))
    ref, meta = safetensors_np.load(os.path.join(out_dir, "reference.safetensors"))
    hp = parse_hyper(meta)

    if hp["arch"] != arch:
        failures.append(f"metadata arch {hp['arch']!r} != config model_type {arch!r}")

    # Structural checks: the exact set of names and shapes the config implies.
    expected_shapes = dict(torch_models.param_shapes(config))
    for name in sorted(set(expected_shapes) - set(weights)):
        failures.append(f"model.safetensors missing {name}")
    for name in sorted(set(weights) - set(expected_shapes)):
        failures.append(f"model.safetensors has unexpected {name}")
    for name in sorted(set(expected_shapes) & set(weights)):
        if tuple(weights[name].shape) != tuple(expected_shapes[name]):
            failures.append(f"model.safetensors {name} shape {weights[name].shape} != {expected_shapes[name]}")
    exp_ref = expected_reference_names(config)
    for name in sorted(exp_ref - set(ref)):
        failures.append(f"reference.safetensors missing {name}")
    for name in sorted(set(ref) - exp_ref):
        failures.append(f"reference.safetensors has unexpected {name}")
    if "tokens" not in ref:
        return failures
    tokens = ref["tokens"]
    V = config["vocab_size"]
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        failures.append(f"tokens shape {tokens.shape} is not [B, T+1] with T >= 1")
    elif tokens.min() < 0 or tokens.max() >= V:
        failures.append(f"tokens out of range [0, {V}): min {tokens.min()} max {tokens.max()}")
    if failures:
        return failures

    mine = compute_reference(config, weights, tokens, hp)
    B, T = tokens.shape[0], tokens.shape[1] - 1
    print(f"arch={arch} B={B} T={T} V={V} params={len(expected_shapes)} "
          f"torch_loss={mine['loss'][0]:.6f} "
          f"hyper=" + ",".join(f"{k}={meta[k]}" for k in HYPER_KEYS if k != "arch"))

    # Compare by group: one line per group with the worst tensor.
    for group in ("loss", "logits", "grad", "step2"):
        names = [n for n in sorted(mine) if n == group or n.startswith(group + ".")]
        worst_name, worst = None, -1.0
        bad = []
        for n in names:
            if n not in ref:
                continue  # already reported as missing
            a = ref[n]
            b = mine[n]
            if a.size != b.size or (a.shape != b.shape and not (group == "loss" and a.size == 1)):
                bad.append(f"{n} (shape {a.shape} != {b.shape})")
                continue
            e = rel_err(a.reshape(b.shape), b)
            if not np.isfinite(e):
                e = float("inf")
            if e > worst:
                worst, worst_name = e, n
            if not (e < TOL[group]):
                bad.append(f"{n} (rel {e:.3e})")
        status = "OK" if not bad else f"FAIL ({len(bad)})"
        print(f"{group:7s} n={len(names):3d} max_rel={worst:.3e} tol={TOL[group]:.0e} worst={worst_name}  {status}")
        failures += [f"{group}: {b}" for b in bad]

    # Diagnostic only: how well the optimizer *update* matches, which the
    # parameter-relative metric above dilutes by the size of the weights.
    worst_u, worst_un = -1.0, None
    for n in torch_models.param_names(config):
        if "step2." + n in ref:
            w0 = weights[n].astype(np.float64)
            e = rel_err(ref["step2." + n].astype(np.float64) - w0, mine["step2." + n].astype(np.float64) - w0)
            if e > worst_u:  # first one wins ties, so a name is always shown
                worst_u, worst_un = e, n
    print(f"info    step2 update (param - initial) max_rel={worst_u:.3e} worst={worst_un}")
    return failures


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    try:
        failures = check(argv[1])
    except (OSError, ValueError, KeyError) as e:
        print(f"FAILED: cannot read {argv[1]}: {e}")
        return 1
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
