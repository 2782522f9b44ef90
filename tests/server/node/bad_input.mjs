// bad_input.mjs: malformed and hostile requests against `vllmc serve`, each expecting the
// right 4xx status with OpenAI's error JSON ({"error": {"message", "type", "param",
// "code"}}, as vLLM's ErrorResponse), and after each one a normal request must still
// succeed (the server keeps serving). Requests go out through raw node:net sockets so that
// broken JSON, invalid UTF-8, lying Content-Length headers and half-sent bodies reach the
// server exactly as written.
//   node bad_input.mjs http://HOST:PORT [slow_loris_seconds]
// The C wrapper starts the server with a short --request-timeout so the slow-loris case
// (a body that never finishes) is answered 408 within seconds.
import { MODEL, baseUrl, check, checkErrorShape, finish, part, post, rawExchange } from './lib.mjs';

const base = baseUrl(2);
const slowLorisSeconds = Number(process.argv[3] || 30);
const host = new URL(base).host;

// A raw HTTP/1.1 request; body a string or Buffer. Connection: close keeps exchanges independent.
function httpBytes(method, path, body, { contentType = 'application/json', extraHeaders = '', contentLength } = {}) {
  const b = body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  let head = `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n`;
  if (contentType) head += `Content-Type: ${contentType}\r\n`;
  if (body !== undefined || contentLength !== undefined) head += `Content-Length: ${contentLength ?? b.length}\r\n`;
  head += extraHeaders + '\r\n';
  return Buffer.concat([Buffer.from(head, 'latin1'), b]);
}

function asResponse(r) {
  let json = null;
  try {
    json = JSON.parse(r.body);
  } catch {
    json = null;
  }
  const ct = /\r\ncontent-type:\s*([^\r\n]*)/i.exec(r.head);
  return { status: r.status, text: r.body, json, headers: { 'content-type': ct ? ct[1] : '' }, closed: r.closed, timedOut: r.timedOut };
}

async function send(method, path, body, opts = {}) {
  return asResponse(await rawExchange(base, [httpBytes(method, path, body, opts)], { timeoutMs: opts.timeoutMs || 30000 }));
}

let normalOk = 0;
// The server must still answer a normal request correctly.
async function expectAlive(after) {
  const r = await post(base, '/v1/completions', { model: MODEL, prompt: 'Once upon a time', max_tokens: 3, temperature: 0 });
  const ok = r.status === 200 && r.json && r.json.choices && r.json.choices.length === 1;
  check(ok, `a normal request still succeeds after: ${after}`, `${r.status} ${r.text.slice(0, 300)}`);
  if (ok) normalOk++;
}

const completion = (extra) => JSON.stringify({ model: MODEL, prompt: 'Hello', max_tokens: 4, ...extra });
const chat = (extra) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, ...extra });
const C = '/v1/completions';
const CHAT = '/v1/chat/completions';

