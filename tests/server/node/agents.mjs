// agents.mjs: the agent-facing APIs end to end through the official clients against `vllmc serve` on the
// random-weight fixture tests/fixtures/models/json_tiny (a 135-token character vocabulary: its text is random
// characters; tools/make_json_tiny.py), started by tests/server/test_server_agents.c with
//   --max-model-len 4096 --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser hermes
//   --api-key test-key
//   node agents.mjs http://HOST:PORT      (AGENTS_SEED: another seed base; AGENTS_ROUNDS: seeds of the
//                                          streamed-vs-not tool-call comparisons, 16)
// OpenAI Responses API (openai client): POST /v1/responses (plain, input items, instructions, reasoning items,
// streamed with responses.stream() and create({stream: true}), tools forced by tool_choice required / named,
// parallel_tool_calls, previous_response_id, function_call_output turns, text.format json_schema / json_object),
// GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, errors in OpenAI's shape, the API key.
// Anthropic Messages API (@anthropic-ai/sdk): POST /v1/messages (system string / blocks, multi-turn, stop
// sequences, thinking blocks, streamed with messages.stream(), tool_use forced by tool_choice any / tool,
// disable_parallel_tool_use, tool_result turns), POST /v1/messages/count_tokens, errors in Anthropic's shape,
// x-api-key and Bearer keys.
// With --reasoning-parser qwen3 and no </think> in the output, the whole output is reasoning: enable_thinking
// false (chat_template_kwargs, a vLLM extension both endpoints take; Responses also reasoning.effort "none")
// makes it plain text (tool calls too). Tool arguments are forced by the JSON grammar (an object with one enum
// property, no whitespace: structured_outputs.disable_any_whitespace), so even this model gives valid calls;
// tool_choice required writes a random number of them, and the streamed calls must equal the unstreamed ones of
// the same seed. Lengths and texts are random: the checks are strict on shapes and tolerant on contents.
// What the clients need of a stream (checked here on the wire too):
//   openai responses.stream(): response.created first (its response's output empty: the SDK appends the
//     output_item.added items to it and indexes them by output_index), content_part.added before the text or
//     reasoning_text deltas of a part (a reasoning item's part of type reasoning_text), the final response in
//     response.completed (it replaces the accumulated one); finalResponse().output_text is not set by openai
//     6.30.1 on streams (openai-node #1662), so the text is read from the output items;
//   anthropic messages.stream(): every event needs an "event:" line (events without one are dropped), message_start
//     first, content_block_start with text "" / thinking "" / input {}, message_delta with usage.output_tokens,
//     message_stop last (finalMessage() fails without it). @anthropic-ai/sdk 1.x sends apiKey as
//     "Authorization: Bearer", not x-api-key: x-api-key is checked with raw requests.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { baseUrl, check, checkErrorShape, finish, get, part, post, request } from './lib.mjs';

const MODEL = 'json_tiny';
const KEY = 'test-key';
const base = baseUrl(2);
const oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 180000 });
const ant = new Anthropic({ baseURL: base, apiKey: KEY, maxRetries: 0, timeout: 180000 });
const AUTH = { Authorization: `Bearer ${KEY}` };

const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };
const COMPACT = { structured_outputs: { disable_any_whitespace: true } };
const UNIT_SCHEMA = {
  type: 'object',
  properties: { unit: { enum: ['c', 'f'] } },
  required: ['unit'],
  additionalProperties: false,
};
const RESP_TOOLS = [{ type: 'function', name: 'get_weather', description: 'w', parameters: UNIT_SCHEMA }];
const ANT_TOOLS = [{ name: 'get_weather', description: 'w', input_schema: UNIT_SCHEMA }];
const JSON_MAX = 1000; // a JSON output under the default whitespace rules
const ROUNDS = Number(process.env.AGENTS_ROUNDS || 16); // seeds of the streamed-vs-not tool-call comparisons
const TOOL_MAX = 1500; // required: an array of calls of ~45 tokens each, as many as the model's ',' / ']' draws make

let seed = Number(process.env.AGENTS_SEED || 1000); // another base replays the test on other samples
const nextSeed = () => seed++;
const short = (x) => {
  const s = typeof x === 'string' ? x : JSON.stringify(x);
  return s && s.length > 400 ? s.slice(0, 400) + '...' : s;
};
const isStr = (s) => typeof s === 'string';
const nonEmpty = (s) => typeof s === 'string' && s.length > 0;
const isInt = (n) => Number.isInteger(n);

// Expects the promise to reject with an instance of Cls and the given status; returns the error (or null).
async function expectError(promise, Cls, status, what) {
  try {
    const r = await promise;
    check(false, `${what}: expected ${status}, got a reply`, short(r));
    return null;
  } catch (e) {
    check(e instanceof Cls, `${what}: throws ${Cls.name}`, `${e && e.constructor && e.constructor.name}: ${e && e.message}`);
    check(e && e.status === status, `${what}: status ${status}`, `${e && e.status} ${e && e.message}`);
    return e;
  }
}

// Runs make(seed) with fresh seeds until full(result) holds, at most 4 times: this model can end at once (its first
// token the end of sequence, about 1 in 135), and an output that must not be empty is then sampled again; an empty
// one must have ended at once (ended(result)).
async function sampled(make, full, ended) {
  let r;
  for (let k = 0; k < 4; k++) {
    r = await make(nextSeed());
    if (full(r)) return r;
    check(ended(r), 'an empty output ended at once (end of sequence first)', short(r));
  }
  return r;
}
const respEnded = (r) => r && r.status === 'completed' && r.usage && r.usage.output_tokens <= 2;
const msgEnded = (m) => m && m.stop_reason === 'end_turn' && m.usage && m.usage.output_tokens <= 2;

// Runs the thunks, four at a time.
async function inBatches(thunks, width = 4) {
  for (let i = 0; i < thunks.length; i += width) await Promise.all(thunks.slice(i, i + width).map((t) => t()));
}

// SSE text -> [{event, data}] (data parsed as JSON when it is; event null when no "event:" line).
function sseEvents(text) {
  const out = [];
  let event = null;
  let data = null;
  for (let line of text.split('\n')) {
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      if (data !== null) {
        let json = null;
        try {
          json = JSON.parse(data);
        } catch {
          json = null;
        }
        out.push({ event, data, json });
      }
      event = null;
      data = null;
      continue;
    }
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data = data === null ? value : data + '\n' + value;
  }
  return out;
}

async function rawStream(path, body, headers = AUTH) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, contentType: res.headers.get('content-type') || '', text, events: sseEvents(text) };
}

// ---------------------------------------------------------------------------------------------------------------
// Responses

// The text of a Responses object's message items (output_text parts), as the SDK's output_text.
function respText(r) {
  let s = '';
  for (const item of r.output || []) {
    if (item.type !== 'message') continue;
    for (const c of item.content || []) if (c.type === 'output_text') s += c.text;
  }
  return s;
}

