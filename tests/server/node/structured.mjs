// structured.mjs: structured outputs end to end through the official OpenAI client against `vllmc serve` on the
// random-weight fixture tests/fixtures/models/json_tiny (a 135-token character vocabulary, so JSON sampled at
// temperature 1 from near-uniform logits finishes: tools/make_json_tiny.py).
//   node structured.mjs http://HOST:PORT
// Parts:
//   corpus     every schema of structured_schemas.json (>= 40, real-world shapes), three ways:
//                chat.completions.parse with response_format json_schema (vLLM's default whitespace: [ \n\t]*
//                  wherever JSON allows it; with this vocabulary whitespace runs end after a few tokens),
//                /v1/completions with structured_outputs {json, disable_any_whitespace: true} (compact: ", " and
//                  ": " only, checked), and for every fourth schema a streamed chat (chat.completions.stream)
//                  with response_format plus structured_outputs.disable_any_whitespace (vllm.c reads it per
//                  request; vLLM takes it from the server's config);
//              every output must end with finish_reason "stop", JSON.parse and validate against its schema
//              (ajv 2020-12, strict mode off, formats checked by ajv-formats in its full mode);
//              ajv-formats' email, uri and uri-template checks are replaced by the RFCs' ABNF (see below: ajv is
//              stricter than the RFCs the JSON Schema spec names);
//   special_tokens  schemas whose strings could hold the text of the special tokens <s> / <unk>: the reply
//              (special tokens skipped) must still validate;
//   json_object, regex, choice, grammar, guided_* (vLLM <= 0.11's fields), tool_choice required / named;
//   hostile    inputs that must be refused with 400 in OpenAI's error shape within HOSTILE_MAX_MS (10,000
//              properties, $ref cycles with no base case, bad regexes, invalid EBNF, a schema that is not JSON,
//              minItems > maxItems, ...) and valid but pathological ones that must be answered quickly
//              ((a*)*b, (a|aa)*c: the engine compiles regexes to automata, nothing backtracks), while a streamed
//              generation runs alongside: its tokens must keep coming (no step waits on a compile); then a
//              normal request still works.
// Requests carry seeds (temperature 1), so a failure can be replayed: the message names schema, mode and seed.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import OpenAI from 'openai';

import { baseUrl, check, checkErrorShape, finish, part, post, setSection } from './lib.mjs';

const Ajv2020 = Ajv2020Module.default || Ajv2020Module;
const addFormats = addFormatsModule.default || addFormatsModule;

const MODEL = 'json_tiny';
const MAX_TOKENS = 3000;     // max_model_len 4096, prompts of ~30 tokens
const CONCURRENCY = 4;       // requests in flight at once
const ROUNDS = Number(process.env.STRUCTURED_ROUNDS || 4); // samples of each schema per mode (other seeds)
// STRUCTURED_SLOW: the wrapper's factor for time bounds (1 for a Release build; more for Debug and sanitizers)
const SLOW = Number(process.env.STRUCTURED_SLOW || 1);
const HOSTILE_MAX_MS = 5000 * SLOW; // a refusal (or a pathological regex's answer) within this
const STALL_MAX_MS = 3000 * SLOW;   // the longest pause of a concurrent stream while hostile requests compile

const here = path.dirname(fileURLToPath(import.meta.url));
const base = baseUrl(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 180000 * SLOW });
const corpus = JSON.parse(fs.readFileSync(path.join(here, 'structured_schemas.json'), 'utf8')).schemas;
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv, { mode: 'full' });

