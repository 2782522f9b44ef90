/*
 * test_server_concurrency.c: ctest wrapper of tests/server/node/concurrency.mjs: 64
 * concurrent streaming chat completions (greedy) against `vllmc serve` on stories260K;
 * every stream complete and well-formed, outputs identical to the same requests sent one
 * by one. The server must exit 0 on SIGTERM afterwards. Then the same against `vllmc serve -dp 2` (two
 * data-parallel replicas): the same outputs, and each replica's own /metrics series (engine="1").
 * Skips (77) when node, npm or the npm registry is unavailable.
 */
#include "server/test_server_util.h"

int main(void) {
    int rc = node_setup();
    if (rc == 77) TEST_SKIP("node, npm or the npm registry is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh server-node failed (exit %d)", rc);
    if (rc != 0 || !srv_tmpdir("concurrency")) TEST_END();

    srv_proc s;
    bool up = srv_start(&s, "server", "", 120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        rc = node_run("concurrency.mjs", s.url);
        CHECK_MSG(rc == 0, "concurrency.mjs failed (exit %d)", rc);
        srv_stop_check(&s, rc != 0);
    }
    up = srv_start(&s, "server_dp", "--data-parallel-size 2 --threads 1", 120);
    CHECK_MSG(up, "vllmc serve -dp 2 did not start");
    if (up) {
        setenv("VLLMC_DP", "2", 1);
        rc = node_run("concurrency.mjs", s.url);
        unsetenv("VLLMC_DP");
        CHECK_MSG(rc == 0, "concurrency.mjs against -dp 2 failed (exit %d)", rc);
        srv_stop_check(&s, rc != 0);
    }
    srv_cleanup();
    TEST_END();
}
