// Single-thread throughput of the npm reference tokenizers on the same JSONL texts that
// `llmrun data prepare` tokenizes: Tokenizers.js (loading the same GPT-2 tokenizer.json) and
// gpt-3-encoder. usage: node reference_tokenizers.mjs NODE_PREFIX GPT2_TOKENIZER_JSON IN.jsonl
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [prefix, tokJson, input] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(prefix), "node_modules", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const gpt3 = require("gpt-3-encoder");
const texts = fs.readFileSync(input, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).text);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
const hf = new Tokenizer(JSON.parse(fs.readFileSync(tokJson, "utf8")), {});
for (const [name, enc] of [["@huggingface/tokenizers", (t) => hf.encode(t, { add_special_tokens: false }).ids],
                           ["gpt-3-encoder", (t) => gpt3.encode(t)]]) {
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  let tokens = 0;
  for (const t of texts) tokens += enc(t).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(c0).user / 1e6;  // CPU time: robust to other load on the machine
  console.log(JSON.stringify({ name, mb: bytes / 1e6, wall_s: s, user_s: cpu, mb_per_s: bytes / 1e6 / s,
                               mb_per_cpu_s: bytes / 1e6 / cpu, tokens_per_s: tokens / s, tokens }));
}