// The Response object's common shape.
function checkResponse(r, what, maxTokens) {
  check(r && r.object === 'response', `${what}: object "response"`, short(r));
  if (!r) return;
  check(isStr(r.id) && r.id.startsWith('resp_'), `${what}: id starts with resp_`, r.id);
  check(typeof r.created_at === 'number' && r.created_at > 1.6e9, `${what}: created_at a unix time`, r.created_at);
  check(r.model === MODEL, `${what}: model echoed`, r.model);
  check(r.status === 'completed' || r.status === 'incomplete', `${what}: status completed or incomplete`, r.status);
  if (r.status === 'incomplete') {
    check(r.incomplete_details && r.incomplete_details.reason === 'max_output_tokens',
      `${what}: incomplete_details.reason max_output_tokens`, r.incomplete_details);
  } else {
    check(r.incomplete_details === null || r.incomplete_details === undefined, `${what}: incomplete_details null when completed`, r.incomplete_details);
  }
  check(Array.isArray(r.output), `${what}: output is an array`, short(r));
  for (const item of r.output || []) {
    check(nonEmpty(item.id) || item.type === 'function_call', `${what}: output item ${item.type} has an id`, short(item));
    if (item.type === 'message') {
      check(item.role === 'assistant', `${what}: message role assistant`, short(item));
      check(Array.isArray(item.content), `${what}: message content is an array`, short(item));
      for (const c of item.content || []) {
        check(c.type === 'output_text', `${what}: message content type output_text`, short(c));
        check(isStr(c.text), `${what}: output_text.text is a string`, short(c));
        check(Array.isArray(c.annotations), `${what}: output_text.annotations is an array`, short(c));
      }
    }
  }
  const u = r.usage;
  check(u && isInt(u.input_tokens) && u.input_tokens > 0, `${what}: usage.input_tokens > 0`, u);
  check(u && isInt(u.output_tokens) && u.output_tokens > 0 && (maxTokens === undefined || u.output_tokens <= maxTokens),
    `${what}: usage.output_tokens in 1..${maxTokens}`, u);
  check(u && u.total_tokens === u.input_tokens + u.output_tokens, `${what}: usage.total_tokens = input + output`, u);
}

// The function_call items of a Response, each checked for shape; returns them.
function checkFunctionCalls(r, what) {
  const calls = (r.output || []).filter((i) => i.type === 'function_call');
  check(calls.length >= 1, `${what}: a function_call output item`, short(r.output));
  check(new Set(calls.map((c) => c.call_id)).size === calls.length, `${what}: call_ids distinct`, short(calls));
  for (const c of calls) {
    check(c.name === 'get_weather', `${what}: function_call name get_weather`, short(c));
    check(nonEmpty(c.call_id), `${what}: function_call call_id non-empty`, short(c));
    let args = null;
    try {
      args = JSON.parse(c.arguments);
    } catch {
      args = null;
    }
    check(args && ['c', 'f'].includes(args.unit) && Object.keys(args).length === 1,
      `${what}: arguments parse as {"unit": "c"|"f"}`, short(c.arguments));
  }
  return calls;
}

// Checks a Responses event list (streamed): created, in_progress first, consecutive sequence numbers, the last
// response.completed; every output item added and done once, with deltas that rebuild the final items.
// raw: the events as sent (the SDK's responses.stream() appends the output items to the response.created event's
// response object in place, so only a raw stream shows it as sent).
function checkResponseEvents(events, final, what, raw = false) {
  const types = events.map((e) => e.type);
  check(types[0] === 'response.created', `${what}: first event response.created`, types.slice(0, 4));
  check(types[1] === 'response.in_progress', `${what}: second event response.in_progress`, types.slice(0, 4));
  check(types[types.length - 1] === 'response.completed', `${what}: last event response.completed`, types.slice(-3));
  const seqOk = events.every((e, i) => e.sequence_number === i);
  check(seqOk, `${what}: sequence_number 0, 1, 2, ... consecutive`, events.map((e) => e.sequence_number).slice(0, 40));
  const created = events[0] && events[0].response;
  if (raw) {
    check(created && created.status === 'in_progress' && Array.isArray(created.output) && created.output.length === 0,
      `${what}: response.created carries an in_progress response with no output`, short(created));
    const prog = events[1] && events[1].response;
    check(prog && prog.status === 'in_progress', `${what}: response.in_progress carries an in_progress response`, short(prog));
  }
  if (created && final) check(created.id === final.id, `${what}: the same id in created and final`, [created.id, final.id]);
  const added = events.filter((e) => e.type === 'response.output_item.added');
  const done = events.filter((e) => e.type === 'response.output_item.done');
  if (!final) return;
  check(added.length === final.output.length && done.length === final.output.length,
    `${what}: one output_item.added and .done per final output item`, { added: added.length, done: done.length, output: final.output.length });
  added.forEach((e, i) => check(e.output_index === i, `${what}: output_item.added ${i} has output_index ${i}`, short(e)));
  for (const d of done) {
    const f = final.output[d.output_index];
    check(f && d.item.type === f.type && (d.item.id || null) === (f.id || null), `${what}: output_item.done item matches the final output`, short([d.item, f]));
  }
  final.output.forEach((item, idx) => {
    if (item.type === 'message') {
      const deltas = events.filter((e) => e.type === 'response.output_text.delta' && e.output_index === idx).map((e) => e.delta).join('');
      const text = (item.content || []).map((c) => c.text).join('');
      check(deltas === text, `${what}: output_text deltas rebuild item ${idx}'s text`, short([deltas, text]));
      const tdone = events.find((e) => e.type === 'response.output_text.done' && e.output_index === idx);
      check(tdone && tdone.text === text, `${what}: response.output_text.done has the text`, short(tdone));
      check(events.some((e) => e.type === 'response.content_part.added' && e.output_index === idx && e.part && e.part.type === 'output_text'),
        `${what}: response.content_part.added (output_text) for item ${idx}`, types);
    } else if (item.type === 'reasoning') {
      const deltas = events.filter((e) => e.type === 'response.reasoning_text.delta' && e.output_index === idx).map((e) => e.delta).join('');
      const text = (item.content || []).map((c) => c.text).join('');
      check(deltas === text, `${what}: reasoning_text deltas rebuild item ${idx}'s reasoning`, short([deltas, text]));
    } else if (item.type === 'function_call') {
      const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta' && e.output_index === idx).map((e) => e.delta).join('');
      check(deltas === item.arguments, `${what}: function_call_arguments deltas rebuild item ${idx}'s arguments`, short([deltas, item.arguments]));
      const adone = events.find((e) => e.type === 'response.function_call_arguments.done' && e.output_index === idx);
      check(adone && adone.arguments === item.arguments, `${what}: function_call_arguments.done has the arguments`, short(adone));
    }
  });
}

