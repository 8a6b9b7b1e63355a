#!/usr/bin/python3
"""Hugging Face directory helpers for the interop e2e test, independent of llmrun.

  make DIR KIND[:shards][:f16] ...     write config.json + random weights (gpt2 | llama | llama31 | qwen2 | phi3 | llama-tied | mixtral | qwen2_moe | olmoe)
  same A B                             every tensor of model dir A equals B's (by HF name, exactly)
  loss TEXT DIR ...                    mean next-token loss of the text (byte tokens, windows of
                                       n_positions + 1 overlapping by one), one "DIR LOSS" line each
  greedy DIR N PROMPT                  N greedy next tokens after the prompt's bytes, one line of ids
(Several dirs per call: importing torch is the slow part of this script.)
Tensors are read by Hugging Face names only (safetensors_np), sharded or not.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

CONFIGS = {
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 128,
             "n_positions": 64, "vocab_size": 256, "layer_norm_epsilon": 1e-5},
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
              "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False},
    # Llama 3.1's rope_scaling, its context shrunk to 64 so the 8 frequencies fall in every band.
    "llama31": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
                "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
              "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": 32, "max_window_layers": 2},
    "phi3": {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 128,
             "original_max_position_embeddings": 128, "sliding_window": 64, "vocab_size": 256,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False},
    # Mixture of experts: Mixtral (every layer routed) and Qwen2-MoE (every 2nd layer routed, a
    # gated shared expert, the top-k not renormalised).
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 48, "max_position_embeddings": 64,
                "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "tie_word_embeddings": False,
                "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
                "sliding_window": None},
    "qwen2_moe": {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
                  "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
                  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 48, "norm_topk_prob": False, "decoder_sparse_step": 2,
                  "mlp_only_layers": [], "use_sliding_window": False},
    # OLMoE: q/k norms over the whole q and k projections, every layer routed, no shared expert,
    # the top-k not renormalised.
    "olmoe": {"model_type": "olmoe", "architectures": ["OlmoeForCausalLM"], "num_hidden_layers": 2,
              "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 32, "max_position_embeddings": 64, "vocab_size": 256,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": False,
              "router_aux_loss_coef": 0.01, "output_router_logits": False, "clip_qkv": None,
              "attention_bias": False, "hidden_act": "silu"},
    "llama-tied": {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 8,
                   "num_key_value_heads": 8, "intermediate_size": 128, "max_position_embeddings": 64,
                   "vocab_size": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": True},
}


def load_dir(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
             else ["model.safetensors"])
    out = {}
    for f in files:
        out.update(st.load(os.path.join(d, f))[0])
    return out


def make(d, kind, shards=1, f16=False):
    import torch_models as tm
    os.makedirs(d, exist_ok=True)
    config = CONFIGS[kind]
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=1)
    w = tm.random_weights(config, seed=11)
    # Ten times the usual init scale: peaked logits, so that a wrong forward pass moves the
    # loss far from ln(vocab) instead of hiding in near-uniform predictions.
    w = {k: (v if v.ndim == 1 else 10 * v) for k, v in w.items()}
    if f16:
        w = {k: v.astype(np.float16) for k, v in w.items()}
    names = list(w)
    if shards == 1:
        st.save(os.path.join(d, "model.safetensors"), w, {"format": "pt"})
        return
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        st.save(os.path.join(d, fname), {k: w[k] for k in part}, {"format": "pt"})
        weight_map.update({k: fname for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))


def same(a, b):
    ta, tb = load_dir(a), load_dir(b)
    if sorted(ta) != sorted(tb):
        sys.exit(f"tensor names differ: {sorted(set(ta) ^ set(tb))}")
    for k in ta:
        if ta[k].shape != tb[k].shape or not np.array_equal(ta[k].astype(np.float32), tb[k].astype(np.float32)):
            sys.exit(f"{k} differs between {a} and {b}")
    print(f"{len(ta)} tensors identical")


def loss(d, text):
    import torch
    import torch_models as tm
    config = json.load(open(os.path.join(d, "config.json")))
    params = tm.make_params(config, load_dir(d))
    model = tm.build_model(config, params)
    ids = torch.tensor(list(open(text, "rb").read()), dtype=torch.long)  # byte-level tokens
    S = config.get("n_positions") or config.get("max_position_embeddings")
    nll, n = 0.0, 0
    with torch.no_grad():
        for begin in range(0, len(ids) - 1, S):
            T = min(S, len(ids) - 1 - begin)
            logits = model.forward(ids[None, begin:begin + T]).double()
            targets = ids[begin + 1:begin + 1 + T]
            nll += torch.nn.functional.cross_entropy(logits[0], targets, reduction="sum").item()
            n += T
    print(d, repr(nll / n))


def greedy(d, n, prompt):
    import torch
    import torch_models as tm
    config = json.load(open(os.path.join(d, "config.json")))
    model = tm.build_model(config, tm.make_params(config, load_dir(d)))
    ids = list(prompt.encode())  # byte-level tokens
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model.forward(torch.tensor([ids])).double()[0, -1].argmax()))
    print(" ".join(map(str, ids[len(prompt.encode()):])))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        for i in range(0, len(args), 2):
            kind, *opts = args[i + 1].split(":")
            make(args[i], kind, int(opts[0]) if opts and opts[0] else 1, "f16" in opts)
    elif cmd == "greedy":
        greedy(args[0], int(args[1]), args[2])
    elif cmd == "same":
        same(args[0], args[1])
    elif cmd == "loss":
        for d in args[1:]:
            loss(d, args[0])
    else:
        sys.exit(__doc__)
