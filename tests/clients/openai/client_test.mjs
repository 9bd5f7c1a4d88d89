// The official openai client (npm "openai", pinned in package.json) against linserve's HTTP API:
// both endpoints streamed and whole with every supported field, the chat template, sessions,
// errors and their statuses, tenants, and a client that leaves mid-stream. Run by run.sh, which
// starts the server with --max_slots=2 --max_queue_depth=2 --tenant_max_queued=2.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = `${process.env.LINSERVE_HTTP}/v1`;
const model = 'shakespeare-linear';
// No retries: a 429 must reach the test.
const client = new OpenAI({ baseURL, apiKey: process.env.LINSERVE_TOKEN, maxRetries: 0 });
const bob = new OpenAI({ baseURL, apiKey: process.env.LINSERVE_OTHER_TOKEN, maxRetries: 0 });

async function metric(name) {
  const text = await (await fetch(process.env.LINSERVE_METRICS)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `no metric ${name}`);
  return Number(line.split(' ')[1]);
}

// Waits (up to 20 s) until `name` equals `value`.
async function waitForMetric(name, value) {
  let last;
  for (let i = 0; i < 200; i++) {
    last = await metric(name);
    if (last === value) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(last, value, `${name} never reached ${value}`);
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const greedy = { model, temperature: 0, max_tokens: 24 };

test('models lists the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, [model]);
  assert.equal((await client.models.retrieve(model)).id, model);
});

test('completions: whole, streamed and the same text', async () => {
  const prompt = 'ROMEO:\nBut soft, what light';
  const whole = await client.completions.create({ ...greedy, prompt });
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.model, model);
  assert.equal(whole.choices.length, 1);
  const choice = whole.choices[0];
  assert.ok(['length', 'stop'].includes(choice.finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0);
  assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 24);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);

  const chunks = await collect(await client.completions.create({
    ...greedy, prompt, stream: true, stream_options: { include_usage: true } }));
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(usage.usage, whole.usage);
  const body = chunks.slice(0, -1);
  assert.ok(body.every((c) => c.usage === null && c.object === 'text_completion'));
  assert.equal(body.map((c) => c.choices[0].text).join(''), choice.text);
  assert.equal(body.at(-1).choices[0].finish_reason, choice.finish_reason);
  assert.ok(body.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
});

test('completions: every sampling field, seeded sampling repeats, logprobs', async () => {
  const request = {
    model, prompt: [[1, 300, 400]], max_tokens: 16, temperature: 0.9, top_p: 0.95, top_k: 50,
    min_p: 0.01, presence_penalty: 0.5, frequency_penalty: 0.2, repetition_penalty: 1.1,
    seed: 1234, stop: ['zzz'], n: 1, logprobs: 2, user: 'test-user', ignore_eos: true,
  };
  const a = await client.completions.create(request);
  const b = await client.completions.create(request);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.equal(a.usage.completion_tokens, 16);
  assert.equal(a.usage.prompt_tokens, 4);  // BOS and the three ids
  const lp = a.choices[0].logprobs;
  assert.equal(lp.tokens.length, 16);
  assert.equal(lp.token_logprobs.length, 16);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
  assert.ok(lp.top_logprobs.every((alts) => Object.keys(alts).length >= 1 &&
                                             Object.keys(alts).length <= 2));
  assert.equal(lp.tokens.join(''), a.choices[0].text);
  assert.deepEqual(lp.text_offset[0], 0);
  const other = await client.completions.create({ ...request, seed: 99 });
  assert.equal(other.usage.completion_tokens, 16);
});

test('logit_bias: +100 forces a token and -100 bans it, greedy, sampled and streamed', async () => {
  // Token 3 is "\n", a piece of its own in the bundled tokenizer (reference/train_tokenizer.py).
  const prompt = 'ROMEO:\n';
  const forced = await client.completions.create({
    model, prompt, max_tokens: 4, temperature: 0, logit_bias: { 3: 100 } });
  assert.equal(forced.choices[0].text, '\n\n\n\n');
  const sampled = await client.completions.create({
    model, prompt, max_tokens: 4, temperature: 1.5, seed: 5, logit_bias: { 3: 100 } });
  assert.equal(sampled.choices[0].text, '\n\n\n\n');
  const plain = await client.completions.create({ model, prompt, max_tokens: 64, temperature: 0 });
  assert.ok(plain.choices[0].text.includes('\n'), plain.choices[0].text);
  const banned = await client.completions.create({
    model, prompt, max_tokens: 64, temperature: 0, logit_bias: { 3: -100 } });
  assert.equal(banned.usage.completion_tokens, 64);
  assert.ok(!banned.choices[0].text.includes('\n'), banned.choices[0].text);
  const streamed = await collect(await client.chat.completions.create({
    model, max_tokens: 64, temperature: 0, stream: true, logit_bias: { 3: -100 },
    messages: [{ role: 'user', content: 'Speak.' }] }));
  const text = streamed.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.ok(text.length > 0 && !text.includes('\n'), text);
});

