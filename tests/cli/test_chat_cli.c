/*
 * test_chat_cli.c: `vllmc chat`: piped multi-turn input gives, turn by turn, the greedy reply that
 * `vllmc chat-template` + `vllmc tokenize` + `vllmc generate --prompt-token-ids` give for the same
 * conversation (so the history, replies included, is carried); /clear, /exit, /help, '\' continuation,
 * --quick, --system-prompt, an inline --chat-template, history trimming with a small --max-model-len,
 * a message too long for the context, the errors; and --url against `vllmc serve`: the same replies.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_test_util.h"
#include "server/test_server_util.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/json_tiny"
#define STORIES VLLM_SOURCE_DIR "/models/stories260K"
#define GREEDY "--temperature 0 --max-tokens 8"
/* stories260K has no chat template: this one, given inline */
#define STORIES_TPL                                                                                   \
    "{{ bos_token }}{% for m in messages %}{{ m.role | capitalize }}: {{ m.content }}\n{% endfor %}" \
    "{% if add_generation_prompt %}Assistant:{% endif %}"

/* Runs vllmc with args and stdin from the text `input`. */
static int run_input(const char *args, const char *input, char **out, char **err) {
    char in[300], cmd[4096];
    snprintf(in, sizeof in, "%s/stdin", g_tmp);
    write_file(in, input);
    snprintf(cmd, sizeof cmd, "%s <%s", args, in);
    return run(cmd, out, err);
}

/* Appends {"role": role, "content": content} to msgs. */
static void add_msg(json_t *msgs, const char *role, const char *content) {
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", role, "content", content));
}

/* The reply `vllmc generate` gives greedily to the conversation msgs rendered by tpl_dir's template
 * (chat-template) and tokenized without special tokens (tokenize), as the chat renders it; malloc'd,
 * without generate's final newline. */
static char *expected_reply(const char *model, const char *tpl_dir, json_t *msgs) {
    char path[300], args[2048], *out = NULL, *err = NULL;
    snprintf(path, sizeof path, "%s/msgs.json", g_tmp);
    CHECK(json_dump_file(msgs, path, 0) == 0);
    snprintf(args, sizeof args, "chat-template --model %s --messages %s", tpl_dir, path);
    int rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "chat-template: rc %d: %s", rc, err);
    json_t *line = json_pack("{s:s, s:b}", "text", out, "add_special_tokens", 0);
    free(out), free(err);
    snprintf(path, sizeof path, "%s/tok.jsonl", g_tmp);
    CHECK(json_dump_file(line, path, JSON_COMPACT) == 0);
    json_decref(line);
    snprintf(args, sizeof args, "tokenize --model %s --input %s", model, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "tokenize: rc %d: %s", rc, err);
    json_t *tok = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    free(out), free(err);
    char list[1500] = "";
    size_t i, k = 0;
    json_t *v;
    json_array_foreach(json_object_get(tok, "ids"), i, v) {
        if (k < sizeof list) k += (size_t)snprintf(list + k, sizeof list - k, "%s%lld", i ? "," : "",
                                                   (long long)json_integer_value(v));
    }
    json_decref(tok);
    CHECK(k > 0 && k < sizeof list);
    snprintf(args, sizeof args, "generate --model %s --prompt-token-ids %s " GREEDY, model, list);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "generate: rc %d: %s", rc, err);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n') out[n - 1] = 0;
    free(err);
    return out;
}

/* "r1\nr2\n...": the chat's stdout for replies r (each followed by a newline). */
static char *joined(char **r, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(r[i]) + 1;
    char *s = calloc(1, len);
    for (int i = 0; s && i < n; i++) strcat(strcat(s, r[i]), "\n");
    return s;
}

/* Two turns on json_tiny (its own template): the chat's stdout equals the replies generate gives to
 * [user 1] and to [user 1, reply 1, user 2]; a line ending in '\' continues the turn. */
