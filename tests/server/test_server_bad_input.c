/*
 * test_server_bad_input.c: ctest wrapper of tests/server/node/bad_input.mjs: malformed and
 * hostile requests (broken JSON, wrong types, out-of-range values, invalid UTF-8, a 10 MB
 * body, unknown routes and models, wrong methods, a slow-loris body, ...) against `vllmc
 * serve` on stories260K: each gets its 4xx with OpenAI's error JSON and a normal request
 * right after still succeeds. The server runs with --request-timeout 3 (the slow-loris
 * case) and must exit 0 on SIGTERM; under the ASan build (make test-asan) this same test
 * checks the server for memory errors and leaks (a report makes its exit status non-zero).
 * Skips (77) when node, npm or the npm registry is unavailable.
 */
#include "server/test_server_util.h"

int main(void) {
    int rc = node_setup();
    if (rc == 77) TEST_SKIP("node, npm or the npm registry is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh server-node failed (exit %d)", rc);
    if (rc != 0 || !srv_tmpdir("bad-input")) TEST_END();

    srv_proc s;
    bool up = srv_start(&s, "server", "--request-timeout 3", 120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        char args[256];
        snprintf(args, sizeof args, "%s 3", s.url);
        rc = node_run("bad_input.mjs", args);
        CHECK_MSG(rc == 0, "bad_input.mjs failed (exit %d)", rc);
        srv_stop_check(&s, rc != 0);
    }
    srv_cleanup();
    TEST_END();
}