// The passage and its ids in the bundled tokenizer (linserve-cli tokenize); the echo checks that
// they still match.
const passage = 'ROMEO:\nBut soft, what light through yonder window breaks?\n' +
  'It is the east, and Juliet is the sun.';
const passageIds = [813, 2007, 3, 451, 367, 1060, 1999, 437, 1272, 1813, 286, 1721, 1622, 303, 1606,
  1990, 2028, 3, 837, 329, 270, 337, 440, 1999, 302, 1730, 329, 270, 1366, 2009];

test('echo: prompt logprobs with max_tokens 0 equal teacher forcing; a loglikelihood', async () => {
  const scored = await client.completions.create({
    model, prompt: passageIds, echo: true, logprobs: 2, max_tokens: 0 });
  const choice = scored.choices[0];
  assert.equal(choice.text, passage);
  assert.equal(choice.finish_reason, 'length');
  assert.equal(scored.usage.completion_tokens, 0);
  assert.equal(scored.usage.prompt_tokens, passageIds.length + 1);  // BOS, not echoed
  const lp = choice.logprobs;
  assert.equal(lp.tokens.length, passageIds.length);
  assert.equal(lp.tokens.join(''), passage);
  assert.equal(lp.text_offset[0], 0);
  // Every token is scored (the first given BOS), with its 2 most likely alternatives.
  assert.ok(lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0));
  assert.ok(lp.top_logprobs.every((alts) => Object.keys(alts).length >= 1 &&
                                             Object.keys(alts).length <= 2));
  // Teacher forcing: the logprob of each token after its prefix, forced with logit_bias (the
  // logprob reported is the unbiased one). Within 1e-3 each (docs/openai.md), and the sums.
  let forced = 0;
  let echoed = 0;
  for (let i = 1; i < passageIds.length; ++i) {
    const r = await client.completions.create({
      model, prompt: passageIds.slice(0, i), max_tokens: 1, temperature: 0, logprobs: 0,
      logit_bias: { [passageIds[i]]: 100 } });
    const expected = r.choices[0].logprobs.token_logprobs[0];
    assert.ok(Math.abs(lp.token_logprobs[i] - expected) <= 1e-3,
      `token ${i}: echo ${lp.token_logprobs[i]}, teacher forcing ${expected}`);
    forced += expected;
    echoed += lp.token_logprobs[i];
  }
  assert.ok(Math.abs(forced - echoed) <= 1e-3 * passageIds.length, `${forced} vs ${echoed}`);

  // Streamed, with a completion: the prompt's text and logprobs come first.
  const chunks = await collect(await client.completions.create({
    model, prompt: passageIds, echo: true, logprobs: 0, max_tokens: 3, temperature: 0,
    stream: true }));
  const text = chunks.map((c) => c.choices[0].text).join('');
  assert.ok(text.startsWith(passage), text);
  const streamedLogprobs = chunks.flatMap((c) => c.choices[0].logprobs?.token_logprobs ?? []);
  assert.equal(streamedLogprobs.length, passageIds.length + 3);
  for (let i = 0; i < passageIds.length; ++i) {
    assert.ok(Math.abs(streamedLogprobs[i] - lp.token_logprobs[i]) <= 1e-6);
  }
  // echo without logprobs: the text only.
  const plain = await client.completions.create({
    model, prompt: passage, echo: true, max_tokens: 2, temperature: 0 });
  assert.ok(plain.choices[0].text.startsWith(passage));
  assert.equal(plain.choices[0].logprobs, null);
});

test('completions: a stop string ends the text before it', async () => {
  const r = await client.completions.create({
    model, prompt: 'ROMEO:\n', temperature: 0, max_tokens: 200, stop: '\n' });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(!r.choices[0].text.includes('\n'));
});

