// client.mjs: `vllmc serve` through the official OpenAI JavaScript client (openai, pinned in
// package.json): completions and chat, streamed and not, n=2, logprobs (completions
// logprobs=3; chat logprobs + top_logprobs), stop strings, stream_options.include_usage
// counts against /tokenize, /v1/models, seed reproducibility, tool_choice "required" and named
// tools (tool_calls, streamed through the client's stream helper), and API keys on a second
// server started with --api-key.
//   node client.mjs http://HOST:PORT [http://HOST:PORT2 KEY]
// Semantics checked follow OpenAI's API reference and vLLM's serving_completion.py /
// serving_chat.py (choice indices, usage chunk with empty choices, role-first chat deltas).
import OpenAI from 'openai';

import { MODEL, baseUrl, check, finish, get, part, post, streamRequest, tokenizeCount } from './lib.mjs';

const base = baseUrl(2);
const keyedBase = process.argv[3] ? process.argv[3].replace(/\/+$/, '') : null;
const apiKey = process.argv[4] || null;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const PROMPT = 'Once upon a time, there was a little girl named Lily.';

async function collectCompletionStream(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  const texts = {};
  const finish = {};
  let usage = null;
  let chunks = 0;
  let usageChunks = 0;
  for await (const chunk of stream) {
    chunks++;
    check(chunk.object === 'text_completion', 'stream chunk object is text_completion', chunk);
    if (chunk.usage) {
      usageChunks++;
      usage = chunk.usage;
      check(Array.isArray(chunk.choices) && chunk.choices.length === 0, 'usage chunk has empty choices', chunk);
    }
    for (const c of chunk.choices || []) {
      texts[c.index] = (texts[c.index] || '') + c.text;
      if (c.finish_reason) {
        check(!(c.index in finish), `choice ${c.index} finishes once`, chunk);
        finish[c.index] = c.finish_reason;
      }
    }
  }
  return { texts, finish, usage, chunks, usageChunks };
}

async function collectChatStream(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const texts = {};
  const finish = {};
  const roleSeen = {};
  let usage = null;
  const logprobs = {};
  for await (const chunk of stream) {
    check(chunk.object === 'chat.completion.chunk', 'chat chunk object', chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices || []) {
      if (!(c.index in roleSeen)) {
        roleSeen[c.index] = true;
        check(c.delta && c.delta.role === 'assistant', `choice ${c.index}: first delta carries role assistant`, chunk);
      }
      if (c.delta && typeof c.delta.content === 'string') texts[c.index] = (texts[c.index] || '') + c.delta.content;
      if (c.logprobs && c.logprobs.content) (logprobs[c.index] ||= []).push(...c.logprobs.content);
      if (c.finish_reason) {
        check(!(c.index in finish), `chat choice ${c.index} finishes once`, chunk);
        finish[c.index] = c.finish_reason;
      }
    }
  }
  return { texts, finish, usage, logprobs };
}

await part('models', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  check(ids.includes(MODEL), '/v1/models lists the served name', ids);
  const m = list.data.find((x) => x.id === MODEL);
  check(m && m.object === 'model', 'model object', m);
  check(m && typeof m.owned_by === 'string', 'model owned_by', m);
  const one = await get(base, '/v1/models');
  check(one.status === 200 && one.json && one.json.object === 'list', 'GET /v1/models is a list', one.text);
  check(one.json && one.json.data[0].max_model_len === 512, 'max_model_len 512 (stories260K)', one.json);
});

await part('health', async () => {
  const h = await get(base, '/health');
  check(h.status === 200, '/health 200', h.status);
  const v = await get(base, '/version');
  check(v.status === 200 && v.json && typeof v.json.version === 'string', '/version', v.text);
  const p = await get(base, '/ping');
  check(p.status === 200, '/ping 200', p.status);
});

