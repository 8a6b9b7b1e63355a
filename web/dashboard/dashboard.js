// The dashboard's logic: polls /api/runs and each shown run's /api/metrics (only the bytes
// appended since the last poll), draws the curves as SVG, and diffs two runs' recipes.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = $("svg-namespace").namespaceURI;  // the HTML parser knows it: no URL in the page
const COLORS = ["#2f6fde", "#e4572e", "#17a398", "#9b5de5", "#f4a259", "#5c7457", "#d1495b", "#3d5a80"];
const runs = new Map();  // id -> {id, name, recipe, recipe_source, color, shown, offset, records}
let nextColor = 0;
let polling = false;

const sum = (r, keys) => keys.reduce((s, k) => s + (typeof r[k] === "number" ? r[k] : 0), 0);
const MEM_KEYS = ["mem_params", "mem_grads", "mem_optimizer", "mem_buffers", "mem_activations"];

// Each chart: a title, a y-axis note, and the series it draws for one run's records.
const CHARTS = [
  { id: "loss", title: "loss (solid) and val_loss (dashed)", series: (recs) => [
      { label: "loss", points: pick(recs, "loss") },
      { label: "val_loss", points: pick(recs, "val_loss"), dash: true }] },
  { id: "lr", title: "learning rate", series: (recs) => [{ label: "lr", points: pick(recs, "lr") }] },
  { id: "tokens_per_s", title: "tokens/s", series: (recs) => [{ label: "tokens/s", points: pick(recs, "tokens_per_s") }] },
  { id: "mfu", title: "MFU (%)", series: (recs) => [{ label: "MFU", points: pick(recs, "mfu", 100) }] },
  { id: "grad_norm", title: "gradient norm", series: (recs) => [{ label: "grad_norm", points: pick(recs, "grad_norm") }] },
  { id: "memory", title: "memory per rank, or per pipeline stage (MB)", series: memorySeries },
];

function pick(recs, key, scale = 1) {
  const out = [];
  for (const r of recs) if (typeof r[key] === "number" && isFinite(r[key])) out.push([r.step, r[key] * scale]);
  return out;
}

function memorySeries(recs) {
  const train = recs.filter((r) => "loss" in r);
  if (train.some((r) => Array.isArray(r.stages))) {
    const byStage = new Map();
    for (const r of train)
      for (const s of r.stages || []) {
        if (!byStage.has(s.stage)) byStage.set(s.stage, []);
        byStage.get(s.stage).push([r.step, sum(s, MEM_KEYS) / 1e6]);
      }
    return [...byStage].map(([stage, points], i) => ({ label: "stage " + stage, points, dash: i % 2 === 1 }));
  }
  return [{ label: "per rank", points: train.map((r) => [r.step, sum(r, MEM_KEYS) / 1e6]) }];
}

// TensorBoard's smoothing: an exponential moving average, debiased at the start.
function smooth(points, weight) {
  if (weight <= 0) return points;
  let last = 0, n = 0;
  return points.map(([x, y]) => {
    last = last * weight + (1 - weight) * y;
    n += 1;
    return [x, last / (1 - Math.pow(weight, n))];
  });
}

function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { const d = Math.abs(lo) * 0.1 || 1; lo -= d; hi += d; }
  const raw = (hi - lo) / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return { lo: Math.min(lo, ticks[0]), hi: Math.max(hi, ticks[ticks.length - 1]), ticks };
}

function fmt(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  return +v.toPrecision(4) + "";
}

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.append(e);
  return e;
}

function drawChart(chart, shown, weight, log) {
  const W = 440, H = 230, L = 56, R = 10, T = 8, B = 26;
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.chart = chart.id;
  const h = document.createElement("h4");
  h.textContent = chart.title;
  box.append(h);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" }, box);
  const lines = [];
  for (const run of shown)
    for (const s of chart.series(run.records)) {
      const pts = log ? s.points.filter(([, y]) => y > 0) : s.points;
      if (pts.length) lines.push({ run, s, raw: pts, pts: smooth(pts, weight) });
    }
  if (!lines.length) {
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, svg).textContent = "no data yet";
    return box;
  }
  const all = lines.flatMap((l) => l.raw.concat(l.pts));
  const xs = all.map((p) => p[0]), ys = all.map((p) => (log ? Math.log10(p[1]) : p[1]));
  const xt = niceTicks(Math.min(...xs), Math.max(...xs), 6);
  let yt = niceTicks(Math.min(...ys), Math.max(...ys), 5);
  if (log) {  // ticks at 1x, 2x and 5x powers of ten inside the data's range (in log10 units)
    let lo = Math.min(...ys), hi = Math.max(...ys);
    const pad = Math.max((hi - lo) * 0.05, 0.02);
    lo -= pad;
    hi += pad;
    const ticks = [];
    for (let e = Math.floor(lo); e <= Math.ceil(hi); e++)
      for (const m of [1, 2, 5]) if (e + Math.log10(m) >= lo && e + Math.log10(m) <= hi) ticks.push(e + Math.log10(m));
    yt = { lo, hi, ticks: ticks.length >= 2 ? ticks : [lo, hi] };
  }
  const X = (x) => L + ((x - xt.lo) / (xt.hi - xt.lo || 1)) * (W - L - R);
  const Y = (y) => H - B - (((log ? Math.log10(y) : y) - yt.lo) / (yt.hi - yt.lo || 1)) * (H - T - B);
  const Yv = (v) => H - B - ((v - yt.lo) / (yt.hi - yt.lo || 1)) * (H - T - B);
  for (const t of yt.ticks) {
    el("line", { x1: L, x2: W - R, y1: Yv(t), y2: Yv(t), class: "grid" }, svg);
    el("text", { x: L - 4, y: Yv(t) + 3, "text-anchor": "end" }, svg).textContent = fmt(log ? Math.pow(10, t) : t);
  }
  for (const t of xt.ticks) {
    el("line", { x1: X(t), x2: X(t), y1: H - B, y2: H - B + 4, class: "axis" }, svg);
    el("text", { x: X(t), y: H - B + 14, "text-anchor": "middle" }, svg).textContent = fmt(t);
  }
  el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }, svg);
  el("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
  el("text", { x: W - R, y: H - 2, "text-anchor": "end" }, svg).textContent = "step";
  const path = (pts) => pts.map(([x, y]) => X(x).toFixed(1) + "," + Y(y).toFixed(1)).join(" ");
  for (const l of lines) {
    if (weight > 0) el("polyline", { points: path(l.raw), class: "raw", stroke: l.run.color }, svg);
    const p = el("polyline", { points: path(l.pts), class: "line", stroke: l.run.color,
      "data-run": l.run.id, "data-series": l.s.label, "data-points": l.pts.length }, svg);
    if (l.s.dash) p.setAttribute("stroke-dasharray", "5 3");
    el("title", {}, p).textContent = l.run.name + " · " + l.s.label;
  }
  return box;
}

