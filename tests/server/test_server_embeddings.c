/*
 * test_server_embeddings.c: POST /v1/embeddings against `vllmc serve models/stories260K --convert embed`
 * (the pooling runner, vLLM's --convert embed: LAST pooling, L2-normalised; --pooler-config saying so
 * too), over plain sockets: the EmbeddingResponse shape
 * (id "embd-...", object list, data index / object / embedding, usage), unit norms, base64 equal to the
 * floats (float32 little-endian; big with endianness), token-id inputs equal to the text's tokens (from
 * /tokenize), use_activation false, truncate_prompt_tokens, vLLM's 400s (empty input, bad
 * encoding_format, too long, truncation past max_model_len, dimensions on a non-Matryoshka model, a bad
 * token id) and the 404 for another model name; the runner checks both ways (completions and chat on the
 * pooling server, embeddings on a generate server: "The model does not support ... API"). Both servers
 * must exit 0 on SIGTERM.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>

#include "server/oai_embed.h"
#include "server/test_server_util.h"

static int g_port;

static const char *str(const json_t *v) {
    const char *s = json_string_value(v);
    return s ? s : "";
}

/* One POST with Connection: close; the whole reply (malloc'd), or NULL. */
static char *exchange(const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return NULL;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t bn = strlen(body);
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      path, bn);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, head, (size_t)hn) != hn ||
        write(fd, body, bn) != (ssize_t)bn) {
        close(fd);
        return NULL;
    }
    char *data = NULL;
    size_t len = 0, cap = 0;
    time_t deadline = time(NULL) + 120;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (time(NULL) > deadline) break;
        if (poll(&p, 1, 200) <= 0) continue;
        if (len + 4097 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *d = realloc(data, cap);
            if (!d) break;
            data = d;
        }
        ssize_t n = read(fd, data + len, 4096);
        if (n <= 0) break;
        len += (size_t)n;
        data[len] = 0;
    }
    close(fd);
    return data;
}

/* The reply's status and its JSON body (NULL when not JSON). */
static json_t *call(const char *path, const char *body, int *status) {
    char *r = exchange(path, body);
    *status = r && !strncmp(r, "HTTP/1.1 ", 9) ? atoi(r + 9) : -1;
    const char *b = r ? strstr(r, "\r\n\r\n") : NULL;
    json_error_t err;
    json_t *j = b ? json_loads(b + 4, 0, &err) : NULL;
    if (!j) fprintf(stderr, "no JSON body in: %.300s\n", r ? r : "(nothing)");
    free(r);
    return j;
}

/* A 4xx with the message holding `want` (and the param when given). */
static void expect_error(const char *path, const char *body, int status, const char *want, const char *param) {
    int st;
    json_t *j = call(path, body, &st);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *p = json_string_value(json_object_get(e, "param"));
    CHECK_MSG(st == status && msg && strstr(msg, want), "%s %s: %d %s (want %d '%s')", path, body, st,
              msg ? msg : "(no message)", status, want);
    if (param) CHECK_MSG(p && !strcmp(p, param), "%s: param %s, want %s", body, p ? p : "null", param);
    CHECK(json_integer_value(json_object_get(e, "code")) == status);
    json_decref(j);
}

/* data[i].embedding as floats (a list, or base64 of float32 in the given byte order); its length in *n. */
static float *embedding_of(const json_t *j, size_t i, bool big_endian, size_t *n) {
    const json_t *item = json_array_get(json_object_get(j, "data"), i);
    const json_t *emb = json_object_get(item, "embedding");
    CHECK(json_integer_value(json_object_get(item, "index")) == (json_int_t)i);
    CHECK(!strcmp(str(json_object_get(item, "object")), "embedding"));
    *n = 0;
    if (json_is_array(emb)) {
        float *v = malloc((json_array_size(emb) + 1) * sizeof *v);
        for (size_t k = 0; v && k < json_array_size(emb); k++)
            v[(*n)++] = (float)json_number_value(json_array_get(emb, k));
        return v;
    }
    const char *s = json_string_value(emb);
    if (!s) return NULL;
    size_t len = strlen(s), nb = len / 4 * 3;
    unsigned char *bytes = malloc(nb + 3);
    float *v = malloc(nb / 4 * sizeof *v + 1);
    size_t got = 0;
    for (size_t k = 0; bytes && k + 3 < len; k += 4) {
        unsigned q[4];
        for (int c = 0; c < 4; c++) {
            const char ch = s[k + (size_t)c];
            q[c] = ch >= 'A' && ch <= 'Z' ? (unsigned)(ch - 'A') : ch >= 'a' && ch <= 'z' ? (unsigned)(ch - 'a' + 26)
                   : ch >= '0' && ch <= '9' ? (unsigned)(ch - '0' + 52) : ch == '+' ? 62u : ch == '/' ? 63u : 0u;
        }
        unsigned w = q[0] << 18 | q[1] << 12 | q[2] << 6 | q[3];
        bytes[got++] = (unsigned char)(w >> 16);
        if (s[k + 2] != '=') bytes[got++] = (unsigned char)(w >> 8);
        if (s[k + 3] != '=') bytes[got++] = (unsigned char)w;
    }
    for (size_t k = 0; v && bytes && k + 4 <= got; k += 4) {
        uint32_t u = 0;
        for (int b = 0; b < 4; b++) u |= (uint32_t)bytes[k + (size_t)b] << (8 * (big_endian ? 3 - b : b));
        memcpy(&v[(*n)++], &u, 4);
    }
    free(bytes);
    return v;
}

