// lib.mjs: helpers shared by the `vllmc serve` tests (client.mjs, concurrency.mjs,
// bad_input.mjs, disconnect.mjs): check/finish counters, raw HTTP over node:net and
// node:http (for requests the openai client cannot send), a Server-Sent Events reader,
// /metrics parsing and the OpenAI error-shape check. The server under test is started by
// the C wrappers tests/server/test_server_*.c, which pass its base URL as argv[2].
import http from 'node:http';
import net from 'node:net';

export const MODEL = 'stories';
let checks = 0;
let failures = 0;
let section = '';

export function setSection(name) {
  section = name;
}

// Counts a check; prints the failure (with the current section) and keeps going.
export function check(cond, msg, detail) {
  checks++;
  if (!cond) {
    failures++;
    let extra = '';
    if (detail !== undefined) {
      extra = typeof detail === 'string' ? detail : JSON.stringify(detail);
      if (extra && extra.length > 600) extra = extra.slice(0, 600) + '...';
    }
    console.error(`FAIL [${section}] ${msg}${extra ? ': ' + extra : ''}`);
  }
  return !!cond;
}

export function finish(name) {
  console.error(`${name}: ${checks} checks, ${failures} failures`);
  process.exit(failures ? 1 : 0);
}

// Runs fn, turning an exception into a failed check (so one broken part does not hide the rest).
export async function part(name, fn) {
  setSection(name);
  try {
    await fn();
  } catch (e) {
    check(false, `threw ${e && e.name}`, (e && (e.stack || e.message)) || String(e));
  }
}

export function baseUrl(argIndex = 2) {
  const u = process.argv[argIndex];
  if (!u || !u.startsWith('http://')) {
    console.error(`usage: node ${process.argv[1]} http://HOST:PORT ...`);
    process.exit(2);
  }
  return u.replace(/\/+$/, '');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One request with node:http: {status, headers, text, json} (json null when not JSON).
export function request(base, method, path, { body, headers = {}, timeoutMs = 60000 } = {}) {
  const url = new URL(base + path);
  let payload = body;
  const hdrs = { ...headers };
  if (body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body)) {
    payload = JSON.stringify(body);
    if (!Object.keys(hdrs).some((k) => k.toLowerCase() === 'content-type')) hdrs['Content-Type'] = 'application/json';
  }
  if (payload !== undefined) hdrs['Content-Length'] = Buffer.byteLength(payload);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers: hdrs, agent: false },
      (res) => {
        const parts = [];
        res.on('data', (d) => parts.push(d));
        res.on('end', () => {
          const text = Buffer.concat(parts).toString('utf8');
          let json = null;
          try {
            json = JSON.parse(text);
          } catch {
            json = null;
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path}: timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

export const post = (base, path, body, opts = {}) => request(base, 'POST', path, { ...opts, body });
export const get = (base, path, opts = {}) => request(base, 'GET', path, opts);

// Sends raw bytes over a TCP socket and collects everything the server sends until it
// closes (or the response is complete, or timeoutMs passes). Returns
// {status, head, body, closed, timedOut}; status 0 when no status line came back.
// writes: an array of Buffers/strings, or {data, delayMs} objects sent in order.
export function rawExchange(base, writes, { timeoutMs = 15000, endAfterWrite = false } = {}) {
  const url = new URL(base);
  return new Promise((resolve) => {
    const sock = net.connect({ host: url.hostname, port: Number(url.port) });
    const chunks = [];
    let done = false;
    let timedOut = false;
    const finishUp = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const buf = Buffer.concat(chunks);
      const sep = buf.indexOf('\r\n\r\n');
      const head = sep >= 0 ? buf.subarray(0, sep).toString('latin1') : buf.toString('latin1');
      let body = sep >= 0 ? buf.subarray(sep + 4) : Buffer.alloc(0);
      if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) body = dechunk(body);
      const m = /^HTTP\/1\.\d (\d{3})/.exec(head);
      resolve({ status: m ? Number(m[1]) : 0, head, body: body.toString('utf8'), closed, timedOut });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      finishUp(false);
    }, timeoutMs);
    sock.on('data', (d) => {
      chunks.push(d);
      // a complete Content-Length response ends the exchange without waiting for close
      const buf = Buffer.concat(chunks);
      const sep = buf.indexOf('\r\n\r\n');
      if (sep >= 0) {
        const head = buf.subarray(0, sep).toString('latin1');
        const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        if (cl && buf.length - sep - 4 >= Number(cl[1])) finishUp(false);
        else if (/\r\ntransfer-encoding:\s*chunked/i.test(head) && buf.includes('\r\n0\r\n\r\n', sep)) finishUp(false);
      }
    });
    sock.on('close', () => finishUp(true));
    sock.on('error', () => finishUp(true));
    sock.on('connect', async () => {
      for (const w of writes) {
        if (done) return;
        if (w && typeof w === 'object' && !Buffer.isBuffer(w) && 'data' in w) {
          if (w.delayMs) await sleep(w.delayMs);
          if (!done && !sock.destroyed) sock.write(w.data);
        } else if (!sock.destroyed) {
          sock.write(w);
        }
      }
      if (endAfterWrite && !sock.destroyed) sock.end();
    });
  });
}