await part('completions', async () => {
  const tok = await tokenizeCount(base, { prompt: PROMPT });
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0 });
  check(r.object === 'text_completion', 'object text_completion', r);
  check(typeof r.id === 'string' && r.id.startsWith('cmpl-'), 'id cmpl-...', r.id);
  check(r.model === MODEL, 'model echoed', r.model);
  check(Number.isInteger(r.created), 'created', r.created);
  check(r.choices.length === 1 && r.choices[0].index === 0, 'one choice', r.choices);
  const c = r.choices[0];
  check(typeof c.text === 'string' && c.text.length > 0, 'non-empty text', c);
  check(['length', 'stop'].includes(c.finish_reason), 'finish_reason', c.finish_reason);
  check(r.usage.prompt_tokens === tok.count, 'usage.prompt_tokens == /tokenize count', { usage: r.usage, tok: tok.count });
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'usage total', r.usage);
  if (c.finish_reason === 'length') check(r.usage.completion_tokens === 24, 'length: 24 tokens', r.usage);

  // streamed greedy = non-streamed greedy, with include_usage
  const s = await collectCompletionStream({
    model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, stream_options: { include_usage: true },
  });
  check(s.texts[0] === c.text, 'streamed text equals the non-streamed text', { stream: s.texts[0], whole: c.text });
  check(s.finish[0] === c.finish_reason, 'streamed finish_reason', s.finish);
  check(s.usageChunks === 1, 'exactly one usage chunk', s.usageChunks);
  check(s.usage && s.usage.prompt_tokens === tok.count, 'stream usage.prompt_tokens == /tokenize count', s.usage);
  check(s.usage && s.usage.completion_tokens === r.usage.completion_tokens, 'stream usage.completion_tokens', s.usage);

  // without include_usage: no usage chunk
  const s2 = await collectCompletionStream({ model: MODEL, prompt: PROMPT, max_tokens: 4, temperature: 0 });
  check(s2.usageChunks === 0, 'no usage chunk without include_usage', s2.usageChunks);

  // prompt as token ids, and a list of two prompts -> two choices
  const ids = tok.tokens;
  const r3 = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 24, temperature: 0 });
  check(r3.choices[0].text === c.text, 'token-id prompt gives the same greedy text', r3.choices[0].text);
  const r4 = await client.completions.create({
    model: MODEL, prompt: [PROMPT, 'The cat sat'], max_tokens: 8, temperature: 0,
  });
  check(r4.choices.length === 2, 'two prompts -> two choices', r4.choices.length);
  check(r4.choices.map((x) => x.index).join() === '0,1', 'choice indices 0,1', r4.choices);
  check(r4.choices[0].text === c.text.slice(0, r4.choices[0].text.length) || r4.choices[0].finish_reason === 'stop',
    'first prompt of the list: greedy prefix of the single run', r4.choices[0]);
});

await part('completions n=2', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, n: 2, temperature: 1, seed: 7 });
  check(r.choices.length === 2, 'n=2: two choices', r.choices.length);
  check(r.choices.map((x) => x.index).sort().join() === '0,1', 'indices 0 and 1', r.choices);
  check(r.usage.completion_tokens === r.choices.length * 16 || r.choices.some((x) => x.finish_reason === 'stop'),
    'n=2 usage counts both choices', r.usage);
  const s = await collectCompletionStream({
    model: MODEL, prompt: PROMPT, max_tokens: 16, n: 2, temperature: 1, seed: 7, stream_options: { include_usage: true },
  });
  check(Object.keys(s.texts).sort().join() === '0,1', 'stream n=2: chunks for both choices', Object.keys(s.texts));
  check(Object.keys(s.finish).sort().join() === '0,1', 'stream n=2: both choices finish', s.finish);
  check(s.texts[0] === r.choices.find((x) => x.index === 0).text && s.texts[1] === r.choices.find((x) => x.index === 1).text,
    'seeded n=2 stream equals the non-streamed choices', { s: s.texts, r: r.choices });
  check(s.usage && s.usage.completion_tokens === r.usage.completion_tokens, 'stream n=2 usage', s.usage);
});