function redraw() {
  const shown = [...runs.values()].filter((r) => r.shown);
  const weight = Number($("smoothing").value), log = $("log-scale").checked;
  $("charts").replaceChildren(...CHARTS.map((c) => drawChart(c, shown, weight, log)));
}

function renderRunList() {
  const box = $("runs");
  if (!runs.size) {
    box.innerHTML = '<p class="muted">no metrics JSONL files here yet</p>';
    return;
  }
  box.replaceChildren(...[...runs.values()].map((r) => {
    const row = document.createElement("label");
    row.className = "run";
    const cb = document.createElement("input");
    cb.type = "checkbox";
    cb.checked = r.shown;
    cb.dataset.run = r.id;
    cb.onchange = () => { r.shown = cb.checked; poll(); };
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = r.color;
    const name = document.createElement("span");
    name.textContent = r.name;
    name.title = r.id;
    row.append(cb, sw, name);
    return row;
  }));
}

function flatten(obj, prefix = "", out = {}) {
  if (obj !== null && typeof obj === "object" && !Array.isArray(obj)) {
    for (const [k, v] of Object.entries(obj)) flatten(v, prefix ? prefix + "." + k : k, out);
  } else {
    out[prefix] = JSON.stringify(obj);
  }
  return out;
}

function renderDiff() {
  const withRecipe = [...runs.values()].filter((r) => r.recipe);
  for (const [sel, i] of [[$("diff-a"), 0], [$("diff-b"), 1]]) {
    const keep = sel.value;
    sel.replaceChildren(...withRecipe.map((r) => new Option(r.name, r.id)));
    if (withRecipe.some((r) => r.id === keep)) sel.value = keep;
    else if (withRecipe.length > i) sel.value = withRecipe[i].id;
  }
  const body = $("diff").tBodies[0];
  body.replaceChildren();
  if (withRecipe.length < 2) {
    $("diff-note").textContent = "Recipe diffs need two runs with a checkpoint (its index.json holds the resolved recipe).";
    return;
  }
  const a = runs.get($("diff-a").value), b = runs.get($("diff-b").value);
  $("diff-a-name").textContent = a.name;
  $("diff-b-name").textContent = b.name;
  const fa = flatten(a.recipe), fb = flatten(b.recipe);
  const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].sort();
  let changed = 0;
  for (const k of keys) {
    const differs = fa[k] !== fb[k];
    changed += differs;
    if (!differs && !$("diff-all").checked) continue;
    const tr = body.insertRow();
    if (differs) tr.className = "changed";
    for (const text of [k, fa[k] ?? "—", fb[k] ?? "—"]) tr.insertCell().textContent = text;
  }
  $("diff-note").textContent = changed + " of " + keys.length + " keys differ (" + a.recipe_source + " vs " + b.recipe_source + ")";
}

async function getJSON(url) {
  const resp = await fetch(url, { cache: "no-store" });
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error ? body.error.message : resp.statusText);
  return body;
}

async function poll() {
  if (polling) return;
  polling = true;
  try {
    const list = await getJSON("/api/runs");
    $("root").textContent = list.root;
    const seen = new Set();
    for (const r of list.runs) {
      seen.add(r.id);
      if (!runs.has(r.id))
        runs.set(r.id, { ...r, color: COLORS[nextColor++ % COLORS.length], shown: runs.size < COLORS.length, offset: 0, records: [] });
      Object.assign(runs.get(r.id), { recipe: r.recipe, recipe_source: r.recipe_source, name: r.name });
    }
    for (const id of [...runs.keys()]) if (!seen.has(id)) runs.delete(id);
    for (const r of runs.values()) {
      if (!r.shown) continue;
      const chunk = await getJSON("/api/metrics?run=" + encodeURIComponent(r.id) + "&offset=" + r.offset);
      if (chunk.reset) r.records = [];  // the file was rewritten (a resumed run)
      r.records.push(...chunk.records);
      r.offset = chunk.offset;
    }
    renderRunList();
    redraw();
    renderDiff();
    $("error").textContent = "";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("error").textContent = "cannot reach the dashboard server: " + e.message;
  } finally {
    polling = false;
  }
}

$("smoothing").oninput = () => { $("smoothing-value").textContent = $("smoothing").value; redraw(); };
$("log-scale").onchange = redraw;
for (const id of ["diff-a", "diff-b", "diff-all"]) $(id).onchange = renderDiff;
setInterval(() => { if ($("live").checked) poll(); }, 2000);
poll();
