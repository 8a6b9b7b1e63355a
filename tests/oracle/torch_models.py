#!/usr/bin/python3
"""Plain PyTorch GPT-2 and Llama, written from the Hugging Face definitions.

This is the reference that llmrun is checked against, so it is deliberately
written as straight-line tensor code with no cleverness: every parameter is a
leaf tensor in a dict keyed by its exact Hugging Face name, and the forward
pass reads from that dict.  Layouts follow HF:
  * GPT-2 uses Conv1D, whose weight is [in, out] and computes y = x @ W + b.
  * Llama uses nn.Linear, whose weight is [out, in] and computes y = x @ W^T.

Usage:
    model = build_model(config_dict, {hf_name: tensor})  # tensors become leaves
    logits = model.forward(tokens)                       # [B, T] -> [B, T, V]
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# Config helpers
# ---------------------------------------------------------------------------

def arch_of(config):
    """'gpt2' or 'llama' (Qwen 2 is Llama with q/k/v biases); rejects config options this
    reference does not model."""
    t = config.get("model_type")
    if t not in ("gpt2", "llama", "qwen2", "phi3", "mixtral", "qwen2_moe", "olmoe"):
        raise ValueError(f"unsupported model_type {t!r}")
    if t == "qwen2" and config.get("use_sliding_window"):
        raise ValueError("use_sliding_window is not supported")
    if t == "phi3" and config.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("partial_rotary_factor is not supported")
    if t in ("qwen2_moe",) and config.get("mlp_only_layers"):
        raise ValueError("mlp_only_layers is not supported")
    if t == "olmoe" and config.get("clip_qkv") is not None:
        raise ValueError("clip_qkv is not supported")
    if t in ("qwen2", "phi3", "mixtral", "qwen2_moe", "olmoe"):
        t = "llama"
    if t == "gpt2" and config.get("activation_function", "gelu_new") != "gelu_new":
        raise ValueError(f"unsupported activation_function {config['activation_function']!r}")
    if t == "llama":
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {config['hidden_act']!r}")
        if config.get("attention_bias") or config.get("mlp_bias"):
            raise ValueError("attention_bias/mlp_bias are not supported")
        rs = config.get("rope_scaling")
        if rs and rs.get("rope_type", rs.get("type")) not in ("linear", "llama3"):
            raise ValueError(f"unsupported rope_scaling {rs!r}")
    return t


def _gpt2_dims(c):
    d = c["n_embd"]
    # HF treats a missing/null n_inner as 4 * n_embd.
    ffn = c.get("n_inner") or 4 * d
    return c["n_layer"], d, c["n_head"], ffn, c["vocab_size"], c["n_positions"]


def _llama_dims(c):
    d = c["hidden_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or d // heads
    return (c["num_hidden_layers"], d, heads, kv, head_dim,
            c["intermediate_size"], c["vocab_size"])


def qkv_bias(c):
    # Qwen2Attention always has q/k/v biases (and none on o_proj).
    return c.get("model_type") in ("qwen2", "qwen2_moe")


def phi3(c):
    # Phi3ForCausalLM stores q|k|v as self_attn.qkv_proj and gate|up as mlp.gate_up_proj.
    return c.get("model_type") == "phi3"


def qk_norm(c):
    # OlmoeAttention: RMSNorm over the whole q projection output (q_norm, heads * head_dim wide)
    # and the whole k output (k_norm, kv_heads * head_dim), before the heads split and RoPE.
    return c.get("model_type") == "olmoe"


def moe_spec(c):
    """(experts, top_k, expert_ffn, shared_ffn, norm_topk_prob, sparse_step, mixtral_names) of a
    Mixtral or Qwen2-MoE config, None for a dense model."""
    t = c.get("model_type")
    if t == "mixtral":
        return (c["num_local_experts"], c.get("num_experts_per_tok", 2), c["intermediate_size"], 0,
                True, 1, True)
    if t == "qwen2_moe":
        return (c["num_experts"], c.get("num_experts_per_tok", 4), c["moe_intermediate_size"],
                c["shared_expert_intermediate_size"], c.get("norm_topk_prob", False),
                c.get("decoder_sparse_step", 1), False)
    if t == "olmoe":  # OlmoeSparseMoeBlock: every layer routed, no shared expert
        return (c["num_experts"], c.get("num_experts_per_tok", 8), c["intermediate_size"], 0,
                c.get("norm_topk_prob", False), 1, False)
    return None


def moe_layer(c, i):
    spec = moe_spec(c)
    return spec is not None and (i + 1) % spec[5] == 0


def moe_shapes(c, p, d):
    E, _, f, fs, _, _, mixtral = moe_spec(c)
    m = p + ("block_sparse_moe." if mixtral else "mlp.")
    out = [(m + "gate.weight", (E, d))]
    for e in range(E):
        x = f"{m}experts.{e}."
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        out += [(x + names[0] + ".weight", (f, d)), (x + names[1] + ".weight", (f, d)),
                (x + names[2] + ".weight", (d, f))]
    if fs:
        out += [(m + "shared_expert.gate_proj.weight", (fs, d)), (m + "shared_expert.up_proj.weight", (fs, d)),
                (m + "shared_expert.down_proj.weight", (d, fs)), (m + "shared_expert_gate.weight", (1, d))]
    return out


def llama_tied(c):
    # HF's LlamaConfig defaults tie_word_embeddings to False.
    return bool(c.get("tie_word_embeddings", False))


def param_shapes(config):
    """Ordered dict-like list of (hf_name, shape) that the config implies."""
    out = []
    if arch_of(config) == "gpt2":
        L, d, _, ffn, V, S = _gpt2_dims(config)
        out += [("transformer.wte.weight", (V, d)), ("transformer.wpe.weight", (S, d))]
        for i in range(L):
            p = f"transformer.h.{i}."
            out += [
                (p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
                (p + "attn.c_attn.weight", (d, 3 * d)), (p + "attn.c_attn.bias", (3 * d,)),
                (p + "attn.c_proj.weight", (d, d)), (p + "attn.c_proj.bias", (d,)),
                (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                (p + "mlp.c_fc.weight", (d, ffn)), (p + "mlp.c_fc.bias", (ffn,)),
                (p + "mlp.c_proj.weight", (ffn, d)), (p + "mlp.c_proj.bias", (d,)),
            ]
        out += [("transformer.ln_f.weight", (d,)), ("transformer.ln_f.bias", (d,))]
    else:
        L, d, H, KV, hd, ffn, V = _llama_dims(config)
        out.append(("model.embed_tokens.weight", (V, d)))
        for i in range(L):
            p = f"model.layers.{i}."
            if phi3(config):
                out += [
                    (p + "input_layernorm.weight", (d,)),
                    (p + "self_attn.qkv_proj.weight", ((H + 2 * KV) * hd, d)),
                    (p + "self_attn.o_proj.weight", (d, H * hd)),
                    (p + "post_attention_layernorm.weight", (d,)),
                    (p + "mlp.gate_up_proj.weight", (2 * ffn, d)),
                    (p + "mlp.down_proj.weight", (d, ffn)),
                ]
                continue
            out += [
                (p + "input_layernorm.weight", (d,)),
                (p + "self_attn.q_proj.weight", (H * hd, d)),
                (p + "self_attn.k_proj.weight", (KV * hd, d)),
                (p + "self_attn.v_proj.weight", (KV * hd, d)),
            ]
            if qkv_bias(config):
                out += [(p + "self_attn.q_proj.bias", (H * hd,)), (p + "self_attn.k_proj.bias", (KV * hd,)),
                        (p + "self_attn.v_proj.bias", (KV * hd,))]
            if qk_norm(config):
                out += [(p + "self_attn.q_norm.weight", (H * hd,)), (p + "self_attn.k_norm.weight", (KV * hd,))]
            if moe_layer(config, i):
                out += [(p + "self_attn.o_proj.weight", (d, H * hd)),
                        (p + "post_attention_layernorm.weight", (d,))] + moe_shapes(config, p, d)
                continue
            out += [
                (p + "self_attn.o_proj.weight", (d, H * hd)),
                (p + "post_attention_layernorm.weight", (d,)),
                (p + "mlp.gate_proj.weight", (ffn, d)),
                (p + "mlp.up_proj.weight", (ffn, d)),
                (p + "mlp.down_proj.weight", (d, ffn)),
            ]
        out.append(("model.norm.weight", (d,)))
        if not llama_tied(config):
            out.append(("lm_head.weight", (V, d)))
    return out


def param_names(config):
    return [n for n, _ in param_shapes(config)]


# ---------------------------------------------------------------------------
# Attention shared by both models
# ---------------------------------------------------------------------------

def causal_attention(q, k, v, use_sdpa=False):
    """q, k, v: [B, H, T, hd] -> [B, H, T, hd], softmax(q k^T / sqrt(hd)) v with a causal mask."""
    if use_sdpa and hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, hd = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    # Position t may attend to positions <= t only.
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# ---------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------

def gelu_new(x):
    # HF "gelu_new": the tanh approximation used by the original GPT-2.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2:
    def __init__(self, config, params, use_sdpa=False):
        self.config = config
        self.p = params
        self.L, self.d, self.H, self.ffn, self.V, self.S = _gpt2_dims(config)
        self.eps = config.get("layer_norm_epsilon", 1e-5)
        self.use_sdpa = use_sdpa

    def _ln(self, x, name):
        return F.layer_norm(x, (self.d,), self.p[name + ".weight"], self.p[name + ".bias"], self.eps)

    def _conv1d(self, x, name):
        # HF Conv1D: weight is [in, out]; y = x @ W + b.
        return x @ self.p[name + ".weight"] + self.p[name + ".bias"]

    def forward(self, tokens):
        p = self.p
        B, T = tokens.shape
        if T > self.S:
            raise ValueError(f"sequence length {T} exceeds n_positions {self.S}")
        hd = self.d // self.H
        pos = torch.arange(T)
        h = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][pos][None]
        for i in range(self.L):
            pre = f"transformer.h.{i}."
            a = self._ln(h, pre + "ln_1")
            qkv = self._conv1d(a, pre + "attn.c_attn")
            q, k, v = qkv.split(self.d, dim=-1)
            # [B, T, d] -> [B, H, T, hd]; head j owns columns j*hd:(j+1)*hd.
            q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in (q, k, v))
            y = causal_attention(q, k, v, self.use_sdpa)
            y = y.transpose(1, 2).reshape(B, T, self.d)
            h = h + self._conv1d(y, pre + "attn.c_proj")
            m = self._ln(h, pre + "ln_2")
            m = gelu_new(self._conv1d(m, pre + "mlp.c_fc"))
            h = h + self._conv1d(m, pre + "mlp.c_proj")
        h = self._ln(h, "transformer.ln_f")
        # Tied head: logits = h @ wte^T.
        return h @ p["transformer.wte.weight"].t()


# ---------------------------------------------------------------------------
# Llama
# ---------------------------------------------------------------------------

def rotate_half(x):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def scaled_inv_freq(inv_freq, rs):
    """transformers' linear and llama3 rope_scaling (modeling_rope_utils), in float32."""
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    factor = rs["factor"]
    if kind == "linear":
        return inv_freq / factor
    low, high, old = rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(T, head_dim, theta, dtype, rope_scaling=None):
    # HF LlamaRotaryEmbedding: frequencies over the first half of the head dim (rescaled
    # for long-context configs), duplicated so they pair i with i + D/2.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    inv_freq = scaled_inv_freq(inv_freq, rope_scaling)
    t = torch.arange(T, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def repeat_kv(x, n_rep):
    """[B, KV, T, hd] -> [B, KV*n_rep, T, hd]; query head h reads kv head h // n_rep."""
    if n_rep == 1:
        return x
    B, KV, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, KV, n_rep, T, hd).reshape(B, KV * n_rep, T, hd)


