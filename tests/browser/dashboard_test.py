#!/usr/bin/env python3
"""`llmrun dashboard` in headless chromium (tests/e2e/browser_dashboard.sh prepares the runs
and starts it): every run is listed; a run's loss curve has one point per logged step and
grows when its metrics file does; two runs overlay; log scale and smoothing redraw; the
recipe diff names the key that differs; nothing is fetched from elsewhere; screenshots are
checked for content.

usage: dashboard_test.py URL RUNS_DIR LIVE_REST SCREENSHOT_DIR
LIVE_REST: lines to append to RUNS_DIR/live/metrics.jsonl while the page is open."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webdriver import Browser, Failure, check_screenshot  # noqa: E402

# The number of points of one curve: chart, run, series (0 when it is not drawn).
COUNT = """((chart, run, series) => {
  const p = document.querySelector(`[data-chart="${chart}"] polyline.line[data-run="${run}"][data-series="${series}"]`);
  return p ? Number(p.dataset.points) : 0; })(arguments[0], arguments[1], arguments[2])"""
POINTS = "return " + COUNT + ";"


def loss_steps(path):
    return sum(1 for l in open(path) if l.strip() and "loss" in json.loads(l) and "val_loss" not in json.loads(l))


def main():
    url, runs_dir, rest_file, shots = sys.argv[1:5]
    live = os.path.join(runs_dir, "live", "metrics.jsonl")
    with Browser(width=1400, height=1300) as b:
        b.get(url + "/")
        b.wait("the run list", "return document.querySelectorAll('#runs input[type=checkbox]').length === 3;")
        names = b.js("return [...document.querySelectorAll('#runs .run span:last-child')].map(e => e.textContent);")
        if sorted(names) != ["a", "b", "live"]:
            raise Failure(f"runs listed: {names}")
        have = loss_steps(live)
        b.wait(f"{have} loss points of the live run", f"return {COUNT} === {have};", "loss", "live/metrics.jsonl", "loss")
        for run in ("a/metrics.jsonl", "b/metrics.jsonl"):  # overlaid on the same chart
            n = b.js(POINTS, "loss", run, "loss")
            if n != loss_steps(os.path.join(runs_dir, run)):
                raise Failure(f"{run}: {n} loss points, expected {loss_steps(os.path.join(runs_dir, run))}")
            if not b.js(POINTS, "loss", run, "val_loss"):
                raise Failure(f"{run}: no val_loss curve")
        for chart, series in (("lr", "lr"), ("tokens_per_s", "tokens/s"), ("mfu", "MFU"), ("memory", "per rank")):
            if b.js(POINTS, chart, "a/metrics.jsonl", series) < 2:
                raise Failure(f"chart {chart} has no {series} curve for run a")
        png = b.screenshot(os.path.join(shots, "dashboard_before.png"))
        print("dashboard_before.png: %d colours, %.2f of rows with content" % check_screenshot(png, "dashboard"))

        # The training run logs more: the open page picks the new lines up by itself.
        with open(live, "a") as f:
            f.write(open(rest_file).read())
        after = loss_steps(live)
        b.wait(f"{after} loss points after the file grew", f"return {COUNT} === {after};", "loss",
               "live/metrics.jsonl", "loss")
        print(f"live run: {have} -> {after} loss points without a reload")

        # Log scale and smoothing redraw the curves.
        first = "return document.querySelector('[data-chart=loss] polyline.line').getAttribute('points');"
        linear = b.js(first)
        b.click("#log-scale")
        b.wait("a log-scale redraw", "return document.querySelector('[data-chart=loss] polyline.line')" +
               ".getAttribute('points') !== arguments[0];", linear)
        b.js("const s = document.getElementById('smoothing'); s.value = 0.8; s.dispatchEvent(new Event('input'));")
        b.wait("the raw curves under the smoothed ones", "return document.querySelectorAll('polyline.raw').length > 0;")

        # The recipes of a and b differ in train.lr only (apart from paths).
        b.js("const a = document.getElementById('diff-a'), b = document.getElementById('diff-b');"
             "a.value = 'a/metrics.jsonl'; b.value = 'b/metrics.jsonl'; a.dispatchEvent(new Event('change'));")
        rows = b.wait("the recipe diff",
                      "const r = [...document.querySelectorAll('#diff tbody tr.changed')].map(tr => "
                      "[...tr.cells].map(c => c.textContent)); return r.length ? r : null;")
        lr = [r for r in rows if r[0] == "train.lr"]
        if not lr or lr[0][1] == lr[0][2]:
            raise Failure(f"recipe diff lacks train.lr: {rows}")
        print(f"recipe diff: {[r[0] for r in rows]}")
        png = b.screenshot(os.path.join(shots, "dashboard_after.png"))
        check_screenshot(png, "dashboard after")
        foreign = b.foreign_requests(url)
        if foreign:
            raise Failure(f"the page fetched from elsewhere: {foreign}")
    print("dashboard: ok")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
