// TPOT through `llmrun serve` with and without a JSON-schema constraint on the same prompts,
// at concurrency 1 and 32 (bench/structured.sh serve). Requests are paired: each prompt runs
// once unconstrained (ignore_eos) and once with `guided_json`, the order alternating from pair
// to pair (at concurrency 32, whole waves alternate), so drift in the machine's load falls on
// both sides alike. A constrained reply may close its array before max_tokens; the
// unconstrained request of the same prompt then stops at the same count (greedy decoding
// makes the count known from an untimed constrained pass), so both sides decode the same
// number of tokens in batches of the same sizes. TPOT = (last chunk - first chunk) /
// (completion tokens - 1), per request.
// Prints, per concurrency, the median TPOT of each side, their ratio, and the median of the
// per-pair ratios. The schema's first request runs before timing (compile, cold masks), as
// the target is stated "after the first request of a schema".
//   node structured_tpot.cjs PORT [PAIRS_AT_C1] [WAVES_AT_C32] [MAX_TOKENS]
const [port, pairsArg, wavesArg, maxArg] = process.argv.slice(2);
const url = `http://127.0.0.1:${port}/v1/completions`;
const pairs1 = Number(pairsArg || 8), waves32 = Number(wavesArg || 2), maxTokens = Number(maxArg || 32);
const schema = { type: "array", items: { type: "integer", minimum: 0, maximum: 999 }, minItems: 8, maxItems: 40 };
const subjects = ["The answer is", "Numbers:", "Once upon a time", "A list of values", "Data follows",
  "Here are the scores", "Result", "The sequence"];
const prompt = (i) => `${subjects[i % subjects.length]} #${i}`;
let mismatches = 0;
const counts = new Map();  // prompt -> completion tokens of its constrained reply

async function one(body) {
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  let first = null, last = null, tokens = 0, buf = "";
  const dec = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const c = JSON.parse(line.slice(6));
      if (c.usage) tokens = c.usage.completion_tokens;
      if (c.choices.length && c.choices[0].text) { const now = performance.now(); if (first === null) first = now; last = now; }
    }
  }
  if (tokens < 3) throw new Error(`only ${tokens} tokens`);
  if (body.guided_json) counts.set(body.prompt, tokens);
  else if (counts.has(body.prompt) && counts.get(body.prompt) !== tokens)
    mismatches += 1;  // reported: the two sides then decoded different lengths
  return (last - first) / (tokens - 1);
}

const plain = (i) => ({ prompt: prompt(i), max_tokens: counts.get(prompt(i)) || maxTokens, temperature: 0, ignore_eos: true });
const constrained = (i) => ({ prompt: prompt(i), max_tokens: maxTokens, temperature: 0, guided_json: schema });
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const wave = (c, base, make) => Promise.all(Array.from({ length: c }, (_, k) => one(make(base + k))));

async function measure(c, rounds) {
  const p = [], s = [], ratios = [];
  for (let r = 0; r < rounds; ++r) {
    const base = r * c;  // the same prompts on both sides of a pair
    const order = r % 2 ? [constrained, plain] : [plain, constrained];
    const a = await wave(c, base, order[0]);
    const b = await wave(c, base, order[1]);
    const [pt, st] = r % 2 ? [b, a] : [a, b];
    p.push(...pt); s.push(...st);
    for (let k = 0; k < c; ++k) ratios.push(st[k] / pt[k]);
  }
  const mp = median(p), ms = median(s);
  return { concurrency: c, requests_per_side: p.length, max_tokens: maxTokens,
    unconstrained_median_tpot_ms: +mp.toFixed(2), constrained_median_tpot_ms: +ms.toFixed(2),
    ratio_of_medians: +(ms / mp).toFixed(4), median_pair_ratio: +median(ratios).toFixed(4),
    length_mismatches: mismatches };
}

(async () => {
  // Untimed: the schema's first request (compile, cold masks), then every prompt's
  // constrained reply once (warm masks, and the token counts the unconstrained side matches).
  await one(constrained(0));
  for (let w = 0; w < Math.max(1, waves32); ++w) await wave(32, 32 * w, constrained);
  console.log(JSON.stringify(await measure(1, Math.min(pairs1, 32 * Math.max(1, waves32)))));
  if (waves32 > 0) console.log(JSON.stringify(await measure(32, waves32)));
})().catch((e) => { console.error(e); process.exit(1); });
