/*
 * test_oai_tokenize.c: the cost cap of POST /tokenize and POST /detokenize
 * (src/server/oai_tokenize.c, oai_server_ctx.max_tokenize_bytes; vllmc serve
 * --max-tokenize-bytes). vLLM leaves both endpoints open when --api-key is
 * set, so the text they tokenize and the ids they decode are bounded before
 * the tokenizer runs: over the limit is a 400 naming it, and the tokenizer
 * is not called. The tokenizer runs on the calling thread.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_protocol.h"
#include "test.h"

enum { VOCAB = 512, BOS = 1 };

static int g_calls;          /* tokenizer calls */
static pthread_t g_thread;   /* the thread of the last call */

/* byte b -> id b + 3 */
static vllm_status fake_tokenize(void *c, const char *text, bool add_special, int32_t **ids, size_t *n) {
    (void)c;
    g_calls++;
    g_thread = pthread_self();
    size_t len = strlen(text);
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids) return VLLM_ERR_NO_MEMORY;
    size_t k = 0;
    if (add_special) (*ids)[k++] = BOS;
    for (size_t i = 0; i < len; i++) (*ids)[k++] = (unsigned char)text[i] + 3;
    *n = k;
    return VLLM_OK;
}

static vllm_status fake_detokenize(void *c, const int32_t *ids, size_t n, bool skip, char **text) {
    (void)c, (void)skip;
    g_calls++;
    g_thread = pthread_self();
    *text = malloc(n + 1);
    if (!*text) return VLLM_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) (*text)[i] = ids[i] >= 3 ? (char)(ids[i] - 3) : '?';
    (*text)[n] = 0;
    return VLLM_OK;
}

static const char *SERVED[] = {"m"};

static oai_server_ctx make_ctx(size_t limit) {
    oai_server_ctx c = {
        .served_model_names = SERVED,
        .num_served_model_names = 1,
        .max_model_len = 64,
        .vocab_size = VOCAB,
        .default_sampling = vllm_sampling_default_params(),
        .chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
        .tokenize = fake_tokenize,
        .detokenize = fake_detokenize,
        .max_tokenize_bytes = limit,
    };
    return c;
}

/* {"prompt": "aaa..."} with n bytes of text */
static char *prompt_body(size_t n) {
    char *b = malloc(n + 32);
    int k = sprintf(b, "{\"prompt\": \"");
    memset(b + k, 'a', n);
    strcpy(b + k + n, "\"}");
    return b;
}

/* {"tokens": [100, 100, ...]} with n ids */
static char *tokens_body(size_t n) {
    char *b = malloc(5 * n + 32);
    size_t k = (size_t)sprintf(b, "{\"tokens\": [");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(b + k, i ? ",100" : "100");
    strcpy(b + k, "]}");
    return b;
}

static void test_tokenize_cap(void) {
    oai_server_ctx ctx = make_ctx(100);
    oai_error err;
    char *resp = NULL, *b;

    /* at the limit: tokenized on this thread */
    b = prompt_body(100);
    g_calls = 0;
    CHECK_OK(oai_tokenize_request(&ctx, b, strlen(b), &resp, &err));
    CHECK(resp && strstr(resp, "\"count\":101") && g_calls == 1 && pthread_equal(g_thread, pthread_self()));
    free(resp), free(b);

    /* one byte over: 400 naming the limit, the tokenizer not called */
    b = prompt_body(101);
    g_calls = 0;
    resp = NULL;
    CHECK(oai_tokenize_request(&ctx, b, strlen(b), &resp, &err) == VLLM_ERR_INVALID_ARG);
    CHECK(err.status == 400 && !strcmp(err.param, "prompt") && !strcmp(err.type, "BadRequestError"));
    CHECK_MSG(strstr(err.message, "prompt is 101 bytes") && strstr(err.message, "at most 100 bytes") &&
                  strstr(err.message, "--max-tokenize-bytes"),
              "message: %s", err.message);
    CHECK(resp == NULL && g_calls == 0);
    free(b);

    /* chat: the rendered text counts ("<user>" + 95 bytes = 101) */
    char chat[256];
    char content[96];
    memset(content, 'b', 95);
    content[95] = 0;
    snprintf(chat, sizeof chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"add_generation_prompt\": false}",
             content);
    g_calls = 0;
    CHECK(oai_tokenize_request(&ctx, chat, strlen(chat), &resp, &err) == VLLM_ERR_INVALID_ARG);
    CHECK(err.status == 400 && !strcmp(err.param, "messages") && strstr(err.message, "rendered chat is 101 bytes"));
    CHECK(g_calls == 0);
    content[94] = 0;
    snprintf(chat, sizeof chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"add_generation_prompt\": false}",
             content);
    CHECK_OK(oai_tokenize_request(&ctx, chat, strlen(chat), &resp, &err));
    CHECK(resp && strstr(resp, "\"count\":100"));
    free(resp);

    /* 0 = the default, 1 MiB */
    ctx = make_ctx(0);
    b = prompt_body(OAI_DEFAULT_MAX_TOKENIZE_BYTES + 1);
    CHECK(oai_tokenize_request(&ctx, b, strlen(b), &resp, &err) == VLLM_ERR_INVALID_ARG);
    CHECK(err.status == 400 && strstr(err.message, "at most 1048576 bytes"));
    free(b);
    b = prompt_body(OAI_DEFAULT_MAX_TOKENIZE_BYTES);
    CHECK_OK(oai_tokenize_request(&ctx, b, strlen(b), &resp, &err));
    free(resp), free(b);
}

static void test_detokenize_cap(void) {
    oai_server_ctx ctx = make_ctx(100);
    oai_error err;
    char *resp = NULL, *b = tokens_body(100);
    g_calls = 0;
    CHECK_OK(oai_detokenize_request(&ctx, b, strlen(b), &resp, &err));
    CHECK(resp && g_calls == 1 && pthread_equal(g_thread, pthread_self()));
    free(resp), free(b);
    b = tokens_body(101);
    g_calls = 0;
    resp = NULL;
    CHECK(oai_detokenize_request(&ctx, b, strlen(b), &resp, &err) == VLLM_ERR_INVALID_ARG);
    CHECK(err.status == 400 && !strcmp(err.param, "tokens"));
    CHECK_MSG(strstr(err.message, "tokens has 101 ids") && strstr(err.message, "at most 100") &&
                  strstr(err.message, "--max-tokenize-bytes"),
              "message: %s", err.message);
    CHECK(resp == NULL && g_calls == 0);
    free(b);
}

int main(void) {
    test_tokenize_cap();
    test_detokenize_cap();
    TEST_END();
}
