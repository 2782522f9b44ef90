/*
 * node_setup.h: the C side of tests/node_setup.sh, the one rule of the tests that compare against node /
 * npm references (tokenizer, chat templates, server): t_node_setup(TARGET) prepares TARGET and returns
 *   0 ready, 77 skip (node or npm not installed, or the npm registry unreachable: the script printed why;
 *   never under VLLM_REQUIRE_NODE=1, which CI sets), anything else a failure.
 * A test whose whole purpose is the reference skips on 77 (TEST_SKIP); one that also checks other things
 * runs those and ends with TEST_END_SKIPPING (tests/test.h).
 */
#ifndef VLLM_TEST_NODE_SETUP_H
#define VLLM_TEST_NODE_SETUP_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static inline int t_node_setup(const char *target) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "sh \"%s/tests/node_setup.sh\" %s", VLLM_SOURCE_DIR, target);
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stdout);
    fflush(stderr);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

#endif
