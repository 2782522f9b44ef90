// disconnect.mjs: a client that goes away mid-request must not leave its request running.
// Starts long requests (ignore_eos, hundreds of tokens), reads a few chunks, destroys the
// socket, then watches /metrics until the request is gone: vllm:num_requests_running back
// to 0, vllmc:num_free_kv_blocks and vllm:kv_cache_usage_perc back to their idle values,
// vllmc:num_requests_in_flight 0, and an "abort" counted in vllm:request_success_total.
// Covers a streamed completion, a streamed chat completion, a non-streamed request whose
// client hangs up while it runs, and eight streams dropped at once.
//   node disconnect.mjs http://HOST:PORT
import net from 'node:net';

import { MODEL, baseUrl, check, finish, metrics, part, post, sleep } from './lib.mjs';

const base = baseUrl(2);
const url = new URL(base);

const idle = await metrics(base);
check(idle.status === 200, 'GET /metrics 200', idle.status);
const IDLE_FREE = idle.byName['vllmc:num_free_kv_blocks'];
const IDLE_USAGE = idle.byName['vllm:kv_cache_usage_perc'];
const TOTAL = idle.byName['vllmc:num_kv_blocks'];
check(typeof IDLE_USAGE === 'number', 'vllm:kv_cache_usage_perc is exported', idle.raw.slice(0, 300));
check(typeof IDLE_FREE === 'number' && IDLE_FREE === TOTAL, 'idle: every KV block free', [IDLE_FREE, TOTAL]);
check(idle.byName['vllm:num_requests_running'] === 0, 'idle: nothing running', idle.byName['vllm:num_requests_running']);

function abortCount(m) {
  for (const k of Object.keys(m)) if (k.startsWith('vllm:request_success_total{') && k.includes('finished_reason="abort"')) return m[k];
  return 0;
}

// Opens a raw connection, sends the request, resolves once `chunks` body pieces arrived
// (or any response bytes, for non-streamed requests after waitMs), returning the socket.
function startRequest(path, body, { minBodyBytes = 1, waitMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const sock = net.connect({ host: url.hostname, port: Number(url.port) }, () => {
      sock.write(`POST ${path} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
      if (waitMs) setTimeout(() => resolve({ sock, received: Buffer.concat(got).toString() }), waitMs);
    });
    const got = [];
    sock.on('data', (d) => {
      got.push(d);
      const text = Buffer.concat(got).toString();
      const sep = text.indexOf('\r\n\r\n');
      if (!waitMs && sep >= 0 && (text.match(/data: /g) || []).length >= minBodyBytes) resolve({ sock, received: text });
    });
    sock.on('error', (e) => reject(e));
    setTimeout(() => reject(new Error('no response within 60 s')), 60000).unref();
  });
}

// Polls /metrics until the server is idle again (or 15 s pass); returns the last snapshot.
async function waitIdle() {
  let m;
  for (let k = 0; k < 300; k++) {
    m = await metrics(base);
    const b = m.byName;
    if (b['vllm:num_requests_running'] === 0 && b['vllm:num_requests_waiting'] === 0 &&
        b['vllmc:num_free_kv_blocks'] === IDLE_FREE && (b['vllmc:num_requests_in_flight'] ?? 0) === 0) return m;
    await sleep(50);
  }
  return m;
}

function checkIdle(m, what, abortsBefore, abortsWanted) {
  const b = m.byName;
  check(b['vllm:num_requests_running'] === 0, `${what}: vllm:num_requests_running back to 0`, b['vllm:num_requests_running']);
  check(b['vllm:num_requests_waiting'] === 0, `${what}: nothing waiting`, b['vllm:num_requests_waiting']);
  check(b['vllmc:num_free_kv_blocks'] === IDLE_FREE, `${what}: free KV blocks back to idle`, [b['vllmc:num_free_kv_blocks'], IDLE_FREE]);
  check(b['vllm:kv_cache_usage_perc'] === IDLE_USAGE, `${what}: kv_cache_usage_perc back to idle`, [b['vllm:kv_cache_usage_perc'], IDLE_USAGE]);
  if ('vllmc:num_requests_in_flight' in b) check(b['vllmc:num_requests_in_flight'] === 0, `${what}: no request in flight`, b['vllmc:num_requests_in_flight']);
  check(abortCount(m) >= abortsBefore + abortsWanted, `${what}: counted as aborted`, [abortCount(m), abortsBefore, abortsWanted]);
}

async function checkRunning(what) {
  const m = await metrics(base);
  const b = m.byName;
  check(b['vllm:num_requests_running'] >= 1 || b['vllm:num_requests_waiting'] >= 1, `${what}: the request is running`, b);
  check(b['vllmc:num_free_kv_blocks'] < IDLE_FREE, `${what}: it holds KV blocks`, [b['vllmc:num_free_kv_blocks'], IDLE_FREE]);
}

// The tiny model decodes thousands of tokens a second: n samples of 480 tokens each keep a
// request busy long enough (well over the few milliseconds the client needs to hang up).
const LONG = { model: MODEL, max_tokens: 480, ignore_eos: true, temperature: 0.8, seed: 1, n: 32 };

await part('streamed completion dropped', async () => {
  const before = abortCount(await metrics(base));
  const { sock } = await startRequest('/v1/completions', { ...LONG, prompt: 'Once upon a time', stream: true }, { minBodyBytes: 3 });
  await checkRunning('streamed completion');
  sock.destroy();
  checkIdle(await waitIdle(), 'streamed completion', before, 1);
});

await part('streamed chat dropped', async () => {
  const before = abortCount(await metrics(base));
  const { sock } = await startRequest('/v1/chat/completions',
    { ...LONG, messages: [{ role: 'user', content: 'Tell me a long story.' }], stream: true }, { minBodyBytes: 2 });
  await checkRunning('streamed chat');
  sock.destroy();
  checkIdle(await waitIdle(), 'streamed chat', before, 1);
});

await part('non-streamed request dropped', async () => {
  const before = abortCount(await metrics(base));
  // dropped 50 ms after sending, while its samples are being generated
  const { sock } = await startRequest('/v1/completions', { ...LONG, prompt: 'The dog' }, { waitMs: 50 });
  sock.destroy();
  const m = await waitIdle();
  // it may have finished before the hang-up was noticed; either way nothing is left
  checkIdle(m, 'non-streamed', before, 0);
});

await part('eight streams dropped at once', async () => {
  const before = abortCount(await metrics(base));
  const socks = await Promise.all(Array.from({ length: 8 }, (_, i) =>
    startRequest('/v1/completions', { ...LONG, n: 8, prompt: `Story number ${i}:`, stream: true }, { minBodyBytes: 2 })));
  await checkRunning('eight streams');
  for (const { sock } of socks) sock.destroy();
  checkIdle(await waitIdle(), 'eight streams', before, 8);
});

await part('still serving', async () => {
  const r = await post(base, '/v1/completions', { model: MODEL, prompt: 'Once upon a time', max_tokens: 4 });
  check(r.status === 200, 'a normal request after the disconnects', `${r.status} ${r.text.slice(0, 200)}`);
});

finish('disconnect.mjs');