// Three of ajv-formats' checks are stricter than the RFCs the JSON Schema spec names for them (draft 2020-12
// validation §7.3), so they are replaced here by the RFCs' ABNF (everything else is ajv-formats' full mode: date,
// time, date-time, duration, ipv4, ipv6, hostname, uuid, uri-reference, json-pointer, relative-json-pointer):
//   email         RFC 5321 §4.1.2 Mailbox: a Domain is sub-domain *("." sub-domain), one label is enough
//                 (ajv wants a dot: "a@b" fails there); local part a Dot-string or a Quoted-string;
//   uri           RFC 3986 §3: hier-part may be path-empty ("urn:", "a:?q", "a:#f" are URIs; ajv refuses them);
//   uri-template  RFC 6570 §2.3: varname = varchar *(["."] varchar) ("{a.b}"; ajv refuses the dot).
const PCT = '%[0-9A-Fa-f]{2}';
const UNRESERVED = 'A-Za-z0-9\\-._~';
const SUB_DELIMS = "!$&'()*+,;=";
const DEC_OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IPV4 = `${DEC_OCTET}(?:\\.${DEC_OCTET}){3}`;
const H16 = '[0-9A-Fa-f]{1,4}';
const LS32 = `(?:${H16}:${H16}|${IPV4})`;
const h16s = (n) => `(?:${H16}:){${n}}`;
const before = (n) => (n < 0 ? '' : `(?:(?:${H16}:){0,${n}}${H16})?`);
const IPV6 = '(?:' + [
  `${h16s(6)}${LS32}`, `::${h16s(5)}${LS32}`, `${before(0)}::${h16s(4)}${LS32}`, `${before(1)}::${h16s(3)}${LS32}`,
  `${before(2)}::${h16s(2)}${LS32}`, `${before(3)}::${H16}:${LS32}`, `${before(4)}::${LS32}`, `${before(5)}::${H16}`,
  `${before(6)}::`,
].join('|') + ')';
const PCHAR = `(?:[${UNRESERVED}${SUB_DELIMS}:@]|${PCT})`;
const URI_RE = new RegExp(
  `^[A-Za-z][A-Za-z0-9+.\\-]*:` +
    `(?://(?:(?:[${UNRESERVED}${SUB_DELIMS}:]|${PCT})*@)?` +
    `(?:\\[(?:${IPV6}|v[0-9A-Fa-f]+\\.[${UNRESERVED}${SUB_DELIMS}:]+)\\]|${IPV4}|(?:[${UNRESERVED}${SUB_DELIMS}]|${PCT})*)` +
    `(?::\\d*)?(?:/${PCHAR}*)*` +
    `|/(?:${PCHAR}+(?:/${PCHAR}*)*)?|${PCHAR}+(?:/${PCHAR}*)*|)` +
    `(?:\\?(?:${PCHAR}|[/?])*)?(?:#(?:${PCHAR}|[/?])*)?$`,
);
const ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const SUB_DOMAIN = '[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
const EMAIL_RE = new RegExp(
  `^(?:${ATEXT}+(?:\\.${ATEXT}+)*|"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])*")@` +
    `(?:${SUB_DOMAIN}(?:\\.${SUB_DOMAIN})*|\\[(?:${IPV4}|IPv6:${IPV6}|[A-Za-z0-9-]*[A-Za-z0-9]:[\\x21-\\x5A\\x5E-\\x7E]+)\\])$`,
);
const VARCHAR = `(?:[A-Za-z0-9_]|${PCT})`;
const VARSPEC = `${VARCHAR}(?:\\.?${VARCHAR})*(?::[1-9]\\d{0,3}|\\*)?`;
const UCSCHAR = '\\u{A0}-\\u{D7FF}\\u{F900}-\\u{FDCF}\\u{FDF0}-\\u{FFEF}\\u{10000}-\\u{1FFFD}\\u{20000}-\\u{2FFFD}\\u{30000}-\\u{3FFFD}';
const URI_TEMPLATE_RE = new RegExp(
  `^(?:[\\x21\\x23\\x24\\x26\\x28-\\x3B\\x3D\\x3F-\\x5B\\x5D\\x5F\\x61-\\x7A\\x7E${UCSCHAR}\\u{E000}-\\u{F8FF}]|${PCT}|` +
    `\\{[+#./;?&=,!@|]?${VARSPEC}(?:,${VARSPEC})*\\})*$`,
  'u',
);
ajv.addFormat('email', EMAIL_RE);
ajv.addFormat('uri', URI_RE);
ajv.addFormat('uri-template', URI_TEMPLATE_RE);
const stats = { requests: 0, tokens: 0, byPart: {}, invalid: {} };
const t0 = Date.now();

function count(usage) {
  stats.requests++;
  if (usage && typeof usage.completion_tokens === 'number') stats.tokens += usage.completion_tokens;
}

// Runs the async thunks, at most `limit` at once; a thunk that throws is a failed check (the others go on).
async function pool(thunks, limit = CONCURRENCY) {
  let next = 0;
  const worker = async () => {
    while (next < thunks.length) {
      const k = next++;
      try {
        await thunks[k]();
      } catch (e) {
        check(false, `request ${k} of the part threw ${e && e.name}`, (e && (e.stack || e.message)) || String(e));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, thunks.length) }, worker));
}

// ajv's validator of a schema (compiled once; "$schema" of another draft dropped: ajv 2020 does not load it)
const validators = new Map();
function validatorOf(name, schema) {
  if (!validators.has(name)) {
    const s = structuredClone(schema);
    if (s && typeof s === 'object') delete s.$schema;
    validators.set(name, ajv.compile(s));
  }
  return validators.get(name);
}

// The text is compact JSON as xgrammar writes it without any_whitespace: outside strings no whitespace but the
// one space after ':' and ','.
function compactProblem(text) {
  let inStr = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inStr) {
      if (c === '\\') i++;
      else if (c === '"') inStr = false;
      continue;
    }
    if (c === '"') inStr = true;
    else if (c === ' ' || c === '\n' || c === '\t' || c === '\r') {
      if (c !== ' ' || (text[i - 1] !== ':' && text[i - 1] !== ',')) return `whitespace ${JSON.stringify(c)} at ${i}`;
      if (text[i + 1] === ' ') return `two spaces at ${i}`;
    }
  }
  return null;
}

