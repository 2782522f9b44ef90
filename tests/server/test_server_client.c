/*
 * test_server_client.c: ctest wrapper of tests/server/node/client.mjs: the official
 * OpenAI JavaScript client against `vllmc serve` on the bundled stories260K model
 * (completions and chat, streaming and not, n=2, logprobs, stop strings, include_usage
 * counts against /tokenize, /v1/models, seeds), plus a second server started with
 * --api-key for the 401 / 200 checks. Both servers must exit 0 on SIGTERM.
 * Skips (77) when node, npm or the npm registry is unavailable.
 */
#include "server/test_server_util.h"

int main(void) {
    int rc = node_setup();
    if (rc == 77) TEST_SKIP("node, npm or the npm registry is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh server-node failed (exit %d)", rc);
    if (rc != 0 || !srv_tmpdir("client")) TEST_END();

    srv_proc open_srv, keyed;
    bool a = srv_start(&open_srv, "open", "", 120);
    bool b = srv_start(&keyed, "keyed", "--api-key sk-vllmc-test-key", 120);
    CHECK_MSG(a && b, "vllmc serve did not start");
    if (a && b) {
        char args[512];
        snprintf(args, sizeof args, "%s %s sk-vllmc-test-key", open_srv.url, keyed.url);
        rc = node_run("client.mjs", args);
        CHECK_MSG(rc == 0, "client.mjs failed (exit %d)", rc);
    }
    if (a) srv_stop_check(&open_srv, rc != 0);
    if (b) srv_stop_check(&keyed, false);
    srv_cleanup();
    TEST_END();
}