await part('completions logprobs', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  check(lp && Array.isArray(lp.tokens), 'logprobs.tokens', lp);
  if (!lp || !Array.isArray(lp.tokens)) return;
  check(lp.tokens.length === r.usage.completion_tokens, 'one logprob entry per generated token', { n: lp.tokens.length, u: r.usage });
  check(lp.token_logprobs.length === lp.tokens.length && lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0),
    'token_logprobs are numbers <= 0', lp.token_logprobs);
  check(Array.isArray(lp.text_offset) && lp.text_offset.length === lp.tokens.length, 'text_offset per token', lp.text_offset);
  check(Array.isArray(lp.top_logprobs) && lp.top_logprobs.length === lp.tokens.length, 'top_logprobs per token', lp.top_logprobs);
  for (let i = 0; i < (lp.top_logprobs || []).length; i++) {
    const top = lp.top_logprobs[i];
    const vals = Object.values(top || {});
    // 3 alternatives (+ the sampled token when not among them); tokens decoding to the same string share a key
    check(vals.length >= 2 && vals.length <= 4, `top_logprobs[${i}] holds 3 (+ the sampled) entries`, top);
    // greedy: the sampled token is the most likely one
    check(Math.abs(Math.max(...vals) - lp.token_logprobs[i]) < 1e-4, `greedy token ${i} is the top logprob`, { top, lp: lp.token_logprobs[i] });
  }
  // streamed logprobs arrive with each chunk
  const stream = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 3, stream: true });
  const toks = [];
  for await (const chunk of stream) for (const c of chunk.choices) if (c.logprobs) toks.push(...c.logprobs.tokens);
  check(toks.join('') === lp.tokens.join(''), 'streamed logprob tokens equal the non-streamed ones', toks);
});

await part('chat', async () => {
  const messages = [
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me about a cat.' },
  ];
  const tok = await tokenizeCount(base, { messages, add_generation_prompt: true });
  const r = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 20, temperature: 0 });
  check(r.object === 'chat.completion', 'object chat.completion', r);
  check(typeof r.id === 'string' && r.id.startsWith('chatcmpl-'), 'id chatcmpl-...', r.id);
  const c = r.choices[0];
  check(c.message.role === 'assistant', 'message role assistant', c.message);
  check(typeof c.message.content === 'string' && c.message.content.length > 0, 'non-empty content', c.message);
  check(['length', 'stop'].includes(c.finish_reason), 'finish_reason', c.finish_reason);
  check(r.usage.prompt_tokens === tok.count, 'chat usage.prompt_tokens == /tokenize(messages) count', { u: r.usage, t: tok.count });
  if (c.finish_reason === 'length') check(r.usage.completion_tokens === 20, 'max_completion_tokens honoured', r.usage);

  const s = await collectChatStream({ model: MODEL, messages, max_tokens: 20, temperature: 0, stream_options: { include_usage: true } });
  check(s.texts[0] === c.message.content, 'streamed chat content equals the non-streamed one', { s: s.texts[0], r: c.message.content });
  check(s.finish[0] === c.finish_reason, 'streamed chat finish_reason', s.finish);
  check(s.usage && s.usage.prompt_tokens === tok.count, 'stream chat usage.prompt_tokens == /tokenize count', s.usage);
  check(s.usage && s.usage.completion_tokens === r.usage.completion_tokens, 'stream chat completion_tokens', s.usage);

  // content as a list of text parts: the parts joined by "\n" (vLLM's chat_utils.py
  // _parse_chat_message_content_parts for templates that take string content)
  const joined = [{ role: 'system', content: 'You tell short stories.' }, { role: 'user', content: 'Tell me\nabout a cat.' }];
  const parts = [{ role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: [{ type: 'text', text: 'Tell me' }, { type: 'text', text: 'about a cat.' }] }];
  const tj = await tokenizeCount(base, { messages: joined, add_generation_prompt: true });
  const tp = await tokenizeCount(base, { messages: parts, add_generation_prompt: true });
  check(tj.tokens.join() === tp.tokens.join(), 'list-of-parts content renders as the parts joined by newlines', { joined: tj.tokens, parts: tp.tokens });
  const r1 = await client.chat.completions.create({ model: MODEL, messages: joined, max_tokens: 20, temperature: 0 });
  const r2 = await client.chat.completions.create({ model: MODEL, messages: parts, max_tokens: 20, temperature: 0 });
  check(r2.choices[0].message.content === r1.choices[0].message.content, 'list-of-parts content = joined string content', [r1.choices[0].message, r2.choices[0].message]);

  // n=2 chat
  const r3 = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, n: 2, temperature: 1, seed: 3 });
  check(r3.choices.length === 2 && r3.choices.map((x) => x.index).sort().join() === '0,1', 'chat n=2', r3.choices);
  const s3 = await collectChatStream({ model: MODEL, messages, max_tokens: 8, n: 2, temperature: 1, seed: 3 });
  check(Object.keys(s3.finish).sort().join() === '0,1', 'chat stream n=2: both finish', s3.finish);
  check(s3.texts[0] === r3.choices.find((x) => x.index === 0).message.content, 'chat seeded n=2 stream = non-stream', { s: s3.texts, r: r3.choices });
});

