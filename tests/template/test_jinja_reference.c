/*
 * test_jinja_reference.c: ctest wrapper of tests/template/node/compare.mjs:
 * `vllmc chat-template` against @huggingface/jinja on the real chat templates
 * for every conversation of tests/template/conversations.json, byte for byte.
 * Skips (77) only when node or npm is not installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"

static int run(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stderr);
    int st = system(cmd);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

int main(void) {
    if (run("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0)
        TEST_SKIP("node/npm not installed (needed for the @huggingface/jinja reference)");
    int rc = run(VLLM_SOURCE_DIR "/tests/template/fetch.sh >/dev/null");
    CHECK_MSG(rc == 0, "tests/template/fetch.sh failed (exit %d)", rc);
    struct stat sb;
    if (rc == 0 && stat(VLLM_SOURCE_DIR "/tests/template/node/node_modules/@huggingface/jinja/package.json", &sb) != 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "/tests/template/node\" && "
                 "npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null");
        CHECK_MSG(rc == 0, "npm ci in tests/template/node failed (exit %d)", rc);
    }
    if (rc == 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "\" && node tests/template/node/compare.mjs \"" VLLMC_BIN "\"");
        CHECK_MSG(rc == 0, "compare.mjs found differences or failed (exit %d)", rc);
    }
    TEST_END();
}