test('chat: the template makes the prompt; whole and streamed agree; logprobs', async () => {
  const messages = [
    { role: 'system', content: 'Verona. A public place.' },
    { role: 'user', content: 'Good morrow, cousin.' },
  ];
  const chat = await client.chat.completions.create({
    model, messages, temperature: 0, max_completion_tokens: 20, logprobs: true,
    top_logprobs: 3, seed: 5, stop: ['zzz'], presence_penalty: 0, frequency_penalty: 0,
    top_p: 1, n: 1, user: 'u' });
  assert.equal(chat.object, 'chat.completion');
  const message = chat.choices[0].message;
  assert.equal(message.role, 'assistant');
  // The bundled template: "NAME:\ncontent\n\n" per message, then the assistant's "NAME:\n".
  const same = await client.completions.create({
    model, temperature: 0, max_tokens: 20,
    prompt: 'Verona. A public place.\n\nROMEO:\nGood morrow, cousin.\n\nJULIET:\n' });
  assert.equal(message.content, same.choices[0].text);
  assert.equal(chat.usage.prompt_tokens, same.usage.prompt_tokens);
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  assert.ok(content.every((t) => t.top_logprobs.length === 3 && t.logprob <= 0 &&
                                 Array.isArray(t.bytes)));

  const chunks = await collect(await client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 20, stream: true,
    stream_options: { include_usage: true } }));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.ok(chunks.slice(0, -1).every((c) => c.object === 'chat.completion.chunk'));
  const text = chunks.slice(0, -1).map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, message.content);
  assert.equal(chunks.at(-1).usage.completion_tokens, chat.usage.completion_tokens);
  // A named speaker replaces the role's name.
  const named = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 8,
    messages: [{ role: 'user', name: 'MERCUTIO', content: 'Nay, gentle Romeo.' }] });
  const direct = await client.completions.create({
    model, temperature: 0, max_tokens: 8, prompt: 'MERCUTIO:\nNay, gentle Romeo.\n\nJULIET:\n' });
  assert.equal(named.choices[0].message.content, direct.choices[0].text);
});

test('sessions: continue server-side, owned by their tenant, deleted', async () => {
  const session = await client.post('/sessions');
  assert.equal(session.object, 'session');
  const first = await client.completions.create({
    model, prompt: 'ROMEO:\nHe jests at scars', max_tokens: 5, temperature: 0,
    session_id: session.id });
  const second = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'What light?' }], max_tokens: 5,
    temperature: 0, session_id: session.id });
  // The second request feeds only its own tokens; the session holds both.
  assert.equal(second.usage.session_tokens,
               first.usage.session_tokens + second.usage.prompt_tokens +
               second.usage.completion_tokens);
  assert.equal(second.session_id, session.id);
  const info = await client.get(`/sessions/${session.id}`);
  assert.equal(info.num_tokens, second.usage.session_tokens);

  // Another tenant cannot see it.
  await assert.rejects(
    bob.completions.create({ model, prompt: 'x', max_tokens: 1, session_id: session.id }),
    (e) => e.status === 404);
  await assert.rejects(bob.get(`/sessions/${session.id}`), (e) => e.status === 404);

  // Busy: a second request while one runs on the session.
  const stream = await client.completions.create({
    model, prompt: 'x', max_tokens: 2000, ignore_eos: true, stream: true,
    session_id: session.id });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  await assert.rejects(
    client.completions.create({ model, prompt: 'y', max_tokens: 1, session_id: session.id }),
    (e) => e.status === 409 && e.error.code === 'session_busy');
  stream.controller.abort();
  await waitForMetric('linserve_active_requests', 0);

  assert.equal((await client.delete(`/sessions/${session.id}`)).deleted, true);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 1, session_id: session.id }),
    (e) => e.status === 404);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 1, session_id: 'nope' }),
    (e) => e.status === 400 && e.param === 'session_id');
});