async function responsesParts() {
  await part('responses basic', async () => {
    const r = await sampled((seed) => oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, reasoning: { effort: 'none' }, temperature: 1, seed }),
      (x) => nonEmpty(x.output_text), respEnded);
    checkResponse(r, 'basic', 16);
    const first = r.output && r.output[0];
    check(first && first.type === 'message', 'output[0] is a message', short(r.output));
    check(first && first.content && first.content[0] && first.content[0].type === 'output_text', 'output[0].content[0] is output_text', short(first));
    check(!(r.output || []).some((i) => i.type === 'reasoning'), 'no reasoning item with effort none', short(r.output));
    check(nonEmpty(r.output_text), 'output_text is a non-empty string', r.output_text);
    check(r.output_text === respText(r), 'output_text equals the message text', short([r.output_text, respText(r)]));
    check(first && first.status === 'completed' || first && first.status === 'incomplete', 'message item status completed / incomplete', short(first));
  });

  await part('responses input items', async () => {
    const r = await oai.responses.create({
      model: MODEL,
      instructions: 'Be brief',
      input: [
        { role: 'system', content: 'x' },
        { role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'ok' }] },
        { role: 'user', content: 'again' },
      ],
      max_output_tokens: 16,
      reasoning: { effort: 'none' },
      seed: nextSeed(),
    });
    checkResponse(r, 'input items', 16);
    const plain = await oai.responses.create({ model: MODEL, input: 'again', max_output_tokens: 4, reasoning: { effort: 'none' }, seed: nextSeed() });
    check(r.usage.input_tokens > plain.usage.input_tokens + 'Be brief'.length,
      'the instructions and every input item reach the prompt (more input tokens than "again" alone)', [r.usage.input_tokens, plain.usage.input_tokens]);
    check(r.instructions === 'Be brief', 'instructions echoed', r.instructions);
    // the same through the chat-template kwargs instead of reasoning.effort
    const r2 = await oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, ...NO_THINK, seed: nextSeed() });
    checkResponse(r2, 'chat_template_kwargs', 16);
    check(r2.output && r2.output[0] && r2.output[0].type === 'message', 'chat_template_kwargs enable_thinking false: a message item', short(r2.output));
  });

  await part('responses reasoning', async () => {
    const r = await sampled((seed) => oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, seed }),
      (x) => x.output && x.output.length > 0, respEnded);
    checkResponse(r, 'reasoning', 16);
    const item = r.output && r.output[0];
    check(item && item.type === 'reasoning', 'output[0] is a reasoning item', short(r.output));
    check(item && Array.isArray(item.content) && item.content[0] && item.content[0].type === 'reasoning_text',
      'reasoning content[0] is reasoning_text', short(item));
    check(item && item.content && item.content[0] && nonEmpty(item.content[0].text), 'reasoning text non-empty', short(item));
    check(item && Array.isArray(item.summary), 'reasoning summary is an array', short(item));
  });

  await part('responses stream', async () => {
    const { events, final } = await sampled(async (seed) => {
      const stream = oai.responses.stream({ model: MODEL, input: 'Hello', max_output_tokens: 24, reasoning: { effort: 'none' }, temperature: 1, seed });
      const evs = [];
      for await (const ev of stream) evs.push(ev);
      return { events: evs, final: await stream.finalResponse() };
    }, (x) => respText(x.final).length > 0, (x) => respEnded(x.final));
    checkResponse(final, 'stream final', 24);
    checkResponseEvents(events, final, 'stream');
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    check(deltas.length > 0, 'text deltas not empty', events.map((e) => e.type));
    // finalResponse().output_text is the SDK's own field, not sent by the API: openai 6.30.1 leaves it undefined on
    // streamed responses (openai-node #1662, fixed later), so the text is read from the output items
    check(respText(final) === deltas, 'finalResponse() text equals the concatenated deltas', short([respText(final), deltas]));
    if (final.output_text !== undefined && final.output_text !== null) check(final.output_text === deltas, 'finalResponse().output_text equals the deltas', short([final.output_text, deltas]));
    check(events.every((e) => isStr(e.type) && isInt(e.sequence_number)), 'every event has type and sequence_number', short(events.slice(0, 3)));
  });

  await part('responses stream reasoning', async () => {
    const { events, final } = await sampled(async (seed) => {
      const stream = oai.responses.stream({ model: MODEL, input: 'Hello', max_output_tokens: 24, temperature: 1, seed });
      const evs = [];
      for await (const ev of stream) evs.push(ev);
      return { events: evs, final: await stream.finalResponse() };
    }, (x) => x.final.output.length > 0, (x) => respEnded(x.final));
    checkResponse(final, 'reasoning stream final', 24);
    checkResponseEvents(events, final, 'reasoning stream');
    const item = final.output && final.output[0];
    check(item && item.type === 'reasoning', 'final output[0] is a reasoning item', short(final.output));
    const deltas = events.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join('');
    const text = item && item.content && item.content[0] ? item.content[0].text : undefined;
    check(deltas.length > 0 && deltas === text, 'reasoning_text deltas concatenate to the final reasoning text', short([deltas, text]));
    const rdone = events.find((e) => e.type === 'response.reasoning_text.done');
    check(rdone && rdone.text === text, 'response.reasoning_text.done has the reasoning text', short(rdone));
  });

  await part('responses stream raw', async () => {
    const s = await oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, reasoning: { effort: 'none' }, stream: true, seed: nextSeed() });
    const events = [];
    for await (const ev of s) events.push(ev);
    check(events.length >= 3, 'several events', events.map((e) => e.type));
    const last = events[events.length - 1];
    check(last && last.type === 'response.completed', 'events end with response.completed', events.map((e) => e.type).slice(-3));
    if (last && last.response) checkResponse(last.response, 'raw stream final', 16);
    checkResponseEvents(events, last && last.response, 'raw stream', true);
    // over the wire: text/event-stream, each event's "event:" line names its type
    const raw = await rawStream('/v1/responses', { model: MODEL, input: 'Hello', max_output_tokens: 8, reasoning: { effort: 'none' }, stream: true, seed: nextSeed() });
    check(raw.status === 200, 'raw stream status 200', raw.text.slice(0, 300));
    check(/^text\/event-stream/.test(raw.contentType), 'Content-Type text/event-stream', raw.contentType);
    const typed = raw.events.filter((e) => e.json);
    check(typed.length >= 3 && typed.every((e) => e.event === null || e.event === e.json.type),
      'every "event:" line equals the data\'s type', short(raw.events.map((e) => [e.event, e.json && e.json.type])));
  });

  await part('responses tools', async () => {
    for (const tc of ['required', { type: 'function', name: 'get_weather' }]) {
      const what = `tool_choice ${JSON.stringify(tc)}`;
      const r = await oai.responses.create({ model: MODEL, input: 'weather?', tools: RESP_TOOLS, tool_choice: tc, max_output_tokens: TOOL_MAX, reasoning: { effort: 'none' }, ...COMPACT, seed: nextSeed() });
      checkResponse(r, what, TOOL_MAX);
      check(r.status === 'completed', `${what}: status completed`, short(r));
      checkFunctionCalls(r, what);
      check(Array.isArray(r.tools) && r.tools.length === 1 && r.tools[0].name === 'get_weather', `${what}: tools echoed`, short(r.tools));
    }
    // parallel_tool_calls false: one call (the grammar may still write more: only the first is returned)
    const one = await oai.responses.create({ model: MODEL, input: 'weather?', tools: RESP_TOOLS, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: TOOL_MAX, reasoning: { effort: 'none' }, ...COMPACT, seed: nextSeed() });
    checkResponse(one, 'parallel_tool_calls false', TOOL_MAX);
    check(checkFunctionCalls(one, 'parallel_tool_calls false').length === 1, 'parallel_tool_calls false: exactly one function_call', short(one.output));
    check(one.parallel_tool_calls === false, 'parallel_tool_calls echoed', one.parallel_tool_calls);
    // tool_choice auto on this model: random text, no call; still a valid response
    const auto = await oai.responses.create({ model: MODEL, input: 'weather?', tools: RESP_TOOLS, max_output_tokens: 16, reasoning: { effort: 'none' }, seed: nextSeed() });
    checkResponse(auto, 'tool_choice auto', 16);
  });

  await part('responses tools stream', async () => {
    for (const tc of ['required', { type: 'function', name: 'get_weather' }]) {
      const what = `streamed tool_choice ${JSON.stringify(tc)}`;
      const stream = oai.responses.stream({ model: MODEL, input: 'weather?', tools: RESP_TOOLS, tool_choice: tc, max_output_tokens: TOOL_MAX, reasoning: { effort: 'none' }, ...COMPACT, seed: nextSeed() });
      const events = [];
      for await (const ev of stream) events.push(ev);
      const final = await stream.finalResponse();
      checkResponse(final, what, TOOL_MAX);
      checkResponseEvents(events, final, what);
      checkFunctionCalls(final, what);
      const adds = events.filter((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
      check(adds.length >= 1 && adds.every((e) => e.item.name === 'get_weather' && nonEmpty(e.item.call_id)),
        `${what}: output_item.added names the function and its call_id`, short(adds));
    }
  });

  await part('responses tools stream = create', async () => {
    // the same seed streamed and not: the same calls (the grammar writes a random number of them, so the stream
    // opens calls while others are still being written)
    const thunks = [];
    for (let k = 0; k < ROUNDS; k++) {
      const seed = nextSeed();
      thunks.push(async () => {
        const body = { model: MODEL, input: 'weather?', tools: RESP_TOOLS, tool_choice: 'required', max_output_tokens: TOOL_MAX, reasoning: { effort: 'none' }, ...COMPACT, seed };
        const once = await oai.responses.create(body);
        const stream = oai.responses.stream(body);
        const events = [];
        for await (const ev of stream) events.push(ev);
        const final = await stream.finalResponse();
        const what = `seed ${seed}`;
        checkResponseEvents(events, final, what);
        const a = (once.output || []).filter((i) => i.type === 'function_call').map((c) => c.arguments);
        const b = (final.output || []).filter((i) => i.type === 'function_call').map((c) => c.arguments);
        check(JSON.stringify(a) === JSON.stringify(b), `${what}: streamed function calls = unstreamed ones`, short({ create: a, stream: b, body }));
      });
    }
    await inBatches(thunks);
  });

  await part('responses store', async () => {
    const r1 = await oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 16, reasoning: { effort: 'none' }, seed: nextSeed() });
    checkResponse(r1, 'r1', 16);
    const r2 = await oai.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'next', max_output_tokens: 16, reasoning: { effort: 'none' }, seed: nextSeed() });
    checkResponse(r2, 'r2 (previous_response_id)', 16);
    check(r2.previous_response_id === r1.id, 'r2.previous_response_id echoed', r2.previous_response_id);
    check(r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens,
      'r2\'s prompt holds r1\'s input and output (more input tokens)', [r1.usage, r2.usage]);
    const got = await oai.responses.retrieve(r1.id);
    check(got.id === r1.id && got.object === 'response', 'retrieve returns the same id', short(got));
    check(JSON.stringify(got.output) === JSON.stringify(r1.output), 'retrieve returns the same output', short([got.output, r1.output]));
    check(got.status === r1.status && JSON.stringify(got.usage) === JSON.stringify(r1.usage), 'retrieve returns the same status and usage', short([got.usage, r1.usage]));
    const raw = await get(base, `/v1/responses/${r1.id}`, { headers: AUTH });
    check(raw.status === 200 && raw.json && raw.json.id === r1.id, 'GET /v1/responses/{id} 200', raw.text.slice(0, 300));
    // a completed (not background) response cannot be cancelled (vLLM: 400); an unknown id is a 404
    const cancel = await post(base, `/v1/responses/${r1.id}/cancel`, {}, { headers: AUTH });
    check(cancel.status === 400, 'cancel of a completed response: 400 (vLLM)', `${cancel.status} ${cancel.text.slice(0, 300)}`);
    if (cancel.status >= 400) checkErrorShape(cancel, cancel.status, 'cancel completed');
    await expectError(oai.responses.cancel('resp_doesnotexist'), OpenAI.NotFoundError, 404, 'cancel unknown id');
    await expectError(oai.responses.create({ model: MODEL, previous_response_id: 'resp_doesnotexist', input: 'x', max_output_tokens: 4 }),
      OpenAI.NotFoundError, 404, 'unknown previous_response_id');
    await oai.responses.delete(r1.id);
    await expectError(oai.responses.retrieve(r1.id), OpenAI.NotFoundError, 404, 'retrieve after delete');
    const del2 = await request(base, 'DELETE', `/v1/responses/${r1.id}`, { headers: AUTH });
    check(del2.status === 404, 'DELETE twice: 404', `${del2.status} ${del2.text.slice(0, 200)}`);
    await expectError(oai.responses.create({ model: MODEL, previous_response_id: r1.id, input: 'x', max_output_tokens: 4 }),
      OpenAI.NotFoundError, 404, 'previous_response_id of a deleted response');
    // r2 is still there
    const g2 = await oai.responses.retrieve(r2.id);
    check(g2.id === r2.id, 'retrieve r2 after r1 was deleted', short(g2));
    const r3 = await oai.responses.create({ model: MODEL, input: 'Hello', store: false, max_output_tokens: 8, reasoning: { effort: 'none' }, seed: nextSeed() });
    checkResponse(r3, 'store false', 8);
    await expectError(oai.responses.retrieve(r3.id), OpenAI.NotFoundError, 404, 'retrieve a store:false response');
    await expectError(oai.responses.retrieve('resp_doesnotexist'), OpenAI.NotFoundError, 404, 'retrieve unknown id');
    // a streamed response is stored too
    const s = await oai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 8, reasoning: { effort: 'none' }, stream: true, seed: nextSeed() });
    let last = null;
    for await (const ev of s) last = ev;
    if (last && last.response) {
      const gs = await oai.responses.retrieve(last.response.id);
      check(gs.id === last.response.id && JSON.stringify(gs.output) === JSON.stringify(last.response.output),
        'a streamed response is stored (retrieve gives the final output)', short([gs, last.response]));
    }
  });

  await part('responses tool result turn', async () => {
    const r = await oai.responses.create({
      model: MODEL,
      tools: RESP_TOOLS,
      input: [
        { role: 'user', content: 'weather?' },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"unit":"c"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '20 degrees' },
      ],
      max_output_tokens: 16,
      reasoning: { effort: 'none' },
      seed: nextSeed(),
    });
    checkResponse(r, 'tool result turn', 16);
    // previous_response_id with a function call, then its output
    const r1 = await oai.responses.create({ model: MODEL, input: 'weather?', tools: RESP_TOOLS, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: TOOL_MAX, reasoning: { effort: 'none' }, ...COMPACT, seed: nextSeed() });
    const calls = checkFunctionCalls(r1, 'r1 named call');
    if (calls.length) {
      const r2 = await oai.responses.create({
        model: MODEL,
        previous_response_id: r1.id,
        tools: RESP_TOOLS,
        input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '20 degrees' }],
        max_output_tokens: 16,
        reasoning: { effort: 'none' },
        seed: nextSeed(),
      });
      checkResponse(r2, 'function_call_output after previous_response_id', 16);
    }
  });

  await part('responses text.format json_schema', async () => {
    const format = { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false } };
    // vLLM's default whitespace ([ \n\t]* where JSON allows it; structured_outputs with text.format is a 400, as
    // vLLM): with this vocabulary whitespace runs end after a few tokens
    const r = await oai.responses.create({ model: MODEL, input: 'json', text: { format }, reasoning: { effort: 'none' }, max_output_tokens: JSON_MAX, seed: nextSeed() });
    checkResponse(r, 'json_schema', JSON_MAX);
    check(r.status === 'completed', 'json_schema: status completed', short(r));
    let v = null;
    try {
      v = JSON.parse(r.output_text);
    } catch {
      v = null;
    }
    check(v && Number.isInteger(v.a) && Object.keys(v).length === 1, 'output_text parses as {"a": integer}', r.output_text);
    check(r.text && r.text.format && r.text.format.type === 'json_schema', 'text.format echoed', short(r.text));
    const both = await post(base, '/v1/responses', { model: MODEL, input: 'json', text: { format }, ...COMPACT }, { headers: AUTH });
    check(both.status === 400, 'structured_outputs with text.format: 400 (vLLM)', `${both.status} ${both.text.slice(0, 200)}`);
    // json_object
    const j = await oai.responses.create({ model: MODEL, input: 'json', text: { format: { type: 'json_object' } }, reasoning: { effort: 'none' }, max_output_tokens: JSON_MAX, seed: nextSeed() });
    checkResponse(j, 'json_object', JSON_MAX);
    if (j.status === 'completed') {
      let o = null;
      try {
        o = JSON.parse(j.output_text);
      } catch {
        o = null;
      }
      check(o !== null && typeof o === 'object', 'json_object: output_text parses as a JSON object', j.output_text);
    }
  });

  await part('responses errors', async () => {
    const cases = [
      ['missing input', { model: MODEL }, 400],
      ['prompt template', { model: MODEL, prompt: { id: 'x' }, input: 'hi' }, 400],
      ['bad model', { model: 'no-such-model', input: 'hi' }, 404],
      ['unknown previous_response_id', { model: MODEL, input: 'hi', previous_response_id: 'resp_nope' }, 404],
      ['input not a string or list', { model: MODEL, input: 42 }, 400],
      ['bad item type', { model: MODEL, input: [{ type: 'no_such_item', foo: 1 }] }, 400],
      ['max_output_tokens past max_model_len', { model: MODEL, input: 'hi', max_output_tokens: 100000 }, 400],
    ];
    for (const [what, body, status] of cases) {
      const res = await post(base, '/v1/responses', body, { headers: AUTH });
      check(res.status === status, `${what}: status ${status}`, `${res.status} ${res.text.slice(0, 300)}`);
      if (res.status >= 400) checkErrorShape(res, res.status, what);
    }
    await expectError(oai.responses.create({ model: 'no-such-model', input: 'hi' }), OpenAI.NotFoundError, 404, 'SDK bad model');
    const e = await expectError(oai.responses.create({ model: MODEL }), OpenAI.BadRequestError, 400, 'SDK missing input');
    check(e && e.error && nonEmpty(e.error.message), 'SDK error has error.message', e && e.error);
    const notJson = await post(base, '/v1/responses', '{"model":', { headers: { ...AUTH, 'Content-Type': 'application/json' } });
    check(notJson.status === 400, 'invalid JSON: 400', `${notJson.status} ${notJson.text.slice(0, 200)}`);
  });

  await part('responses auth', async () => {
    const none = await post(base, '/v1/responses', { model: MODEL, input: 'hi', max_output_tokens: 4 });
    check(none.status === 401, 'no key: 401', `${none.status} ${none.text.slice(0, 200)}`);
    const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
    await expectError(wrong.responses.create({ model: MODEL, input: 'hi', max_output_tokens: 4 }), OpenAI.AuthenticationError, 401, 'wrong key');
    const getNoKey = await get(base, '/v1/responses/resp_x');
    check(getNoKey.status === 401, 'GET /v1/responses/{id} without key: 401', `${getNoKey.status} ${getNoKey.text.slice(0, 200)}`);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Anthropic Messages

function checkMessage(m, what, maxTokens) {
  check(m && m.type === 'message', `${what}: type message`, short(m));
  if (!m) return;
  check(m.role === 'assistant', `${what}: role assistant`, m.role);
  check(isStr(m.id) && m.id.startsWith('msg_'), `${what}: id starts with msg_`, m.id);
  check(m.model === MODEL, `${what}: model echoed`, m.model);
  check(Array.isArray(m.content), `${what}: content is an array`, short(m));
  check(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), `${what}: stop_reason set`, m.stop_reason);
  check(m.stop_reason === 'stop_sequence' ? isStr(m.stop_sequence) : m.stop_sequence === null || m.stop_sequence === undefined,
    `${what}: stop_sequence null unless stop_reason stop_sequence`, [m.stop_reason, m.stop_sequence]);
  const u = m.usage;
  check(u && isInt(u.input_tokens) && u.input_tokens > 0, `${what}: usage.input_tokens > 0`, u);
  check(u && isInt(u.output_tokens) && u.output_tokens >= 1 && (maxTokens === undefined || u.output_tokens <= maxTokens),
    `${what}: usage.output_tokens in 1..${maxTokens}`, u);
  for (const b of m.content || []) {
    if (b.type === 'text') check(isStr(b.text), `${what}: text block has text`, short(b));
    else if (b.type === 'thinking') check(isStr(b.thinking), `${what}: thinking block has thinking`, short(b));
    else if (b.type === 'tool_use') check(nonEmpty(b.id) && nonEmpty(b.name) && b.input && typeof b.input === 'object', `${what}: tool_use block shape`, short(b));
    else check(false, `${what}: content block of a known type`, short(b));
  }
}

const textOf = (m) => (m.content || []).filter((b) => b.type === 'text').map((b) => b.text).join('');

function checkToolUse(m, what) {
  const uses = (m.content || []).filter((b) => b.type === 'tool_use');
  check(uses.length >= 1, `${what}: a tool_use block`, short(m.content));
  check(new Set(uses.map((b) => b.id)).size === uses.length, `${what}: tool_use ids distinct`, short(uses));
  for (const b of uses) {
    check(b.name === 'get_weather', `${what}: tool_use name get_weather`, short(b));
    check(nonEmpty(b.id), `${what}: tool_use id non-empty`, short(b));
    check(b.input && ['c', 'f'].includes(b.input.unit) && Object.keys(b.input).length === 1, `${what}: input {"unit": "c"|"f"}`, short(b.input));
  }
  check(m.stop_reason === 'tool_use', `${what}: stop_reason tool_use`, m.stop_reason);
  return uses;
}

// Event order of a Messages stream: message_start, then per block start / delta* / stop (indexes 0, 1, ...),
// message_delta, message_stop; returns the deltas per block index.
// raw: the events as sent (messages.stream() accumulates the content into message_start's message object).
function checkMessageEvents(events, what, raw = false) {
  const types = events.map((e) => e.type).filter((t) => t !== 'ping');
  check(types[0] === 'message_start', `${what}: first event message_start`, types.slice(0, 4));
  check(types[types.length - 1] === 'message_stop', `${what}: last event message_stop`, types.slice(-3));
  check(types[types.length - 2] === 'message_delta', `${what}: message_delta before message_stop`, types.slice(-3));
  const start = events.find((e) => e.type === 'message_start');
  const sm = start && start.message;
  check(sm && sm.role === 'assistant' && Array.isArray(sm.content) && (!raw || sm.content.length === 0) && sm.usage && isInt(sm.usage.input_tokens),
    `${what}: message_start carries an ${raw ? 'empty ' : ''}assistant message with usage`, short(sm));
  const md = events.find((e) => e.type === 'message_delta');
  check(md && md.delta && md.delta.stop_reason && md.usage && isInt(md.usage.output_tokens),
    `${what}: message_delta has delta.stop_reason and usage.output_tokens`, short(md));
  let open = -1;
  let next = 0;
  let orderOk = true;
  const blocks = [];
  for (const e of events) {
    if (e.type === 'content_block_start') {
      if (open !== -1 || e.index !== next) orderOk = false;
      open = e.index;
      blocks[e.index] = { start: e.content_block, deltas: [] };
    } else if (e.type === 'content_block_delta') {
      if (e.index !== open) orderOk = false;
      else blocks[e.index].deltas.push(e.delta);
    } else if (e.type === 'content_block_stop') {
      if (e.index !== open) orderOk = false;
      open = -1;
      next++;
    }
  }
  check(orderOk && open === -1, `${what}: content blocks started, streamed and stopped in order (index 0, 1, ...)`, types);
  for (const b of blocks) {
    if (!b) continue;
    const st = b.start || {};
    if (st.type === 'text') check(st.text === '', `${what}: text block starts with text ""`, short(st));
    if (st.type === 'thinking') check(st.thinking === '', `${what}: thinking block starts with thinking ""`, short(st));
    if (st.type === 'tool_use') check(nonEmpty(st.id) && st.name === 'get_weather' && st.input && Object.keys(st.input).length === 0,
      `${what}: tool_use block starts with id, name and input {}`, short(st));
  }
  return blocks;
}

async function anthropicParts() {
  const HELLO = [{ role: 'user', content: 'Hello' }];

  await part('messages basic', async () => {
    const m = await sampled((seed) => ant.messages.create({ model: MODEL, max_tokens: 16, messages: HELLO, temperature: 1, ...NO_THINK, seed }),
      (x) => x.content.length > 0, msgEnded);
    checkMessage(m, 'basic', 16);
    check(m.content[0] && m.content[0].type === 'text' && nonEmpty(m.content[0].text), 'content[0] is a non-empty text block', short(m.content));
    check(m.content.length === 1, 'one content block', short(m.content));
    check(['end_turn', 'max_tokens'].includes(m.stop_reason), 'stop_reason end_turn or max_tokens', m.stop_reason);
    if (m.stop_reason === 'max_tokens') check(m.usage.output_tokens === 16, 'max_tokens: output_tokens = max_tokens', m.usage);
  });

  await part('messages system, turns, stop sequences', async () => {
    const s1 = await ant.messages.create({ model: MODEL, max_tokens: 16, system: 'sys', messages: HELLO, ...NO_THINK, seed: nextSeed() });
    checkMessage(s1, 'system string', 16);
    const s2 = await ant.messages.create({ model: MODEL, max_tokens: 16, system: [{ type: 'text', text: 'sys' }], messages: HELLO, ...NO_THINK, seed: nextSeed() });
    checkMessage(s2, 'system blocks', 16);
    check(s1.usage.input_tokens === s2.usage.input_tokens, 'system string and blocks give the same prompt', [s1.usage, s2.usage]);
    const plain = await ant.messages.create({ model: MODEL, max_tokens: 1, messages: HELLO, ...NO_THINK });
    check(s1.usage.input_tokens > plain.usage.input_tokens, 'the system prompt reaches the prompt', [s1.usage, plain.usage]);
    const turns = await ant.messages.create({
      model: MODEL,
      max_tokens: 16,
      messages: [
        { role: 'user', content: 'Hello' },
        { role: 'assistant', content: 'Hi there' },
        { role: 'user', content: [{ type: 'text', text: 'How are you?' }] },
      ],
      ...NO_THINK,
      seed: nextSeed(),
    });
    checkMessage(turns, 'multi-turn', 16);
    check(turns.usage.input_tokens > plain.usage.input_tokens + 'Hi there'.length, 'every turn reaches the prompt', [turns.usage, plain.usage]);
    const stops = ['a', 'e', 'o', 'x'];
    const st = await ant.messages.create({ model: MODEL, max_tokens: 40, messages: HELLO, stop_sequences: stops, top_p: 1, top_k: 100, metadata: { user_id: 'u1' }, ...NO_THINK, seed: nextSeed() });
    checkMessage(st, 'stop_sequences', 40);
    const t = textOf(st);
    check(!stops.some((s) => t.includes(s)), 'the text holds no stop sequence', t);
    if (st.stop_reason === 'stop_sequence') check(stops.includes(st.stop_sequence), 'stop_sequence names the one that matched', st.stop_sequence);
  });

  await part('messages thinking', async () => {
    const m = await sampled((seed) => ant.messages.create({ model: MODEL, max_tokens: 16, messages: HELLO, seed }),
      (x) => x.content.length > 0, msgEnded);
    checkMessage(m, 'thinking', 16);
    const b = m.content[0];
    check(b && b.type === 'thinking' && nonEmpty(b.thinking), 'content[0] is a non-empty thinking block', short(m.content));
    check(b && isStr(b.signature), 'thinking block has a signature string', short(b));
  });

  await part('messages stream', async () => {
    let stream;
    const { events, final } = await sampled(async (seed) => {
      stream = ant.messages.stream({ model: MODEL, max_tokens: 24, messages: HELLO, temperature: 1, ...NO_THINK, seed });
      const evs = [];
      for await (const ev of stream) evs.push(ev);
      return { events: evs, final: await stream.finalMessage() };
    }, (x) => x.final.content.length > 0, (x) => msgEnded(x.final));
    checkMessage(final, 'stream final', 24);
    const blocks = checkMessageEvents(events, 'stream');
    const deltas = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta').map((e) => e.delta.text).join('');
    check(deltas.length > 0 && textOf(final) === deltas, 'final text equals the concatenated text_delta events', short([textOf(final), deltas]));
    check(blocks.length === 1 && blocks[0] && blocks[0].start.type === 'text', 'one text block', short(blocks));
    const start = events[0] && events[0].message;
    check(start && start.id === final.id, 'message_start id = final id', [start && start.id, final.id]);
    check(final.usage.output_tokens > 0, 'final usage.output_tokens > 0', final.usage);
    check(final.usage.input_tokens > 0, 'final usage.input_tokens > 0', final.usage);
    const ft = await stream.finalText();
    check(ft === deltas, 'finalText() equals the deltas', short([ft, deltas]));
    // greedy: streamed and not, the same message
    const s2 = ant.messages.stream({ model: MODEL, max_tokens: 24, messages: HELLO, temperature: 0, ...NO_THINK });
    const once = await ant.messages.create({ model: MODEL, max_tokens: 24, messages: HELLO, temperature: 0, ...NO_THINK });
    const f2 = await s2.finalMessage();
    check(textOf(f2) === textOf(once) && f2.stop_reason === once.stop_reason && f2.usage.output_tokens === once.usage.output_tokens,
      'greedy: a stream and a create give the same message', short([f2.content, once.content, f2.usage, once.usage]));
    // over the wire: every event has an "event:" line naming its type (the SDK drops events without one)
    const raw = await rawStream('/v1/messages', { model: MODEL, max_tokens: 8, messages: HELLO, stream: true, ...NO_THINK, seed: nextSeed() });
    check(raw.status === 200, 'raw stream 200', raw.text.slice(0, 300));
    check(/^text\/event-stream/.test(raw.contentType), 'Content-Type text/event-stream', raw.contentType);
    checkMessageEvents(raw.events.map((e) => e.json || {}), 'raw stream', true);
    check(raw.events.length >= 3 && raw.events.every((e) => e.json && e.event === e.json.type),
      'every event has an "event:" line equal to its data\'s type', short(raw.events.map((e) => [e.event, e.json && e.json.type])));
    check(!raw.events.some((e) => e.data === '[DONE]'), 'no [DONE] sentinel (not Anthropic\'s format)', raw.text.slice(-200));
  });

  await part('messages stream thinking', async () => {
    const { events, final } = await sampled(async (seed) => {
      const stream = ant.messages.stream({ model: MODEL, max_tokens: 24, messages: HELLO, temperature: 1, seed });
      const evs = [];
      for await (const ev of stream) evs.push(ev);
      return { events: evs, final: await stream.finalMessage() };
    }, (x) => x.final.content.length > 0, (x) => msgEnded(x.final));
    checkMessage(final, 'thinking stream final', 24);
    checkMessageEvents(events, 'thinking stream');
    const b = final.content[0];
    check(b && b.type === 'thinking', 'final content[0] is a thinking block', short(final.content));
    const deltas = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'thinking_delta').map((e) => e.delta.thinking).join('');
    check(deltas.length > 0 && b && b.thinking === deltas, 'thinking_delta events concatenate to the thinking block', short([deltas, b]));
  });

  await part('messages tools', async () => {
    for (const tc of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
      const what = `tool_choice ${JSON.stringify(tc)}`;
      const m = await ant.messages.create({ model: MODEL, max_tokens: TOOL_MAX, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, tool_choice: tc, ...NO_THINK, ...COMPACT, seed: nextSeed() });
      checkMessage(m, what, TOOL_MAX);
      checkToolUse(m, what);
    }
    // disable_parallel_tool_use: at most one tool_use block
    const one = await ant.messages.create({ model: MODEL, max_tokens: TOOL_MAX, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, tool_choice: { type: 'any', disable_parallel_tool_use: true }, ...NO_THINK, ...COMPACT, seed: nextSeed() });
    checkMessage(one, 'disable_parallel_tool_use', TOOL_MAX);
    check(checkToolUse(one, 'disable_parallel_tool_use').length === 1, 'disable_parallel_tool_use: exactly one tool_use block', short(one.content));
    const auto = await ant.messages.create({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, ...NO_THINK, seed: nextSeed() });
    checkMessage(auto, 'tool_choice auto (absent)', 16);
    const none = await ant.messages.create({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, tool_choice: { type: 'none' }, ...NO_THINK, seed: nextSeed() });
    checkMessage(none, 'tool_choice none', 16);
    check(!none.content.some((b) => b.type === 'tool_use'), 'tool_choice none: no tool_use', short(none.content));
  });

  await part('messages tools stream', async () => {
    for (const tc of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
      const what = `streamed tool_choice ${JSON.stringify(tc)}`;
      const stream = ant.messages.stream({ model: MODEL, max_tokens: TOOL_MAX, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, tool_choice: tc, ...NO_THINK, ...COMPACT, seed: nextSeed() });
      const events = [];
      for await (const ev of stream) events.push(ev);
      const final = await stream.finalMessage();
      checkMessage(final, what, TOOL_MAX);
      const blocks = checkMessageEvents(events, what);
      const uses = checkToolUse(final, what);
      for (const b of blocks) {
        if (!b || b.start.type !== 'tool_use') continue;
        const json = b.deltas.filter((d) => d.type === 'input_json_delta').map((d) => d.partial_json).join('');
        let parsed = null;
        try {
          parsed = JSON.parse(json);
        } catch {
          parsed = null;
        }
        const u = uses.find((x) => x.id === b.start.id);
        check(parsed && u && JSON.stringify(parsed) === JSON.stringify(u.input), `${what}: input_json_delta fragments parse to the final input`, short([json, u]));
      }
    }
  });

  await part('messages tools stream = create', async () => {
    const thunks = [];
    for (let k = 0; k < ROUNDS; k++) {
      const seed = nextSeed();
      thunks.push(async () => {
        const body = { model: MODEL, max_tokens: TOOL_MAX, messages: [{ role: 'user', content: 'weather?' }], tools: ANT_TOOLS, tool_choice: { type: 'any' }, ...NO_THINK, ...COMPACT, seed };
        const once = await ant.messages.create(body);
        const stream = ant.messages.stream(body);
        const events = [];
        for await (const ev of stream) events.push(ev);
        const final = await stream.finalMessage();
        const what = `seed ${seed}`;
        const blocks = checkMessageEvents(events, what);
        const a = once.content.filter((b) => b.type === 'tool_use').map((b) => b.input);
        const b = final.content.filter((x) => x.type === 'tool_use').map((x) => x.input);
        const frags = blocks.filter((x) => x && x.start.type === 'tool_use').map((x) => x.deltas.map((d) => d.partial_json).join(''));
        check(JSON.stringify(a) === JSON.stringify(b), `${what}: streamed tool_use inputs = unstreamed ones`, short({ create: a, stream: b, input_json_delta: frags, body }));
      });
    }
    await inBatches(thunks);
  });

  await part('messages tool_result turn', async () => {
    const m = await ant.messages.create({
      model: MODEL,
      max_tokens: 16,
      tools: ANT_TOOLS,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { unit: 'c' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '20 degrees' }] },
      ],
      ...NO_THINK,
      seed: nextSeed(),
    });
    checkMessage(m, 'tool_result turn', 16);
    const m2 = await ant.messages.create({
      model: MODEL,
      max_tokens: 16,
      tools: ANT_TOOLS,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Let me look.' }, { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { unit: 'f' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: '68 F' }] }, { type: 'text', text: 'thanks' }] },
      ],
      ...NO_THINK,
      seed: nextSeed(),
    });
    checkMessage(m2, 'tool_result blocks turn', 16);
  });

  await part('messages count_tokens', async () => {
    const variants = [
      { messages: HELLO },
      { system: 'sys', messages: [{ role: 'user', content: 'Hello' }, { role: 'assistant', content: 'Hi' }, { role: 'user', content: 'again' }] },
      { tools: ANT_TOOLS, messages: [{ role: 'user', content: 'weather?' }] },
    ];
    for (const v of variants) {
      const what = `count_tokens ${short(v).slice(0, 80)}`;
      const c = await ant.messages.countTokens({ model: MODEL, ...v, ...NO_THINK });
      check(c && isInt(c.input_tokens) && c.input_tokens > 0, `${what}: input_tokens > 0`, short(c));
      const m = await ant.messages.create({ model: MODEL, max_tokens: 1, ...v, ...NO_THINK });
      check(c && c.input_tokens === m.usage.input_tokens, `${what}: equals a create's usage.input_tokens`, [c && c.input_tokens, m.usage]);
    }
    await expectError(ant.messages.countTokens({ model: 'no-such-model', messages: HELLO }), Anthropic.NotFoundError, 404, 'count_tokens bad model');
    await expectError(ant.messages.countTokens({ model: MODEL }), Anthropic.BadRequestError, 400, 'count_tokens without messages');
  });

  await part('messages errors', async () => {
    const e = await expectError(ant.messages.create({ model: MODEL, messages: HELLO }), Anthropic.BadRequestError, 400, 'missing max_tokens');
    const body = e && e.error;
    check(body && body.type === 'error' && body.error && body.error.type === 'invalid_request_error' && nonEmpty(body.error.message),
      'missing max_tokens: body {type: "error", error: {type: "invalid_request_error", message}}', short(body));
    const nf = await expectError(ant.messages.create({ model: 'no-such-model', max_tokens: 4, messages: HELLO }), Anthropic.NotFoundError, 404, 'bad model');
    check(nf && nf.error && nf.error.type === 'error' && nf.error.error && nf.error.error.type === 'not_found_error',
      'bad model: error.type not_found_error', short(nf && nf.error));
    const cases = [
      ['no messages', { model: MODEL, max_tokens: 4 }, 400],
      ['messages not an array', { model: MODEL, max_tokens: 4, messages: 'hi' }, 400],
      ['bad role', { model: MODEL, max_tokens: 4, messages: [{ role: 'robot', content: 'hi' }] }, 400],
      ['max_tokens not a number', { model: MODEL, max_tokens: 'x', messages: HELLO }, 400],
      ['max_tokens past max_model_len', { model: MODEL, max_tokens: 100000, messages: HELLO }, 400],
    ];
    for (const [what, b, status] of cases) {
      const res = await post(base, '/v1/messages', b, { headers: { 'x-api-key': KEY } });
      check(res.status === status, `${what}: status ${status}`, `${res.status} ${res.text.slice(0, 300)}`);
      check(res.json && res.json.type === 'error' && res.json.error && isStr(res.json.error.type) && nonEmpty(res.json.error.message),
        `${what}: Anthropic error shape`, res.text.slice(0, 300));
    }
    const notJson = await post(base, '/v1/messages', '{"model":', { headers: { 'x-api-key': KEY, 'Content-Type': 'application/json' } });
    check(notJson.status === 400, 'invalid JSON: 400', `${notJson.status} ${notJson.text.slice(0, 200)}`);
  });

  await part('messages auth', async () => {
    const wrong = new Anthropic({ baseURL: base, apiKey: 'wrong-key', maxRetries: 0 });
    const e = await expectError(wrong.messages.create({ model: MODEL, max_tokens: 4, messages: HELLO, ...NO_THINK }), Anthropic.AuthenticationError, 401, 'wrong key');
    check(e && e.error && e.error.type === 'error' && e.error.error && e.error.error.type === 'authentication_error',
      'wrong key: Anthropic error shape, type authentication_error', short(e && e.error));
    const body = { model: MODEL, max_tokens: 4, messages: HELLO, ...NO_THINK };
    const xkey = await post(base, '/v1/messages', body, { headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' } });
    check(xkey.status === 200 && xkey.json && xkey.json.type === 'message', 'x-api-key: test-key works', `${xkey.status} ${xkey.text.slice(0, 200)}`);
    const xwrong = await post(base, '/v1/messages', body, { headers: { 'x-api-key': 'nope' } });
    check(xwrong.status === 401, 'x-api-key: wrong: 401', `${xwrong.status} ${xwrong.text.slice(0, 200)}`);
    const bearer = await post(base, '/v1/messages', body, { headers: AUTH });
    check(bearer.status === 200 && bearer.json && bearer.json.type === 'message', 'Authorization: Bearer test-key works', `${bearer.status} ${bearer.text.slice(0, 200)}`);
    const none = await post(base, '/v1/messages', body);
    check(none.status === 401, 'no key: 401', `${none.status} ${none.text.slice(0, 200)}`);
    const cnt = await post(base, '/v1/messages/count_tokens', { model: MODEL, messages: HELLO }, { headers: { 'x-api-key': KEY } });
    check(cnt.status === 200 && cnt.json && isInt(cnt.json.input_tokens), 'count_tokens with x-api-key', `${cnt.status} ${cnt.text.slice(0, 200)}`);
    const cntNone = await post(base, '/v1/messages/count_tokens', { model: MODEL, messages: HELLO });
    check(cntNone.status === 401, 'count_tokens without key: 401', `${cntNone.status} ${cntNone.text.slice(0, 200)}`);
    // authToken: the SDK's other credential (Authorization: Bearer)
    const tok = new Anthropic({ baseURL: base, authToken: KEY, maxRetries: 0 });
    const m = await tok.messages.create({ model: MODEL, max_tokens: 4, messages: HELLO, ...NO_THINK });
    checkMessage(m, 'authToken client', 4);
  });
}

await responsesParts();
await anthropicParts();
finish('agents.mjs');
