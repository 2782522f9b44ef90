// make_expected.js: writes tests/tokenizer/data/expected.jsonl, the reference encodings and
// decodings of the hand-made tokenizers (make_data.py) by Hugging Face's own implementation,
// the `tokenizers` npm package (Rust core, Node binding), version 0.23.2.
//
// Usage (from the repo root; needs node and network access to the npm registry once):
//   npm install --prefix /tmp/hf tokenizers@0.23.2
//   NODE_PATH=/tmp/hf/node_modules node tests/tokenizer/data/make_expected.js
//
// Each line: {"dir", "text", "add_special", "ids"} for encodings, or
// {"dir", "ids", "skip_special", "text"} for decodings ("decode": true).
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("tokenizers");

const here = __dirname;
const dirs = ["spm", "bytelevel", "gpt2", "misc", "wp", "unicode", "unicode_w", "opts_a", "opts_b", "opts_c"];
const texts = [
  "Hello world",
  "hello world! How are you?",
  "",
  " ",
  "   ",
  " leading space",
  "trailing space ",
  "  double  spaces  here  ",
  "Once upon a time, there was a little girl named Lily.",
  "She loved to play outside in the park. One day, she saw a big red ball.",
  "emoji \u{1F600} and CJK \u4f60\u597d \u{1F468}\u200d\u{1F469}\u200d\u{1F467}",
  "tabs\tand\nnewlines\n\n and\r\nCRLF",
  "numbers 12345 and 3.14, 1,000,000",
  "<s>hello</s> world<s>",
  "<|endoftext|>Hello<|im_start|>user\nhi<|im_end|>\n<think>ok</think>",
  "I'm sure you'll see we've done it. THEY'RE HERE",
  "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
  "Cafe\u0301 decomposed e\u0301",
  "\ufb01 ligature \u2460 \uff21\uff22 full width",
  "a<mask>b <mask> c  <mask>d",
  "x [sw] y[sw] [sw]z [sw]",
  "say hello world and Hello   World",
  "a<r>  b <r>\tc",
  "hello fox jumps",
  "a".repeat(300),
  "ab".repeat(150) + " the the the",
  "\u2581already\u2581meta \u2581",
  "\u0000nul and \u007f del",
  "def main(): return x + y  # code",
  // Unicode 15.0 (not newer: the package's own tables may be newer than utf8proc's)
  "a \u{1FA77} b\u{1F6DC}c \u{1FAE8}! Pink",
  "CJK ext H \u{31350}\u{31351}x Kawi \u{11F04}\u{11F05} \u{11F50}\u{11F51}9 \u{11F00}",
  "Nag Mundari \u{1E4D0}\u{1E4F1}\u{1E4EC}",
];

function lcg(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  };
}

async function main() {
  const out = [];
  for (const dir of dirs) {
    const tok = Tokenizer.fromFile(path.join(here, dir, "tokenizer.json"));
    for (const text of texts) {
      for (const add_special of [false, true]) {
        const enc = await tok.encode(text, null, { addSpecialTokens: add_special });
        const ids = Array.from(enc.getIds());
        out.push({ dir, text, add_special, ids });
        if (!add_special) {
          for (const skip_special of [false, true]) {
            const dec = await tok.decode(ids, skip_special);
            out.push({ dir, decode: true, ids, skip_special, text: dec });
          }
        }
      }
    }
    // Random id sequences: every decoder path, byte tokens that form invalid UTF-8, specials.
    const n = tok.getVocabSize(true);
    const rnd = lcg(1234 + dir.length);
    for (let k = 0; k < 40; k++) {
      const len = 1 + (rnd() % 12);
      const ids = [];
      for (let i = 0; i < len; i++) ids.push(rnd() % n);
      for (const skip_special of [false, true]) {
        const dec = await tok.decode(ids, skip_special);
        out.push({ dir, decode: true, ids, skip_special, text: dec });
      }
    }
  }
  fs.writeFileSync(path.join(here, "expected.jsonl"), out.map((o) => JSON.stringify(o)).join("\n") + "\n");
  console.log(`wrote ${out.length} lines`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