// One output against its schema: finish_reason stop, JSON, valid. what names the request for the failure line.
function checkJsonOutput(what, schemaName, schema, text, finishReason, { compact = false, parsed } = {}) {
  if (!check(finishReason === 'stop', `${what}: finish_reason stop`, { finish_reason: finishReason, text }))
    return false;
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    check(false, `${what}: output is JSON`, { error: e.message, text });
    return false;
  }
  if (parsed !== undefined)
    check(JSON.stringify(parsed) === JSON.stringify(value), `${what}: the client's message.parsed is the output`, { parsed, text });
  const validate = validatorOf(schemaName, schema);
  const ok = validate(value);
  if (!ok) {
    console.error(`INVALID ${what}: ${JSON.stringify(text).slice(0, 4000)}\n  ajv: ${JSON.stringify(validate.errors)}`);
    for (const e of validate.errors || []) {
      const k = e.keyword === 'format' ? `format ${e.params.format}` : e.keyword;
      stats.invalid[k] = (stats.invalid[k] || 0) + 1;
    }
  }
  check(ok, `${what}: output validates against its schema`, { errors: validate.errors, text });
  if (compact) {
    const p = compactProblem(text);
    check(p === null, `${what}: compact output (disable_any_whitespace)`, { problem: p, text });
  }
  return ok;
}

const messages = (content) => [{ role: 'user', content }];

// ---- the corpus ----------------------------------------------------------------------------------------------

await part('corpus', async () => {
  check(corpus.length >= 40, `corpus has at least 40 schemas`, corpus.length);
  const names = new Set(corpus.map((c) => c.name));
  check(names.size === corpus.length, 'schema names are unique');
  for (const c of corpus) {
    try {
      validatorOf(c.name, c.schema);
    } catch (e) {
      check(false, `${c.name}: ajv compiles the schema`, e.message);
    }
  }
  const jobs = [];
  for (let round = 0; round < ROUNDS; round++) corpus.forEach((c, i) => {
    const seed = 10000 * round + 1000 + i;
    jobs.push(async () => {
      const what = `${c.name} chat response_format json_schema seed ${seed}`;
      try {
        const r = await client.chat.completions.parse({
          model: MODEL,
          messages: messages(`Reply with a ${c.name} as JSON.`),
          response_format: { type: 'json_schema', json_schema: { name: c.name.slice(0, 64), schema: c.schema, strict: true } },
          temperature: 1,
          seed,
          max_tokens: MAX_TOKENS,
        });
        count(r.usage);
        const ch = r.choices[0];
        checkJsonOutput(what, c.name, c.schema, ch.message.content, ch.finish_reason, { parsed: ch.message.parsed });
      } catch (e) {
        let detail = `${e.name}: ${e.message}`;
        if (e.name === 'LengthFinishReasonError') {
          // parse() throws without the text: the same seed again through create() to show it
          const again = await client.chat.completions.create({
            model: MODEL, messages: messages(`Reply with a ${c.name} as JSON.`), temperature: 1, seed, max_tokens: MAX_TOKENS,
            response_format: { type: 'json_schema', json_schema: { name: c.name.slice(0, 64), schema: c.schema, strict: true } },
          });
          detail = { finish_reason: again.choices[0].finish_reason, text: again.choices[0].message.content };
          console.error(`LENGTH ${what}: ${JSON.stringify(detail.text).slice(0, 4000)}`);
        }
        check(false, `${what}: request failed`, detail);
      }
    });
    jobs.push(async () => {
      const what = `${c.name} completions structured_outputs.json compact seed ${seed + 500}`;
      try {
        const r = await client.completions.create({
          model: MODEL,
          prompt: `A ${c.name} in JSON: `,
          structured_outputs: { json: c.schema, disable_any_whitespace: true },
          temperature: 1,
          seed: seed + 500,
          max_tokens: MAX_TOKENS,
        });
        count(r.usage);
        checkJsonOutput(what, c.name, c.schema, r.choices[0].text, r.choices[0].finish_reason, { compact: true });
      } catch (e) {
        check(false, `${what}: request failed`, `${e.name}: ${e.message}`);
      }
    });
    if (i % 4 === 0) {
      jobs.push(async () => {
        const what = `${c.name} chat stream response_format + disable_any_whitespace seed ${seed + 2000}`;
        try {
          const stream = client.chat.completions.stream({
            model: MODEL,
            messages: messages(`Stream a ${c.name} as JSON.`),
            response_format: { type: 'json_schema', json_schema: { name: c.name.slice(0, 64), schema: c.schema } },
            structured_outputs: { disable_any_whitespace: true },
            temperature: 1,
            seed: seed + 2000,
            max_tokens: MAX_TOKENS,
            stream_options: { include_usage: true },
          });
          let deltas = '';
          for await (const chunk of stream) for (const ch of chunk.choices || []) deltas += ch.delta?.content || '';
          const fin = await stream.finalChatCompletion();
          count(fin.usage);
          const ch = fin.choices[0];
          check(deltas === ch.message.content, `${what}: deltas add up to the message`, { deltas, content: ch.message.content });
          // (the stream helper parses only zod formats: message.parsed is null here)
          checkJsonOutput(what, c.name, c.schema, ch.message.content, ch.finish_reason, { compact: true });
        } catch (e) {
          check(false, `${what}: request failed`, `${e.name}: ${e.message}`);
        }
      });
    }
  });
  // the older guided_json field for a few
  for (const i of [0, 5, 9]) {
    const c = corpus[i];
    jobs.push(async () => {
      const what = `${c.name} guided_json seed ${7000 + i}`;
      const res = await post(base, '/v1/chat/completions', {
        model: MODEL, messages: messages('JSON please'), guided_json: c.schema, temperature: 1, seed: 7000 + i,
        max_tokens: MAX_TOKENS,
      });
      count(res.json && res.json.usage);
      if (!check(res.status === 200, `${what}: 200`, res.text)) return;
      const ch = res.json.choices[0];
      checkJsonOutput(what, c.name, c.schema, ch.message.content, ch.finish_reason);
    });
  }
  const t = Date.now();
  await pool(jobs);
  stats.byPart.corpus = { requests: jobs.length, ms: Date.now() - t };
});

