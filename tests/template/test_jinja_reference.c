/*
 * test_jinja_reference.c: ctest wrapper of tests/template/node/compare.mjs:
 * `vllmc chat-template` against @huggingface/jinja on the real chat templates
 * for every conversation of tests/template/conversations.json, byte for byte.
 * Skips (77) by tests/node_setup.sh's rule: node or npm not installed, or the
 * npm registry unreachable (a failure under VLLM_REQUIRE_NODE=1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "node_setup.h"
#include "test.h"

static int run(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stderr);
    int st = system(cmd);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

int main(void) {
    int rc = t_node_setup("template-node");
    if (rc == 77) TEST_SKIP("the @huggingface/jinja reference is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh template-node failed (exit %d)", rc);
    if (rc == 0) {
        rc = run("cd \"" VLLM_SOURCE_DIR "\" && node tests/template/node/compare.mjs \"" VLLMC_BIN "\"");
        CHECK_MSG(rc == 0, "compare.mjs found differences or failed (exit %d)", rc);
    }
    TEST_END();
}
