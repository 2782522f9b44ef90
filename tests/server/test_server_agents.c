/*
 * test_server_agents.c: ctest wrapper of tests/server/node/agents.mjs: the agent-facing APIs end to end through the
 * official clients against `vllmc serve` on the random-weight fixture tests/fixtures/models/json_tiny
 * (tools/make_json_tiny.py: a 135-token character vocabulary) with --reasoning-parser qwen3,
 * --enable-auto-tool-choice --tool-call-parser hermes and --api-key test-key:
 *   the OpenAI Responses API through the openai client: POST /v1/responses (text, input items, instructions,
 *     reasoning items, responses.stream() and stream: true event sequences, function calls forced by
 *     tool_choice required / named, previous_response_id, function_call_output turns, text.format json_schema),
 *     GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, OpenAI-shaped errors, the API key;
 *   the Anthropic Messages API through @anthropic-ai/sdk: POST /v1/messages (system, turns, stop_sequences,
 *     thinking blocks, messages.stream() event order, tool_use forced by tool_choice any / tool, tool_result
 *     turns), POST /v1/messages/count_tokens, Anthropic-shaped errors, x-api-key and Bearer keys.
 * The server must exit 0 on SIGTERM. Skips (77) when node, npm or the npm registry is unavailable.
 */
#include "server/test_server_util.h"

#define JSON_TINY VLLM_SOURCE_DIR "/tests/fixtures/models/json_tiny"

int main(void) {
    int rc = node_setup();
    if (rc == 77) TEST_SKIP("node, npm or the npm registry is not available (the line above says why)");
    CHECK_MSG(rc == 0, "tests/node_setup.sh server-node failed (exit %d)", rc);
    if (rc != 0 || !srv_tmpdir("agents")) TEST_END();

    srv_proc srv;
    bool up = srv_start_model(&srv, "agents", JSON_TINY, "json_tiny", NULL,
                              "--max-model-len 4096 --reasoning-parser qwen3 --enable-auto-tool-choice "
                              "--tool-call-parser hermes --api-key test-key",
                              120);
    CHECK_MSG(up, "vllmc serve did not start on %s", JSON_TINY);
    if (up) {
        rc = node_run("agents.mjs", srv.url);
        CHECK_MSG(rc == 0, "agents.mjs failed (exit %d)", rc);
        srv_stop_check(&srv, rc != 0);
    }
    srv_cleanup();
    TEST_END();
}
