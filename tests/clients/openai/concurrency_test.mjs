// 1,000 concurrent streams through the HTTP front end (the official openai client, half
// completions, half chat): every one ends with [DONE] and its usage, and the tokens the clients
// were told they got are the tokens the server's metrics counted. Run by run.sh with a queue
// deep enough to admit them all.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const kStreams = 1000;
const model = 'shakespeare-linear';
const client = new OpenAI({
  baseURL: `${process.env.LINSERVE_HTTP}/v1`, apiKey: process.env.LINSERVE_TOKEN, maxRetries: 0,
  timeout: 300_000 });

async function metrics() {
  const text = await (await fetch(process.env.LINSERVE_METRICS)).text();
  const value = (name) => Number(text.split('\n').find((l) => l.startsWith(name + ' '))
                                     .split(' ')[1]);
  return {
    generated: value('linserve_generated_tokens_total'),
    prompt: value('linserve_prompt_tokens_total'),
    active: value('linserve_active_requests'),
  };
}

async function one(i) {
  const common = { model, max_tokens: 1 + (i % 4), ignore_eos: true, seed: i, stream: true,
                   stream_options: { include_usage: true } };
  const stream = i % 2
    ? await client.chat.completions.create(
        { ...common, messages: [{ role: 'user', content: `Stream ${i}` }] })
    : await client.completions.create({ ...common, prompt: `ROMEO:\nStream ${i}` });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text ?? c.delta?.content ?? '';
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(finish, 'length', `stream ${i}`);
  assert.equal(usage.completion_tokens, 1 + (i % 4), `stream ${i}`);
  return { usage, text };
}

test(`${kStreams} concurrent streams match the server's token counts`, async () => {
  const before = await metrics();
  const results = await Promise.all(Array.from({ length: kStreams }, (_, i) => one(i)));
  const after = await metrics();
  const generated = results.reduce((n, r) => n + r.usage.completion_tokens, 0);
  const prompt = results.reduce((n, r) => n + r.usage.prompt_tokens, 0);
  assert.equal(after.generated - before.generated, generated);
  assert.equal(after.prompt - before.prompt, prompt);
  assert.equal(after.active, 0);
  console.log(`${kStreams} streams: ${generated} tokens generated, ${prompt} prompt tokens`);
});
