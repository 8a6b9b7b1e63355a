#!/usr/bin/python3
"""Check llmrun's LoRA fine-tuning against an independent PyTorch LoRA, and its PEFT format.

Usage:  /usr/bin/python3 tests/oracle/check_lora_against_torch.py OUT

OUT is written by llmrun_lora_dump:
  OUT/model/                      the frozen base (Hugging Face dir)
  OUT/adapter/adapter_config.json PEFT LoraConfig fields
  OUT/adapter/adapter_model.safetensors  base_model.model.<module>.lora_{A,B}.weight
  OUT/reference.safetensors       llmrun's logits, loss, grad.<adapter>, step2.<adapter>

The reference here applies LoRA as PEFT defines it, y = base(x) + (lora_alpha / r) *
(x @ A^T) @ B^T for every module named by target_modules (PEFT's suffix match), on the plain
models of torch_models.py; only A and B are trained (torch.optim.AdamW, clip_grad_norm_).
The format check holds the adapter dir to PEFT's documented layout: tensor names and
shapes (A [r, in], B [out, r], also for GPT-2's Conv1D with fan_in_fan_out) and the
adapter_config.json fields PEFT reads. Exit 0 on success, 1 on any mismatch.
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
PREFIX = "base_model.model."


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def targeted(module, targets):
    return any(module == t or module.endswith("." + t) for t in targets)


def linear_modules(config, weights):
    """module name -> (in, out) for every linear of the blocks, from the base weights."""
    arch = torch_models.arch_of(config)
    out = {}
    for name, w in weights.items():
        if not name.endswith(".weight") or w.ndim != 2 or ".layers." not in name and ".h." not in name:
            continue
        module = name[: -len(".weight")]
        if arch == "gpt2":  # Conv1D: [in, out]
            out[module] = (w.shape[0], w.shape[1])
        else:
            out[module] = (w.shape[1], w.shape[0])
    return out


def check_format(config, weights, cfg, adapter):
    failures = []
    arch = torch_models.arch_of(config)
    want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "bias": "none",
            "fan_in_fan_out": arch == "gpt2", "use_rslora": False, "use_dora": False}
    for k, v in want.items():
        if cfg.get(k) != v:
            failures.append(f"adapter_config.json {k}={cfg.get(k)!r}, PEFT needs {v!r}")
    for k in ("r", "lora_alpha", "lora_dropout", "target_modules", "base_model_name_or_path",
              "modules_to_save", "rank_pattern", "alpha_pattern", "init_lora_weights"):
        if k not in cfg:
            failures.append(f"adapter_config.json lacks {k}")
    if failures:
        return failures
    r = cfg["r"]
    expected = {}
    for module, (fan_in, fan_out) in linear_modules(config, weights).items():
        if targeted(module, cfg["target_modules"]):
            expected[PREFIX + module + ".lora_A.weight"] = (r, fan_in)
            expected[PREFIX + module + ".lora_B.weight"] = (fan_out, r)
    if not expected:
        failures.append("target_modules match no module of the base")
    for n in sorted(set(expected) - set(adapter)):
        failures.append(f"adapter_model.safetensors missing {n}")
    for n in sorted(set(adapter) - set(expected)):
        failures.append(f"adapter_model.safetensors has unexpected {n}")
    for n in sorted(set(expected) & set(adapter)):
        if tuple(adapter[n].shape) != expected[n]:
            failures.append(f"{n} shape {adapter[n].shape} != {expected[n]}")
    return failures


class LoraMixin:
    """Adds PEFT's LoRA path to the reference models' linears."""

    def setup_lora(self, adapters, scale, targets):
        self.adapters, self.scale, self.targets = adapters, scale, targets

    def _delta(self, x, module):
        if not targeted(module, self.targets):
            return 0
        a = self.adapters[PREFIX + module + ".lora_A.weight"]
        b = self.adapters[PREFIX + module + ".lora_B.weight"]
        return self.scale * ((x @ a.t()) @ b.t())


class GPT2Lora(LoraMixin, torch_models.GPT2):
    def _conv1d(self, x, name):
        return super()._conv1d(x, name) + self._delta(x, name)


class LlamaLora(LoraMixin, torch_models.Llama):
    def _lin(self, x, name):
        return super()._lin(x, name) + self._delta(x, name)


def build(config, weights, adapter, cfg, base_dtype="fp32"):
    base = {n: torch.as_tensor(np.array(w)) for n, w in weights.items()}  # frozen: no grad
    if base_dtype == "bf16":  # finetune.base_dtype: bf16 holds the frozen base rounded to bf16
        base = {n: w.to(torch.bfloat16).float() for n, w in base.items()}
    adapters = {n: torch.as_tensor(np.array(w)).clone().requires_grad_(True) for n, w in adapter.items()}
    cls = GPT2Lora if torch_models.arch_of(config) == "gpt2" else LlamaLora
    model = cls(config, base)
    model.setup_lora(adapters, cfg["lora_alpha"] / cfg["r"], cfg["target_modules"])
    return model, adapters


def compute(config, weights, adapter, cfg, tokens, hp, base_dtype="fp32"):
    tokens = torch.as_tensor(np.asarray(tokens)).long()
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    out = {}
    model, adapters = build(config, weights, adapter, cfg, base_dtype)
    logits = model.forward(inputs)
    loss = torch_models.cross_entropy_loss(logits, targets)
    loss.backward()
    out["logits"] = logits.detach().numpy()
    out["loss"] = np.array([loss.item()], dtype=np.float32)
    for n, p in adapters.items():
        out["grad." + n] = p.grad.numpy().copy()
    model, adapters = build(config, weights, adapter, cfg, base_dtype)
    opt = torch.optim.AdamW(list(adapters.values()), lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"], weight_decay=hp["weight_decay"])
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        torch_models.cross_entropy_loss(model.forward(inputs), targets).backward()
        torch.nn.utils.clip_grad_norm_(list(adapters.values()), hp["clip"])
        opt.step()
    for n, p in adapters.items():
        out["step2." + n] = p.detach().numpy().copy()
    return out


def check(out_dir):
    with open(os.path.join(out_dir, "model", "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(out_dir, "adapter", "adapter_config.json")) as f:
        cfg = json.load(f)
    weights, _ = safetensors_np.load(os.path.join(out_dir, "model", "model.safetensors"))
    adapter, _ = safetensors_np.load(os.path.join(out_dir, "adapter", "adapter_model.safetensors"))
    ref, meta = safetensors_np.load(os.path.join(out_dir, "reference.safetensors"))
    failures = check_format(config, weights, cfg, adapter)
    print(f"format  {len(adapter)} adapter tensors, r={cfg.get('r')} alpha={cfg.get('lora_alpha')} "
          f"targets={cfg.get('target_modules')}  {'OK' if not failures else 'FAIL'}")
    if failures:
        return failures
    hp = {k: float(meta[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "clip")}
    base_dtype = meta.get("base_dtype", "fp32")
    if base_dtype not in ("fp32", "bf16"):
        return [f"reference.safetensors: unknown base_dtype {base_dtype!r}"]
    print(f"base    {base_dtype}")
    mine = compute(config, weights, adapter, cfg, ref["tokens"], hp, base_dtype)
    expected = set(mine) | {"tokens"}
    for n in sorted(expected - set(ref)):
        failures.append(f"reference.safetensors missing {n}")
    for n in sorted(set(ref) - expected):
        failures.append(f"reference.safetensors has unexpected {n}")
    for group in ("loss", "logits", "grad", "step2"):
        names = [n for n in sorted(mine) if (n == group or n.startswith(group + ".")) and n in ref]
        worst, worst_name, bad = -1.0, None, []
        for n in names:
            a, b = ref[n], mine[n]
            if a.size != b.size:
                bad.append(f"{n} (size {a.size} != {b.size})")
                continue
            e = rel_err(a.reshape(b.shape), b)
            if not np.isfinite(e):
                e = float("inf")
            if e > worst:
                worst, worst_name = e, n
            if not e < TOL[group]:
                bad.append(f"{n} (rel {e:.3e})")
        if group == "grad":  # a zero gradient would make the comparison vacuous
            bad += [f"{n} is all zero" for n in names if not np.any(mine[n])]
        print(f"{group:7s} n={len(names):3d} max_rel={worst:.3e} tol={TOL[group]:.0e} "
              f"worst={worst_name}  {'OK' if not bad else 'FAIL'}")
        failures += [f"{group}: {b}" for b in bad]
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
