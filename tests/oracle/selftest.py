#!/usr/bin/python3
"""Self-test for check_against_torch.py: it must pass on correct data and
fail on slightly wrong data.

For each tiny model (GPT-2; Llama with GQA, untied; Llama tied) we write a
fake OUT directory whose reference values come from our own torch models, so
the checker must pass; then we corrupt it in several ways (one gradient off
by 1e-3 relative, one step2 parameter off, a missing tensor, an extra
tensor) and the checker must fail each time.  A few direct checks of the
safetensors codec and of the models' causality run first.

Usage:  /usr/bin/python3 tests/oracle/selftest.py     (exit 0 on success)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_np  # noqa: E402
import torch_models  # noqa: E402
from check_against_torch import compute_reference  # noqa: E402

CHECKER = os.path.join(HERE, "check_against_torch.py")
B, T = 4, 16

CONFIGS = {
    "gpt2": {
        "model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4, "n_inner": 128,
        "n_positions": 16, "vocab_size": 64, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "tie_word_embeddings": True,
    },
    "llama_gqa_untied": {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 88,
        "max_position_embeddings": 16, "vocab_size": 64, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False,
    },
    "llama_tied": {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 88,
        "max_position_embeddings": 16, "vocab_size": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0, "tie_word_embeddings": True,
    },
}
# Different clip settings so both the clipped (0.1 is below the initial
# gradient norm) and unclipped paths of the checker run.
HYPER = {
    "gpt2": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip": 0.1},
    "llama_gqa_untied": {"lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "clip": 0.0},
    "llama_tied": {"lr": 1e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1, "clip": 1.0},
}


def write_out(out_dir, config, weights, ref, hyper):
    os.makedirs(os.path.join(out_dir, "model"), exist_ok=True)
    with open(os.path.join(out_dir, "model", "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    safetensors_np.save(os.path.join(out_dir, "model", "model.safetensors"), weights)
    meta = {k: repr(v) for k, v in hyper.items()}
    meta["arch"] = config["model_type"]
    safetensors_np.save(os.path.join(out_dir, "reference.safetensors"), ref, meta)


def run_checker(out_dir):
    r = subprocess.run([sys.executable, CHECKER, out_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    return r.returncode, r.stdout


def perturb(x, rel, seed):
    """x plus noise whose norm is `rel` times the norm of x."""
    noise = np.random.default_rng(seed).standard_normal(x.shape)
    noise *= rel * np.linalg.norm(x) / np.linalg.norm(noise)
    return (x + noise).astype(x.dtype)


def test_safetensors_codec(tmp):
    path = os.path.join(tmp, "codec.safetensors")
    data = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "f16": np.linspace(-2, 2, 5).astype(np.float16),
        "i32": np.array([[1, -2], [3, 2**31 - 1]], dtype=np.int32),
        "scalar_like": np.array([3.5], dtype=np.float32),
    }
    safetensors_np.save(path, data, {"k": "v"})
    back, meta = safetensors_np.load(path)
    assert meta == {"k": "v"}, meta
    assert set(back) == set(data)
    for k in data:
        assert back[k].dtype == data[k].dtype and np.array_equal(back[k], data[k]), k
    # BF16: hand-write a file, since numpy cannot produce bfloat16 itself.
    vals = np.array([1.0, -2.5, 3.140625], dtype=np.float32)  # exactly representable in bf16
    raw = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({"b": {"dtype": "BF16", "shape": [3], "data_offsets": [0, len(raw)]}}).encode()
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + raw)
    back, _ = safetensors_np.load(path)
    assert np.array_equal(back["b"], vals), back["b"]
    print("ok   safetensors codec (F32, F16, I32, BF16, metadata)")


def test_causality(name, config):
    """Changing the last input token must not change logits at earlier positions."""
    params = torch_models.make_params(config, torch_models.random_weights(config, 1))
    model = torch_models.build_model(config, params)
    tok = torch.randint(0, config["vocab_size"], (2, T))
    tok2 = tok.clone()
    tok2[:, -1] = (tok2[:, -1] + 1) % config["vocab_size"]
    with torch.no_grad():
        a, b = model.forward(tok), model.forward(tok2)
    assert torch.equal(a[:, :-1], b[:, :-1]), "future token leaked into earlier logits"
    assert not torch.equal(a[:, -1], b[:, -1]), "last token had no effect"
    print(f"ok   {name}: causal mask")


def test_checker(name, config, hyper, tmp):
    weights = torch_models.random_weights(config, seed=1234)
    rng = np.random.default_rng(99)
    tokens = rng.integers(0, config["vocab_size"], size=(B, T + 1)).astype(np.int32)
    ref = compute_reference(config, weights, tokens, hyper)
    ref["tokens"] = tokens
    # Clipping must actually bite where the test asks for it.
    gnorm = np.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for k, v in ref.items() if k.startswith("grad.")))
    print(f"     {name}: loss={ref['loss'][0]:.4f} grad_norm={gnorm:.4f} clip={hyper['clip']}")

    names = torch_models.param_names(config)
    some_grad = "grad." + names[len(names) // 2]
    some_step2 = "step2." + names[1]
    cases = [("clean", True, lambda r: r)]

    def set_(key, fn):
        def f(r):
            r = dict(r)
            r[key] = fn(r[key])
            return r
        return f

    cases += [
        # Float32-rounding-sized differences must pass, or the tolerances are too tight.
        ("everything off by 1e-6 rel", True,
         lambda r: {k: (v if k == "tokens" else perturb(v, 1e-6, 3)) for k, v in r.items()}),
        (f"{some_grad} off by 1e-3 rel", False, set_(some_grad, lambda x: perturb(x, 1e-3, 5))),
        (f"{some_step2} off by 1e-3 rel", False, set_(some_step2, lambda x: perturb(x, 1e-3, 6))),
        ("logits off by 1e-3 rel", False, set_("logits", lambda x: perturb(x, 1e-3, 7))),
        ("loss off by 1e-4 rel", False, set_("loss", lambda x: (x * (1 + 1e-4)).astype(np.float32))),
        ("grad missing", False, lambda r: {k: v for k, v in r.items() if k != some_grad}),
        ("extra tensor", False, lambda r: dict(r, **{"grad.bogus": np.zeros(3, np.float32)})),
        ("NaN in a grad", False, set_(some_grad, lambda x: np.where(np.arange(x.size).reshape(x.shape) == 0, np.nan, x).astype(np.float32))),
    ]
    ok = True
    for label, should_pass, mutate in cases:
        out_dir = os.path.join(tmp, name)
        shutil.rmtree(out_dir, ignore_errors=True)
        write_out(out_dir, config, weights, mutate(ref), hyper)
        rc, text = run_checker(out_dir)
        good = (rc == 0) == should_pass
        ok &= good
        expect = "pass" if should_pass else "fail"
        print(f"{'ok  ' if good else 'BAD '} {name}: {label}: checker rc={rc} (expected {expect})")
        if label == "clean" or not good:  # show the report format once per model
            print("       | " + text.rstrip().replace("\n", "\n       | "))
    return ok


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="oracle_selftest_")
    ok = True
    try:
        test_safetensors_codec(tmp)
        for name, config in CONFIGS.items():
            test_causality(name, config)
        for name, config in CONFIGS.items():
            ok &= test_checker(name, config, HYPER[name], tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("SELFTEST PASSED" if ok else "SELFTEST FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
