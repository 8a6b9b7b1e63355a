#!/usr/bin/env python3
"""Bookkeeping of run-checks.sh (standard library only: it runs on any python3).

  checks.py record RESULTS NAME RESULT FIGURE [DETAIL]
      append one check (RESULT: PASS, FAIL or "SKIPPED: why") to RESULTS/checks.jsonl
  checks.py parity CUDA.jsonl CPU.jsonl --tol T [--after N] [--steps S] [--window W] [--first F]
      compare the per-step losses of two training metrics files: every step > N must
      agree within relative tolerance T (with W > 1: the means of W consecutive steps, the
      first window starting after step N); with F, only steps F..S (or F.. the last) are
      compared and required (a run resumed before step F); prints one JSON object, exits 0
      (agree) or 1
  checks.py fp8-state A/index.json B/index.json
      compare the FP8 scaling state (every tensor's scale and amax history) of two checkpoint
      indexes bit for bit; prints one JSON object, exits 0 (equal) or 1
  checks.py metric FILE.jsonl KEY [--skip N]
      median of KEY over the rows of a metrics file whose step > N (bench figures)
  checks.py summary RESULTS [--commit C] [--device D] [--command CMD]
      print the summary table of RESULTS/checks.jsonl and write RESULTS/results.json (with the
      date, UTC, and the command line); exits 1 when a check failed, else 0
"""
import argparse
import datetime
import json
import os
import statistics
import sys


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e})")
    return rows


def losses(path):
    """step -> loss of a metrics JSONL (validation rows, which lack "loss", are ignored)."""
    return {r["step"]: float(r["loss"]) for r in read_jsonl(path) if "loss" in r and "step" in r}


def window_means(loss, after, window):
    """{last step of the window: mean loss} over complete windows of consecutive steps."""
    out, s = {}, after + 1
    while all(t in loss for t in range(s, s + window)):
        out[s + window - 1] = sum(loss[t] for t in range(s, s + window)) / window
        s += window
    return out


def parity(a_path, b_path, tol, after, steps, window=1, first=0):
    a, b = losses(a_path), losses(b_path)
    want = range(1, steps + 1) if steps else sorted(set(a) | set(b))
    if first:
        want = [s for s in (want if steps else range(first, max(set(a) | set(b) | {first}) + 1)) if s >= first]
    missing = [s for s in want if s not in a or s not in b]
    if window > 1 and not missing:
        a, b = window_means(a, after, window), window_means(b, after, window)
        want = sorted(set(a) & set(b))
    worst_step, worst = None, 0.0
    for s in want:
        if s in missing or s <= after:
            continue
        rel = abs(a[s] - b[s]) / max(abs(b[s]), 1e-30)
        if worst_step is None or rel > worst:
            worst_step, worst = s, rel
    ok = not missing and worst_step is not None and worst <= tol
    out = {"ok": ok, "max_rel_diff": worst, "worst_step": worst_step, "tol": tol, "after_step": after,
           "steps_compared": sum(1 for s in want if s not in missing and s > after),
           "missing_steps": missing[:10], "window": window}
    if worst_step is not None:
        out["loss_a"], out["loss_b"] = a[worst_step], b[worst_step]
    return out


def fp8_state(a_path, b_path):
    """The "fp8" blocks of two checkpoint index.json files, tensor by tensor."""
    def load(p):
        with open(p) as f:
            st = json.load(f).get("fp8")
        if not isinstance(st, dict) or not isinstance(st.get("tensors"), dict):
            raise SystemExit(f"{p}: no FP8 scaling state")
        return st["tensors"]
    a, b = load(a_path), load(b_path)
    differing = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    not_one = sum(1 for t in a.values() if isinstance(t, dict) and t.get("scale") not in (1, 1.0))
    return {"ok": not differing and bool(a), "tensors": len(a), "differing": differing[:10],
            "n_differing": len(differing), "scales_not_one": not_one}


def metric(path, key, skip):
    vals = [float(r[key]) for r in read_jsonl(path) if key in r and r.get("step", 0) > skip]
    if not vals:
        raise SystemExit(f"{path}: no {key!r} after step {skip}")
    return statistics.median(vals)


def status_of(result):
    if result == "PASS":
        return "pass"
    if result == "FAIL":
        return "fail"
    if result.startswith("SKIPPED"):
        return "skipped"
    raise SystemExit(f"result must be PASS, FAIL or 'SKIPPED: why', not {result!r}")


def record(results, name, result, figure, detail):
    status_of(result)
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "checks.jsonl"), "a") as f:
        f.write(json.dumps({"check": name, "result": result, "figure": figure, "detail": detail}) + "\n")


def summary(results, commit, device, command=""):
    path = os.path.join(results, "checks.jsonl")
    checks = read_jsonl(path) if os.path.exists(path) else []
    counts = {"pass": 0, "fail": 0, "skipped": 0}
    for c in checks:
        counts[status_of(c["result"])] += 1
    w1 = max([len("check")] + [len(c["check"]) for c in checks])
    w2 = max([len("result")] + [len(c["result"]) for c in checks])
    lines = [f"{'check':<{w1}}  {'result':<{w2}}  figure", f"{'-' * w1}  {'-' * w2}  ------"]
    lines += [f"{c['check']:<{w1}}  {c['result']:<{w2}}  {c['figure']}" for c in checks]
    lines.append(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped")
    print("\n".join(lines))
    with open(os.path.join(results, "results.json"), "w") as f:
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        json.dump({"commit": commit, "device": device, "date": date, "command": command, "counts": counts,
                   "checks": checks}, f, indent=1)
        f.write("\n")
    return 1 if counts["fail"] else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("record")
    p.add_argument("results")
    p.add_argument("name")
    p.add_argument("result")
    p.add_argument("figure")
    p.add_argument("detail", nargs="?", default="")
    p = sub.add_parser("parity")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tol", type=float, required=True)
    p.add_argument("--after", type=int, default=0, help="compare only steps after this one")
    p.add_argument("--steps", type=int, default=0, help="steps 1..S must be in both files")
    p.add_argument("--window", type=int, default=1, help="compare means of this many steps")
    p.add_argument("--first", type=int, default=0, help="compare (and require) only steps from this one")
    p = sub.add_parser("fp8-state")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("metric")
    p.add_argument("path")
    p.add_argument("key")
    p.add_argument("--skip", type=int, default=0)
    p = sub.add_parser("summary")
    p.add_argument("results")
    p.add_argument("--commit", default="")
    p.add_argument("--device", default="")
    p.add_argument("--command", default="")
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.results, a.name, a.result, a.figure, a.detail)
    elif a.cmd == "parity":
        out = parity(a.a, a.b, a.tol, a.after, a.steps, a.window, a.first)
        print(json.dumps(out))
        sys.exit(0 if out["ok"] else 1)
    elif a.cmd == "fp8-state":
        out = fp8_state(a.a, a.b)
        print(json.dumps(out))
        sys.exit(0 if out["ok"] else 1)
    elif a.cmd == "metric":
        print(metric(a.path, a.key, a.skip))
    else:
        sys.exit(summary(a.results, a.commit, a.device, a.command))


if __name__ == "__main__":
    main()
