// concurrency.mjs: 64 streaming chat completions sent at once to `vllmc serve` (greedy,
// temperature 0, different prompts and lengths). Every stream must complete and be
// well-formed as vLLM's serving_chat.py streams it: Content-Type text/event-stream, every
// event a chat.completion.chunk with one id, the first delta carrying role "assistant",
// then content deltas without a role, exactly one finish_reason (on the last choice chunk),
// the include_usage chunk after it, and "data: [DONE]" last. The outputs must equal the
// same requests sent one at a time (continuous batching must not change greedy results),
// and a few are also compared with the openai client's non-streamed answer.
//   node concurrency.mjs http://HOST:PORT
import OpenAI from 'openai';

import { MODEL, baseUrl, check, finish, metrics, part, sleep, streamRequest } from './lib.mjs';

const base = baseUrl(2);
const N = 64;
const openers = [
  'Once upon a time', 'The little dog', 'Tom and Sue went to the park', 'A big red ball',
  'Lily wanted to play', 'The sun was hot', 'Ben saw a bird', 'There was a tree',
];
const asks = ['Tell me a story.', 'What happened next?', 'Who was there?', 'Why?'];

function requestFor(i) {
  const messages = [{ role: 'user', content: `${openers[i % openers.length]}. ${asks[(i >> 3) % asks.length]} #${i}` }];
  if (i % 5 === 0) messages.unshift({ role: 'system', content: 'You are a storyteller.' });
  if (i % 7 === 0) messages.push({ role: 'assistant', content: 'Once upon a time,' }, { role: 'user', content: 'Go on.' });
  return {
    model: MODEL,
    messages,
    max_tokens: 8 + ((i * 37) % 57), // 8 .. 64
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ...(i % 3 === 0 ? { ignore_eos: true } : {}),
  };
}

// Checks one stream's framing; returns {content, finishReason, completionTokens} or null.
function checkStream(i, s) {
  const what = `request ${i}`;
  if (!check(s.status === 200, `${what}: status 200`, s.text.slice(0, 300))) return null;
  check(/^text\/event-stream/.test(s.contentType), `${what}: Content-Type text/event-stream`, s.contentType);
  check(s.problems.length === 0, `${what}: well-formed SSE`, s.problems);
  const ev = s.events;
  check(ev.length >= 3, `${what}: at least role, finish and [DONE] events`, ev);
  check(ev[ev.length - 1] === '[DONE]', `${what}: [DONE] is last`, ev.slice(-2));
  check(ev.filter((e) => e === '[DONE]').length === 1, `${what}: one [DONE]`, ev.length);
  let content = '';
  let finishReason = null;
  let finishAt = -1;
  let usage = null;
  let usageAt = -1;
  let id = null;
  let firstChoice = true;
  for (let k = 0; k < ev.length - 1; k++) {
    let c;
    try {
      c = JSON.parse(ev[k]);
    } catch {
      check(false, `${what}: event ${k} is JSON`, ev[k]);
      continue;
    }
    check(c.object === 'chat.completion.chunk', `${what}: event ${k} object`, c);
    check(c.model === MODEL, `${what}: event ${k} model`, c.model);
    if (id === null) id = c.id;
    check(c.id === id && typeof id === 'string' && id.startsWith('chatcmpl-'), `${what}: one chatcmpl id`, [id, c.id]);
    if (c.usage) {
      usage = c.usage;
      usageAt = k;
      check(Array.isArray(c.choices) && c.choices.length === 0, `${what}: usage chunk has no choices`, c);
      continue;
    }
    check(Array.isArray(c.choices) && c.choices.length === 1, `${what}: event ${k} has one choice`, c);
    const ch = c.choices[0];
    check(ch.index === 0, `${what}: choice index 0`, ch);
    check(finishAt < 0, `${what}: no choice chunk after the finish_reason`, c);
    if (firstChoice) {
      check(ch.delta && ch.delta.role === 'assistant', `${what}: first delta has role assistant`, c);
      firstChoice = false;
    } else {
      check(!ch.delta || ch.delta.role === undefined, `${what}: later deltas carry no role`, c);
    }
    if (ch.delta && ch.delta.content !== undefined && ch.delta.content !== null) {
      check(typeof ch.delta.content === 'string', `${what}: content is a string`, ch.delta);
      content += ch.delta.content;
    }
    if (ch.finish_reason !== null && ch.finish_reason !== undefined) {
      check(['stop', 'length'].includes(ch.finish_reason), `${what}: finish_reason stop|length`, ch);
      finishReason = ch.finish_reason;
      finishAt = k;
    }
  }
  check(finishAt >= 0, `${what}: a finish_reason`, ev.slice(-3));
  check(usage !== null && usageAt > finishAt, `${what}: usage chunk after the finish`, { usageAt, finishAt });
  const req = requestFor(i);
  if (usage) {
    if (finishReason === 'length') check(usage.completion_tokens === req.max_tokens, `${what}: length = max_tokens`, usage);
    else check(usage.completion_tokens <= req.max_tokens, `${what}: at most max_tokens`, usage);
    if (req.ignore_eos) check(finishReason === 'length', `${what}: ignore_eos runs to max_tokens`, finishReason);
  }
  return { content, finishReason, completionTokens: usage ? usage.completion_tokens : -1 };
}

