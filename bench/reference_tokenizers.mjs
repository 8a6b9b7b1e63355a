// Single-thread throughput of the npm reference tokenizers on the same JSONL texts that
// `llmrun data prepare` tokenizes: Tokenizers.js (loading the same tokenizer.json) and the
// vocabulary's own port (gpt-3-encoder for gpt2, mistral-tokenizer-js for mistral7b).
// usage: node reference_tokenizers.mjs NODE_PREFIX TOKENIZER_JSON IN.jsonl [gpt2|mistral7b]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [prefix, tokJson, input, kind = "gpt2"] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(prefix), "node_modules", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const portName = kind === "gpt2" ? "gpt-3-encoder" : "mistral-tokenizer-js";
const portModule = require(portName);
const portTokenizer = portModule.default ?? portModule;
// mistral-tokenizer-js: no BOS, "▁" prepended (the tokenizer.json's Prepend normalizer).
const port = [portName, kind === "gpt2" ? (t) => portTokenizer.encode(t) : (t) => portTokenizer.encode(t, false, true)];
const texts = fs.readFileSync(input, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).text);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
const hf = new Tokenizer(JSON.parse(fs.readFileSync(tokJson, "utf8")), {});
for (const [name, enc] of [["@huggingface/tokenizers", (t) => hf.encode(t, { add_special_tokens: false }).ids],
                           port]) {
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  let tokens = 0;
  for (const t of texts) tokens += enc(t).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(c0).user / 1e6;  // CPU time: robust to other load on the machine
  console.log(JSON.stringify({ name, mb: bytes / 1e6, wall_s: s, user_s: cpu, mb_per_s: bytes / 1e6 / s,
                               mb_per_cpu_s: bytes / 1e6 / cpu, tokens_per_s: tokens / s, tokens }));
}