// [name, method, path, body, expected status (or list), options]
const cases = [
  ['broken JSON', 'POST', C, '{"model": "stories", "prompt": ', 400],
  ['empty body', 'POST', C, '', 400],
  ['JSON array instead of an object', 'POST', C, '[1, 2, 3]', 400],
  ['JSON string instead of an object', 'POST', C, '"hello"', 400],
  ['JSON null', 'POST', C, 'null', 400],
  ['trailing garbage after the JSON', 'POST', C, completion({}) + ' xyz', 400],
  ['NaN literal', 'POST', C, '{"model":"stories","prompt":"Hi","temperature":NaN}', 400],
  ['prompt of the wrong type (number)', 'POST', C, completion({ prompt: 42 }), 400],
  ['prompt as an object', 'POST', C, completion({ prompt: { text: 'Hi' } }), 400],
  ['prompt list mixing strings and numbers', 'POST', C, completion({ prompt: ['Hi', 3] }), 400],
  ['empty prompt list', 'POST', C, completion({ prompt: [] }), 400],
  ['missing prompt', 'POST', C, JSON.stringify({ model: MODEL, max_tokens: 4 }), 400],
  ['max_tokens as a word', 'POST', C, completion({ max_tokens: 'ten' }), 400],
  ['max_tokens negative', 'POST', C, completion({ max_tokens: -1 }), 400],
  ['max_tokens zero', 'POST', C, completion({ max_tokens: 0 }), 400],
  ['max_tokens huge', 'POST', C, completion({ max_tokens: 1e12 }), 400],
  ['max_tokens fractional', 'POST', C, completion({ max_tokens: 2.5 }), 400],
  ['n = 0', 'POST', C, completion({ n: 0 }), 400],
  ['temperature -1', 'POST', C, completion({ temperature: -1 }), 400],
  ['temperature as a string', 'POST', C, completion({ temperature: 'hot' }), 400],
  ['top_p 2', 'POST', C, completion({ top_p: 2 }), 400],
  ['top_k -5', 'POST', C, completion({ top_k: -5 }), 400],
  ['min_p 2', 'POST', C, completion({ min_p: 2 }), 400],
  ['presence_penalty 5', 'POST', C, completion({ presence_penalty: 5 }), 400],
  ['frequency_penalty -3', 'POST', C, completion({ frequency_penalty: -3 }), 400],
  ['repetition_penalty 0', 'POST', C, completion({ repetition_penalty: 0 }), 400],
  ['logprobs 50', 'POST', C, completion({ logprobs: 50 }), 400],
  ['logprobs negative', 'POST', C, completion({ logprobs: -1 }), 400],
  ['seed as a string', 'POST', C, completion({ seed: 'abc' }), 400],
  ['stop of the wrong type', 'POST', C, completion({ stop: 5 }), 400],
  ['stream as a string', 'POST', C, completion({ stream: 'yes' }), 400],
  ['suffix (not supported)', 'POST', C, completion({ suffix: 'The end.' }), 400],
  ['logit_bias with a huge token id', 'POST', C, completion({ logit_bias: { 99999999: 5 } }), 400],
  ['logit_bias with a non-numeric key', 'POST', C, completion({ logit_bias: { abc: 5 } }), 400],
  ['stop_token_ids out of the vocabulary', 'POST', C, completion({ stop_token_ids: [100000] }), 400],
  ['prompt token id out of the vocabulary', 'POST', C, completion({ prompt: [1, 600, 3] }), 400],
  ['negative prompt token id', 'POST', C, completion({ prompt: [1, -5] }), 400],
  ['prompt longer than max_model_len', 'POST', C, completion({ prompt: Array.from({ length: 600 }, (_, i) => 10 + (i % 400)) }), 400],
  ['prompt + max_tokens over max_model_len', 'POST', C, completion({ prompt: Array.from({ length: 500 }, () => 50), max_tokens: 100 }), 400],
  ['invalid UTF-8 bytes in the body', 'POST', C,
    Buffer.concat([Buffer.from('{"model":"stories","prompt":"ab'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('","max_tokens":2}')]), 400],
  ['deeply nested JSON', 'POST', C, '{"model":"stories","prompt":' + '['.repeat(100000) + ']'.repeat(100000) + '}', 400],
  ['unknown model', 'POST', C, completion({ model: 'gpt-4-turbo' }), 404],
  ['unknown model (chat)', 'POST', CHAT, chat({ model: 'no-such-model' }), 404],
  ['chat: missing messages', 'POST', CHAT, JSON.stringify({ model: MODEL, max_tokens: 4 }), 400],
  ['chat: messages not a list', 'POST', CHAT, chat({ messages: 'hello' }), 400],
  ['chat: empty messages', 'POST', CHAT, chat({ messages: [] }), 400],
  ['chat: message without a role', 'POST', CHAT, chat({ messages: [{ content: 'Hi' }] }), 400],
  ['chat: role of the wrong type', 'POST', CHAT, chat({ messages: [{ role: 42, content: 'Hi' }] }), 400],
  ['chat: unknown role', 'POST', CHAT, chat({ messages: [{ role: 'wizard', content: 'Hi' }] }), 400],
  ['chat: content of the wrong type', 'POST', CHAT, chat({ messages: [{ role: 'user', content: 12 }] }), 400],
  ['chat: content part of an unknown type', 'POST', CHAT, chat({ messages: [{ role: 'user', content: [{ type: 'video', url: 'x' }] }] }), 400],
  ['chat: top_logprobs 50', 'POST', CHAT, chat({ logprobs: true, top_logprobs: 50 }), 400],
  ['chat: top_logprobs without logprobs', 'POST', CHAT, chat({ top_logprobs: 2 }), 400],
  ['chat: max_completion_tokens negative', 'POST', CHAT, chat({ max_completion_tokens: -4 }), 400],
  ['chat: n = 0', 'POST', CHAT, chat({ n: 0 }), 400],
  ['chat: stream_options.include_usage of the wrong type', 'POST', CHAT, chat({ stream_options: { include_usage: 'yes' }, stream: true }), 400],
  ['stream_options without stream', 'POST', C, completion({ stream_options: { include_usage: true } }), 400],
  ['tokenize without a prompt', 'POST', '/tokenize', JSON.stringify({ model: MODEL }), 400],
  ['detokenize ids out of the vocabulary', 'POST', '/detokenize', JSON.stringify({ model: MODEL, tokens: [1, 100000] }), 400],
  ['unknown route', 'POST', '/v1/no-such-endpoint', completion({}), 404],
  ['unknown route (GET)', 'GET', '/v2/models', undefined, 404],
  ['wrong method on /v1/completions', 'GET', C, undefined, 405],
  ['wrong method on /v1/models', 'DELETE', '/v1/models', undefined, 405],
  ['a 10 MB body', 'POST', C, '{"model":"stories","prompt":"' + 'a'.repeat(10 * 1024 * 1024) + '"}', 413],
  ['a body declared as 100 GB', 'POST', C, '{}', 413, { contentLength: 100 * 1024 * 1024 * 1024 }],
];

await part('malformed requests', async () => {
  for (const [name, method, path, body, want, opts] of cases) {
    const r = await send(method, path, body, opts || {});
    const wants = Array.isArray(want) ? want : [want];
    check(wants.includes(r.status), `${name}: status ${wants.join('|')}`, `got ${r.status}: ${r.text.slice(0, 300)}`);
    if (wants.includes(r.status) && r.status >= 400) checkErrorShape(r, r.status, name);
    await expectAlive(name);
  }
});

await part('accepted oddities', async () => {
  // unknown fields are accepted (vLLM ignores extra fields, with a warning)
  let r = await send('POST', C, completion({ foo_bar: 1, user: 'me', nested: { a: [1, 2] } }));
  check(r.status === 200, 'unknown fields are ignored (200)', `${r.status} ${r.text.slice(0, 300)}`);
  // no Content-Type header: parsed as JSON (FastAPI reads JSON bodies without one)
  r = await send('POST', C, completion({}), { contentType: '' });
  check(r.status === 200 || r.status === 415, 'no Content-Type: 200 (parsed) or 415', `${r.status} ${r.text.slice(0, 300)}`);
  if (r.status === 415) checkErrorShape(r, 415, 'no Content-Type');
  // a logit_bias value beyond [-100, 100] is clamped, not rejected (vLLM's SamplingParams.from_optional)
  r = await send('POST', C, completion({ logit_bias: { 5: 1000 }, max_tokens: 3, temperature: 0 }));
  check(r.status === 200, 'logit_bias 1000 is clamped to 100 (200)', `${r.status} ${r.text.slice(0, 300)}`);
  if (r.status === 200) {
    const one = await post(base, '/detokenize', { model: MODEL, tokens: [5, 5, 5] });
    check(r.json.choices[0].text === one.json.prompt, 'the biased token wins every step', [r.json.choices[0].text, one.json]);
  }
  // a charset parameter on the content type
  r = await send('POST', C, completion({}), { contentType: 'application/json; charset=utf-8' });
  check(r.status === 200, 'Content-Type with a charset parameter (200)', `${r.status} ${r.text.slice(0, 300)}`);
  // a body with a UTF-8 BOM is not JSON
  r = await send('POST', C, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(completion({}))]));
  check(r.status === 400 || r.status === 200, 'a BOM-prefixed body: 400 or 200', r.status);
  await expectAlive('accepted oddities');
});

