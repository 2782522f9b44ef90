/*
 * test_server_tools.c: tool calls end to end: `vllmc serve` on the bundled stories260K model with tools and
 * tool_choice "required" and a named tool, streamed and not, over plain sockets. The grammar engine forces the
 * JSON (an array of {"name", "parameters"} for required, the tool's arguments for a named tool), so even this
 * tiny model must give a valid tool_calls reply: ids "chatcmpl-tool-<32 hex>", arguments that parse as the
 * tool's parameters, content "", finish_reason "tool_calls" (required) / "stop" (named), and the streamed
 * deltas (first with id, type and name, then argument fragments) must rebuild the same calls as the
 * non-streamed reply of the same seed. The server runs --enable-auto-tool-choice --tool-call-parser llama3_json
 * --reasoning-parser qwen3, so tool_choice auto (plain story text) goes through both parsers too. Also the
 * startup errors for bad parser options (vLLM's argument checks). The server must exit 0 on SIGTERM.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "server/test_server_util.h"

static int g_port;

/* Tools whose arguments the grammar pins to one of two objects. */
#define TOOLS                                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","  \
    "\"properties\":{\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"unit\"],\"additionalProperties\":false}}},"   \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":" \
    "{\"zone\":{\"enum\":[\"utc\",\"local\"]}},\"required\":[\"zone\"],\"additionalProperties\":false}}}]"
/* No blanks (the model would fill max_tokens with them), and the comma tokens of stories260K's vocabulary
 * (432 ",", 47 <0x2C>) biased away: after the first element the grammar then closes the array (it still
 * takes a comma where it is the only choice). */
#define FORCE "\"structured_outputs\":{\"disable_any_whitespace\":true},\"logit_bias\":{\"432\":-100,\"47\":-100}"
#define REQ_HEAD "{\"model\":\"stories\",\"messages\":[{\"role\":\"user\",\"content\":\"What now?\"}],\"max_tokens\":120,"
/* The server runs --reasoning-parser qwen3: without a </think> the whole reply would be reasoning (and the
 * tool stage would see no content); enable_thinking false makes it all content, as with Qwen3. */
#define NO_THINKING "\"chat_template_kwargs\":{\"enable_thinking\":false}"

/* HTTP/1.0 POST: the server closes after the reply, whose body is not chunked. */
static int post(const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      path, strlen(body));
    size_t bn = strlen(body);
    if (write(fd, head, (size_t)hn) != hn || write(fd, body, bn) != (ssize_t)bn) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The whole reply (head and body) until the server closes, malloc'd; NULL on timeout. */
static char *exchange(const char *body) {
    int fd = post("/v1/chat/completions", body);
    if (fd < 0) return NULL;
    size_t len = 0, cap = 65536;
    char *d = malloc(cap);
    time_t deadline = time(NULL) + 300; /* ASan builds on 2 shared cores */
    while (d && time(NULL) < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        if (len + 4097 > cap) {
            char *nd = realloc(d, cap *= 2);
            if (!nd) break;
            d = nd;
        }
        ssize_t n = read(fd, d + len, 4096);
        if (n <= 0) {
            close(fd);
            d[len] = 0;
            return d;
        }
        len += (size_t)n;
    }
    close(fd);
    free(d);
    return NULL;
}

static const char *body_of(const char *reply) {
    const char *b = reply ? strstr(reply, "\r\n\r\n") : NULL;
    return b ? b + 4 : NULL;
}

static bool status_200(const char *reply) { return reply && !strncmp(reply, "HTTP/1.", 7) && !strncmp(reply + 8, " 200", 4); }

/* One tool call as a client rebuilds it. */
typedef struct call {
    char id[64], name[64], args[512];
} call;

static bool id_ok(const char *id) {
    if (strncmp(id, "chatcmpl-tool-", 14) || strlen(id) != 46) return false;
    for (const char *p = id + 14; *p; p++)
        if (!strchr("0123456789abcdef", *p)) return false;
    return true;
}

/* A call's arguments are the tool's parameters: {"unit": "c"|"f"} or {"zone": "utc"|"local"}. */
static bool args_ok(const call *c) {
    json_t *a = json_loads(c->args, 0, NULL);
    const char *key = !strcmp(c->name, "get_weather") ? "unit" : !strcmp(c->name, "get_time") ? "zone" : NULL;
    const char *v = key ? json_string_value(json_object_get(a, key)) : NULL;
    bool ok = json_is_object(a) && json_object_size(a) == 1 && v &&
              (!strcmp(key, "unit") ? !strcmp(v, "c") || !strcmp(v, "f") : !strcmp(v, "utc") || !strcmp(v, "local"));
    json_decref(a);
    return ok;
}

