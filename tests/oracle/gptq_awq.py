#!/usr/bin/python3
"""GPTQ and AWQ model dirs for the e2e test, written independently of llmrun.

  make DIR                               a fp32 Llama dir (random weights, wide enough for groups of 128)
  quantize SRC OUT REF METHOD BITS GROUP SYM [act]
                                         round-to-nearest quantization of SRC's linears (not lm_head)
                                         into METHOD's packed layout (gptq | awq) in OUT, with
                                         config.json's quantization_config; REF gets the same model
                                         with the dequantized weights in fp32 (the PyTorch oracle's input).
                                         act (GPTQ): desc_act, each linear's inputs put in groups by a
                                         random permutation of i // GROUP (g_idx), as act-order leaves
                                         them; REF is then PyTorch's dequantization of the packed
                                         tensors by GPTQ's formula with g_idx (checked to equal the
                                         quantizer's own values)
  greedy REF PROMPT OUT TOL              OUT is what `llmrun generate --temperature 0` printed for PROMPT:
                                         PyTorch on REF, fed the same tokens, ranks each generated
                                         token first, or within TOL of the first's logit (a near tie
                                         that activation quantization may flip); prints the count of each

Layouts, from AutoGPTQ's / transformers' and AutoAWQ's documentation and packers:
  GPTQ: qweight int32 [in/p, out] (p = 32/bits values a word, along the input dim, value k at
        bits k*bits); qzeros int32 [groups, out/p] (along the output dim) holding zero - 1 ("v1");
        scales fp16 [groups, out]; g_idx int32 [in] = i // group_size (act-order: any group per
        input); w[o, i] = scales[g_idx[i], o] * (q[i, o] - (qzeros[g_idx[i], o] + 1)).
  AWQ:  qweight int32 [in, out/8], nibble k of word w holding output 8w + [0,2,4,6,1,3,5,7][k];
        qzeros int32 [groups, out/8], the same interleave, zero as is; scales fp16 [groups, out].
  Both: w = scale * (q - zero).
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 384, "max_position_embeddings": 64,
          "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

SCALE = 4  # times the usual init: peaked logits, so a wrong weight moves the loss visibly
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def make(d):
    import torch_models as tm
    os.makedirs(d, exist_ok=True)
    json.dump(CONFIG, open(os.path.join(d, "config.json"), "w"), indent=1)
    w = tm.random_weights(CONFIG, seed=5)
    w = {k: (v if v.ndim == 1 else SCALE * v) for k, v in w.items()}
    st.save(os.path.join(d, "model.safetensors"), w, {"format": "pt"})


def rtn(w, bits, g_idx, sym):
    """w [out, in], the group of each input -> q [out, in] (ints), zero and fp16 scale
    [groups, out], and the dequantized w."""
    out, n = w.shape
    maxq = 2 ** bits - 1
    groups = int(g_idx.max()) + 1
    q = np.zeros((out, n), dtype=np.int64)
    zero = np.zeros((groups, out), dtype=np.int64)
    scale = np.zeros((groups, out), dtype=np.float16)
    deq = np.zeros((out, n), dtype=np.float32)
    for k in range(groups):
        cols = np.nonzero(g_idx == k)[0]
        g = w[:, cols]
        if sym:
            sc = (2 * np.abs(g).max(axis=1) / maxq).astype(np.float16)
            z = np.full(sc.shape, (maxq + 1) // 2, dtype=np.int64)
        else:
            lo, hi = np.minimum(g.min(axis=1), 0), np.maximum(g.max(axis=1), 0)
            sc = ((hi - lo) / maxq).astype(np.float16)
            z = np.clip(np.round(-lo / sc.astype(np.float32)), 0, maxq).astype(np.int64)
        s = sc.astype(np.float32)
        qk = np.clip(np.round(g / s[:, None]) + z[:, None], 0, maxq).astype(np.int64)
        q[:, cols], zero[k], scale[k] = qk, z, sc
        deq[:, cols] = s[:, None] * (qk - z[:, None]).astype(np.float32)
    return q, zero, scale, deq


def gptq_dequant(qweight, qzeros, scales, g_idx, bits):
    """GPTQ's dequantization (AutoGPTQ / transformers, v1 zeros) in PyTorch, from the packed
    tensors: w[o, i] = scales[g_idx[i], o] * (q[i, o] - (qzeros[g_idx[i], o] + 1)); [out, in]."""
    import torch
    per, mask = 32 // bits, 2 ** bits - 1
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    qw = torch.from_numpy(qweight)  # [in/per, out]
    q = (qw[:, None, :] >> shifts[None, :, None]) & mask  # [in/per, per, out]
    q = q.reshape(-1, qw.shape[1])  # [in, out]
    qz = torch.from_numpy(qzeros)  # [groups, out/per]
    z = ((qz[:, :, None] >> shifts[None, None, :]) & mask).reshape(qz.shape[0], -1) + 1
    g = torch.from_numpy(g_idx).long()
    s = torch.from_numpy(scales).float()
    return (s[g] * (q - z[g]).float()).T.contiguous().numpy()


def pack(values, bits, axis, order=None):
    """Packs int values (0..2^bits-1) into int32 words along `axis`, 32/bits a word."""
    per = 32 // bits
    v = np.moveaxis(values.astype(np.uint64), axis, -1)
    v = v.reshape(*v.shape[:-1], v.shape[-1] // per, per)
    if order is not None:
        v = v[..., order]  # slot k holds element order[k]
    words = np.zeros(v.shape[:-1], dtype=np.uint64)
    for k in range(per):
        words |= (v[..., k] & (2 ** bits - 1)) << np.uint64(bits * k)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis)


def quantize(src, out, ref, method, bits, group, sym, act=False):
    tensors = st.load(os.path.join(src, "model.safetensors"))[0]
    rng, orders = np.random.default_rng(11), {}
    config = json.load(open(os.path.join(src, "config.json")))
    packed, plain = {}, {}
    for name, w in tensors.items():
        stem = name[:-len(".weight")]
        if not (name.endswith(".weight") and stem.split(".")[-1] in LINEARS):
            packed[name] = plain[name] = w
            continue
        n_in = w.shape[1]
        g = n_in if group == -1 else group
        g_idx = (np.arange(n_in) // g).astype(np.int32)
        if act:  # act-order: the groups hold inputs scattered over the whole row. Linears that
            # share an input share its order in layer 0 (GPTQ orders by the input's Hessian, the
            # same for q, k, v and for gate, up); in layer 1 each draws its own.
            share = stem.replace("k_proj", "q_proj").replace("v_proj", "q_proj").replace("up_proj", "gate_proj")
            key = share if ".layers.0." in stem else stem
            if key not in orders:
                orders[key] = rng.permutation(g_idx).astype(np.int32)
            g_idx = orders[key]
        q, zero, scale, deq = rtn(w.astype(np.float32), bits, g_idx, sym)
        plain[name] = deq
        if method == "gptq":
            assert zero.min() >= 1, "a zero point of 0 would overflow GPTQ v1's zero - 1"
            packed[stem + ".qweight"] = pack(q.T, bits, axis=0)        # [in/p, out]
            packed[stem + ".qzeros"] = pack(zero - 1, bits, axis=1)    # [groups, out/p], v1: zero - 1
            packed[stem + ".g_idx"] = g_idx
            if act:  # the oracle's weights by GPTQ's documented formula, from the packed tensors
                plain[name] = gptq_dequant(packed[stem + ".qweight"], packed[stem + ".qzeros"],
                                           scale, g_idx, bits)
                assert np.array_equal(plain[name], deq), name
        else:
            packed[stem + ".qweight"] = pack(q.T, bits, axis=1, order=AWQ_ORDER)   # [in, out/8]
            packed[stem + ".qzeros"] = pack(zero, bits, axis=1, order=AWQ_ORDER)  # [groups, out/8]
        packed[stem + ".scales"] = scale                                # [groups, out] fp16
    for d, t in ((out, packed), (ref, plain)):
        os.makedirs(d, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(src, f)):
                shutil.copy(os.path.join(src, f), d)
        st.save(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    qc = {"quant_method": method, "bits": bits, "group_size": group}
    if method == "gptq":
        qc.update({"sym": sym, "desc_act": act, "damp_percent": 0.01, "true_sequential": True})
    else:
        qc.update({"zero_point": True, "version": "gemm"})
    json.dump(dict(config, quantization_config=qc), open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump(config, open(os.path.join(ref, "config.json"), "w"), indent=1)


def greedy(ref, prompt, out_file, tol):
    import torch
    import hf_interop as hi
    import torch_models as tm
    config = json.load(open(os.path.join(ref, "config.json")))
    model = tm.build_model(config, tm.make_params(config, hi.load_dir(ref)))
    out, p = open(out_file, "rb").read(), prompt.encode()
    assert out.startswith(p) and out.endswith(b"\n"), out
    ids, generated = list(p), list(out[len(p):-1])  # byte-level tokens
    first = ties = 0
    with torch.no_grad():
        logits = model.forward(torch.tensor([ids + generated])).double()[0]
    for k, tok in enumerate(generated):
        row = logits[len(ids) + k - 1]
        gap = (row.max() - row[tok]).item()
        if gap == 0:
            first += 1
        elif gap <= tol:
            ties += 1
        else:
            sys.exit(f"token {k} ({tok}) is {gap:.4f} below PyTorch's argmax {int(row.argmax())}")
    print(f"{first} of {len(generated)} tokens PyTorch's argmax, {ties} within {tol} of it")
    if first < len(generated) * 3 // 4:
        sys.exit("fewer than 3/4 of the tokens are PyTorch's argmax")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(args[0])
    elif cmd == "quantize":
        quantize(args[0], args[1], args[2], args[3], int(args[4]), int(args[5]), args[6] == "sym",
                 args[7:] == ["act"])
    elif cmd == "greedy":
        greedy(args[0], args[1], args[2], float(args[3]))
    else:
        sys.exit(__doc__)