let concurrent = [];
// The sum over the engines (-dp N: one series per engine) of a per-engine family.
function sumOver(m, name) {
  let total = 0;
  for (const [k, v] of Object.entries(m)) if (k.startsWith(`${name}{`)) total += v;
  return total;
}

await part('64 concurrent streams', async () => {
  const before = await metrics(base);
  const t0 = Date.now();
  let peakRunning = 0;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      try {
        const m = await metrics(base);
        /* every engine's gauge summed (-dp N: one line per engine; the balancer may have put the burst on any) */
        peakRunning = Math.max(peakRunning, sumOver(m, 'vllm:num_requests_running'));
      } catch {
        /* the server may be busy; the next poll retries */
      }
      await sleep(20);
    }
  })();
  const results = await Promise.all(
    Array.from({ length: N }, (_, i) => streamRequest(base, '/v1/chat/completions', requestFor(i)).catch((e) => ({ error: e }))),
  );
  polling = false;
  await poller;
  for (let i = 0; i < N; i++) {
    const s = results[i];
    if (!check(!s.error, `request ${i} completed`, s.error && String(s.error))) {
      concurrent.push(null);
      continue;
    }
    concurrent.push(checkStream(i, s));
  }
  const after = await metrics(base);
  /* Batching, read from counters rather than a poller that may miss a short burst (a CI run under load
   * once saw 0): run one at a time, a request takes a step per token it generates (its prefill step
   * samples the first), so the burst would take at least as many steps as tokens; batched, far fewer. */
  const steps = sumOver(after, 'vllmc:engine_steps_total') - sumOver(before, 'vllmc:engine_steps_total');
  const generated = sumOver(after, 'vllm:generation_tokens_total') - sumOver(before, 'vllm:generation_tokens_total');
  console.error(`64 concurrent streams: ${Date.now() - t0} ms, ${steps} engine steps for ${generated} tokens, ` +
    `peak vllm:num_requests_running seen ${peakRunning}`);
  check(generated > 0 && steps > 0 && steps < generated, 'requests ran batched together (fewer engine steps than tokens)',
    { steps, generated, peakRunning });
});

await part('same requests one at a time', async () => {
  for (let i = 0; i < N; i++) {
    const s = await streamRequest(base, '/v1/chat/completions', requestFor(i));
    const one = checkStream(i, s);
    const many = concurrent[i];
    if (!one || !many) continue;
    check(one.content === many.content, `request ${i}: concurrent output equals the sequential one`,
      { concurrent: many.content, sequential: one.content });
    check(one.finishReason === many.finishReason, `request ${i}: same finish_reason`, [many.finishReason, one.finishReason]);
    check(one.completionTokens === many.completionTokens, `request ${i}: same completion_tokens`, [many.completionTokens, one.completionTokens]);
  }
});

await part('non-streamed answers agree', async () => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  for (const i of [0, 1, 7, 21, 63]) {
    const { stream, stream_options, ...req } = requestFor(i); // eslint-disable-line no-unused-vars
    const r = await client.chat.completions.create(req);
    if (!concurrent[i]) continue;
    check(r.choices[0].message.content === concurrent[i].content, `request ${i}: non-streamed content equals the stream`,
      { stream: concurrent[i].content, whole: r.choices[0].message.content });
    check(r.choices[0].finish_reason === concurrent[i].finishReason, `request ${i}: non-streamed finish_reason`, r.choices[0]);
  }
});

await part('idle afterwards', async () => {
  let m;
  for (let k = 0; k < 100; k++) {
    m = await metrics(base);
    if ((m.byName['vllm:num_requests_running'] || 0) === 0 && (m.byName['vllm:num_requests_waiting'] || 0) === 0) break;
    await sleep(50);
  }
  check(m.byName['vllm:num_requests_running'] === 0, 'no request left running', m.byName['vllm:num_requests_running']);
  check(m.byName['vllm:num_requests_waiting'] === 0, 'no request left waiting', m.byName['vllm:num_requests_waiting']);
  if ('vllmc:num_free_kv_blocks' in m.byName) {
    check(m.byName['vllmc:num_free_kv_blocks'] === m.byName['vllmc:num_kv_blocks'], 'every KV block free again',
      [m.byName['vllmc:num_free_kv_blocks'], m.byName['vllmc:num_kv_blocks']]);
  }
});

// VLLMC_DP=N: the server runs N data-parallel replicas; each served some of the 64 and has its series
if (process.env.VLLMC_DP) {
  await part('data-parallel replicas', async () => {
    const m = await metrics(base);
    for (let e = 0; e < Number(process.env.VLLMC_DP); e++) {
      const gen = m[`vllm:generation_tokens_total{engine="${e}",model_name="${MODEL}"}`];
      check(gen > 0, `engine ${e} generated tokens (its own series)`, gen);
      check(m[`vllm:num_requests_running{engine="${e}",model_name="${MODEL}"}`] === 0, `engine ${e} idle`,
        m[`vllm:num_requests_running{engine="${e}",model_name="${MODEL}"}`]);
    }
  });
}

finish('concurrency.mjs');