// ---- json_object ---------------------------------------------------------------------------------------------

await part('json_object', async () => {
  const jobs = [];
  for (let k = 0; k < 6; k++) {
    jobs.push(async () => {
      const what = `chat response_format json_object seed ${3000 + k}`;
      const r = await client.chat.completions.create({
        model: MODEL, messages: messages('Any JSON object.'), response_format: { type: 'json_object' },
        temperature: 1, seed: 3000 + k, max_tokens: MAX_TOKENS,
      });
      count(r.usage);
      const ch = r.choices[0];
      if (!check(ch.finish_reason === 'stop', `${what}: finish_reason stop`, ch)) return;
      let v;
      try {
        v = JSON.parse(ch.message.content);
      } catch (e) {
        check(false, `${what}: JSON`, { error: e.message, text: ch.message.content });
        return;
      }
      check(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: an object`, ch.message.content);
    });
  }
  for (let k = 0; k < 3; k++) {
    jobs.push(async () => {
      const what = `completions structured_outputs.json_object compact seed ${3100 + k}`;
      const r = await client.completions.create({
        model: MODEL, prompt: '{}', structured_outputs: { json_object: true, disable_any_whitespace: true },
        temperature: 1, seed: 3100 + k, max_tokens: MAX_TOKENS,
      });
      count(r.usage);
      const c = r.choices[0];
      if (!check(c.finish_reason === 'stop', `${what}: finish_reason stop`, c)) return;
      let v;
      try {
        v = JSON.parse(c.text);
      } catch (e) {
        check(false, `${what}: JSON`, { error: e.message, text: c.text });
        return;
      }
      check(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: an object`, c.text);
      check(compactProblem(c.text) === null, `${what}: compact`, { problem: compactProblem(c.text), text: c.text });
    });
  }
  await pool(jobs);
});

// ---- special tokens' text ------------------------------------------------------------------------------------

// The vocabulary's special tokens <s> and <unk> (not stop tokens) have text; a grammar that reads them as that text
// lets "<s>" be sampled as one token inside a string, and a reply that drops special tokens (skip_special_tokens,
// the default) then shows a different string from the one the grammar accepted. The reply must still validate.
await part('special_tokens', async () => {
  const cases = [
    ['enum of special-token texts', { enum: ['<s>', '<unk>', '</s>'] }],
    ['string of exactly 3 characters', { type: 'string', minLength: 3, maxLength: 3 }],
    ['pattern over special-token text', { type: 'string', pattern: '^(<s>|<unk>|x){2}$' }],
  ];
  const jobs = [];
  cases.forEach(([name, schema], i) => {
    for (let seed = 0; seed < 16; seed++) {
      jobs.push(async () => {
        const what = `${name} seed ${seed}`;
        const r = await client.completions.create({
          model: MODEL, prompt: 'x', structured_outputs: { json: schema }, temperature: 1, seed, max_tokens: 100,
          logprobs: 0,
        });
        count(r.usage);
        const c = r.choices[0];
        const ok = checkJsonOutput(what, `special ${i}`, schema, c.text, c.finish_reason);
        if (!ok) console.error(`  tokens: ${JSON.stringify(c.logprobs && c.logprobs.tokens)}`);
      });
    }
  });
  await pool(jobs);
});