await part('chat logprobs', async () => {
  const messages = [{ role: 'user', content: 'Once upon a time' }];
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs && r.choices[0].logprobs.content;
  check(Array.isArray(content) && content.length === r.usage.completion_tokens, 'logprobs.content per token', r.choices[0].logprobs);
  for (const e of content || []) {
    check(typeof e.token === 'string' && typeof e.logprob === 'number' && e.logprob <= 0, 'entry token/logprob', e);
    check(Array.isArray(e.bytes), 'entry bytes', e);
    check(Array.isArray(e.top_logprobs) && e.top_logprobs.length === 2, 'two top_logprobs', e);
    if (Array.isArray(e.top_logprobs) && e.top_logprobs.length) check(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, 'greedy = top 1', e);
  }
  const s = await collectChatStream({ model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
  check((s.logprobs[0] || []).map((e) => e.token).join('') === (content || []).map((e) => e.token).join(''), 'streamed chat logprobs', s.logprobs);
  // logprobs: true alone: no alternatives
  const r2 = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 3, temperature: 0, logprobs: true });
  const c2 = r2.choices[0].logprobs && r2.choices[0].logprobs.content;
  check(Array.isArray(c2) && c2.every((e) => Array.isArray(e.top_logprobs) && e.top_logprobs.length === 0), 'logprobs without top_logprobs', c2);
});

await part('stop strings', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0, ignore_eos: true });
  const text = r.choices[0].text;
  // a word from the middle of the greedy output becomes the stop string
  const words = text.split(/\s+/).filter((w) => /^[a-z]{3,}$/.test(w));
  check(words.length > 0, 'greedy text has words to stop at', text);
  if (!words.length) return;
  const stop = ' ' + words[Math.floor(words.length / 2)];
  const at = text.indexOf(stop);
  check(at >= 0, 'stop word found', { text, stop });
  const r2 = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0, stop: [stop, 'zzzzqqq'] });
  check(r2.choices[0].finish_reason === 'stop', 'finish_reason stop', r2.choices[0]);
  check(r2.choices[0].text === text.slice(0, at), 'text ends right before the stop string', { got: r2.choices[0].text, want: text.slice(0, at) });
  const s = await collectCompletionStream({ model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0, stop });
  check(s.texts[0] === text.slice(0, at) && s.finish[0] === 'stop', 'streamed stop: same text and reason', s);
  const r3 = await client.completions.create({
    model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 0, stop, include_stop_str_in_output: true,
  });
  check(r3.choices[0].text === text.slice(0, at + stop.length), 'include_stop_str_in_output keeps it', r3.choices[0].text);
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 48, temperature: 0, stop: ['.'] });
  check(!c.choices[0].message.content.includes('.') , 'chat stop "." : no period in the content', c.choices[0].message.content);
});

await part('seed', async () => {
  const params = { model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 1.0, seed: 42 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  check(a.choices[0].text === b.choices[0].text, 'same seed, same text', [a.choices[0].text, b.choices[0].text]);
  const c = await client.completions.create({ ...params, seed: 43 });
  check(c.choices[0].text !== a.choices[0].text, 'another seed, another text', c.choices[0].text);
  const ca = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 24, temperature: 1, seed: 5 });
  const cb = await collectChatStream({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 24, temperature: 1, seed: 5 });
  check(ca.choices[0].message.content === cb.texts[0], 'chat: same seed streamed and not', [ca.choices[0].message.content, cb.texts[0]]);
});

await part('raw stream framing', async () => {
  const s = await streamRequest(base, '/v1/completions', { model: MODEL, prompt: PROMPT, max_tokens: 5, stream: true });
  check(s.status === 200, 'status 200', s.status);
  check(/text\/event-stream/.test(s.contentType), 'Content-Type text/event-stream', s.contentType);
  check(s.problems.length === 0, 'well-formed SSE', s.problems);
  check(s.events[s.events.length - 1] === '[DONE]', 'data: [DONE] last', s.events.slice(-2));
});