static void test_multi_turn(void) {
    char *out, *err, *r[3];
    int rc = run_input("chat --model " TINY " " GREEDY, "hello\nhow are\\\n you?\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    json_t *msgs = json_array();
    add_msg(msgs, "user", "hello");
    r[0] = expected_reply(TINY, TINY, msgs);
    add_msg(msgs, "assistant", r[0]);
    add_msg(msgs, "user", "how are\n you?");
    r[1] = expected_reply(TINY, TINY, msgs);
    char *want = joined(r, 2);
    CHECK_MSG(!strcmp(out, want), "chat printed '%s', want '%s'", out, want);
    /* the history matters: turn 2 alone gets another reply */
    json_t *alone = json_array();
    add_msg(alone, "user", "how are\n you?");
    r[2] = expected_reply(TINY, TINY, alone);
    CHECK_MSG(strcmp(r[1], r[2]) != 0, "turn 2 with and without the history: '%s'", r[1]);
    CHECK_MSG(err[0] == 0, "stderr: %s", err);
    json_decref(alone);
    json_decref(msgs);
    for (int i = 0; i < 3; i++) free(r[i]);
    free(want), free(out), free(err);
}

/* /clear forgets the turns, /help lists the commands (stderr), /exit ends; --quick answers one message. */
static void test_commands(void) {
    char *out, *err;
    json_t *msgs = json_array();
    add_msg(msgs, "user", "hello");
    char *r[2] = {expected_reply(TINY, TINY, msgs), NULL};
    r[1] = r[0];
    char *twice = joined(r, 2), *once = joined(r, 1);

    int rc = run_input("chat --model " TINY " " GREEDY, "hello\n/clear\n\n  /help\nhello\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(!strcmp(out, twice), "after /clear: '%s', want '%s'", out, twice);
    CHECK_MSG(strstr(err, "history cleared") && strstr(err, "/exit"), "stderr: %s", err);
    free(out), free(err);

    rc = run_input("chat --model " TINY " " GREEDY, "hello\n /exit \nhello again\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(!strcmp(out, once), "after /exit: '%s', want '%s'", out, once);
    free(out), free(err);

    rc = run_input("chat --model " TINY " " GREEDY " -q hello", "ignored\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(!strcmp(out, once), "--quick: '%s', want '%s'", out, once);
    free(out), free(err);

    /* --chat-template-kwargs reach the template */
    rc = run_input("chat --model " TINY " " GREEDY " --chat-template '{{ greeting }}:{{ messages[0].content }}:'"
                   " --chat-template-kwargs '{\"greeting\": \"hi\"}'", "x\n", &out, &err);
    CHECK_MSG(rc == 0 && out[0], "rc %d: %s", rc, err);
    free(out), free(err);
    json_decref(msgs);
    free(r[0]), free(twice), free(once);
}

/* stories260K with an inline --chat-template and a system prompt: the same replies as generate on the
 * conversation rendered by that template (a folder holding it as chat_template.jinja, for chat-template). */
static void test_inline_template(void) {
    char dir[300], path[400], *out, *err, *r[2];
    snprintf(dir, sizeof dir, "%s/tpl", g_tmp);
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    write_file(path, STORIES_TPL);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path, "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
    int rc = run_input("chat --model " STORIES " " GREEDY " --system-prompt 'Tell stories.' --chat-template '"
                       STORIES_TPL "'", "Once upon a time\nThe end\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    json_t *msgs = json_array();
    add_msg(msgs, "system", "Tell stories.");
    add_msg(msgs, "user", "Once upon a time");
    r[0] = expected_reply(STORIES, dir, msgs);
    add_msg(msgs, "assistant", r[0]);
    add_msg(msgs, "user", "The end");
    r[1] = expected_reply(STORIES, dir, msgs);
    char *want = joined(r, 2);
    CHECK_MSG(!strcmp(out, want), "chat printed '%s', want '%s'", out, want);
    json_decref(msgs);
    free(r[0]), free(r[1]), free(want), free(out), free(err);
}

/* A 64-token context with 8 kept for the reply: old turns are dropped (a notice), a message that cannot
 * fit is skipped (a notice), and the chat goes on. */
static void test_trimming(void) {
    char *out, *err;
    const char *in = "the first message\nthe second message\nthe third message\n"
                     "a message far too long for this context: abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz\n"
                     "short\n";
    int rc = run_input("chat --model " TINY " " GREEDY " --max-model-len 64", in, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(strstr(err, "vllmc: history trimmed: dropped the oldest 1 turn(s) to fit the context of 64 tokens"),
              "stderr: %s", err);
    CHECK_MSG(strstr(err, "does not fit the context of 64 tokens"), "stderr: %s", err);
    /* the last turn is answered, from the history trimmed to fit (36 tokens a turn: to that turn alone) */
    json_t *msgs = json_array();
    add_msg(msgs, "user", "short");
    char *alone = expected_reply(TINY, TINY, msgs);
    size_t n = strlen(out), k = strlen(alone);
    CHECK_MSG(n > k + 1 && !strncmp(out + n - k - 1, alone, k) && out[n - 1] == '\n', "stdout '%s' does not end "
              "with '%s'", out, alone);
    json_decref(msgs);
    free(alone), free(out), free(err);
}

static void test_errors(void) {
    expect_error_rc("chat", "give --model DIR", 2);
    expect_error_rc("chat --model " TINY " --url http://127.0.0.1:1", "not both", 2);
    expect_error_rc("chat --model " TINY " --n 2", "--n is not supported", 2);
    expect_error_rc("chat --model " TINY " --bogus", "unknown option '--bogus'", 2);
    expect_error_rc("chat --model " TINY " --chat-template-kwargs '[1]'", "must be a JSON object", 2);
    expect_error_rc("chat --url http://127.0.0.1:1 --chat-template x.jinja", "--chat-template goes with --model", 2);
    expect_error_rc("chat --model " TINY " --chat-template /nonexistent/t.jinja </dev/null", "neither a readable file nor a template", 1);
    expect_error_rc("chat --model " TINY " --chat-template '{{ messages' </dev/null", "chat template", 1);
    expect_error_rc("chat --model " STORIES " </dev/null", "has no chat template", 1);
    expect_error_rc("chat --model /nonexistent/model --chat-template '{{ 1 }}' </dev/null", "/nonexistent/model", 1);
    expect_error_rc("chat --url http://127.0.0.1:1 </dev/null", "cannot reach the server", 1);
    expect_error_rc("chat --url https://127.0.0.1:1 </dev/null", "https is not supported", 1);
    expect_error_rc("chat --model " TINY " --max-tokens 5000 </dev/null", "leaves no room", 1);
}

/* --url against vllmc serve (json_tiny, its own template, an API key): the same replies as the local
 * chat; a wrong model name is the server's 404, printed, and the chat goes on. */
static void test_remote(void) {
    if (!srv_tmpdir("chat")) {
        CHECK(0);
        return;
    }
    srv_proc s;
    if (!srv_start_model(&s, "chat", TINY, "tiny", NULL, "--api-key sekrit", 120)) {
        CHECK_MSG(0, "vllmc serve did not start");
        srv_cleanup();
        return;
    }
    const char *in = "hello\nhow are\\\n you?\n";
    char *local, *out, *err, args[1024];
    int rc = run_input("chat --model " TINY " " GREEDY, in, &local, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    free(err);

    snprintf(args, sizeof args, "chat --url %s --api-key sekrit " GREEDY, s.url);
    rc = run_input(args, in, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(!strcmp(out, local), "--url printed '%s', the local chat '%s'", out, local);
    free(out), free(err);

    setenv("OPENAI_API_KEY", "sekrit", 1); /* the key's default */
    snprintf(args, sizeof args, "chat --url %s/v1 --model-name tiny " GREEDY, s.url);
    rc = run_input(args, in, &out, &err);
    unsetenv("OPENAI_API_KEY");
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(!strcmp(out, local), "--url .../v1 printed '%s', the local chat '%s'", out, local);
    free(out), free(err);

    snprintf(args, sizeof args, "chat --url %s --api-key sekrit --model-name nope " GREEDY, s.url);
    rc = run_input(args, "hello\nagain\n", &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(strstr(err, "the server answered 404") && count_lines(err) == 2, "stderr: %s", err);
    CHECK_MSG(out[0] == 0, "stdout: %s", out);
    free(out), free(err);

    snprintf(args, sizeof args, "chat --url %s </dev/null", s.url);
    expect_error_rc(args, "the server answered 401", 1);
    free(local);
    srv_stop_check(&s, false);

    /* a server with a small context: the oldest turns are dropped when it refuses the conversation's length,
     * a message too long even alone is skipped with the history kept */
    srv_proc s2;
    if (srv_start_model(&s2, "chat64", TINY, "tiny", NULL, "--max-model-len 64", 120)) {
        const char *in2 = "the first message\nthe second message\nthe third message\n"
                          "a message far too long for this context: abcdefghijklmnopqrstuvwxyz "
                          "abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz\nshort\n";
        snprintf(args, sizeof args, "chat --url %s " GREEDY, s2.url);
        rc = run_input(args, in2, &out, &err);
        CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
        CHECK_MSG(strstr(err, "history trimmed: dropped the oldest") && strstr(err, "fit the server's context"),
                  "stderr: %s", err);
        CHECK_MSG(strstr(err, "does not fit the server's context even alone: skipped"), "stderr: %s", err);
        CHECK_MSG(count_lines(out) == 4, "four replies expected: '%s'", out); /* all but the skipped message */
        free(out), free(err);
        srv_stop_check(&s2, false);
    } else {
        CHECK_MSG(0, "vllmc serve --max-model-len 64 did not start");
    }
    srv_cleanup();
}

/* Interactive: on a terminal (a pty from util-linux's `script`) the banner and the "> " prompt appear and the
 * reply is the same as piped. */
static void test_tty(void) {
    if (system("command -v script >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_tty: no `script` (util-linux): the pty check is skipped\n");
        return;
    }
    char in[300], cmd[4096], o[300];
    snprintf(in, sizeof in, "%s/tty_in", g_tmp);
    snprintf(o, sizeof o, "%s/tty_out", g_tmp);
    write_file(in, "hello\n/exit\n");
    snprintf(cmd, sizeof cmd,
             "script -qec 'env VLLM_LOG_LEVEL=error %s chat --model %s " GREEDY "' /dev/null <%s >%s 2>&1", VLLMC_BIN,
             TINY, in, o);
    int rc = system(cmd);
    char *out = t_slurp(o);
    json_t *msgs = json_array();
    add_msg(msgs, "user", "hello");
    char *reply = expected_reply(TINY, TINY, msgs);
    CHECK_MSG(rc == 0 && out && strstr(out, "/help for commands") && strstr(out, "> ") && reply && reply[0] &&
                  strstr(out, reply),
              "rc %d, pty output '%s', reply '%s'", rc, out ? out : "", reply ? reply : "");
    json_decref(msgs);
    free(reply);
    free(out);
}

int main(void) {
    if (!cli_tmp_begin("vllmc_chat")) TEST_SKIP("mkdtemp failed");
    test_multi_turn();
    test_tty();
    test_commands();
    test_inline_template();
    test_trimming();
    test_errors();
    test_remote();
    cli_tmp_end();
    TEST_END();
}
