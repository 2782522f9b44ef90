/*
 * test_server_structured.c: ctest wrapper of tests/server/node/structured.mjs: structured outputs end to end
 * through the official OpenAI JavaScript client against `vllmc serve` on the random-weight fixture
 * tests/fixtures/models/json_tiny (tools/make_json_tiny.py: a 135-token character vocabulary, so JSON sampled at
 * temperature 1 finishes) with --max-model-len 4096: a corpus of JSON schemas (every output must parse and
 * validate with ajv), json_object, regex, choice, grammar, the guided_* fields, tool_choice required / named, and
 * hostile inputs answered 400 within seconds while a concurrent stream keeps going. The server must exit 0 on
 * SIGTERM. Skips (77) when node, npm or the npm registry is unavailable.
 */
#include "server/test_server_util.h"

#define JSON_TINY VLLM_SOURCE_DIR "/tests/fixtures/models/json_tiny"

/* The node script's time bounds (STRUCTURED_SLOW, a factor) and samples per schema (STRUCTURED_ROUNDS) follow the
 * build: a sanitized or Debug vllmc is several times slower (either variable set in the environment wins). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRUCTURED_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define STRUCTURED_SANITIZED 1
#endif
#endif
#if defined(STRUCTURED_SANITIZED)
#define SLOW_FACTOR "10"
#define ROUNDS "1"
#elif !defined(NDEBUG)
#define SLOW_FACTOR "3"
#define ROUNDS "2"
#else
#define SLOW_FACTOR "1"
#define ROUNDS "4"
#endif

int main(void) {
    int rc = node_setup();
    if (rc == 77) TEST_SKIP("node, npm or the npm registry is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh server-node failed (exit %d)", rc);
    if (rc != 0 || !srv_tmpdir("structured")) TEST_END();

    srv_proc srv;
    bool up = srv_start_model(&srv, "structured", JSON_TINY, "json_tiny", NULL, "--max-model-len 4096", 120);
    CHECK_MSG(up, "vllmc serve did not start on %s", JSON_TINY);
    if (up) {
        setenv("STRUCTURED_SLOW", SLOW_FACTOR, 0);
        setenv("STRUCTURED_ROUNDS", ROUNDS, 0);
        rc = node_run("structured.mjs", srv.url);
        CHECK_MSG(rc == 0, "structured.mjs failed (exit %d)", rc);
        srv_stop_check(&srv, rc != 0);
    }
    srv_cleanup();
    TEST_END();
}