test('errors: OpenAI JSON with the field and the status', async () => {
  const cases = [
    [{ model: 'gpt-4', prompt: 'x' }, 404, 'model', 'model_not_found'],
    [{ model, prompt: 'x', n: 17 }, 400, 'n'],
    [{ model, prompt: 'x', temperature: -1 }, 400, 'temperature'],
    [{ model, prompt: 'x', top_p: 2 }, 400, 'top_p'],
    [{ model, prompt: 'x', max_tokens: 0 }, 400, 'max_tokens'],
    [{ model, prompt: 'x', max_tokens: 1e9 }, 400, 'max_tokens'],
    [{ model, prompt: 'x', logprobs: 99 }, 400, 'logprobs'],
    [{ model, prompt: 'x', stop: [1] }, 400, 'stop[0]'],
    [{ model, prompt: 'x', stream_options: { include_usage: true } }, 400, 'stream_options'],
    [{ model, prompt: '' }, 400, 'prompt'],
    [{ model, prompt: [5000000] }, 400, 'prompt[0]'],
    [{ model, prompt: 'x', seed: 'one' }, 400, 'seed'],
    [{ model, prompt: 'x', logit_bias: { 2048: 1 } }, 400, 'logit_bias'],
    [{ model, prompt: 'x', logit_bias: { 5: 101 } }, 400, 'logit_bias'],
    [{ model, prompt: 'x', logit_bias: { five: 1 } }, 400, 'logit_bias'],
    [{ model, prompt: 'x', echo: 'yes' }, 400, 'echo'],
  ];
  for (const [body, status, param, code] of cases) {
    await assert.rejects(client.completions.create(body), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      assert.ok(e.message.includes(param.replace(/\[.*/, '')), e.message);
      if (code) assert.equal(e.code, code);
      assert.equal(e.type, status === 404 ? 'not_found_error' : 'invalid_request_error');
      return true;
    });
  }
  const chatCases = [
    [{ model, messages: [] }, 'messages'],
    [{ model, messages: [{ role: 'narrator', content: 'x' }] }, 'messages[0].role'],
    [{ model, messages: [{ role: 'user' }] }, 'messages[0].content'],
    [{ model, messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, 'top_logprobs'],
  ];
  for (const [body, param] of chatCases) {
    await assert.rejects(client.chat.completions.create(body),
                         (e) => e.status === 400 && e.param === param);
  }
  // What the client cannot send: bad JSON, an unknown route, a wrong method.
  const headers = { Authorization: `Bearer ${process.env.LINSERVE_TOKEN}` };
  let r = await fetch(`${baseURL}/completions`, { method: 'POST', headers, body: '{"model":' });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
  r = await fetch(`${baseURL}/embeddings`, { method: 'POST', headers, body: '{}' });
  assert.equal(r.status, 404);
  r = await fetch(`${baseURL}/completions`, { headers });
  assert.equal(r.status, 405);
  // Every method a path does not serve: 405 in JSON with Allow, never libevent's HTML 501.
  for (const method of ['PUT', 'PATCH', 'OPTIONS', 'DELETE']) {
    const body = method === 'OPTIONS' ? undefined : '{}';
    r = await fetch(`${baseURL}/completions`, { method, headers, body });
    assert.equal(r.status, 405, method);
    assert.equal(r.headers.get('allow'), 'POST');
    assert.equal((await r.json()).error.type, 'invalid_request_error');
  }
  r = await fetch(`${baseURL}/models`, { method: 'HEAD', headers });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'GET');
  // A body over the limit: 413 in JSON.
  r = await fetch(`${baseURL}/completions`, {
    method: 'POST', headers, body: 'x'.repeat(8 << 20),
  });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error.message, /exceeds/);
  // Integers past int64 are out of range, not wrapped to a negative.
  r = await fetch(`${baseURL}/completions`, {
    method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' },
    body: '{"model":"' + model + '","prompt":"a","max_tokens":9223372036854775808}',
  });
  assert.equal(r.status, 400);
  const big = (await r.json()).error;
  assert.equal(big.param, 'max_tokens');
  assert.match(big.message, /got 9223372036854775808/);
});

test('auth: a missing or wrong bearer token is 401', async () => {
  for (const apiKey of ['wrong-token']) {
    const stranger = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
    await assert.rejects(stranger.models.list(),
                         (e) => e.status === 401 && e.code === 'invalid_api_key');
  }
  const r = await fetch(`${baseURL}/models`);
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.type, 'authentication_error');
});

test('admission: a full queue is 429; a client that leaves frees its slot', async () => {
  // --max_slots=2 --max_queue_depth=2 (and this tenant may fill the queue): two run, at most
  // two wait, the rest are refused at once.
  const cancelledBefore = await metric('linserve_generations_total{outcome="cancelled"}');
  const streams = [];
  const refused = [];
  let settled = 0;
  for (let i = 0; i < 8; i++) {
    client.completions
      .create({ model, prompt: 'ROMEO:\n', max_tokens: 4000, ignore_eos: true, stream: true })
      .then((s) => streams.push(s), (e) => refused.push(e))
      .finally(() => settled++);
  }
  const until = async (condition) => {
    for (let i = 0; i < 200 && !condition(); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(condition(), `${streams.length} streaming, ${refused.length} refused`);
  };
  // A stream's headers come with its first token: the two running ones answer, the waiting
  // ones do not yet.
  await until(() => streams.length === 2 && refused.length >= 4);
  assert.ok(refused.every((e) => e.status === 429 && e.code === 'rate_limit_exceeded'));
  assert.equal(await metric('linserve_active_requests'), 2);
  // Leaving frees the slots: the waiting requests run, and leave in turn.
  for (let i = 0; i < 400 && settled < 8; i++) {
    for (const s of streams) s.controller.abort();
    await new Promise((r) => setTimeout(r, 50));
  }
  for (const s of streams) s.controller.abort();
  await waitForMetric('linserve_active_requests', 0);
  await waitForMetric('linserve_queue_depth', 0);
  assert.equal(await metric('linserve_generations_total{outcome="cancelled"}'),
               cancelledBefore + streams.length);
  // A whole (not streamed) request whose client leaves is cancelled too.
  const controller = new AbortController();
  const pending = client.completions.create(
    { model, prompt: 'x', max_tokens: 4000, ignore_eos: true }, { signal: controller.signal });
  await waitForMetric('linserve_active_requests', 1);
  controller.abort();
  await assert.rejects(pending);
  await waitForMetric('linserve_active_requests', 0);
});