// ---- regex, choice, grammar ----------------------------------------------------------------------------------

// [regex, JavaScript flags]: the output must match ^(?:regex)$
const REGEXES = [
  ['\\(\\d{3}\\) \\d{3}-\\d{4}', ''],
  ['\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])', ''],
  ['((25[0-5]|2[0-4]\\d|1?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1?\\d?\\d)', ''],
  ['#[0-9a-fA-F]{6}', ''],
  ['[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,10}(\\.[a-z0-9-]{1,10}){0,2}\\.[a-z]{2,4}', ''],
  ['(yes|no|maybe)', ''],
  ['[A-Z][a-z]{0,8}( [A-Z][a-z]{0,8}){0,3}', ''],
  ['-?(0|[1-9]\\d{0,5})(\\.\\d{1,4})?([eE][+-]?\\d{1,2})?', ''],
  ['\\w{1,12}', ''],
  ['[^"\\\\]{0,20}', 'u'],
  ['(ab|cd){2,5}x?', ''],
  ['(\u00e9|\u20ac|\ud83d\ude00){1,4}', 'u'],
  ['.{5}', 'u'],
  ['\\d{3}-\\d{2}-\\d{4}', ''],
  ['[^a-z]{3,6}', 'u'],
  ['(a*)*b', ''],
  ['(a|aa)*c', ''],
  ['(x+x+)+y', ''],
  ['(\\w+\\s?)*!', ''],
];

const GRAMMARS = [
  ['root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]{1,3} | "(" expr ")"', null],
  ['root ::= "SELECT " cols " FROM " name ";"\ncols ::= name (", " name){0,3}\nname ::= [a-z] [a-z0-9_]{0,7}',
    /^SELECT [a-z][a-z0-9_]{0,7}(, [a-z][a-z0-9_]{0,7}){0,3} FROM [a-z][a-z0-9_]{0,7};$/],
  ['root ::= "[" (item ("," item)*)? "]"\nitem ::= "true" | "false" | "null"', /^\[((true|false|null)(,(true|false|null))*)?\]$/],
];

// balanced parentheses of the arithmetic grammar, checked by hand (a regular expression cannot)
function isArith(s) {
  let i = 0;
  const term = () => {
    if (s[i] === '(') {
      i++;
      if (!expr() || s[i] !== ')') return false;
      i++;
      return true;
    }
    const m = /^[0-9]{1,3}/.exec(s.slice(i));
    if (!m) return false;
    i += m[0].length;
    return !/^[0-9]/.test(s.slice(i));
  };
  const expr = () => {
    if (!term()) return false;
    while (s[i] === '+' || s[i] === '-') {
      i++;
      if (!term()) return false;
    }
    return true;
  };
  return expr() && i === s.length;
}

await part('regex_choice_grammar', async () => {
  const jobs = [];
  REGEXES.forEach(([re, flags], i) => {
    const rx = new RegExp(`^(?:${re})$`, flags);
    for (const field of ['structured_outputs', 'guided_regex']) {
      for (let s = 0; s < 2; s++) {
        const seed = 4000 + i * 10 + s + (field === 'guided_regex' ? 5 : 0);
        jobs.push(async () => {
          const what = `regex ${JSON.stringify(re)} via ${field} seed ${seed}`;
          const extra = field === 'structured_outputs' ? { structured_outputs: { regex: re } } : { guided_regex: re };
          const t = Date.now();
          const r = field === 'structured_outputs'
            ? await client.completions.create({ model: MODEL, prompt: 'text: ', temperature: 1, seed, max_tokens: 500, ...extra })
            : await client.chat.completions.create({ model: MODEL, messages: messages('text'), temperature: 1, seed, max_tokens: 500, ...extra });
          count(r.usage);
          const ch = r.choices[0];
          const text = field === 'structured_outputs' ? ch.text : ch.message.content;
          check(ch.finish_reason === 'stop', `${what}: finish_reason stop`, { finish_reason: ch.finish_reason, text });
          check(rx.test(text), `${what}: output matches`, text);
          check(Date.now() - t < 60000 * SLOW, `${what}: answered in under a minute`, Date.now() - t);
        });
      }
    }
  });
  const CHOICES = [
    ['positive', 'negative', 'neutral'],
    ['a', 'ab', 'abc', '\u00e9\ud83d\ude00', 'with "quote"', 'new\nline', '}, {', ''],
  ];
  CHOICES.forEach((choices, i) => {
    for (let s = 0; s < 4; s++) {
      const seed = 5000 + i * 10 + s;
      const viaSo = s % 2 === 0;
      jobs.push(async () => {
        const what = `choice ${JSON.stringify(choices)} via ${viaSo ? 'structured_outputs' : 'guided_choice'} seed ${seed}`;
        const r = await client.chat.completions.create({
          model: MODEL, messages: messages('pick one'), temperature: 1, seed, max_tokens: 100,
          ...(viaSo ? { structured_outputs: { choice: choices } } : { guided_choice: choices }),
        });
        count(r.usage);
        const ch = r.choices[0];
        check(ch.finish_reason === 'stop', `${what}: finish_reason stop`, ch);
        check(choices.includes(ch.message.content), `${what}: output is one of the choices`, ch.message.content);
      });
    }
  });
  GRAMMARS.forEach(([g, rx], i) => {
    for (let s = 0; s < 3; s++) {
      const seed = 6000 + i * 10 + s;
      const viaSo = s !== 2;
      jobs.push(async () => {
        const what = `grammar ${i} via ${viaSo ? 'structured_outputs' : 'guided_grammar'} seed ${seed}`;
        const r = await client.completions.create({
          model: MODEL, prompt: 'out: ', temperature: 1, seed, max_tokens: 1000,
          ...(viaSo ? { structured_outputs: { grammar: g } } : { guided_grammar: g }),
        });
        count(r.usage);
        const c = r.choices[0];
        check(c.finish_reason === 'stop', `${what}: finish_reason stop`, c);
        check(rx ? rx.test(c.text) : isArith(c.text), `${what}: output is a sentence of the grammar`, c.text);
      });
    }
  });
  const t = Date.now();
  await pool(jobs);
  stats.byPart.regex_choice_grammar = { requests: jobs.length, ms: Date.now() - t };
});

