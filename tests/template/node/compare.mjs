// compare.mjs: renders every chat template x conversation with @huggingface/jinja (the
// reference, as transformers.js uses it) and with `vllmc chat-template`, and reports any
// byte difference (exit 1). With --write, (re)writes tests/template/expected/ from the
// reference renders (used by the C test test_chat_templates.c).
// Usage: node tests/template/node/compare.mjs path/to/vllmc [--write]
// Templates: the npm ones (tests/template/fetch.sh puts them in .cache/npm/template/) and the
// committed tests/template/templates/<name>.jinja (bos/eos from templates/tokens.json).
import { Template } from "@huggingface/jinja";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const bin = process.argv[2];
const write = process.argv.includes("--write");
if (!bin) {
  console.error("usage: node compare.mjs path/to/vllmc [--write]");
  process.exit(2);
}
// vllmc reads SOURCE_DATE_EPOCH for strftime_now (@huggingface/jinja's own uses today's date).
const EPOCH = 1735689600; // 2025-01-01T00:00:00Z
// ... so pin the reference's clock to the same instant, in UTC (strftime_now reads `new Date()`).
process.env.TZ = "UTC";
const RealDate = globalThis.Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    if (a.length === 0) super(EPOCH * 1000);
    else super(...a);
  }
  static now() {
    return EPOCH * 1000;
  }
};
function tokenStr(t) {
  if (t && typeof t === "object") return t.content;
  return t ?? undefined;
}

const convs = JSON.parse(fs.readFileSync(path.join(root, "tests/template/conversations.json"), "utf8"));
const tdir = path.join(root, ".cache/npm/template");
const expDir = path.join(root, "tests/template/expected");
if (write) fs.mkdirSync(expDir, { recursive: true });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "vllmc-ct-"));
let total = 0, same = 0, skipped = 0;
const perTemplate = {};
// name -> { dir (a --model folder), src, bos_token, eos_token }
const sources = [];
for (const name of fs.readdirSync(tdir).sort()) {
  const dir = path.join(tdir, name);
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (typeof cfg.chat_template !== "string") continue;
  sources.push({ name, dir, src: cfg.chat_template, bos_token: tokenStr(cfg.bos_token), eos_token: tokenStr(cfg.eos_token) });
}
const jdir = path.join(root, "tests/template/templates");
const tokens = JSON.parse(fs.readFileSync(path.join(jdir, "tokens.json"), "utf8"));
for (const file of fs.readdirSync(jdir).sort()) {
  if (!file.endsWith(".jinja")) continue;
  const name = file.slice(0, -".jinja".length);
  const src = fs.readFileSync(path.join(jdir, file), "utf8");
  const tok = tokens[name] ?? {};
  const dir = path.join(tmp, "model-" + name); // chat_template.jinja + tokenizer_config.json
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, "chat_template.jinja"), src);
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(tok));
  sources.push({ name, dir, src, bos_token: tok.bos_token, eos_token: tok.eos_token });
}
for (const { name, dir, src, bos_token, eos_token } of sources) {
  const tpl = new Template(src);
  perTemplate[name] = [0, 0];
  for (const conv of convs) {
    if (conv.templates && !conv.templates.includes(name)) continue;
    const agp = conv.add_generation_prompt ?? true;
    const ctx = { messages: conv.messages, add_generation_prompt: agp, bos_token, eos_token, ...(conv.vars ?? {}) };
    if (conv.tools) ctx.tools = conv.tools;
    let want, wantErr = null;
    try {
      want = tpl.render(ctx); // raise_exception and strftime_now are built into @huggingface/jinja
    } catch (e) {
      wantErr = String(e.message ?? e);
    }
    const mfile = path.join(tmp, "messages.json");
    fs.writeFileSync(mfile, JSON.stringify(conv.messages));
    const args = ["chat-template", "--model", dir, "--messages", mfile];
    if (!agp) args.push("--no-generation-prompt");
    if (conv.tools) {
      const tfile = path.join(tmp, "tools.json");
      fs.writeFileSync(tfile, JSON.stringify(conv.tools));
      args.push("--tools", tfile);
    }
    for (const [k, v] of Object.entries(conv.vars ?? {})) args.push("--var", `${k}=${JSON.stringify(v)}`);
    let got, gotErr = null;
    try {
      got = execFileSync(bin, args, { env: { ...process.env, SOURCE_DATE_EPOCH: String(EPOCH) }, stdio: ["ignore", "pipe", "pipe"] }).toString("utf8");
    } catch (e) {
      gotErr = (e.stderr ?? "").toString().trim() || String(e);
    }
    if (conv.reference === "jinja2" && wantErr !== null) {
      // @huggingface/jinja cannot render this one (see README.md): its expected/ render comes
      // from Python jinja2 (tests/template/jinja2_oracle.py --write), which the C test checks.
      console.log(`SKIP ${name} / ${conv.name}: @huggingface/jinja: ${wantErr} (reference: jinja2_oracle.py)`);
      skipped++;
      continue;
    }
    total++;
    perTemplate[name][1]++;
    const ok = wantErr !== null ? gotErr !== null : gotErr === null && got === want;
    if (ok) {
      same++;
      perTemplate[name][0]++;
    } else {
      console.log(`MISMATCH ${name} / ${conv.name}`);
      if (wantErr !== null) console.log(`  reference error: ${wantErr}\n  vllmc: ${JSON.stringify(got)}`);
      else if (gotErr !== null) console.log(`  vllmc error: ${gotErr}`);
      else {
        let i = 0;
        while (i < want.length && want[i] === got[i]) i++;
        console.log(`  first difference at char ${i}:\n  want: ${JSON.stringify(want.slice(Math.max(0, i - 40), i + 60))}\n  got:  ${JSON.stringify(got.slice(Math.max(0, i - 40), i + 60))}`);
      }
    }
    if (write) {
      const base = path.join(expDir, `${name}__${conv.name}`);
      for (const ext of [".txt", ".err"]) fs.rmSync(base + ext, { force: true });
      if (wantErr !== null) fs.writeFileSync(base + ".err", wantErr + "\n");
      else fs.writeFileSync(base + ".txt", want);
    }
  }
}
fs.rmSync(tmp, { recursive: true, force: true });
for (const [n, [a, b]] of Object.entries(perTemplate)) console.log(`${n}: ${a}/${b} identical`);
console.log(`total: ${same}/${total} identical` + (skipped ? `, ${skipped} left to jinja2_oracle.py` : ""));
process.exit(same === total && total > 0 ? 0 : 1);