await part('broken HTTP', async () => {
  // not HTTP at all: the server answers 400 (or just closes) and keeps serving
  let r = asResponse(await rawExchange(base, [Buffer.from('GARBAGE\r\n\r\n')], { timeoutMs: 10000 }));
  check(r.status === 400 || r.status === 0, 'a garbage request line: 400 or closed', `${r.status}`);
  await expectAlive('garbage request line');
  // a header line without a colon
  r = asResponse(await rawExchange(base, [Buffer.from(`POST ${C} HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n`)], { timeoutMs: 10000 }));
  check(r.status === 400 || r.status === 0, 'a malformed header: 400 or closed', `${r.status}`);
  await expectAlive('malformed header');
  // Content-Length larger than what is sent, then the client hangs up
  r = asResponse(await rawExchange(base, [httpBytes('POST', C, '{"model":', { contentLength: 100 })], { timeoutMs: 3000, endAfterWrite: true }));
  check(r.status === 0 || r.status === 400 || r.status === 408, 'a body cut short by the client: no crash', r.status);
  await expectAlive('body cut short');
});

await part('slow loris', async () => {
  // headers and part of the body, then nothing: 408 after the server's request timeout
  const t0 = Date.now();
  const body = completion({});
  const r = asResponse(await rawExchange(base,
    [httpBytes('POST', C, body.slice(0, 10), { contentLength: body.length })],
    { timeoutMs: (slowLorisSeconds + 15) * 1000 }));
  const secs = (Date.now() - t0) / 1000;
  check(r.status === 408, 'a stalled body gets 408', `got ${r.status} after ${secs.toFixed(1)} s: ${r.text.slice(0, 200)}`);
  if (r.status === 408) checkErrorShape(r, 408, 'slow loris');
  check(!r.timedOut, 'the server answered (or closed) before the client gave up', secs);
  await expectAlive('slow loris');
  // a slow client dribbling its headers does not block others meanwhile
  const dribble = rawExchange(base, Array.from({ length: 6 }, (_, k) => ({ data: k === 0 ? `POST ${C} HTTP/1.1\r\n` : `X-Slow-${k}: 1\r\n`, delayMs: 300 })), { timeoutMs: 5000 });
  await expectAlive('a dribbling client (concurrently)');
  await dribble;
});

check(normalOk >= cases.length, `the server answered a normal request after every case (${normalOk})`, normalOk);
finish('bad_input.mjs');
