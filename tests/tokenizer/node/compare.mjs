// compare.mjs: vllm.c's tokenizer against Hugging Face transformers.js (an independent
// implementation) on real tokenizers: every corpus string encoded with and without special
// tokens, and decodes (skip_special_tokens true/false) of the encoded ids and of random id
// sequences, through `vllmc tokenize --input` / `vllmc detokenize --input`.
//
// Usage (repo root; tokenizers fetched by tools/fetch_tokenizers.sh; `npm ci --ignore-scripts`
// run in this folder):
//   node tests/tokenizer/node/compare.mjs path/to/vllmc [--only qwen3,llama3] [--tokenizers DIR]
//        [--corpus F.jsonl] [--random N] [--strict]
// Prints one summary line per tokenizer; exits 1 on any difference (printing the first few).
// Differences explained by a listed known vllm.c issue (KNOWN below) are counted and printed
// with an example but do not fail the run unless --strict.
//
// One deliberate adjustment of the reference: Python transformers' LlamaTokenizerFast /
// GemmaTokenizerFast rebuild the post-processor from tokenizer_config.json's add_bos_token /
// add_eos_token (update_post_processor), transformers.js does not. vLLM runs the Python
// tokenizer, so for those classes the expected add_special_tokens=true ids get the BOS / EOS the
// Python tokenizer adds (only DeepSeek-V3 is affected among the six).
import { env, AutoTokenizer } from "@huggingface/transformers";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const NAMES = ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss", "llama2"];
const MAX_DIFFS = 5;

function parseArgs(argv) {
    const a = { bin: null, only: NAMES, tokDir: path.join(root, ".cache/tokenizers"),
                corpus: path.join(root, "tests/tokenizer/corpus/corpus.jsonl"), random: 300, strict: false };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i];
        if (k === "--only") a.only = argv[++i].split(",");
        else if (k === "--tokenizers") a.tokDir = path.resolve(argv[++i]);
        else if (k === "--corpus") a.corpus = path.resolve(argv[++i]);
        else if (k === "--random") a.random = parseInt(argv[++i], 10);
        else if (k === "--strict") a.strict = true;
        else if (!a.bin) a.bin = path.resolve(k);
        else throw new Error(`unknown argument ${k}`);
    }
    if (!a.bin) throw new Error("usage: node compare.mjs path/to/vllmc [--only a,b] [--tokenizers DIR] [--corpus F] [--random N] [--strict]");
    return a;
}

// mulberry32: a tiny deterministic PRNG, so the random id sequences are the same every run
function rng(seed) {
    let s = seed >>> 0;
    return () => {
        s = (s + 0x6d2b79f5) >>> 0;
        let t = s;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const show = (s, n = 160) => {
    const j = JSON.stringify(s);
    return j.length > n ? j.slice(0, n) + `... (${s.length} chars)` : j;
};

// ids around the first difference, so long sequences stay readable
function showIds(want, got) {
    let i = 0;
    while (i < want.length && i < got.length && want[i] === got[i]) i++;
    const lo = Math.max(0, i - 3);
    const cut = (a) => (lo ? "..." : "") + JSON.stringify(a.slice(lo, i + 8)).slice(1, -1) + (a.length > i + 8 ? "..." : "");
    return `first difference at index ${i} (lengths ${want.length} / ${got.length})\n      expected [${cut(want)}]\n      got      [${cut(got)}]`;
}

function runVllmc(bin, args, lines) {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "vllmc-compare-"));
    const f = path.join(tmp, "in.jsonl");
    fs.writeFileSync(f, lines.map((o) => JSON.stringify(o)).join("\n") + "\n");
    try {
        const out = execFileSync(bin, [...args, "--input", f], { maxBuffer: 1 << 30, encoding: "utf8",
                                                                stdio: ["ignore", "pipe", "pipe"] });
        const res = out.split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
        if (res.length !== lines.length) throw new Error(`vllmc ${args[0]}: ${res.length} output lines for ${lines.length} inputs`);
        return res;
    } catch (e) {
        throw new Error(`vllmc ${args.join(" ")} failed: ${e.stderr || e.message}`);
    } finally {
        fs.rmSync(tmp, { recursive: true, force: true });
    }
}

const sameIds = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

// Python transformers' LlamaTokenizerFast / GemmaTokenizerFast replace the post-processor by
// "[bos] $A [eos]" from add_bos_token / add_eos_token (update_post_processor); see the header
const PY_TEMPLATE_CLASSES = /^(Llama|Gemma)Tokenizer(Fast)?$/;
function expectedEncode(tok, cfg, text, add) {
    if (!add || !PY_TEMPLATE_CLASSES.test(cfg.tokenizer_class || "")) return tok.encode(text, { add_special_tokens: add });
    const ids = tok.encode(text, { add_special_tokens: false });
    const bos = cfg.add_bos_token !== false && tok.bos_token_id != null ? [tok.bos_token_id] : [];
    const eos = cfg.add_eos_token === true && tok.eos_token_id != null ? [tok.eos_token_id] : [];
    return [...bos, ...ids, ...eos];
}

