// bench_tokenizer.mjs: the transformers.js side of the tokenizer benchmark (tools/bench_tokenizer.c):
// same measurements on the same corpus file: tokenizer load time (best of 5, AutoTokenizer from a
// local folder) and single-thread encode MB/s (the corpus as ~4 KB documents ending at a newline,
// add_special_tokens false, best of 3).
//
// Usage (after bench_tokenizer wrote the corpus):
//   node tools/bench_tokenizer.mjs TOKENIZER_DIR CORPUS [NODE_MODULES_DIR]
// NODE_MODULES_DIR holds @huggingface/transformers (default: tests/tokenizer/node/node_modules,
// installed there by `npm ci --ignore-scripts`). Prints one JSON line like bench_tokenizer.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [tokDir, corpusPath, modules = path.join(here, "..", "tests", "tokenizer", "node", "node_modules")] =
    process.argv.slice(2);
if (!tokDir || !corpusPath) {
    console.error("usage: node tools/bench_tokenizer.mjs TOKENIZER_DIR CORPUS [NODE_MODULES_DIR]");
    process.exit(2);
}
const entry = createRequire(path.join(modules, "_")).resolve("@huggingface/transformers");
const { env, AutoTokenizer } = await import(pathToFileURL(entry).href);
env.allowRemoteModels = false;
env.useFSCache = false;
env.localModelPath = path.dirname(path.resolve(tokDir)) + path.sep;
const name = path.basename(path.resolve(tokDir));

let loadS = Infinity, tok = null;
for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint();
    tok = await AutoTokenizer.from_pretrained(name);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    loadS = Math.min(loadS, dt);
}

// Documents: the same byte cuts as bench_tokenizer.c (>= 4096 bytes, then up to a newline).
const buf = fs.readFileSync(corpusPath);
const docs = [];
for (let off = 0; off < buf.length;) {
    let end = Math.min(off + 4096, buf.length);
    while (end < buf.length && buf[end - 1] !== 0x0a) end++;
    docs.push(buf.subarray(off, end).toString("utf8"));
    off = end;
}
let encS = Infinity, tokens = 0;
for (let r = 0; r < 3; r++) {
    tokens = 0;
    const t0 = process.hrtime.bigint();
    for (const d of docs) tokens += tok.encode(d, { add_special_tokens: false }).length;
    encS = Math.min(encS, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(JSON.stringify({ impl: "transformers.js", load_s: +loadS.toFixed(4),
                             encode_mb_s: +(buf.length / 1e6 / encS).toFixed(2), bytes: buf.length, tokens }));
