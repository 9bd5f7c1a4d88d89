// Closed-loop load on the OpenAI completions endpoint: CONCURRENCY clients, each sending the
// next streamed request as soon as the last one ends, for SECONDS; 16 random prompt token ids
// and OUTPUT_TOKENS tokens (ignore_eos) per request, like linserve-loadtest's defaults in
// bench/http/run.sh. The served tokens/s is read from the server's metrics by run.sh; this
// prints the number of requests completed and fails on any non-200 answer.
//   node http_load.mjs URL CONCURRENCY SECONDS OUTPUT_TOKENS
import http from 'node:http';

const [url, concurrency, seconds, outputTokens] = process.argv.slice(2);
const target = new URL('/v1/completions', url);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(concurrency) });
const deadline = Date.now() + Number(seconds) * 1000;
let completed = 0;
let seed = 1;

function request() {
  const prompt = Array.from({ length: 16 }, () => 3 + Math.floor(Math.random() * 2000));
  const body = JSON.stringify({
    model: 'shakespeare-linear', prompt, max_tokens: Number(outputTokens), ignore_eos: true,
    temperature: 1, seed: seed++, stream: true });
  return new Promise((resolve, reject) => {
    const req = http.request(target, {
      method: 'POST', agent, headers: { 'Content-Type': 'application/json' } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
      res.on('data', () => {});
      res.on('end', resolve);
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function worker() {
  while (Date.now() < deadline) {
    await request();
    completed++;
  }
}

await Promise.all(Array.from({ length: Number(concurrency) }, worker));
console.log(completed);
agent.destroy();
