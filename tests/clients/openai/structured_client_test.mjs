// Structured output through the official openai client (npm "openai", with "zod" for its schema
// helper): chat.completions.parse with zodResponseFormat sends response_format json_schema
// (strict) and parses the reply with the client's own helper, which throws unless the content is
// JSON that the zod schema accepts; json_object on both endpoints; refusals as 400s naming the
// field; pathological constraints refused by the limit's name or served validly. Run by run.sh
// with --constraint_max_nesting_depth=16.
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
      max_tokens: 1500,
    });
    const choice = completion.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    assert.deepEqual(choice.message.parsed, Person.parse(JSON.parse(choice.message.content)));
    assert.equal(typeof choice.message.parsed.alive, 'boolean');
    // Whitespace between two tokens is at most 20 characters (Person's strings are at most 12
    // characters long: no longer run can come from inside one).
    for (const run of choice.message.content.match(/[ \t\n\r]+/g) ?? []) {
      assert.ok(run.length <= 20, `a whitespace run of ${run.length}: ${JSON.stringify(run)}`);
    }
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
  assert.match(chat.choices[0].message.content, /^\{\s*("|\}|$)/);
  const plain = await client.completions.create({
    model,
    prompt: 'ROMEO:\n',
    response_format: { type: 'json_object' },
    temperature: 0,
    max_tokens: 16,
  });
  assert.match(plain.choices[0].text, /^\{\s*("|\}|$)/);
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

// Pathological constraints: each is refused with a 400 naming the limit it breaks, or compiles
// within the limits and is served (its output valid); the server answers a plain request after.
test('hostile constraints are refused by name or served within the limits', async () => {
  const refused = async (fields, pattern) => {
    await assert.rejects(
      client.completions.create({ model, prompt: 'Hark', max_tokens: 8, ...fields }),
      (e) => e instanceof OpenAI.BadRequestError && pattern.test(e.message),
      JSON.stringify(fields).slice(0, 80),
    );
  };
  await refused({ guided_regex: '(a{1000}){1000}' }, /max_grammar_elements/);
  await refused({ guided_regex: '('.repeat(200) + 'a' + ')'.repeat(200) }, /max_nesting_depth/);
  await refused({ guided_grammar: 'root ::= x\nx ::= x "a" | "b"' }, /recurs/);
  let deep = { type: 'string' };
  // 40 levels: within the HTTP body's JSON nesting limit (64), beyond the server's
  // --constraint_max_nesting_depth=16 (structured_client_test's flags in tests/clients).
  for (let i = 0; i < 40; i++) deep = { type: 'array', items: deep };
  await refused(
    { response_format: { type: 'json_schema', json_schema: { name: 'deep', schema: deep } } },
    /max_nesting_depth/);
  const huge = { type: 'string', enum: Array.from({ length: 20000 }, (_, i) => `value${i}`) };
  await refused(
    { response_format: { type: 'json_schema', json_schema: { name: 'huge', schema: huge } } },
    /max_text_bytes/);

  // A repetition of something that can match nothing is refused (docs/server.md).
  await refused({ guided_regex: '(a*)*b' }, /left-recursive/);
  // Ambiguous but legal: overlapping alternatives under stars, served.
  const ambiguous = '(a|a)*(a|aa)*(ab|a)*b';
  for (let seed = 0; seed < 5; seed++) {
    const r = await client.completions.create({
      model, prompt: 'Hark', max_tokens: 48, temperature: 1, seed, guided_regex: ambiguous,
    });
    const text = r.choices[0].text;
    if (r.choices[0].finish_reason === 'stop') {
      assert.match(text, new RegExp(`^(?:${ambiguous})$`));
    } else {
      assert.match(text, /^a*$/);
    }
  }
  const plenty = { type: 'string', enum: Array.from({ length: 3000 }, (_, i) => `v${i}`) };
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Pick' }], max_tokens: 16,
    response_format: { type: 'json_schema', json_schema: { name: 'plenty', schema: plenty } },
  });
  assert.ok(plenty.enum.includes(JSON.parse(r.choices[0].message.content)));
  const plain = await client.completions.create({ model, prompt: 'Hark', max_tokens: 4 });
  assert.equal(plain.choices.length, 1);
});
