// n choices through the official openai client: one prompt, n seeded choices (choice i is the
// one-choice request with seed + i), streamed and whole, on completions and chat; the usage
// counts the prompt once; a session needs session_choice; the limits are 400s naming the field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const model = 'shakespeare-linear';
const client = new OpenAI({
  baseURL: `${process.env.LINSERVE_HTTP}/v1`, apiKey: process.env.LINSERVE_TOKEN, maxRetries: 0 });

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const sampled = { model, max_tokens: 16, temperature: 1.0, seed: 1234, ignore_eos: true };

test('completions: n = 4 whole gives 4 distinct seeded choices, reproducible', async () => {
  const request = { ...sampled, prompt: 'ROMEO:\n', n: 4 };
  const a = await client.completions.create(request);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(new Set(a.choices.map((c) => c.text)).size, 4);
  assert.ok(a.choices.every((c) => c.finish_reason === 'length'));
  const b = await client.completions.create(request);
  assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
  // Choice i is the one-choice request with seed + i; the prompt is counted once.
  for (let i = 0; i < 4; ++i) {
    const one = await client.completions.create({ ...sampled, prompt: 'ROMEO:\n', seed: 1234 + i });
    assert.equal(a.choices[i].text, one.choices[0].text, `choice ${i}`);
    if (i === 0) {
      assert.equal(a.usage.prompt_tokens, one.usage.prompt_tokens);
    }
  }
  assert.equal(a.usage.completion_tokens, 4 * 16);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 4 * 16);
});

test('chat: n = 4 streamed equals n = 4 whole, every chunk with its index', async () => {
  const request = { ...sampled, n: 4, messages: [{ role: 'user', content: 'Speak, Juliet.' }] };
  const whole = await client.chat.completions.create(request);
  assert.equal(whole.choices.length, 4);
  const chunks = await collect(await client.chat.completions.create({
    ...request, stream: true, stream_options: { include_usage: true } }));
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(usage.usage, whole.usage);
  const texts = ['', '', '', ''];
  const roles = [0, 0, 0, 0];
  const finishes = [0, 0, 0, 0];
  for (const chunk of chunks.slice(0, -1)) {
    assert.equal(chunk.choices.length, 1);
    const { index, delta, finish_reason: finish } = chunk.choices[0];
    assert.ok(index >= 0 && index < 4, `index ${index}`);
    texts[index] += delta.content ?? '';
    if (delta.role) roles[index] += 1;
    if (finish) finishes[index] += 1;
  }
  assert.deepEqual(roles, [1, 1, 1, 1]);
  assert.deepEqual(finishes, [1, 1, 1, 1]);
  assert.deepEqual(texts, whole.choices.map((c) => c.message.content));
});

test('sessions: n > 1 needs session_choice; the session continues with that choice', async () => {
  const created = await client.post('/sessions');
  const request = { ...sampled, prompt: 'JULIET:\n', n: 2, session_id: created.id };
  await assert.rejects(client.completions.create(request),
    (e) => e.status === 400 && e.error.param === 'n');
  const kept = await client.completions.create({ ...request, session_choice: 1 });
  assert.equal(kept.choices.length, 2);
  const other = await client.post('/sessions');
  const one = await client.completions.create({
    ...sampled, prompt: 'JULIET:\n', seed: 1235, session_id: other.id });
  assert.equal(kept.choices[1].text, one.choices[0].text);
  assert.equal(kept.usage.session_tokens, one.usage.session_tokens);
});

test('limits: n beyond max_choices, echo with n, a bad session_choice are 400s', async () => {
  const cases = [
    [{ model, prompt: 'x', n: 17 }, 'n'],
    [{ model, prompt: 'x', n: 0 }, 'n'],
    [{ model, prompt: 'x', n: 2, echo: true, max_tokens: 1 }, 'echo'],
    [{ model, prompt: 'x', n: 2, session_choice: 5 }, 'session_choice'],
  ];
  for (const [body, param] of cases) {
    await assert.rejects(client.completions.create(body),
      (e) => e.status === 400 && e.error.param === param, JSON.stringify(body));
  }
});