// ---- tool_choice required / named ----------------------------------------------------------------------------

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      strict: true,
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['city', 'unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      strict: true,
      parameters: {
        $defs: { Filter: { type: 'object', properties: { field: { type: 'string', maxLength: 8 }, op: { enum: ['eq', 'lt', 'gt'] } }, required: ['field', 'op'] } },
        type: 'object',
        properties: { q: { type: 'string', maxLength: 20 }, filters: { type: 'array', items: { $ref: '#/$defs/Filter' }, maxItems: 2 } },
        required: ['q'],
      },
    },
  },
];

await part('tool_choice', async () => {
  const jobs = [];
  const toolCheck = (what, r) => {
    count(r.usage);
    const ch = r.choices[0];
    const calls = ch.message.tool_calls || [];
    check(calls.length >= 1, `${what}: at least one tool call`, ch.message);
    for (const call of calls) {
      const tool = TOOLS.find((t) => t.function.name === call.function.name);
      if (!check(tool, `${what}: a known tool`, call)) continue;
      let args;
      try {
        args = JSON.parse(call.function.arguments);
      } catch (e) {
        check(false, `${what}: arguments are JSON`, call.function.arguments);
        continue;
      }
      const v = validatorOf(`tool ${tool.function.name}`, tool.function.parameters);
      check(v(args), `${what}: ${tool.function.name} arguments validate`, { errors: v.errors, args: call.function.arguments });
    }
    return calls;
  };
  for (let s = 0; s < 3; s++) {
    jobs.push(async () => {
      const what = `tool_choice required seed ${8000 + s}`;
      const r = await client.chat.completions.parse({
        model: MODEL, messages: messages('call tools'), tools: TOOLS, tool_choice: 'required', temperature: 1,
        seed: 8000 + s, max_tokens: MAX_TOKENS,
      });
      toolCheck(what, r);
      check(r.choices[0].finish_reason === 'tool_calls', `${what}: finish_reason tool_calls`, r.choices[0].finish_reason);
    });
    for (const name of ['get_weather', 'search']) {
      jobs.push(async () => {
        const what = `tool_choice named ${name} seed ${8100 + s}`;
        const r = await client.chat.completions.parse({
          model: MODEL, messages: messages('call it'), tools: TOOLS, tool_choice: { type: 'function', function: { name } },
          temperature: 1, seed: 8100 + s, max_tokens: MAX_TOKENS,
        });
        const calls = toolCheck(what, r);
        check(calls.length === 1 && calls[0].function.name === name, `${what}: one call of ${name}`, calls);
      });
    }
  }
  await pool(jobs);
});

// ---- hostile inputs ------------------------------------------------------------------------------------------

const many = (n, f) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, f(i)]));
function nested(depth) {
  let s = { type: 'integer' };
  for (let i = 0; i < depth; i++) s = { type: 'object', properties: { a: s }, required: ['a'] };
  return s;
}
const chat = (extra) => ({ path: '/v1/chat/completions', body: { model: MODEL, messages: messages('x'), max_tokens: 50, ...extra } });
const cmpl = (extra) => ({ path: '/v1/completions', body: { model: MODEL, prompt: 'x', max_tokens: 50, ...extra } });
const rfSchema = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'h', schema } } });