/* The non-streamed reply: its calls, content and finish_reason. */
static size_t reply_calls(const char *reply, call *calls, size_t max, char *content, size_t ccap, char *finish,
                          size_t fcap) {
    json_t *o = json_loads(body_of(reply) ? body_of(reply) : "", 0, NULL);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(ch, "message");
    snprintf(content, ccap, "%s", json_is_string(json_object_get(msg, "content")) ? json_string_value(json_object_get(msg, "content")) : "(not a string)");
    snprintf(finish, fcap, "%s", json_string_value(json_object_get(ch, "finish_reason")) ? json_string_value(json_object_get(ch, "finish_reason")) : "");
    size_t n = 0, i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
        if (n == max) break;
        json_t *fn = json_object_get(tc, "function");
        const char *id = json_string_value(json_object_get(tc, "id")), *nm = json_string_value(json_object_get(fn, "name")),
                   *ar = json_string_value(json_object_get(fn, "arguments")), *ty = json_string_value(json_object_get(tc, "type"));
        if (!id || !nm || !ar || !ty || strcmp(ty, "function")) break;
        snprintf(calls[n].id, sizeof calls[n].id, "%s", id);
        snprintf(calls[n].name, sizeof calls[n].name, "%s", nm);
        snprintf(calls[n].args, sizeof calls[n].args, "%s", ar);
        n++;
    }
    json_decref(o);
    return n;
}

/* The streamed reply rebuilt: its calls (from delta.tool_calls), any content, the finish_reason. *bad counts
 * deltas out of OpenAI's shape. */
static size_t stream_calls(const char *reply, call *calls, size_t max, char *content, size_t ccap, char *finish,
                           size_t fcap, int *bad) {
    size_t n = 0, clen = 0;
    content[0] = finish[0] = 0;
    for (const char *p = body_of(reply) ? strstr(body_of(reply), "data: {") : NULL; p; p = strstr(p + 1, "data: {")) {
        const char *end = strstr(p, "\n\n");
        if (!end) break;
        json_t *o = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0), *d = json_object_get(ch, "delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        if (c && clen + strlen(c) < ccap) memcpy(content + clen, c, strlen(c) + 1), clen += strlen(c);
        if (json_string_value(json_object_get(ch, "finish_reason")))
            snprintf(finish, fcap, "%s", json_string_value(json_object_get(ch, "finish_reason")));
        size_t i;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
            json_t *fn = json_object_get(tc, "function");
            size_t index = (size_t)json_integer_value(json_object_get(tc, "index"));
            const char *id = json_string_value(json_object_get(tc, "id")), *ar = json_string_value(json_object_get(fn, "arguments"));
            if (id) { /* the first delta of a call: id, type, index, name */
                const char *nm = json_string_value(json_object_get(fn, "name"));
                if (index != n || n == max || !nm || !json_is_string(json_object_get(tc, "type"))) {
                    (*bad)++;
                    continue;
                }
                snprintf(calls[n].id, sizeof calls[n].id, "%s", id);
                snprintf(calls[n].name, sizeof calls[n].name, "%s", nm);
                calls[n++].args[0] = 0;
            } else if (index >= n || json_string_value(json_object_get(fn, "name"))) {
                (*bad)++;
                continue;
            }
            size_t have = strlen(calls[index].args);
            if (ar && have + strlen(ar) < sizeof calls[index].args) memcpy(calls[index].args + have, ar, strlen(ar) + 1);
        }
        json_decref(o);
    }
    return n;
}