class Llama:
    def __init__(self, config, params, use_sdpa=False):
        self.config = config
        self.p = params
        self.L, self.d, self.H, self.KV, self.hd, self.ffn, self.V = _llama_dims(config)
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.theta = float(config.get("rope_theta", 10000.0))
        self.tied = llama_tied(config)
        self.use_sdpa = use_sdpa
        # Mixture of experts: the router's losses are not in the config (z-loss, capacity) or
        # differ from transformers' (aux, see moe_routing.h); the test sets them.
        self.moe_aux, self.moe_z, self.capacity_factor = 0.0, 0.0, 0.0
        self.router_loss = torch.zeros(())

    def _moe(self, x, pre):
        """Routed SwiGLU experts, written independently of llmrun's permutation: for each expert
        the tokens that chose it (and survived the capacity cut) run through it and are added
        back with their combine weight."""
        E, K, _, fs, norm_topk, _, mixtral = moe_spec(self.config)
        m = pre + ("block_sparse_moe." if mixtral else "mlp.")
        B, T, d = x.shape
        xs = x.reshape(-1, d)
        N = xs.shape[0]
        logits = xs @ self.p[m + "gate.weight"].t()
        probs = torch.softmax(logits, dim=-1)
        # Ties go to the lower expert index: a stable sort keeps equal values in index order.
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
        idx = order[:, :K]
        w = probs.gather(1, idx)
        if norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        onehot = F.one_hot(idx.reshape(-1), E)  # slots in token order, then k
        keep = torch.ones(N, K, dtype=torch.bool)
        if self.capacity_factor > 0:
            cap = math.ceil(self.capacity_factor * N * K / E)
            position = (onehot.cumsum(0) * onehot).sum(-1) - 1
            keep = (position < cap).reshape(N, K)
        out = torch.zeros_like(xs)
        names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        for e in range(E):
            tok, slot = torch.where((idx == e) & keep)
            if tok.numel() == 0:
                continue
            x_e = xs[tok]
            ep = f"{m}experts.{e}."
            h = F.silu(self._lin(x_e, ep + names[0])) * self._lin(x_e, ep + names[1])
            out = out.index_add(0, tok, w[tok, slot, None] * self._lin(h, ep + names[2]))
        if fs:
            sp = m + "shared_expert."
            h = F.silu(self._lin(xs, sp + "gate_proj")) * self._lin(xs, sp + "up_proj")
            gate = torch.sigmoid(self._lin(xs, m + "shared_expert_gate"))
            out = out + gate * self._lin(h, sp + "down_proj")
        f = onehot.sum(0).to(probs.dtype) / (N * K)
        aux = self.moe_aux * E * (f * probs.mean(0)).sum()
        z = self.moe_z * (torch.logsumexp(logits, dim=-1) ** 2).mean()
        self.router_loss = self.router_loss + aux + z
        return out.reshape(B, T, d)

    def _rms(self, x, name):
        # HF LlamaRMSNorm: normalise in float32, cast back, then scale.
        dtype = x.dtype
        xf = x.to(torch.float32)
        var = xf.pow(2).mean(-1, keepdim=True)
        xf = xf * torch.rsqrt(var + self.eps)
        return self.p[name + ".weight"] * xf.to(dtype)

    def _lin(self, x, name):
        # nn.Linear: weight is [out, in]; a bias where the checkpoint has one (Qwen 2's q/k/v).
        y = x @ self.p[name + ".weight"].t()
        return y + self.p[name + ".bias"] if name + ".bias" in self.p else y

    def forward(self, tokens):
        p = self.p
        B, T = tokens.shape
        h = p["model.embed_tokens.weight"][tokens]
        cos, sin = rope_cos_sin(T, self.hd, self.theta, h.dtype, self.config.get("rope_scaling"))
        n_rep = self.H // self.KV
        self.router_loss = torch.zeros(())
        for i in range(self.L):
            pre = f"model.layers.{i}."
            a = self._rms(h, pre + "input_layernorm")
            if phi3(self.config):  # Phi3Attention: one qkv_proj, split by rows
                qkv = self._lin(a, pre + "self_attn.qkv_proj")
                q, k, v = qkv.split([self.H * self.hd, self.KV * self.hd, self.KV * self.hd], dim=-1)
            else:
                q = self._lin(a, pre + "self_attn.q_proj")
                k = self._lin(a, pre + "self_attn.k_proj")
                v = self._lin(a, pre + "self_attn.v_proj")
            if qk_norm(self.config):
                q = self._rms(q, pre + "self_attn.q_norm")
                k = self._rms(k, pre + "self_attn.k_norm")
            q = q.view(B, T, self.H, self.hd).transpose(1, 2)
            k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
            v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
            y = causal_attention(q, k, v, self.use_sdpa)
            y = y.transpose(1, 2).reshape(B, T, self.H * self.hd)
            h = h + self._lin(y, pre + "self_attn.o_proj")
            m = self._rms(h, pre + "post_attention_layernorm")
            if moe_layer(self.config, i):
                h = h + self._moe(m, pre)
                continue
            if phi3(self.config):  # Phi3MLP: gate_up_proj, gate first
                gate, up = self._lin(m, pre + "mlp.gate_up_proj").chunk(2, dim=-1)
                m = up * F.silu(gate)
            else:
                m = F.silu(self._lin(m, pre + "mlp.gate_proj")) * self._lin(m, pre + "mlp.up_proj")
            h = h + self._lin(m, pre + "mlp.down_proj")
        h = self._rms(h, "model.norm")
        head = p["model.embed_tokens.weight"] if self.tied else p["lm_head.weight"]
        return h @ head.t()


