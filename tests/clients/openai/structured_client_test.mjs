// Structured output through the official openai client (npm "openai", with "zod" for its schema
// helper): chat.completions.parse with zodResponseFormat sends response_format json_schema
// (strict) and parses the reply with the client's own helper, which throws unless the content is
// JSON that the zod schema accepts; json_object on both endpoints; refusals as 400s naming the
// field. Run by run.sh.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const baseURL = `${process.env.LINSERVE_HTTP}/v1`;
const model = 'shakespeare-linear';
const client = new OpenAI({ baseURL, apiKey: process.env.LINSERVE_TOKEN, maxRetries: 0 });

const Person = z.object({
  name: z.string().max(12),
  role: z.enum(['king', 'queen', 'fool']),
  age: z.number().int(),
  score: z.number(),
  alive: z.boolean(),
  tags: z.array(z.string().max(6)).min(1).max(3),
  spouse: z.string().max(10).nullable(),
});

test('chat.completions.parse accepts what a json_schema response_format returns', async () => {
  const format = zodResponseFormat(Person, 'person');
  for (let seed = 0; seed < 40; seed++) {
    // parse() throws on finish_reason "length" and when zod refuses the content.
    const completion = await client.chat.completions.parse({
      model,
      messages: [{ role: 'user', content: 'Describe a character of the play.' }],
      response_format: format,
      temperature: 1,
      seed,
      max_tokens: 400,
    });
    const choice = completion.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    assert.deepEqual(choice.message.parsed, Person.parse(JSON.parse(choice.message.content)));
    assert.equal(typeof choice.message.parsed.alive, 'boolean');
  }
});

test('json_object on both endpoints starts a JSON object', async () => {
  // The bundled model never saw a double quote, so the first key's string does not end within
  // max_tokens (structured_validity.py says more): the text is the start of an object.
  const chat = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Hark' }],
    response_format: { type: 'json_object' },
    temperature: 0,
    max_tokens: 16,
  });
  assert.match(chat.choices[0].message.content, /^\{\s*("|\})/);
  const plain = await client.completions.create({
    model,
    prompt: 'ROMEO:\n',
    response_format: { type: 'json_object' },
    temperature: 0,
    max_tokens: 16,
  });
  assert.match(plain.choices[0].text, /^\{\s*("|\})/);
});

test('an unsupported schema keyword is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Hark' }],
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'dated',
          schema: { type: 'object', properties: { when: { type: 'string', format: 'date' } } },
        },
      },
      max_tokens: 8,
    }),
    (e) => e instanceof OpenAI.BadRequestError && /format/.test(e.message),
  );
});
