// Drives llmrun serve with the official openai npm client. argv: PORT API_KEY EXPECTED_JSON.
// openai 4.x's default HTTP layer on Node is the node-fetch polyfill, whose streamed bodies end
// in "Premature close" on Node 18 (Debian 12's); its documented web shim makes the client use
// Node's built-in fetch instead, as openai 5.x and later always do. It must come first.
require('openai/shims/web');
const OpenAI = require('openai');
const fs = require('fs');
const assert = require('assert/strict');

const [port, key, expectedPath] = process.argv.slice(2);
const expected = JSON.parse(fs.readFileSync(expectedPath, 'utf8'));
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0 });
const model = 'tiny';

async function expectError(promise, Type, status, what) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof Type, `${what}: expected ${Type.name}, got ${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, status, what);
    assert.ok(e.error && typeof e.error.message === 'string', `${what}: OpenAI-style error body`);
    return;
  }
  assert.fail(`${what}: request succeeded`);
}

async function main() {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['tiny']);

  // Greedy completions equal `llmrun generate`, concurrently, streaming and not.
  await Promise.all(expected.greedy.map(async ({ prompt, text }) => {
    const r = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
    assert.equal(r.choices[0].text, text, `completion of ${JSON.stringify(prompt)}`);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.prompt_tokens, Buffer.byteLength(prompt));
    assert.equal(r.usage.completion_tokens, 12);
    assert.equal(r.usage.total_tokens, Buffer.byteLength(prompt) + 12);

    const stream = await client.completions.create({
      model, prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let streamed = '';
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        streamed += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(streamed, text, 'streamed completion');
    assert.equal(finish, 'length');
    assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [Buffer.byteLength(prompt), 12]);
  }));

  // Same seed + prompt = what `llmrun generate --seed` samples.
  const s = expected.sampled;
  const sampled = await client.completions.create({ model, prompt: s.prompt, max_tokens: 12, temperature: 0.8, top_k: 40, seed: 77 });
  assert.equal(sampled.choices[0].text, s.text, 'seeded sampling');

  // Stop strings (spanning tokens; not emitted).
  const g = expected.greedy[1];
  const stop = g.text.slice(5, 8);
  const cut = g.text.indexOf(stop);
  const stopped = await client.completions.create({ model, prompt: g.prompt, max_tokens: 12, temperature: 0, stop: [stop, 'never-there'] });
  assert.equal(stopped.choices[0].text, g.text.slice(0, cut), `stop ${JSON.stringify(stop)}`);
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  const streamStop = await client.completions.create({ model, prompt: g.prompt, max_tokens: 12, temperature: 0, stop, stream: true });
  let st = '';
  for await (const chunk of streamStop) for (const c of chunk.choices) st += c.text;
  assert.equal(st, g.text.slice(0, cut), 'streamed stop');

  // n > 1: every choice, usage over all of them; the same seed gives the same choices.
  const nreq = { model, prompt: 'Many', max_tokens: 6, temperature: 1.0, n: 3, seed: 5 };
  const many = await client.completions.create(nreq);
  assert.deepEqual(many.choices.map((c) => c.index).sort(), [0, 1, 2]);
  assert.equal(many.usage.completion_tokens, 18);
  assert.equal(many.usage.prompt_tokens, 4);
  const again = await client.completions.create(nreq);
  assert.deepEqual(again.choices.map((c) => c.text), many.choices.map((c) => c.text));

  // Logprobs.
  const lp = await client.completions.create({ model, prompt: g.prompt, max_tokens: 4, temperature: 0, logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.token_logprobs.length, 4);
  assert.equal(Object.keys(lp.choices[0].logprobs.top_logprobs[0]).length, 2);
  assert.equal(lp.choices[0].logprobs.tokens.join(''), g.text.slice(0, 4));
  for (const v of lp.choices[0].logprobs.token_logprobs) assert.ok(v <= 0);

  // Chat: non-stream and stream agree; the first chunk carries the role; usage exact.
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi!' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 1 });
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(chat.choices[0].logprobs.content.length, chat.usage.completion_tokens);
  const rendered = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n';
  assert.equal(chat.usage.prompt_tokens, Buffer.byteLength(rendered));
  const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let first = true;
  let content = '';
  let chatUsage = null;
  for await (const chunk of chatStream) {
    if (chunk.usage) chatUsage = chunk.usage;
    for (const c of chunk.choices) {
      if (first) {
        assert.equal(c.delta.role, 'assistant', 'first chat chunk carries the role');
        first = false;
      }
      content += c.delta.content || '';
    }
  }
  assert.equal(content, chat.choices[0].message.content);
  assert.deepEqual([chatUsage.prompt_tokens, chatUsage.completion_tokens, chatUsage.total_tokens],
    [chat.usage.prompt_tokens, chat.usage.completion_tokens, chat.usage.total_tokens]);
  assert.equal(chatUsage.prompt_tokens_details.cached_tokens, 80, 'the repeated chat prompt reuses its 5 full blocks');

  // Typed errors.
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await expectError(bad.completions.create({ model, prompt: 'x' }), OpenAI.AuthenticationError, 401, 'wrong key');
  await expectError(client.completions.create({ model, prompt: 'x', temperature: 5 }), OpenAI.BadRequestError, 400, 'temperature 5');
  await expectError(client.completions.create({ model: 'gpt-4', prompt: 'x' }), OpenAI.NotFoundError, 404, 'unknown model');
  await expectError(client.completions.create({ model, prompt: 'y'.repeat(200) }), OpenAI.BadRequestError, 400, 'prompt longer than the model');
  await expectError(client.completions.create({ model, prompt: 'x', max_tokens: 500 }), OpenAI.BadRequestError, 400, 'max_tokens beyond context');
  await expectError(client.chat.completions.create({ model, messages: [] }), OpenAI.BadRequestError, 400, 'no messages');
  await expectError(client.completions.create({ model, prompt: 'x', n: 0 }), OpenAI.BadRequestError, 400, 'n 0');
  console.log('openai client checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
