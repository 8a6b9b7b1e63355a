"""Checks an SVG written by `llmrun plot` against the metrics JSONL files it was drawn from.

usage: check_svg.py OUT.svg LABEL=METRICS.jsonl [LABEL=METRICS.jsonl ...]
LABEL is the legend name expected for that file ('' for a single file: no legend).
Fails (exit 1, one line per problem) unless the file is well-formed XML and, for each
input, there is one polyline per quantity with one point per logged value, x proportional
to the step and y an affine image of the value (larger values higher up).
"""
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def series_from_jsonl(path):
    out = {"loss": [], "val_loss": [], "tokens_per_s": [], "mfu": []}
    for line in open(path):
        if not line.strip():
            continue
        j = json.loads(line)
        for k in out:
            if j.get(k) is not None:
                out[k].append((j["step"], j[k]))
    return out


def main():
    svg_path, inputs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    root = ET.parse(svg_path).getroot()  # raises on malformed XML
    problems = []
    if root.tag != NS + "svg":
        problems.append(f"root element is {root.tag}")
    texts = [t.text or "" for t in root.iter(NS + "text")]
    for label in ("step", "loss", "tokens/s", "MFU (%)", "Loss", "Throughput"):
        if label not in texts:
            problems.append(f"no axis/panel label {label!r} (texts: {texts[:12]}...)")
    lines = [p for p in root.iter(NS + "polyline") if p.get("class") == "series"]
    expected_count = 0
    for label, path in inputs:
        want = series_from_jsonl(path)
        for quantity, pts in want.items():
            if not pts:
                continue
            expected_count += 1
            if quantity in ("loss", "val_loss"):
                name = f"{label} {quantity}" if label else quantity
            else:
                name = label
            found = [p for p in lines if p.get("data-quantity") == quantity and p.get("data-series") == name]
            if len(found) != 1:
                problems.append(f"{path}: {len(found)} polylines for {quantity!r} named {name!r}, expected 1")
                continue
            xy = [tuple(map(float, p.split(","))) for p in found[0].get("points").split()]
            if len(xy) != len(pts):
                problems.append(f"{path}: {quantity} has {len(xy)} points, the file logged {len(pts)}")
                continue
            if any(b[0] <= a[0] for a, b in zip(xy, xy[1:])):
                problems.append(f"{path}: {quantity} x does not increase with the step")
            # Pixels must be an affine image of the values, larger values higher up: fit through
            # the extremes, then every point within rounding (coordinates have 2 decimals).
            hi = max(range(len(pts)), key=lambda i: pts[i][1])
            lo = min(range(len(pts)), key=lambda i: pts[i][1])
            if pts[hi][1] > pts[lo][1]:
                slope = (xy[hi][1] - xy[lo][1]) / (pts[hi][1] - pts[lo][1])
                if slope >= 0:
                    problems.append(f"{path}: {quantity}: the largest value is not drawn above the smallest")
                off = [abs(xy[lo][1] + slope * (v - pts[lo][1]) - y) for (_, v), (_, y) in zip(pts, xy)]
                if max(off) > 0.02:
                    problems.append(f"{path}: {quantity}: y is off the values by up to {max(off):.2f} px")
            xs = [s for s, _ in pts]
            if xs[-1] > xs[0]:
                xslope = (xy[-1][0] - xy[0][0]) / (xs[-1] - xs[0])
                if max(abs(xy[0][0] + xslope * (s - xs[0]) - x) for s, (x, _) in zip(xs, xy)) > 0.02:
                    problems.append(f"{path}: {quantity}: x is not proportional to the step")
        if label and label not in " ".join(texts):
            problems.append(f"legend lacks {label!r}")
    if len(lines) != expected_count:
        problems.append(f"{len(lines)} series polylines, expected {expected_count}")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