/* tool_choice (JSON) at one seed, not streamed then streamed: valid calls, the same both ways. */
static void check_choice(const char *what, const char *tool_choice, const char *want_finish, size_t min_calls,
                         int seed) {
    char body[4096];
    snprintf(body, sizeof body, REQ_HEAD "\"seed\":%d," TOOLS ",\"tool_choice\":%s," FORCE "," NO_THINKING "}", seed,
             tool_choice);
    char *r1 = exchange(body);
    snprintf(body, sizeof body, REQ_HEAD "\"seed\":%d," TOOLS ",\"tool_choice\":%s," FORCE "," NO_THINKING
             ",\"stream\":true}", seed, tool_choice);
    char *r2 = exchange(body);
    CHECK_MSG(status_200(r1) && status_200(r2), "%s: %.400s\n%.400s", what, r1 ? r1 : "(nothing)", r2 ? r2 : "(nothing)");
    call a[8], b[8];
    char ca[256], cb[256], fa[32], fb[32];
    int bad = 0;
    size_t na = status_200(r1) ? reply_calls(r1, a, 8, ca, sizeof ca, fa, sizeof fa) : 0;
    size_t nb = status_200(r2) ? stream_calls(r2, b, 8, cb, sizeof cb, fb, sizeof fb, &bad) : 0;
    CHECK_MSG(na >= min_calls && na <= 8, "%s: %zu tool calls: %.600s", what, na, body_of(r1) ? body_of(r1) : "");
    CHECK_MSG(!strcmp(ca, "") && !strcmp(fa, want_finish), "%s: content '%s', finish_reason %s", what, ca, fa);
    for (size_t i = 0; i < na; i++) {
        CHECK_MSG(id_ok(a[i].id) && args_ok(&a[i]), "%s: call %zu: id %s, %s(%s)", what, i, a[i].id, a[i].name, a[i].args);
        if (!strncmp(tool_choice, "{", 1)) CHECK_MSG(!strcmp(a[i].name, "get_weather"), "%s: named %s", what, a[i].name);
    }
    CHECK_MSG(bad == 0 && !strcmp(cb, "") && !strcmp(fb, want_finish), "%s streamed: %d bad deltas, content '%s', "
              "finish_reason %s", what, bad, cb, fb);
    CHECK_MSG(nb == na, "%s: %zu calls streamed, %zu not: %.800s", what, nb, na, body_of(r2) ? body_of(r2) : "");
    for (size_t i = 0; i < na && i < nb; i++)
        CHECK_MSG(id_ok(b[i].id) && !strcmp(a[i].name, b[i].name) && !strcmp(a[i].args, b[i].args),
                  "%s: call %zu streamed %s(%s) id %s, not %s(%s)", what, i, b[i].name, b[i].args, b[i].id, a[i].name,
                  a[i].args);
    free(r1), free(r2);
}

/* Parser options vLLM refuses at startup: exit 2 before the model loads, naming the valid parsers. */
static void check_bad_options(void) {
    struct {
        const char *args, *want;
    } cases[] = {
        {"--tool-call-parser bogus", "invalid tool call parser: bogus (chose from { hermes,"},
        {"--enable-auto-tool-choice", "--enable-auto-tool-choice requires --tool-call-parser"},
        {"--reasoning-parser nope", "invalid reasoning parser: nope (chose from { qwen3,deepseek_r1,"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[1024], err[320];
        snprintf(err, sizeof err, "%s/bad%zu.err", g_srv_tmp, i);
        snprintf(cmd, sizeof cmd, "\"%s\" serve \"%s\" --port 0 %s 2>\"%s\"", VLLMC_BIN, SRV_MODEL, cases[i].args, err);
        int rc = srv_system(cmd);
        char *e = t_slurp(err);
        CHECK_MSG(rc == 2 && e && strstr(e, cases[i].want), "%s: exit %d, %s", cases[i].args, rc, e ? e : "(no stderr)");
        free(e);
    }
}

int main(void) {
    if (!srv_tmpdir("tools")) TEST_END();
    check_bad_options();
    srv_proc s;
    /* llama3_json: a parser that leaves skip_special_tokens on (hermes turns it off, and the engine then keeps
       the EOS text "</s>" at the end of the output, which vLLM's detokenizer drops) */
    bool up = srv_start(&s, "server", "--enable-auto-tool-choice --tool-call-parser llama3_json --reasoning-parser qwen3",
                        120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        g_port = s.port;
        check_choice("required", "\"required\"", "tool_calls", 1, 1);
        check_choice("required, seed 2", "\"required\"", "tool_calls", 1, 2);
        check_choice("named", "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", "stop", 1, 3);
        /* tool_choice auto (the default with tools) through llama3_json: plain story text, no calls; with thinking
           on and no </think>, qwen3 makes it all reasoning (content null), with thinking off all content */
        char *r = exchange(REQ_HEAD "\"seed\":4," TOOLS "}");
        const char *b = body_of(r);
        CHECK_MSG(status_200(r) && b && strstr(b, "\"content\":null") && !strstr(b, "tool_calls") &&
                      strstr(b, "\"reasoning\":\"") && strstr(b, "\"finish_reason\":\"length\""),
                  "auto: %.600s", r ? r : "(nothing)");
        free(r);
        r = exchange(REQ_HEAD "\"seed\":4," TOOLS "," NO_THINKING "}");
        b = body_of(r);
        CHECK_MSG(status_200(r) && b && strstr(b, "\"content\":\"") && !strstr(b, "tool_calls") &&
                      strstr(b, "\"reasoning\":null"),
                  "auto without thinking: %.600s", r ? r : "(nothing)");
        free(r);
        srv_stop_check(&s, t_failures != 0);
    }
    srv_cleanup();
    TEST_END();
}
