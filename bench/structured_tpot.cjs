// TPOT through `llmrun serve` with and without a JSON schema, at concurrency 1 and 32
// (bench/structured.sh). Each request streams with usage; TPOT = (last chunk - first chunk)
// / (completion tokens - 1). The schema's first request runs before timing (compile, cold
// masks): the figures are for later requests, as the target states.
//   node structured_tpot.cjs PORT
const port = process.argv[2];
const url = `http://127.0.0.1:${port}/v1/completions`;
const schema = { type: "array", items: { type: "integer", minimum: 0, maximum: 999 }, minItems: 12, maxItems: 12 };

async function one(body) {
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
  const reader = r.body.getReader();
  let first = null, last = null, tokens = 0, buf = "", text = "";
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
      if (c.choices.length) { const now = performance.now(); if (first === null) first = now; last = now; text += c.choices[0].text; }
    }
  }
  return { tpot: (last - first) / Math.max(1, tokens - 1), tokens, ttft: first - t0, text };
}

async function run(concurrency, n, body) {
  const results = [];
  let next = 0;
  const worker = async () => { while (next < n) { next++; results.push(await one(body)); } };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const t = results.map((r) => r.tpot).sort((a, b) => a - b);
  return { median_tpot_ms: +t[Math.floor(t.length / 2)].toFixed(2), requests: n,
           mean_tokens: +(results.reduce((a, r) => a + r.tokens, 0) / n).toFixed(1),
           sample: results[0].text.slice(0, 60) };
}

(async () => {
  const plain = { prompt: "The answer is", max_tokens: 32, temperature: 0, ignore_eos: true };
  const constrained = { prompt: "The answer is", max_tokens: 64, temperature: 0, guided_json: schema };
  await one(constrained);  // first request of the schema: compile and cold masks
  await one(plain);
  for (const c of [1, 32]) {
    const n = c === 1 ? 8 : 64;
    const p = await run(c, n, plain);
    const s = await run(c, n, constrained);
    console.log(JSON.stringify({ concurrency: c, unconstrained: p, constrained: s,
      overhead_pct: +((s.median_tpot_ms / p.median_tpot_ms - 1) * 100).toFixed(1) }));
  }
})().catch((e) => { console.error(e); process.exit(1); });