static double norm2(const float *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* The prompt's token ids by /tokenize, as a JSON list text (malloc'd); *count gets their number. */
static char *tokenize(const char *text, long long *count) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", text);
    int st;
    json_t *j = call("/tokenize", body, &st);
    CHECK(st == 200);
    *count = json_integer_value(json_object_get(j, "count"));
    char *ids = json_dumps(json_object_get(j, "tokens"), JSON_COMPACT);
    json_decref(j);
    return ids;
}

static void run_pooling(void) {
    int st;
    json_t *f =
        call("/v1/embeddings", "{\"model\":\"stories\",\"input\":[\"Once upon a time\",\"The cat sat.\"]}", &st);
    CHECK(st == 200);
    CHECK(!strncmp(str(json_object_get(f, "id")), "embd-", 5));
    CHECK(!strcmp(str(json_object_get(f, "object")), "list"));
    CHECK(!strcmp(str(json_object_get(f, "model")), "stories"));
    CHECK(json_integer_value(json_object_get(f, "created")) > 0);
    CHECK(json_array_size(json_object_get(f, "data")) == 2);
    long long n0, n1;
    char *ids0 = tokenize("Once upon a time", &n0), *ids1 = tokenize("The cat sat.", &n1);
    const json_t *u = json_object_get(f, "usage");
    CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == n0 + n1);
    CHECK(json_integer_value(json_object_get(u, "total_tokens")) == n0 + n1);
    CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 0);
    size_t d0, d1;
    float *e0 = embedding_of(f, 0, false, &d0), *e1 = embedding_of(f, 1, false, &d1);
    CHECK(e0 && e1 && d0 == 64 && d1 == 64);
    if (e0 && e1) {
        CHECK_NEAR(norm2(e0, d0), 1.0, 1e-5);
        CHECK_NEAR(norm2(e1, d1), 1.0, 1e-5);
    }

    /* base64: the same float32 values, little-endian (and big with endianness big) */
    for (int big = 0; big < 2; big++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"input\":[\"Once upon a time\",\"The cat sat.\"],\"encoding_format\":\"base64\"%s}",
                 big ? ",\"endianness\":\"big\"" : "");
        json_t *b = call("/v1/embeddings", body, &st);
        CHECK(st == 200);
        size_t bd;
        float *b1 = embedding_of(b, 1, big, &bd);
        CHECK(b1 && bd == 64);
        for (size_t k = 0; b1 && e1 && k < bd; k++) CHECK(b1[k] == e1[k]); /* the JSON floats round-trip */
        free(b1);
        json_decref(b);
    }

    /* token ids (one list, a list of lists) give the same embeddings; use_activation false: not normalised */
    char body[2048];
    snprintf(body, sizeof body, "{\"input\":%s}", ids0 ? ids0 : "[]");
    json_t *t = call("/v1/embeddings", body, &st);
    size_t td;
    float *t0 = embedding_of(t, 0, false, &td);
    for (size_t k = 0; t0 && e0 && k < td; k++) CHECK(t0[k] == e0[k]);
    free(t0);
    json_decref(t);
    snprintf(body, sizeof body, "{\"input\":[%s,%s],\"use_activation\":false}", ids0 ? ids0 : "[]", ids1 ? ids1 : "[]");
    t = call("/v1/embeddings", body, &st);
    CHECK(st == 200 && json_array_size(json_object_get(t, "data")) == 2);
    t0 = embedding_of(t, 1, false, &td);
    if (t0 && e1) {
        double nr = norm2(t0, td);
        CHECK(fabs(nr - 1.0) > 1e-3);
        for (size_t k = 0; k < td; k++) CHECK_NEAR(t0[k] / nr, e1[k], 1e-6);
    }
    free(t0);
    json_decref(t);

    /* truncate_prompt_tokens keeps the last tokens */
    t = call("/v1/embeddings", "{\"input\":\"Once upon a time, there was a little girl named Lily.\","
                               "\"truncate_prompt_tokens\":4}", &st);
    CHECK(st == 200 && json_integer_value(json_object_get(json_object_get(t, "usage"), "prompt_tokens")) == 4);
    json_decref(t);

    /* errors, as vLLM */
    expect_error("/v1/embeddings", "{\"input\":[]}", 400, "please provide at least one prompt", "input");
    expect_error("/v1/embeddings", "{\"model\":\"stories\"}", 400, "input: Field required", "input");
    expect_error("/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":\"hex\"}", 400,
                 "encoding_format: Input should be 'float', 'base64'", "encoding_format");
    expect_error("/v1/embeddings", "{\"input\":\"a\",\"dimensions\":16}", 400,
                 "Model \"stories\" does not support matryoshka representation", "dimensions");
    expect_error("/v1/embeddings", "{\"input\":\"a\",\"truncate_prompt_tokens\":600}", 400,
                 "truncate_prompt_tokens value (600) is greater than max_model_len (512).", "truncate_prompt_tokens");
    expect_error("/v1/embeddings", "{\"input\":[1,2,512]}", 400, "token id 512 is out of vocabulary", "input[2]");
    expect_error("/v1/embeddings", "{\"input\":[1,\"a\"]}", 400, "Input should be a valid integer", NULL);
    expect_error("/v1/embeddings", "{\"input\":[\"a\",[1]]}", 400, "Input should be a string, a list", "input");
    expect_error("/v1/embeddings", "{\"input\":{}}", 400, "Input should be a string, a list", "input");
    expect_error("/v1/embeddings", "{\"input\":[[]]}", 400, "The decoder prompt cannot be empty", "input");
    expect_error("/v1/embeddings", "{\"input\":\"a\",\"model\":\"gpt\"}", 404, "The model `gpt` does not exist.",
                 "model");
    expect_error("/v1/embeddings", "[1]", 400, "", NULL);
    {
        char *big = malloc(8000);
        int k = snprintf(big, 8000, "{\"input\":[");
        for (int i = 0; i < 513; i++) k += snprintf(big + k, 8000 - (size_t)k, "%s5", i ? "," : "");
        snprintf(big + k, 8000 - (size_t)k, "]}");
        expect_error("/v1/embeddings", big, 400,
                     "This model's maximum context length is 512 tokens. However, you requested 513 tokens in the "
                     "input for embedding generation. Please reduce the length of the input.",
                     "input");
        /* exactly max_model_len tokens: embedded */
        big[k - 2] = ']', big[k - 1] = '}', big[k] = 0;
        int st2;
        json_t *ok = call("/v1/embeddings", big, &st2);
        CHECK_MSG(st2 == 200, "512 tokens: %d", st2);
        json_decref(ok);
        free(big);
    }
    expect_error("/v1/completions", "{\"prompt\":\"hi\"}", 400, "The model does not support Completions API", NULL);
    expect_error("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 400,
                 "The model does not support Chat Completions API", NULL);
    free(e0);
    free(e1);
    free(ids0);
    free(ids1);
    json_decref(f);
}

