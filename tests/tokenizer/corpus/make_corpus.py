#!/usr/bin/env python3
"""make_corpus.py: writes corpus.jsonl next to it, the strings the real-tokenizer tests
(tests/tokenizer/node/compare.mjs) encode with vllm.c and with transformers.js.

One line per string: {"text": "..."} (JSON, non-ASCII kept as UTF-8). Deterministic: the
mixed strings come from a fixed-seed LCG, not Python's random module, so any Python 3
gives the same file. Usage (repo root): python3 tests/tokenizer/corpus/make_corpus.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world!",
    "hello world",
    "HELLO WORLD",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no money in my purse,",
    "I'm sure you'll see we've done it; they're here and it's fine, we'd like that.",
    "DON'T SHOUT! I'M RIGHT HERE, AREN'T I? THEY'LL HEAR YOU.",
    "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune.",
    "She sells sea-shells on the sea-shore; the shells she sells are sea-shells, I'm sure.",
    "The U.S.A. and the U.K. signed the treaty on Jan. 5th, 1995 (approx.).",
    "e.g. i.e. etc. vs. Dr. St. Jr. Ph.D. a.m. p.m.",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "\"Quoted,\" she said. 'Single quoted,' he replied. `Backticks`.",
    "Question? Exclamation! Interrobang?! Ellipsis... Dash -- double.",
    "semi;colon:colon,comma.period",
    "(parentheses) [brackets] {braces} <angles>",
    "Email me at john.doe+tag@example.co.uk or call +1 (555) 123-4567.",
    "The meeting is at 10:30am on 2024-03-15; bring $1,234.56 and 15% of \u20ac99.",
    "A man, a plan, a canal: Panama.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
    "Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "CamelCaseWords and snake_case_words and kebab-case-words and SCREAMING_SNAKE_CASE",
    "iPhone iPad macOS YouTube GitHub JavaScript TypeScript PostgreSQL",
    "don't won't can't shouldn't wouldn't couldn't isn't aren't wasn't weren't",
    "he's she's it's we're you're they're I've you've we've I'd you'd I'll you'll",
    "O'Brien O'Neil rock'n'roll ma'am y'all 'twas",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate pi\u00f1ata jalape\u00f1o \u00fcber Stra\u00dfe",
    "Fran\u00e7ais: L'\u00e9t\u00e9 dernier, nous sommes all\u00e9s \u00e0 la plage. \u00c7a \u00e9tait g\u00e9nial!",
    "Deutsch: Die Stra\u00dfenbahn f\u00e4hrt \u00fcber die Br\u00fccke. \u00c4pfel, \u00d6l, \u00dcbel.",
    "Espa\u00f1ol: \u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Qu\u00e9 bien!",
    "Portugu\u00eas: N\u00e3o sei se \u00e9 poss\u00edvel, mas vou tentar amanh\u00e3.",
    "Polski: Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144.",
    "T\u00fcrk\u00e7e: I\u011fd\u0131r \u0130stanbul \u0131\u015f\u0131k \u00e7i\u00e7ek \u015fa\u015fk\u0131n.",
    "Ti\u1ebfng Vi\u1ec7t: T\u00f4i y\u00eau ti\u1ebfng n\u01b0\u1edbc t\u00f4i t\u1eeb khi m\u1edbi ra \u0111\u1eddi.",
    "\u010ce\u0161tina: P\u0159\u00edli\u0161 \u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u00fap\u011bl \u010f\u00e1belsk\u00e9 \u00f3dy.",
    "Norsk: \u00c6rlig \u00f8l p\u00e5 \u00e5pent hav. Svenska: \u00c5ngstr\u00f6m. Dansk: bl\u00e5b\u00e6rgr\u00f8d.",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439: \u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a, \u0434\u0430 \u0432\u044b\u043f\u0435\u0439 \u0447\u0430\u044e.",
    "\u0423\u043a\u0440\u0430\u0457\u043d\u0441\u044c\u043a\u0430: \u0429\u0430\u0441\u0442\u0456\u0448\u0441\u0442\u044c \u0454 \u0457\u0436\u0430\u0447\u043a\u0430 \u0491\u0430\u043d\u043a\u0443.",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u039e\u03b5\u03c3\u03ba\u03b5\u03c0\u03ac\u03b6\u03c9 \u03c4\u03b7\u03bd \u03c8\u03c5\u03c7\u03bf\u03c6\u03b8\u03cc\u03c1\u03b1 \u03b2\u03b4\u03b5\u03bb\u03c5\u03b3\u03bc\u03af\u03b1.",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\n\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)  # (3, 4)\n",
    "class Foo(Base):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tcontinue\n\tprint(f\"{i=}\")\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n    printf(\"hello, %s\\n\", argv[0]);\n    return 0;\n}\n",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "for (size_t i = 0; i < n; i++) { y[i] += a * x[i]; } // saxpy",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#ifdef __cplusplus\nextern \"C\" {\n#endif",
    "template <typename T>\nstd::vector<T> f(const std::vector<T>& v) { return {v.rbegin(), v.rend()}; }",
    "const add = (a, b) => a + b;\nexport default function App() {\n  return <div className=\"app\">{items.map(i => <Item key={i.id} {...i} />)}</div>;\n}",
    "let x = await fetch(`https://api.example.com/v1/users/${id}?limit=10`);\nconsole.log(JSON.stringify(x, null, 2));",
    "fn main() {\n    let v: Vec<i32> = (0..10).filter(|x| x % 2 == 0).collect();\n    println!(\"{:?}\", v);\n}\n",
    "impl<'a, T: Clone + Send> Iterator for Iter<'a, T> { type Item = &'a T; }",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tch := make(chan int, 3)\n\tfmt.Println(<-ch)\n}\n",
    "SELECT u.id, COUNT(*) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 5 ORDER BY n DESC;",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}' >> out.log 2>&1\ndone\n",
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test</title></head>\n<body><p class=\"x\">Hi &amp; bye &lt;3</p></body>\n</html>",
    "{\"name\": \"vllm.c\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"inference\"], \"nested\": {\"a\": 1, \"b\": null, \"c\": true}}",
    "key: value\nlist:\n  - item1\n  - item2\nnested:\n    deep: 3.14\n",
    "\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
    "public static void main(String[] args) throws IOException {\n    System.out.println(\"Hello\");\n}",
    "val xs = List(1, 2, 3).map(_ * 2).filter(_ > 2) // Scala",
    "(defun fact (n) (if (<= n 1) 1 (* n (fact (- n 1)))))",
    "main :: IO ()\nmain = mapM_ print [x * y | x <- [1..3], y <- [1..3], x /= y]",
    "SELECT * FROM t WHERE name LIKE '%\\_%' ESCAPE '\\';",
    "regex: ^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*)@example\\.com$",
    "x=1;y=2;z=x+y*3-4/5%6**7//8&9|10^~11<<12>>13",
    "a==b!=c<=d>=e&&f||g->h::i++j--k+=l-=m*=n/=o",
    "    indented with four spaces\n        and eight\n\tand a tab\n\t\tand two tabs",
    "diff --git a/x.c b/x.c\n@@ -1,3 +1,4 @@\n-old line\n+new line\n context\n",
    "// \u6ce8\u91ca: \u8ba1\u7b97\u603b\u548c\nint \u603b\u548c = 0; /* \u30b3\u30e1\u30f3\u30c8 */",
    "<?php echo htmlspecialchars($_GET['q'] ?? '', ENT_QUOTES, 'UTF-8'); ?>",
    "mov eax, [ebp+8]\nadd eax, 0x1F\nret",
    "0x7fffffff 0b1010_1010 0o755 1e-9 3.14159f 6.022e23 -0.0 1_000_000 .5 5.",
]

SCRIPTS = [
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u4eba\u5de5\u667a\u80fd\u662f\u8ba1\u7b97\u673a\u79d1\u5b66\u7684\u4e00\u4e2a\u5206\u652f\uff0c\u5b83\u4f01\u56fe\u4e86\u89e3\u667a\u80fd\u7684\u5b9e\u8d28\u3002",
    "\u7e41\u9ad4\u4e2d\u6587\uff1a\u6211\u5011\u5728\u81fa\u7063\u5b78\u7fd2\u8a9e\u8a00\u3002",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u3072\u3089\u304c\u306a\u3068\u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57\u3092\u4f7f\u3044\u307e\u3059\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01\u30b3\u30f3\u30d4\u30e5\u30fc\u30bf\u30fc\u30d7\u30ed\u30b0\u30e9\u30df\u30f3\u30b0",
    "\uff76\uff80\uff76\uff85 \u534a\u89d2\u30ab\u30ca and \uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff11\uff12\uff13",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694, \ub9cc\ub098\uc11c \ubc18\uac11\uc2b5\ub2c8\ub2e4!",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab decomposed hangul jamo",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629 \u062c\u062f\u0627\u064b. \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645!",
    "\u0628\u0650\u0633\u0652\u0645\u0650 \u0671\u0644\u0644\u0651\u064e\u0647\u0650 \u0671\u0644\u0631\u0651\u064e\u062d\u0652\u0645\u064e\u0670\u0646\u0650 with harakat",
    "\u0627\u0644\u0639\u062f\u062f \u0661\u0662\u0663\u0664\u0665 \u0648 12345 mixed RTL/LTR text",
    "\u05e2\u05d1\u05e8\u05d9\u05ea: \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd, \u05de\u05d4 \u05e9\u05dc\u05d5\u05de\u05da?",
    "\u0641\u0627\u0631\u0633\u06cc: \u0633\u0644\u0627\u0645 \u062f\u0646\u06cc\u0627\u060c \u062d\u0627\u0644 \u0634\u0645\u0627 \u0686\u0637\u0648\u0631 \u0627\u0633\u062a\u061f",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u092c\u0939\u0941\u0924 \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964 \u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e!",
    "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f \u0936\u094d\u0930\u0940 \u0926\u094d\u0935\u093e\u0930 \u0930\u094d\u0915 conjuncts \u0915\u093c \u0921\u093c nukta",
    "\u092e\u0930\u093e\u0920\u0940: \u092e\u0939\u093e\u0930\u093e\u0937\u094d\u091f\u094d\u0930 \u0967\u0968\u0969 \u0938\u0902\u0916\u094d\u092f\u093e",
    "\u09ac\u09be\u0982\u09b2\u09be: \u0986\u09ae\u09bf \u09ac\u09be\u0982\u09b2\u09be\u09af\u09bc \u0997\u09be\u09a8 \u0997\u09be\u0987\u0964",
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd: \u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e40\u0e1b\u0e47\u0e19\u0e20\u0e32\u0e29\u0e32\u0e17\u0e35\u0e48\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07\u0e23\u0e30\u0e2b\u0e27\u0e48\u0e32\u0e07\u0e04\u0e33",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e22\u0e34\u0e19\u0e14\u0e35\u0e17\u0e35\u0e48\u0e44\u0e14\u0e49\u0e23\u0e39\u0e49\u0e08\u0e31\u0e01 \u0e51\u0e52\u0e53",
    "\u0ea5\u0eb2\u0ea7 \u1781\u17d2\u1798\u17c2\u179a \u1019\u103c\u1014\u103a\u1019\u102c Lao Khmer Burmese",
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0570\u0561\u0575\u0565\u0580\u0565\u0576 \u12a0\u121b\u122d\u129b Georgian Armenian Amharic",
    "\u1f00\u03c1\u03c7\u1f74 \u1f10\u03bd \u03c4\u1ff7 \u03c0\u03bf\u03bb\u03c5\u03c4\u03bf\u03bd\u03b9\u03ba\u1ff7 polytonic Greek",
    "\U00010330\U00010331\U00010332 Gothic \U00010400\U00010401 Deseret \U00013000\U00013001 hieroglyphs",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 \U0001d400\U0001d401\U0001d402 math alphanumerics",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2227 \u2203y (y \u2260 x) \u21d2 \u2211\u1d62 a\u1d62 \u2264 \u221e \u00b1 \u2248 \u00d7 \u00f7",
    "\u2460\u2461\u2462 \u2160\u2161\u2162 \u00bd \u00bc \u00be \u2153 x\u00b2 x\u2083 \ufb01 \ufb02 \u2126 \u212b \u2122",
    "\u00c5 vs A\u030a vs \u212b; \u00e9 vs e\u0301; \u1e69 vs s\u0323\u0307 vs s\u0307\u0323",
    "Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u036b\u0357\u0364\u0365\u0306\u0305\u0350\u031a\u0364\u0336\u0321\u0324\u0324\u0316\u0323 l\u0343\u0314\u033d\u0305\u0311\u0350\u0316\u0354\u0349\u0348g\u0311o",
    "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b\u030c\u030d\u030e\u030f combining pile-up",
    "\u0301 leading combining mark, then e\u0301",
    "\u3000ideographic\u3000space\u3000",
]

EMOJI = [
    "\U0001F600\U0001F603\U0001F604\U0001F601\U0001F606\U0001F605\U0001F602\U0001F923",
    "I love pizza \U0001F355 and tacos \U0001F32E!!! \U0001F389\U0001F389",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family ZWJ",
    "\U0001F469\U0001F3FD\u200d\U0001F4BB \U0001F468\U0001F3FF\u200d\U0001F680 \U0001F9D1\U0001F3FB\u200d\U0001F52C skin tones",
    "\U0001F44D\U0001F3FB\U0001F44D\U0001F3FC\U0001F44D\U0001F3FD\U0001F44D\U0001F3FE\U0001F44D\U0001F3FF",
    "\U0001F1FA\U0001F1F8 \U0001F1EF\U0001F1F5 \U0001F1E9\U0001F1EA \U0001F1EB\U0001F1F7 \U0001F1E7\U0001F1F7 flags",
    "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F Scotland tag sequence",
    "\U0001F3F3\ufe0f\u200d\U0001F308 \U0001F3F3\ufe0f\u200d\u26a7\ufe0f \u2764\ufe0f\u200d\U0001F525",
    "1\ufe0f\u20e3 2\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3 keycaps",
    "\u2764 \u2764\ufe0f \u263a \u263a\ufe0f \u2600\ufe0e text vs emoji presentation",
    "\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1 \U0001F46F\u200d\u2640\ufe0f \U0001F575\ufe0f\u200d\u2642\ufe0f",
    "emoji\U0001F680rocket\U0001F680between\U0001F680words",
    "\U0001FAE0\U0001FAE1\U0001FAE2\U0001FAE3 newer emoji \U0001FA77\U0001FA75",
    "(\u256f\u00b0\u25a1\u00b0)\u256f\ufe35 \u253b\u2501\u253b \u00af\\_(\u30c4)_/\u00af \u0ca0_\u0ca0",
    "\u2615\ufe0f\u26bd\u26be\u2603\u26c4\u2614 misc symbols \u2713\u2717\u2605\u2606\u2192\u2190\u2191\u2193",
]

WHITESPACE = [
    "", " ", "  ", "   ", "    ", "        ", " " * 17, " " * 64,
    "\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r", "\r\r\n",
    " \n", "\n ", " \n ", "\t\n", "\n\t", " \t \t ", "\t \n \r\n\t",
    "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb", "a\rb",
    " leading space", "  two leading spaces", "trailing space ", "trailing spaces   ",
    " both ", "   both three   ", "\tleading tab", "trailing tab\t", "\nleading newline", "trailing newline\n",
    "line1\nline2\r\nline3\rline4\n\n\nline7", "para one.\n\npara two.\n\n\n\npara three.",
    "mixed \t\n\r\n \t whitespace \n\n  runs", "word\n    indented\n\tTabbed\n  \n  \n", "  \n  \n  ",
    "x\u00a0y\u00a0\u00a0z no-break spaces", "em\u2003space en\u2002space thin\u2009space hair\u200aspace",
    "zero\u200bwidth\u200cnon\u200djoiner\u2060word\ufeffjoiner", "line\u2028separator\u2029paragraph",
    "vertical\x0btab form\x0cfeed", "\x85next line char", "\u1680ogham space \u180emongolian",
    "end with spaces and newline  \n", "  \t  ", "\n \n \n", "a" + " " * 40 + "b",
]

NUMBERS = [
    "0", "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14159265358979323846", "-42", "+7", "1,000,000", "1.000.000,50", "1e10", "6.02e-23",
    "2024-01-01T12:34:56Z", "12:30:45.123", "192.168.0.1", "255.255.255.0/24", "::1", "fe80::1ff:fe23:4567:890a",
    "$19.99", "\u20ac20", "\u00a3300", "\u00a51000", "\u20b9500", "50%", "100\u00b0C", "-273.15\u00b0C",
    "1st 2nd 3rd 4th 21st 102nd", "ISBN 978-3-16-148410-0", "phone: 555-0199 ext. 42",
    "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19 fullwidth digits", "\u0660\u0661\u0662\u0663\u0664 Arabic-Indic", "\u0966\u0967\u0968\u0969 Devanagari digits",
    "\u2070\u00b9\u00b2\u00b3\u2074 superscripts \u2080\u2081\u2082 subscripts", "\u216b\u2167 roman numerals",
    "v1.2.3-beta.4+build.567", "0.1 + 0.2 = 0.30000000000000004", "2^64 = 18446744073709551616",
    "pi=3.14,e=2.71;phi=1.618", "99 bottles, 98 bottles, 97 bottles", "1/2 3/4 5/8", "a1b2c3d4e5",
    "x86_64 arm64 sm_90a fp8 bf16 int4 4096x4096 1024*1024", "Room 101, Floor 7, Building 42B",
    "00000000001", "007", "1 2 3 4 5 6 7 8 9 10", "\u4e00\u4e8c\u4e09 \u58f9\u8d30\u53c1 2023\u5e7412\u670831\u65e5",
]

URLS = [
    "https://www.example.com/", "http://example.org/path/to/page.html?query=1&lang=en#section-2",
    "Visit https://github.com/vllm-project/vllm/blob/main/README.md for details.",
    "ftp://user:pass@ftp.example.com:2121/pub/file.tar.gz", "mailto:someone@example.com?subject=Hi%20there",
    "https://\u4f8b\u3048.jp/\u30d1\u30b9?q=\u691c\u7d22", "https://xn--r8jz45g.jp/ and https://\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444",
    "file:///C:/Users/Name/Documents/report%202024.pdf", "/usr/local/lib/python3.11/site-packages/torch/__init__.py",
    "C:\\Windows\\System32\\drivers\\etc\\hosts", "~/.config/nvim/init.lua", "../../relative/path/./file.txt",
    "<https://example.com/a_(b)_c> [link](http://x.y/z?a=b) www.example.com example.com:8080",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "git@github.com:user/repo.git", "s3://bucket-name/key/with spaces/and+plus",
    "@username #hashtag $TICKER &entity *bold* _italic_ ~strike~ `code` ||spoiler||",
    "uuid 123e4567-e89b-12d3-a456-426614174000 sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
]

SPECIAL_TEXT = [
    "<|im_start|>", "<|im_end|>", "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more text", "<|endoftext|><|endoftext|>",
    "<s>", "</s>", "<s>hello</s>", " <s> spaced </s> ", "<s><s></s></s>", "<unk>", "a<unk>b",
    "[INST] What is 2+2? [/INST]", "<<SYS>>\nYou are helpful.\n<</SYS>>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<pad><mask><eos>",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c><\uff5cUser\uff5c>hi<\uff5cAssistant\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>analysis<|message|>", "<|return|><|call|><|constrain|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<|im_start", "im_start|>", "<|im_start |>", "< s>", "<s >", "<S>", "<|IM_START|>", "<||>", "<|>",
    "user text containing <|im_end|> in the middle", "\u2581leading sentencepiece mark", "a\u2581b\u2581\u2581c",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "<0x41> <0x0A> byte-token lookalikes", "\u0120hello \u010a byte-level lookalikes",
]

SHORT = list("aZ0 .,!?-_'\"/\\()[]{}<>@#$%^&*+=|~`;:") + [
    "\u00e9", "\u00df", "\u4e2d", "\u3042", "\ud55c", "\u0627", "\u0905", "\u0e01", "\U0001F600", "\u2581", "\ufffd",
    "\ue000", "\uffff", "\U0010fffd", "\u00ad", "\u200d", "\ufeff",
    "\x01", "\x07", "\x1b[31mred\x1b[0m", "\x7f", "\x00", "a\x00b", "\x00\x00",
    "I", "a", "the", " the", "The", "THE", "tHe", "'s", "'S", "'ll", "n't", " 's",
]


def lcg(seed):
    """Deterministic 32-bit LCG (Numerical Recipes constants)."""
    state = seed & 0xFFFFFFFF
    while True:
        state = (1664525 * state + 1013904223) & 0xFFFFFFFF
        yield state


def long_strings():
    r = lcg(12345)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = [
        "a" * 3000, "ab" * 2000, "abc" * 1500, "z" * 10000, " " * 3000, "\n" * 1000, "\t" * 500,
        "1" * 3000, "9876543210" * 300, "." * 2000, "!?" * 800, "-" * 1500 + ">", "=" * 1200,
        "\u4e2d" * 2000, "\u3042\u3044\u3046" * 700, "\U0001F600" * 1000, "\U0001F468\u200d\U0001F469\u200d\U0001F467" * 200,
        "\u0915\u094d\u0937" * 700, "\u0e01\u0e32\u0e23" * 700, "e\u0301" * 1500, "\u2581" * 1000, "\u00e9" * 2500,
        "x" * 4096 + " " + "y" * 4096, "https://example.com/" + "/".join("seg%d" % i for i in range(600)),
        "".join(letters[next(r) % 26] for _ in range(5000)),
        "".join(letters[next(r) % 26] for _ in range(3000)).upper(),
        "".join(chr(0x4E00 + next(r) % 20000) for _ in range(3000)),
        "".join(chr(0x0600 + next(r) % 0xFF) for _ in range(2000)),
        "Pneumonoultramicroscopicsilicovolcanoconiosis" * 100,
        "base64:" + "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[next(r) % 64] for _ in range(4000)),
        " ".join(PROSE) * 3,
        "\n".join(CODE),
    ]
    return out


def mixed_strings(n):
    """n strings glued from fragments of every category, with random separators."""
    r = lcg(2024)
    pools = [PROSE, CODE, SCRIPTS, EMOJI, WHITESPACE, NUMBERS, URLS, SPECIAL_TEXT, SHORT]
    seps = ["", " ", "  ", "\n", "\t", "\r\n", " \n ", ", ", ". ", "\u3000", "\u00a0"]
    out = []
    for _ in range(n):
        k = 1 + next(r) % 4
        parts = []
        for _ in range(k):
            pool = pools[next(r) % len(pools)]
            s = pool[next(r) % len(pool)]
            if len(s) > 80:  # a random slice of long fragments, cut on a code point
                a = next(r) % (len(s) - 40)
                s = s[a:a + 20 + next(r) % 60]
            parts.append(s)
            parts.append(seps[next(r) % len(seps)])
        out.append("".join(parts))
    return out


def main():
    corpus = PROSE + CODE + SCRIPTS + EMOJI + WHITESPACE + NUMBERS + URLS + SPECIAL_TEXT + SHORT
    corpus += long_strings()
    corpus += mixed_strings(260)
    seen, uniq = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    for s in uniq:  # every string must be valid UTF-8 (no lone surrogates)
        s.encode("utf-8")
    path = os.path.join(HERE, "corpus.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for s in uniq:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(uniq)} strings")


if __name__ == "__main__":
    main()
