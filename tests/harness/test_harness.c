/*
 * test_harness.c: the rules of the test suite itself.
 *   - tests/test.h: a test that runs no check fails (t_end: 1), a skip goes through the skip path
 *     (77: TEST_SKIP, or TEST_END_SKIPPING when a part could not run), a failed check beats a skip.
 * The t_end calls below print summary lines of their own, marked "(harness demo)".
 */
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

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

int main(void) {
    test_summary_rule();
    TEST_END();
}
