// Client side of serve_structured.sh's tool-calling part: the official `openai` npm client's
// chat.completions.create({tools}) round trip against `llmrun serve` — a forced call (named
// and required, streamed and not) whose arguments ajv validates against the tool's schema,
// the call and a `role: tool` result sent back, tool_choice none and auto. Streamed calls
// come piece by piece as OpenAI sends them (the first delta names the call, later ones carry
// argument fragments), which the client's stream helpers (beta.chat.completions.stream and
// runTools) reassemble.
//   node serve_tools_client.cjs PORT TEMPLATE_NAME
require("openai/shims/web");  // Node's built-in fetch for streams (see serve_openai_client.cjs)
const OpenAI = require("openai");
const Ajv2020 = require("ajv/dist/2020").default;
const assert = require("assert/strict");

const [port, template] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "none", maxRetries: 0 });
const ajv = new Ajv2020({ strict: false });
const weather = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1, maxLength: 16 },
    unit: { enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const search = {
  type: "object",
  properties: { query: { type: "string", maxLength: 20 }, limit: { type: "integer", minimum: 1, maximum: 10 } },
  required: ["query"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Current weather", parameters: weather } },
  { type: "function", function: { name: "search", description: "Web search", parameters: search } },
];
const schemaOf = { get_weather: weather, search };
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

function checkCall(call, name) {
  assert.equal(call.type, "function");
  // Mistral's template takes only 9-alphanumeric ids.
  assert.match(call.id, template === "mistral" ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
  if (name) assert.equal(call.function.name, name);
  const schema = schemaOf[call.function.name];
  assert.ok(schema, "unknown function " + call.function.name);
  const args = JSON.parse(call.function.arguments);
  assert.ok(ajv.validate(schema, args), `${call.function.arguments}: ${ajv.errorsText(ajv.errors)}`);
}

async function main() {
  // A named function: the call is forced and valid.
  const r1 = await client.chat.completions.create({
    model: "tiny", messages, tools, seed: 1, max_tokens: 200,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const c1 = r1.choices[0];
  assert.equal(c1.finish_reason, "tool_calls");
  assert.equal(c1.message.content, null);
  assert.equal(c1.message.tool_calls.length, 1);
  checkCall(c1.message.tool_calls[0], "get_weather");

  // The call and its result go back into the prompt (longer than the first by both).
  const follow = [
    ...messages,
    c1.message,
    { role: "tool", tool_call_id: c1.message.tool_calls[0].id, content: '{"temperature": 21}' },
  ];
  const r2 = await client.chat.completions.create({
    model: "tiny", messages: follow, tools, tool_choice: "auto", max_tokens: 8, seed: 2,
  });
  assert.equal(typeof r2.choices[0].message.content, "string");
  assert.ok(r2.usage.prompt_tokens > r1.usage.prompt_tokens + 60, "the follow-up prompt lost the call or result");
  // tool_choice none: text only, and the tools stay out of the prompt.
  const none = await client.chat.completions.create({
    model: "tiny", messages: follow, tools, tool_choice: "none", max_tokens: 8, seed: 2,
  });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.equal(typeof none.choices[0].message.content, "string");
  assert.ok(none.usage.prompt_tokens < r2.usage.prompt_tokens - 200);

  // required, streamed: delta.tool_calls chunks assemble into a valid call.
  for (const seed of [3, 4, 5]) {
    const stream = await client.chat.completions.create({
      model: "tiny", messages: follow, tools, tool_choice: "required", stream: true, seed, max_tokens: 200,
    });
    const calls = [];
    let finish = null, content = "";
    for await (const chunk of stream) {
      const ch = chunk.choices[0];
      if (!ch) continue;
      content += ch.delta.content || "";
      for (const tc of ch.delta.tool_calls || []) {
        calls[tc.index] = calls[tc.index] || { id: "", type: "function", function: { name: "", arguments: "" } };
        const c = calls[tc.index];
        if (tc.id) c.id = tc.id;
        if (tc.function && tc.function.name) c.function.name += tc.function.name;
        if (tc.function && tc.function.arguments) c.function.arguments += tc.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    assert.equal(finish, "tool_calls");
    assert.equal(content, "");
    assert.equal(calls.length, 1);
    checkCall(calls[0]);
  }

  // The raw stream: the call's first delta carries index, id, type and name with empty
  // arguments; the arguments then arrive in several fragments, not one lump.
  const raw = await client.chat.completions.create({
    model: "tiny", messages, tools, tool_choice: "required", stream: true, seed: 7, max_tokens: 200,
  });
  const callDeltas = [];
  for await (const chunk of raw) for (const tc of chunk.choices[0]?.delta.tool_calls || []) callDeltas.push(tc);
  assert.ok(callDeltas[0].id && callDeltas[0].type === "function" && callDeltas[0].function.name, JSON.stringify(callDeltas[0]));
  assert.equal(callDeltas[0].function.arguments, "");
  assert.ok(callDeltas.length >= 4, `arguments came in ${callDeltas.length - 1} fragment(s)`);
  for (const d of callDeltas.slice(1)) {
    assert.equal(d.index, 0);
    assert.equal(d.id, undefined);
    assert.equal(typeof d.function.arguments, "string");
  }

  // The client's stream helper: argument deltas as events, the final message assembled.
  const helper = client.beta.chat.completions.stream({
    model: "tiny", messages, tools, tool_choice: { type: "function", function: { name: "search" } }, seed: 8, max_tokens: 200,
  });
  let argEvents = 0, doneArgs = null;
  helper.on("tool_calls.function.arguments.delta", (e) => { argEvents += 1; assert.equal(e.name, "search"); });
  helper.on("tool_calls.function.arguments.done", (e) => { doneArgs = e.arguments; });
  const final = await helper.finalChatCompletion();
  const fc = final.choices[0];
  assert.equal(fc.finish_reason, "tool_calls");
  assert.equal(fc.message.tool_calls.length, 1);
  checkCall(fc.message.tool_calls[0], "search");
  assert.equal(doneArgs, fc.message.tool_calls[0].function.arguments);
  assert.ok(argEvents >= 3, `only ${argEvents} argument delta event(s)`);

  // runTools, streamed: the client parses the streamed arguments, calls the function, and
  // sends its result back as a tool message.
  let called = null;
  const runner = client.beta.chat.completions.runTools({
    model: "tiny", messages, seed: 9, max_tokens: 200, stream: true,
    tool_choice: { type: "function", function: { name: "get_weather" } },
    tools: [{ type: "function", function: {
      name: "get_weather", parameters: weather, parse: JSON.parse,
      function: (args) => { called = args; return { temperature: 21 }; },
    } }],
  });
  await runner.done();
  assert.ok(called && ajv.validate(weather, called), JSON.stringify(called));
  const toolMsg = runner.messages.find((m) => m.role === "tool");
  assert.equal(toolMsg.content, '{"temperature":21}');

  // auto on a random-weight model: a text answer, no call invented.
  const r3 = await client.chat.completions.create({ model: "tiny", messages, tools, max_tokens: 10, seed: 6 });
  assert.equal(r3.choices[0].finish_reason, "length");

  // A tool_choice naming no tool is a 400 the client raises as BadRequestError.
  await assert.rejects(
    client.chat.completions.create({
      model: "tiny", messages, tools, tool_choice: { type: "function", function: { name: "nope" } },
    }),
    (e) => e.status === 400 && /nope/.test(e.message),
  );
  console.log(`tool calling (${template}): ok`);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
