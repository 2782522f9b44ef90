/*
 * bench_tokenizer.c: tokenizer benchmark: tokenizer.json load time and single-thread encode
 * throughput (MB/s) on a deterministic English + code corpus built here (no downloads), so
 * the same bytes can be fed to transformers.js by tools/bench_tokenizer.mjs in the same run.
 *
 * Build (from the repo root; not part of the CMake build):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc tools/bench_tokenizer.c src/core/error.c src/core/log.c \
 *      src/tokenizer/[a-z]*.c -o /tmp/bench_tokenizer -lm -lpthread $(pkg-config --cflags --libs jansson) \
 *      -lonig -lutf8proc
 * Run:
 *   /tmp/bench_tokenizer DIR [CORPUS_OUT]   # DIR holds tokenizer.json; CORPUS_OUT: also write the corpus
 * Prints one JSON line: {"impl":"vllm.c","load_s":...,"encode_mb_s":...,"bytes":...,"tokens":...}.
 * Load: best of 5 loads. Encode: the corpus as documents of about 4 KB, without special tokens,
 * best of 3 passes.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

#define CORPUS_BYTES (2u << 20) /* 2 MiB */
#define DOC_BYTES 4096

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x853C49E6748FEA9BULL;
static uint32_t rnd(uint32_t n) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 33) % n;
}

static const char *WORDS[] = {
    "the", "a", "model", "token", "server", "request", "batch", "memory", "cache", "block", "time", "little",
    "girl", "named", "Lily", "went", "to", "park", "and", "saw", "big", "dog", "it", "was", "happy", "because",
    "of", "in", "on", "with", "for", "every", "sequence", "attention", "layer", "weights", "are", "loaded",
    "from", "disk", "into", "kernel", "throughput", "latency", "scheduler", "preempted", "recomputed", "later",
    "however", "although", "quickly", "carefully", "1024", "2048", "3.14159", "2025", "HTTP", "JSON", "GPU",
    "don't", "it's", "we'll", "they're", "I'm", "you've", "e.g.", "i.e.", "naïve", "café", "résumé",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static const char *CODE[] = {
    "static int sum(const int *xs, size_t n) {\n    int s = 0;\n    for (size_t i = 0; i < n; i++) s += xs[i];\n"
    "    return s;\n}\n",
    "def attention(q, k, v, mask=None):\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
    "    if mask is not None:\n        scores = scores.masked_fill(mask == 0, float('-inf'))\n"
    "    return torch.softmax(scores, dim=-1) @ v\n",
    "    for (int h = 0; h < n_heads; h++) {\n        float *att = state->att + h * seq_len;\n"
    "        // q (head_dim) . k (pos, head_dim) -> att (pos)\n    }\n",
    "const server = http.createServer((req, res) => {\n  res.writeHead(200, {'Content-Type': 'application/json'});\n"
    "  res.end(JSON.stringify({ ok: true, items: [1, 2, 3] }));\n});\n",
    "SELECT id, name, created_at FROM users WHERE age >= 18 ORDER BY created_at DESC LIMIT 100;\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tprintf(\"hello, %s!\\n\", argc > 1 ? argv[1] : \"world\");\n"
    "\treturn 0;\n}\n",
    "    if err != nil {\n        return nil, fmt.Errorf(\"open %s: %w\", path, err)\n    }\n",
};
#define N_CODE (sizeof CODE / sizeof CODE[0])

/* English paragraphs interleaved with code snippets (about 1 in 4), deterministic. */
static char *make_corpus(size_t *len) {
    size_t cap = CORPUS_BYTES + 4096;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t n = 0;
    while (n < CORPUS_BYTES) {
        if (rnd(4) == 0) {
            const char *c = CODE[rnd(N_CODE)];
            size_t k = strlen(c);
            memcpy(s + n, c, k);
            n += k;
        } else {
            int words = 20 + (int)rnd(60);
            for (int w = 0; w < words; w++) {
                const char *word = WORDS[rnd(N_WORDS)];
                size_t k = strlen(word);
                if (w > 0) s[n++] = ' ';
                memcpy(s + n, word, k);
                if (w == 0) s[n] = (char)(s[n] >= 'a' && s[n] <= 'z' ? s[n] - 32 : s[n]);
                n += k;
                if (rnd(12) == 0) s[n++] = ',';
            }
            s[n++] = '.';
        }
        s[n++] = '\n';
        if (rnd(3) == 0) s[n++] = '\n';
    }
    s[n] = '\0';
    *len = n;
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR [CORPUS_OUT]\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    char *corpus = make_corpus(&len);
    if (!corpus) return 1;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "wb");
        if (!f || fwrite(corpus, 1, len, f) != len) {
            fprintf(stderr, "cannot write %s\n", argv[2]);
            return 1;
        }
        fclose(f);
    }
    double load_s = 1e9;
    tokenizer *tok = NULL;
    for (int r = 0; r < 5; r++) {
        tok_free(tok);
        tok = NULL;
        double t0 = now();
        if (tok_load_dir(argv[1], &tok) != VLLM_OK) {
            fprintf(stderr, "load: %s\n", vllm_last_error());
            return 1;
        }
        double dt = now() - t0;
        if (dt < load_s) load_s = dt;
    }
    double enc_s = 1e9;
    size_t tokens = 0;
    for (int r = 0; r < 3; r++) {
        tokens = 0;
        double t0 = now();
        for (size_t off = 0; off < len;) {
            /* a document: about DOC_BYTES, ending after a newline */
            size_t end = off + DOC_BYTES < len ? off + DOC_BYTES : len;
            while (end < len && corpus[end - 1] != '\n') end++;
            int32_t *ids = NULL;
            size_t n = 0;
            if (tok_encode(tok, corpus + off, end - off, false, &ids, &n) != VLLM_OK) {
                fprintf(stderr, "encode: %s\n", vllm_last_error());
                return 1;
            }
            tokens += n;
            free(ids);
            off = end;
        }
        double dt = now() - t0;
        if (dt < enc_s) enc_s = dt;
    }
    printf("{\"impl\":\"vllm.c\",\"load_s\":%.4f,\"encode_mb_s\":%.2f,\"bytes\":%zu,\"tokens\":%zu}\n", load_s,
           (double)len / 1e6 / enc_s, len, tokens);
    tok_free(tok);
    free(corpus);
    return 0;
}