# ---------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------

def make_params(config, weights, dtype=torch.float32):
    """Turn name -> array/tensor into name -> fresh leaf tensor with requires_grad.

    Checks the names and shapes against what the config implies, so a model
    never silently runs with a missing or misshapen tensor.
    """
    expected = dict(param_shapes(config))
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    if missing or extra:
        raise ValueError(f"weights do not match config: missing={missing} extra={extra}")
    params = {}
    for name, shape in expected.items():
        w = weights[name]
        t = torch.as_tensor(np.asarray(w)) if not torch.is_tensor(w) else w.detach()
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: shape {tuple(t.shape)} but config implies {tuple(shape)}")
        params[name] = t.to(dtype).clone().requires_grad_(True)
    return params


def build_model(config, params, use_sdpa=False):
    """params: name -> leaf tensor (see make_params). The model reads them by reference."""
    if arch_of(config) == "gpt2":
        return GPT2(config, params, use_sdpa)
    return Llama(config, params, use_sdpa)


def random_weights(config, seed):
    """HF-style initialisation as name -> float32 numpy array.

    Normal(0, 0.02) matrices (GPT-2 residual projections scaled by
    1/sqrt(2 L) as in HF), zero biases.  Norm weights and biases get a small
    random jitter around their HF values (1 and 0) so that tests exercise
    them, which an exact 1/0 init would partly hide.
    """
    rng = np.random.default_rng(seed)
    arch = arch_of(config)
    n_layer = config["n_layer"] if arch == "gpt2" else config["num_hidden_layers"]
    out = {}
    for name, shape in param_shapes(config):
        is_norm = any(k in name for k in ("ln_", "layernorm", "model.norm", "_norm.weight"))
        if is_norm and name.endswith(".weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = 0.02 * rng.standard_normal(shape)
        else:
            std = 0.02
            if arch == "gpt2" and name.endswith("c_proj.weight"):
                std = 0.02 / math.sqrt(2 * n_layer)
            w = std * rng.standard_normal(shape)
        out[name] = w.astype(np.float32)
    return out


def cross_entropy_loss(logits, targets):
    """Mean cross-entropy over all B*T positions."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long())