int main(void) {
    /* the protocol's base64 (RFC 4648 test vectors) */
    const char *vec[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < 5; i++) {
        char *b = oai_base64((const unsigned char *)vec[i][0], strlen(vec[i][0]));
        CHECK(b && !strcmp(b, vec[i][1]));
        free(b);
    }
    /* the pooling options are checked before the model loads (usage errors: exit 2) */
    static const char *const bad[] = {"--runner nope", "--convert classify",
                                      "--pooler-config '{\"pooling_type\":\"MAX\"}'",
                                      "--pooler-config '{\"dimensions\":8}'", "--pooler-config '[1]'",
                                      "--runner generate --convert embed"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "\"%s\" serve \"%s\" %s 2>/dev/null", VLLMC_BIN, SRV_MODEL, bad[i]);
        CHECK_MSG(srv_system(cmd) == 2, "%s: want exit 2", bad[i]);
    }
    if (!srv_tmpdir("embeddings")) TEST_END();
    srv_proc s;
    const char *opts = "--convert embed --pooler-config '{\"pooling_type\":\"LAST\",\"normalize\":true}'";
    bool up = srv_start(&s, "pooling", opts, 120);
    CHECK_MSG(up, "vllmc serve --convert embed did not start");
    if (up) {
        g_port = s.port;
        run_pooling();
        srv_stop_check(&s, t_failures != 0);
    }
    up = srv_start(&s, "generate", "", 120);
    CHECK_MSG(up, "vllmc serve did not start");
    if (up) {
        g_port = s.port;
        expect_error("/v1/embeddings", "{\"input\":\"hi\"}", 400, "The model does not support Embeddings API", NULL);
        srv_stop_check(&s, t_failures != 0);
    }
    srv_cleanup();
    TEST_END();
}
