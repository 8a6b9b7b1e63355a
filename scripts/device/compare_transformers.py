#!/usr/bin/env python3
"""`llmrun generate` (greedy) against a reference greedy decode, token for token.

  compare_transformers.py --llmrun BIN --model DIR --prompt TEXT --max-tokens N
      [--reference auto|transformers|oracle] [--oracle-dir tests/oracle] [--json OUT]
      [-- extra llmrun generate arguments]

DIR is a model directory llmrun exported with the byte-level tokenizer (token id = byte),
so the ids llmrun generated are exactly the bytes it printed after the prompt. The
reference is Hugging Face transformers' `generate(do_sample=False)` in fp32 with eager
attention, or, with --reference oracle (or auto when transformers is not importable), a
greedy loop over the plain PyTorch model of tests/oracle/torch_models.py, which reads the
same files by their Hugging Face names. A mismatch reports the first differing position
and the reference's margin between its two best logits there (a margin near float
rounding means a near tie, not a wrong kernel).

Exit status: 0 agree, 1 differ, 2 bad input, 77 skipped (the reason on stdout, as
"SKIPPED: ..."). One JSON object goes to --json (and the last line of stdout).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

SKIP = 77


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the byte-level tokenizer's vocabulary)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def check_byte_level(model_dir):
    """Raises ValueError unless the dir's tokenizer maps every byte b to id b."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        raise ValueError(f"{path} is missing")
    vocab = json.load(open(path)).get("model", {}).get("vocab", {})
    for b, ch in bytes_to_unicode().items():
        if vocab.get(ch) != b:
            raise ValueError(f"{path}: not the byte-level tokenizer (byte {b} is not id {b})")


def run_llmrun(binary, model_dir, prompt, max_tokens, extra):
    cmd = [binary, "generate", model_dir, "--prompt", prompt, "--max-tokens", str(max_tokens),
           "--temperature", "0"] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.decode(errors='replace')[-500:]}")
    out, head = p.stdout, prompt.encode()
    if not out.startswith(head) or not out.endswith(b"\n"):
        raise RuntimeError(f"llmrun generate printed {out[:80]!r}..., not the prompt, the tokens and a newline")
    return list(out[len(head):-1])


def max_new_tokens(config, n_prompt, want):
    """llmrun stops a GPT-2 at its context (learned positions); so must the reference."""
    if config.get("model_type") == "gpt2":
        return max(0, min(want, config["n_positions"] - n_prompt))
    return want


def eos_ids(model_dir):
    path = os.path.join(model_dir, "generation_config.json")
    eos = json.load(open(path)).get("eos_token_id") if os.path.exists(path) else None
    if eos is None:
        return []
    return eos if isinstance(eos, list) else [eos]


def margin(logits_row):
    top = logits_row.float().topk(2).values
    return float(top[0] - top[1])


def reference_transformers(model_dir, prompt_ids, n_new):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    eos = eos_ids(model_dir)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, do_sample=False,
                             num_beams=1, eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
                             output_scores=True, return_dict_in_generate=True)
    gen = out.sequences[0, len(prompt_ids):].tolist()
    if eos and gen and gen[-1] in eos:
        gen = gen[:-1]  # llmrun prints no stop token
    return gen, [margin(s[0]) for s in out.scores]


def reference_oracle(model_dir, prompt_ids, n_new, oracle_dir):
    import torch
    sys.path.insert(0, oracle_dir)
    import hf_interop
    import torch_models as tm
    config = json.load(open(os.path.join(model_dir, "config.json")))
    model = tm.build_model(config, tm.make_params(config, hf_interop.load_dir(model_dir)))
    eos = eos_ids(model_dir)
    ids, gen, margins = list(prompt_ids), [], []
    with torch.no_grad():
        for _ in range(n_new):
            logits = model.forward(torch.tensor([ids], dtype=torch.long))[0, -1]
            nxt = int(torch.argmax(logits))
            margins.append(margin(logits))
            if nxt in eos:
                break
            gen.append(nxt)
            ids.append(nxt)
    return gen, margins


def importable(name):
    return importlib.util.find_spec(name) is not None


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llmrun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--reference", choices=("auto", "transformers", "oracle"), default="auto")
    ap.add_argument("--oracle-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    result = {"model": a.model, "prompt": a.prompt, "reference": a.reference}

    def finish(status, code, **kw):
        result.update(kw, result=status)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)
        if status.startswith("SKIPPED") or status.startswith("ERROR"):
            print(status)
        print(json.dumps(result))
        sys.exit(code)

    try:
        check_byte_level(a.model)
        config = json.load(open(os.path.join(a.model, "config.json")))
    except (ValueError, OSError, json.JSONDecodeError) as e:
        finish(f"ERROR: {e}", 2)
    ref = a.reference
    if ref == "auto":
        ref = "transformers" if importable("transformers") else "oracle"
    result["reference"] = ref
    if not importable("torch"):
        finish("SKIPPED: torch not importable", SKIP)
    if ref == "transformers" and not importable("transformers"):
        finish("SKIPPED: transformers not importable", SKIP)
    if ref == "oracle" and not os.path.exists(os.path.join(a.oracle_dir, "torch_models.py")):
        finish(f"SKIPPED: no torch_models.py in {a.oracle_dir}", SKIP)

    prompt_ids = list(a.prompt.encode())
    n_new = max_new_tokens(config, len(prompt_ids), a.max_tokens)
    try:
        ours = run_llmrun(a.llmrun, a.model, a.prompt, a.max_tokens, extra)
    except RuntimeError as e:
        finish(f"ERROR: {e}", 1)
    if ref == "transformers":
        theirs, margins = reference_transformers(a.model, prompt_ids, n_new)
    else:
        theirs, margins = reference_oracle(a.model, prompt_ids, n_new, a.oracle_dir)
    first = next((i for i in range(max(len(ours), len(theirs)))
                  if i >= len(ours) or i >= len(theirs) or ours[i] != theirs[i]), None)
    kw = {"tokens": len(theirs), "llmrun_ids": ours, "reference_ids": theirs,
          "min_margin": min(margins) if margins else None}
    if first is None:
        finish("PASS", 0, matched=len(ours), **kw)
    finish("FAIL", 1, matched=first, first_mismatch=first,
           margin_at_mismatch=margins[first] if first < len(margins) else None, **kw)


if __name__ == "__main__":
    main()
