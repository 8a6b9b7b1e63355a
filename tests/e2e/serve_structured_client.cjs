// Client side of serve_structured.sh: every schema of tests/structured/schemas.json through
// `llmrun serve` (chat and completions, streamed and not, batched with unconstrained
// requests), each output parsed and validated by ajv, an independent JSON Schema validator;
// then guided_regex/choice/grammar, json_object and the 400s.
//   node serve_structured_client.cjs PORT SCHEMAS_JSON
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats");
const fs = require("fs");

const [port, schemasPath] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}/v1`;
const schemas = JSON.parse(fs.readFileSync(schemasPath, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
let failures = 0;
const fail = (msg) => {
  failures++;
  console.error("FAIL: " + msg);
};

async function post(path, body) {
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!body.stream || r.status !== 200) return { status: r.status, json: JSON.parse(text) };
  // Stream: join the deltas, keep the last finish_reason.
  let content = "", finish = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const c = JSON.parse(line.slice(6));
    for (const ch of c.choices) {
      content += ch.delta ? ch.delta.content || "" : ch.text || "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { status: r.status, content, finish };
}

function output(res, chat, stream) {
  if (stream) return { text: res.content, finish: res.finish };
  const c = res.json.choices[0];
  return { text: chat ? c.message.content : c.text, finish: c.finish_reason };
}

// One constrained request for schema i, in one of four forms.
async function constrained(i) {
  const { name, schema } = schemas[i];
  const chat = i % 2 === 0, stream = i % 4 >= 2;
  const body = { max_tokens: 400, temperature: 1, seed: 1000 + i, stream };
  if (chat) body.messages = [{ role: "user", content: "Give me JSON for " + name }];
  else body.prompt = "JSON for " + name + ":";
  if (i % 3 === 0 && !chat) body.guided_json = schema;
  else body.response_format = { type: "json_schema", json_schema: { name, schema, strict: true } };
  const res = await post(chat ? "/chat/completions" : "/completions", body);
  if (res.status !== 200) return fail(`${name}: HTTP ${res.status} ${JSON.stringify(res.json)}`);
  const { text, finish } = output(res, chat, stream);
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return fail(`${name}: not JSON (${finish}): ${text}`);
  }
  if (!ajv.validate(schema, value))
    return fail(`${name}: invalid ${text}: ${ajv.errorsText(ajv.errors)}`);
  if (finish !== "stop") fail(`${name}: finish_reason ${finish}`);
  return text;
}

const plain = (stream) => ({
  prompt: "The quick brown fox",
  max_tokens: 24,
  temperature: 0,
  ignore_eos: true,
  stream,
});

async function main() {
  // Unconstrained greedy text alone: batched with constrained requests it must not change.
  const alone = output(await post("/completions", plain(false)), false, false).text;
  let valid = 0;
  for (let g = 0; g < schemas.length; g += 8) {
    const jobs = [];
    for (let i = g; i < Math.min(g + 8, schemas.length); i++)
      jobs.push(constrained(i).then((t) => t !== undefined && valid++));
    const plains = [post("/completions", plain(false)), post("/completions", plain(true))];
    await Promise.all(jobs);
    const [a, b] = await Promise.all(plains);
    if (output(a, false, false).text !== alone) fail("unconstrained text changed in a batch");
    if (output(b, false, true).text !== alone) fail("unconstrained streamed text changed");
  }
  console.log(`schemas: ${valid}/${schemas.length} outputs parsed and validated`);
  if (valid !== schemas.length) fail("not every schema gave a valid output");

  // The other forms.
  const chatOf = (extra) => ({
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 80,
    temperature: 1,
    seed: 5,
    ...extra,
  });
  const obj = output(await post("/chat/completions", chatOf({ response_format: { type: "json_object" } })), true, false);
  try {
    const v = JSON.parse(obj.text);
    if (typeof v !== "object" || v === null || Array.isArray(v)) fail("json_object: not an object");
  } catch (e) {
    fail("json_object: not JSON: " + obj.text);
  }
  const re = "[a-z]{2,8}@[a-z]{2,8}\\.(com|org)";
  for (const stream of [false, true]) {
    const r = output(await post("/completions", { prompt: "mail:", max_tokens: 30, seed: 9, stream, guided_regex: re }), false, stream);
    if (!new RegExp("^(?:" + re + ")$").test(r.text)) fail("guided_regex: " + r.text);
  }
  const choices = ["positive", "negative", "neutral"];
  const ch = output(await post("/chat/completions", chatOf({ guided_choice: choices })), true, false);
  if (!choices.includes(ch.text)) fail("guided_choice: " + ch.text);
  const grammar = 'root ::= "(" num ( "+" num )* ")"\nnum ::= [1-9] [0-9]{0,2}\n';
  const gr = output(await post("/completions", { prompt: "sum:", max_tokens: 40, seed: 3, guided_grammar: grammar }), false, false);
  if (!/^\([1-9][0-9]{0,2}(\+[1-9][0-9]{0,2})*\)$/.test(gr.text)) fail("guided_grammar: " + gr.text);

  // Errors: clear 400s naming the problem.
  const bad = [
    [{ guided_json: { type: "array", uniqueItems: true } }, "uniqueItems"],
    [{ guided_grammar: "root ::= undefined-rule" }, "undefined-rule"],
    [{ guided_grammar: "root ::= [^\\x00-\\U0010FFFF]" }, "cannot match"],
    [{ guided_regex: "(a)\\1" }, "not supported"],
    [{ response_format: { type: "xml" } }, "response_format.type"],
    [{ guided_json: { type: "string" }, guided_regex: "a" }, "both constrain"],
    [{ guided_json: { type: "string", minLength: 50 }, max_tokens: 10 }, "max_tokens"],
  ];
  for (const [extra, words] of bad) {
    const r = await post("/completions", { prompt: "x", max_tokens: 20, ...extra });
    if (r.status !== 400 || !r.json.error.message.includes(words))
      fail(`expected a 400 about ${words}: ${r.status} ${JSON.stringify(r.json)}`);
  }
  if (failures) process.exit(1);
  console.log("structured outputs: ok");
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