// Known vllm.c differences (reported, not failing unless --strict): each predicate says whether
// a difference is fully explained by one known issue. Remove an entry once it is fixed.
const KNOWN = [];

async function compareOne(name, args, corpus) {
    const dir = path.join(args.tokDir, name);
    const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
    const tok = await AutoTokenizer.from_pretrained(name);
    const diffs = [];
    const known = new Map(); // id -> { n, example }
    const note = (k, msg) => {
        const kn = args.strict ? null : KNOWN.find((e) => e.match({ ...k, cfg }));
        if (kn) {
            const e = known.get(kn.id) || { n: 0, example: msg, why: kn.why };
            e.n++;
            known.set(kn.id, e);
            return true;
        }
        if (diffs.length < MAX_DIFFS) diffs.push(msg);
        return false;
    };

    // encode: every string, add_special_tokens false then true
    const encIn = [];
    for (const text of corpus) for (const add of [false, true]) encIn.push({ text, add_special_tokens: add });
    const encOut = runVllmc(args.bin, ["tokenize", "--model", dir], encIn);
    let encOk = 0, encKnown = 0;
    const encoded = [];
    encIn.forEach((inp, i) => {
        const want = expectedEncode(tok, cfg, inp.text, inp.add_special_tokens);
        const got = encOut[i].ids;
        if (sameIds(want, got)) encOk++;
        else if (note({ op: "encode", text: inp.text },
                       `encode add_special_tokens=${inp.add_special_tokens} ${show(inp.text)}\n      ${showIds(want, got)}`)) encKnown++;
        if (inp.add_special_tokens) encoded.push(want);
    });

    // decode: the reference encodings, and random sequences over every id of the vocabulary
    const v = tok.get_vocab();
    const allIds = [...new Set(v instanceof Map ? v.values() : Object.values(v))].sort((a, b) => a - b);
    const special = tok.all_special_ids || [];
    const r = rng(1234 + name.length);
    const seqs = [...encoded];
    for (let k = 0; k < args.random; k++) {
        const n = 1 + Math.floor(r() * 24);
        const s = [];
        for (let j = 0; j < n; j++) {
            const u = r();
            if (u < 0.1 && special.length) s.push(special[Math.floor(r() * special.length)]);
            else s.push(allIds[Math.floor(r() * allIds.length)]);
        }
        seqs.push(s);
    }
    const decIn = [];
    for (const ids of seqs) for (const skip of [false, true]) decIn.push({ ids, skip_special_tokens: skip });
    const decOut = runVllmc(args.bin, ["detokenize", "--model", dir], decIn);
    let decOk = 0, decKnown = 0;
    decIn.forEach((inp, i) => {
        // transformers.js rejects [], Python's decode([]) is ""
        const want = inp.ids.length ? tok.decode(inp.ids, { skip_special_tokens: inp.skip_special_tokens }) : "";
        const got = decOut[i].text;
        if (want === got) decOk++;
        else if (note({ op: "decode", want, got },
                       `decode skip_special_tokens=${inp.skip_special_tokens} ids ${show(inp.ids, 200)}\n      expected ${show(want)}\n      got      ${show(got)}`)) decKnown++;
    });

    const ok = encOk + encKnown === encIn.length && decOk + decKnown === decIn.length;
    const kn = encKnown + decKnown ? ` (known differences: encode ${encKnown}, decode ${decKnown})` : "";
    console.log(`${ok ? "ok  " : "FAIL"} ${name}: encode ${encOk}/${encIn.length} agree, decode ${decOk}/${decIn.length} agree${kn}`);
    for (const d of diffs) console.log(`    ${d}`);
    for (const [id, e] of known) console.log(`    KNOWN ${id} x${e.n}: ${e.why}; e.g. ${e.example}`);
    return ok;
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = args.tokDir + path.sep;
    const corpus = fs.readFileSync(args.corpus, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l).text);
    let ok = true;
    for (const name of args.only) {
        if (!NAMES.includes(name)) throw new Error(`unknown tokenizer ${name} (have ${NAMES.join(", ")})`);
        ok = (await compareOne(name, args, corpus)) && ok;
    }
    console.log(ok ? `all agree (${args.only.length} tokenizers, ${corpus.length} corpus strings)` : "DIFFERENCES FOUND");
    process.exit(ok ? 0 : 1);
}

main().catch((e) => {
    console.error(`compare.mjs: ${e.message}`);
    process.exit(2);
});