// Decodes a chunked body (lenient: stops at the first malformed size line).
export function dechunk(buf) {
  const out = [];
  let pos = 0;
  for (;;) {
    const nl = buf.indexOf('\r\n', pos);
    if (nl < 0) break;
    const size = parseInt(buf.subarray(pos, nl).toString('latin1').split(';')[0].trim(), 16);
    if (!Number.isFinite(size) || size <= 0) break;
    out.push(buf.subarray(nl + 2, nl + 2 + size));
    pos = nl + 2 + size + 2;
  }
  return Buffer.concat(out);
}

// Parses an SSE body into its events' data strings (WHATWG rules: "data:" lines joined by
// "\n", ":" comments ignored, a blank line ends an event). Also reports format problems.
export function parseSse(text) {
  const events = [];
  const problems = [];
  let data = null;
  const lines = text.split('\n');
  const last = lines.pop(); // after the final "\n": must be empty for a well-terminated stream
  if (last !== '') problems.push(`stream does not end with a newline: ${JSON.stringify(last.slice(0, 80))}`);
  for (let line of lines) {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      if (data !== null) events.push(data);
      data = null;
      continue;
    }
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data = data === null ? value : data + '\n' + value;
    else problems.push(`unexpected SSE field ${JSON.stringify(field)}`);
  }
  if (data !== null) problems.push('last event not terminated by a blank line');
  return { events, problems };
}

// Streams a request with fetch and returns {status, contentType, events, problems, text}.
export async function streamRequest(base, path, body, { headers = {}, signal } = {}) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal,
  });
  const text = await res.text();
  const { events, problems } = parseSse(text);
  return { status: res.status, contentType: res.headers.get('content-type') || '', events, problems, text };
}

// Checks OpenAI's error shape {"error": {"message", "type", "param", "code"}} for status.
export function checkErrorShape(res, status, what) {
  const e = res.json && res.json.error;
  check(res.json !== null, `${what}: error body is JSON`, res.text);
  check(e && typeof e === 'object', `${what}: body has an "error" object`, res.text);
  if (!e || typeof e !== 'object') return;
  check(typeof e.message === 'string' && e.message.length > 0, `${what}: error.message is a non-empty string`, e);
  check(typeof e.type === 'string' && e.type.length > 0, `${what}: error.type is a string`, e);
  check('param' in e && (e.param === null || typeof e.param === 'string'), `${what}: error.param is null or a string`, e);
  check(e.code === status, `${what}: error.code is ${status}`, e);
  const ct = (res.headers && res.headers['content-type']) || '';
  check(/application\/json/.test(ct), `${what}: Content-Type application/json`, ct);
}

// GET /metrics as {name{labels}: value} plus name -> first value.
export async function metrics(base) {
  const res = await get(base, '/metrics');
  const out = { raw: res.text, byName: {}, status: res.status };
  for (const line of res.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = Number(m[3]);
    out[m[1] + (m[2] || '')] = v;
    if (!(m[1] in out.byName)) out.byName[m[1]] = v;
  }
  return out;
}

// Tokenize through the server: {prompt} or {messages, add_generation_prompt}.
export async function tokenizeCount(base, body) {
  const res = await post(base, '/tokenize', { model: MODEL, ...body });
  if (res.status !== 200 || !res.json || typeof res.json.count !== 'number') {
    throw new Error(`/tokenize failed: ${res.status} ${res.text}`);
  }
  return res.json;
}