await part('tool calls', async () => {
  // tool_choice "required" and a named tool: the grammar forces the JSON, so even stories260K gives valid calls;
  // the client's stream helper rebuilds the streamed calls (first delta: id, type, name; then argument fragments)
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { unit: { enum: ['c', 'f'] } }, required: ['unit'], additionalProperties: false } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'local'] } }, required: ['zone'], additionalProperties: false } } },
  ];
  // no blanks, and stories260K's comma tokens (432, 47) biased away so the array closes after one element
  const params = { model: MODEL, messages: [{ role: 'user', content: 'What now?' }], max_tokens: 120, seed: 7, tools,
    structured_outputs: { disable_any_whitespace: true }, logit_bias: { 432: -100, 47: -100 } };
  const cases = [['required', 'required', 'tool_calls'], ['named', { type: 'function', function: { name: 'get_weather' } }, 'stop']];
  for (const [what, tool_choice, finish] of cases) {
    const r = await client.chat.completions.create({ ...params, tool_choice });
    const c = r.choices[0];
    const calls = c.message.tool_calls || [];
    check(c.finish_reason === finish, `${what}: finish_reason ${finish}`, c);
    check(c.message.content === '' && calls.length >= 1, `${what}: content "" and tool_calls`, c.message);
    for (const tc of calls) {
      check(/^chatcmpl-tool-[0-9a-f]{32}$/.test(tc.id) && tc.type === 'function', `${what}: call id and type`, tc);
      let args = null;
      try { args = JSON.parse(tc.function.arguments); } catch (e) { args = null; }
      const ok = tc.function.name === 'get_weather' ? args && ['c', 'f'].includes(args.unit) : args && ['utc', 'local'].includes(args.zone);
      check(ok && (what === 'required' || tc.function.name === 'get_weather'), `${what}: arguments fit the tool`, tc);
    }
    const stream = client.chat.completions.stream({ ...params, tool_choice });
    const final = await stream.finalChatCompletion();
    const fc = final.choices[0];
    const key = (tcs) => (tcs || []).map((t) => `${t.function.name}(${t.function.arguments})`).join(';');
    check(fc.finish_reason === finish, `${what} streamed: finish_reason ${finish}`, fc);
    check(key(fc.message.tool_calls) === key(calls), `${what}: streamed calls = non-streamed (same seed)`, { s: fc.message.tool_calls, r: calls });
    check((fc.message.tool_calls || []).every((t) => /^chatcmpl-tool-[0-9a-f]{32}$/.test(t.id)), `${what} streamed: ids`, fc.message);
  }
});

if (keyedBase && apiKey) {
  await part('api key', async () => {
    const noKey = await post(keyedBase, '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 2 });
    check(noKey.status === 401, 'no key: 401', noKey.status);
    const wrong = await post(keyedBase, '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 2 },
      { headers: { Authorization: 'Bearer wrong-key' } });
    check(wrong.status === 401, 'wrong key: 401', wrong.status);
    check(wrong.json && 'error' in wrong.json, '401 body has "error"', wrong.text);
    const lower = await post(keyedBase, '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: 2 },
      { headers: { Authorization: `bearer ${apiKey}x` } });
    check(lower.status === 401, 'key with a suffix: 401', lower.status);
    const models = await get(keyedBase, '/v1/models');
    check(models.status === 401, 'GET /v1/models without key: 401', models.status);
    const health = await get(keyedBase, '/health');
    check(health.status === 200, '/health needs no key (vLLM protects /v1 only)', health.status);

    const bad = new OpenAI({ baseURL: `${keyedBase}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
    try {
      await bad.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 });
      check(false, 'openai client with a wrong key must throw');
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError || e.status === 401, 'openai client: AuthenticationError (401)', String(e));
    }
    const good = new OpenAI({ baseURL: `${keyedBase}/v1`, apiKey, maxRetries: 0 });
    const r = await good.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 2 });
    check(r.choices.length === 1, 'right key: 200 with a completion', r);
    const list = await good.models.list();
    check(list.data.some((m) => m.id === MODEL), 'right key: models listed', list.data);
    const chat = await good.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
    check(chat.choices.length === 1, 'right key: chat works', chat);
  });
}

finish('client.mjs');