// refused: 400 with OpenAI's error shape, within HOSTILE_MAX_MS
const REFUSED = [
  ['10,000 required properties (response_format)', chat(rfSchema({ type: 'object', properties: many(10000, () => ({ type: 'integer' })), required: Object.keys(many(10000, () => 0)) }))],
  ['10,000 optional properties (structured_outputs.json)', cmpl({ structured_outputs: { json: { type: 'object', properties: many(10000, () => ({ type: 'string' })) } } })],
  ['$ref cycle with no base case', chat(rfSchema({ $ref: '#/$defs/n', $defs: { n: { $ref: '#/$defs/n' } } }))],
  ['$ref cycle through anyOf, no base case', cmpl({ structured_outputs: { json: { $defs: { a: { anyOf: [{ $ref: '#/$defs/b' }] }, b: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' } } })],
  ['$ref to nothing', chat(rfSchema({ type: 'object', properties: { x: { $ref: '#/$defs/missing' } } }))],
  ['minItems > maxItems', chat(rfSchema({ type: 'array', items: { type: 'integer' }, minItems: 5, maxItems: 3 }))],
  ['minLength > maxLength', cmpl({ structured_outputs: { json: { type: 'string', minLength: 9, maxLength: 2 } } })],
  ['minimum > maximum', cmpl({ structured_outputs: { json: { type: 'integer', minimum: 10, maximum: 2 } } })],
  ['schema that is not JSON (response_format)', chat(rfSchema('{"type": "object", "properties": {'))],
  ['schema that is not JSON (structured_outputs.json)', cmpl({ structured_outputs: { json: '{not json' } })],
  ['schema that is not JSON (guided_json)', chat({ guided_json: '[1, 2' })],
  ['schema false', chat(rfSchema(false))],
  ['unsupported multipleOf', chat(rfSchema({ type: 'integer', multipleOf: 3 }))],
  ['unsupported uniqueItems', cmpl({ structured_outputs: { json: { type: 'array', uniqueItems: true } } })],
  ['schema nested 1,000 deep', cmpl({ structured_outputs: { json: nested(1000) } })],
  ['regex: unclosed group', cmpl({ structured_outputs: { regex: '(ab' } })],
  ['regex: repetition range out of order', chat({ guided_regex: 'a{5,3}' })],
  ['regex: repeat count 100,000', cmpl({ structured_outputs: { regex: '[a-z]{1,100000}' } })],
  ['regex: nothing to repeat', cmpl({ structured_outputs: { regex: '*a' } })],
  ['grammar: unclosed parenthesis', cmpl({ structured_outputs: { grammar: 'root ::= ("a"' } })],
  ['grammar: undefined rule', cmpl({ structured_outputs: { grammar: 'root ::= foo' } })],
  ['grammar: no root rule', chat({ guided_grammar: 'start ::= "a"' })],
  ['grammar: reversed class range', cmpl({ structured_outputs: { grammar: 'root ::= [z-a]' } })],
  ['grammar: not EBNF at all', cmpl({ structured_outputs: { grammar: 'SELECT * FROM t WHERE' } })],
  ['grammar: 100,000 nested parentheses', cmpl({ structured_outputs: { grammar: 'root ::= ' + '('.repeat(100000) + '"a"' + ')'.repeat(100000) } })],
  ['grammar: 5,000 rules', cmpl({ structured_outputs: { grammar: 'root ::= r0\n' + Array.from({ length: 5000 }, (_, i) => `r${i} ::= "a"${i < 4999 ? ` r${i + 1}` : ''}`).join('\n') } })],
  ['choice: empty list', chat({ structured_outputs: { choice: [] } })],
  ['two constraints at once', cmpl({ structured_outputs: { json: { type: 'string' }, regex: 'a+' } })],
  ['constraint plus tool_choice required', chat({ structured_outputs: { regex: 'a' }, tools: TOOLS, tool_choice: 'required' })],
];

// valid but pathological: answered 200 within HOSTILE_MAX_MS; regexes match, the schema without a finite
// member (vLLM admits it: has_non_terminating_ref_cycle only refuses cycles that emit nothing) ends at max_tokens
const ANSWERED = [
  ['catastrophic regex (a*)*b', cmpl({ structured_outputs: { regex: '(a*)*b' }, temperature: 1, seed: 1 }), /^(?:(a*)*b)$/, 'stop'],
  ['catastrophic regex (a|aa)*c', cmpl({ structured_outputs: { regex: '(a|aa)*c' }, temperature: 1, seed: 2 }), /^(?:(a|aa)*c)$/, 'stop'],
  ['catastrophic regex ^(a+)+$', cmpl({ structured_outputs: { regex: '^(a+)+$' }, temperature: 1, seed: 3, max_tokens: 20 }), /^a+$/, null],
  ['regex (a{1000}){1000}: a million-state automaton', cmpl({ structured_outputs: { regex: '(a{1000}){1000}' }, temperature: 1, seed: 4, max_tokens: 20 }), /^a{1,20}$/, 'length'],
  ['required self-recursion (no finite member)', cmpl({ structured_outputs: { json: { $defs: { A: { type: 'object', properties: { a: { $ref: '#/$defs/A' } }, required: ['a'] } }, $ref: '#/$defs/A' } }, temperature: 1, seed: 5, max_tokens: 200 }), null, 'length'],
  ['10,000-value enum', cmpl({ structured_outputs: { json: { enum: Array.from({ length: 10000 }, (_, i) => `v${i}`) } }, temperature: 1, seed: 6 }), /^"v\d+"$/, 'stop'],
];

await part('hostile', async () => {
  // a long unconstrained stream alongside: its chunks must keep coming while the hostile requests compile
  const arrivals = [];
  const streamDone = (async () => {
    const s = await client.completions.create({
      model: MODEL, prompt: 'Once', max_tokens: 3500, temperature: 1, seed: 9, ignore_eos: true, stream: true,
    });
    for await (const chunk of s) {
      arrivals.push(Date.now());
      if (chunk.usage) count(chunk.usage);
    }
  })();
  while (arrivals.length < 5) await new Promise((r) => setTimeout(r, 10));
  const from = Date.now();
  for (const [name, req] of REFUSED) {
    setSection(`hostile: ${name}`);
    const t = Date.now();
    let res;
    try {
      res = await post(base, req.path, req.body, { timeoutMs: 60000 * SLOW });
    } catch (e) {
      check(false, 'answered', e.message);
      continue;
    }
    const ms = Date.now() - t;
    stats.requests++;
    console.error(`  hostile ${name}: ${res.status} in ${ms} ms: ${(res.json && res.json.error && res.json.error.message || res.text).slice(0, 160)}`);
    check(res.status === 400, 'answered 400', { status: res.status, body: res.text.slice(0, 300) });
    if (res.status === 400) checkErrorShape(res, 400, name);
    check(ms < HOSTILE_MAX_MS, `answered within ${HOSTILE_MAX_MS} ms`, ms);
  }
  for (const [name, req, rx, fin] of ANSWERED) {
    setSection(`hostile: ${name}`);
    const t = Date.now();
    const res = await post(base, req.path, req.body, { timeoutMs: 60000 * SLOW });
    const ms = Date.now() - t;
    stats.requests++;
    const c = res.json && res.json.choices && res.json.choices[0];
    console.error(`  valid ${name}: ${res.status} in ${ms} ms, finish ${c && c.finish_reason}`);
    if (!check(res.status === 200 && c, 'answered 200', res.text.slice(0, 300))) continue;
    count(res.json.usage);
    check(ms < HOSTILE_MAX_MS, `answered within ${HOSTILE_MAX_MS} ms`, ms);
    if (rx) check(rx.test(c.text), 'output matches', c.text);
    if (fin) check(c.finish_reason === fin, `finish_reason ${fin}`, c);
  }
  const until = Date.now();
  setSection('hostile: concurrent stream');
  await streamDone;
  let gap = 0;
  for (let i = 1; i < arrivals.length; i++) if (arrivals[i] >= from && arrivals[i - 1] <= until) gap = Math.max(gap, arrivals[i] - arrivals[i - 1]);
  const during = arrivals.filter((a) => a >= from && a <= until).length;
  console.error(`  concurrent stream: ${arrivals.length} chunks, ${during} during the hostile requests (${until - from} ms), longest pause ${gap} ms`);
  check(arrivals.length > 100, 'the concurrent stream ran', arrivals.length);
  check(gap < STALL_MAX_MS, `no pause over ${STALL_MAX_MS} ms in the concurrent stream while hostile requests were answered`, gap);

  setSection('hostile: a normal request afterwards');
  const c = corpus.find((x) => x.name === 'pydantic_order') || corpus[0];
  const r = await client.chat.completions.parse({
    model: MODEL, messages: messages('order'), temperature: 1, seed: 42, max_tokens: MAX_TOKENS,
    response_format: { type: 'json_schema', json_schema: { name: 'after', schema: c.schema } },
  });
  count(r.usage);
  checkJsonOutput(`${c.name} after the hostile requests`, c.name, c.schema, r.choices[0].message.content, r.choices[0].finish_reason, { parsed: r.choices[0].message.parsed });
});

const secs = ((Date.now() - t0) / 1000).toFixed(1);
console.error(`structured: ${stats.requests} requests, ${stats.tokens} completion tokens in ${secs} s; ${JSON.stringify(stats.byPart)}`);
if (Object.keys(stats.invalid).length) console.error(`structured: outputs that did not validate, by failing keyword: ${JSON.stringify(stats.invalid)}`);
finish('structured.mjs');
