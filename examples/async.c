/*
 * async.c: the thread-safe front of libvllmc: two requests run together on
 * one engine thread; each is read by its own thread, which streams its
 * text to stdout as it arrives, one tagged line ([0] or [1]) per sentence.
 *
 *   build/example_async models/stories260K "Once upon a time" "Lily and Tom"
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "vllm.h"

typedef struct reader {
    vllm_stream *stream;
    int tag;
    char pending[4096];          /* text not printed yet (an unfinished sentence) */
    size_t len;
} reader;

static pthread_mutex_t stdout_mu = PTHREAD_MUTEX_INITIALIZER;

/* Prints the first n pending bytes as one tagged line and drops them. */
static void print_line(reader *r, size_t n) {
    size_t skip = 0;
    while (skip < n && (r->pending[skip] == ' ' || r->pending[skip] == '\n')) skip++;
    pthread_mutex_lock(&stdout_mu);
    if (n > skip) printf("[%d] %.*s\n", r->tag, (int)(n - skip), r->pending + skip);
    fflush(stdout);
    pthread_mutex_unlock(&stdout_mu);
    memmove(r->pending, r->pending + n, r->len - n);
    r->len -= n;
}

/* Reads the stream to its last chunk, printing each sentence once complete. */
static void *read_stream(void *arg) {
    reader *r = arg;
    for (;;) {
        vllm_stream_chunk chunk;
        if (vllm_stream_next(r->stream, &chunk, -1) != VLLM_OK) {
            fprintf(stderr, "error: %s\n", vllm_last_error());
            return NULL;
        }
        for (size_t i = 0; chunk.text && i < chunk.text_len; i++) {
            if (r->len == sizeof r->pending) print_line(r, r->len);
            r->pending[r->len++] = chunk.text[i];
            char c = chunk.text[i];
            if (c == '.' || c == '!' || c == '?' || c == '\n') print_line(r, r->len);
        }
        bool last = chunk.last;
        if (last) {
            print_line(r, r->len);
            pthread_mutex_lock(&stdout_mu);
            printf("[%d] (%s, %zu tokens%s%s)\n", r->tag, vllm_finish_reason_str(chunk.finish_reason),
                   chunk.completion_tokens, chunk.error ? ", error: " : "", chunk.error ? chunk.error : "");
            pthread_mutex_unlock(&stdout_mu);
        }
        vllm_stream_chunk_clear(&chunk);
        if (last) return NULL;
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT1 PROMPT2\n", argv[0]);
        return 2;
    }
    vllm_engine_options opts = vllm_engine_default_options();
    vllm_async_engine *engine = NULL;
    if (vllm_async_engine_create(argv[1], &opts, &engine) != VLLM_OK) {
        fprintf(stderr, "error: %s\n", vllm_last_error());
        return 1;
    }
    vllm_sampling_params params = vllm_async_engine_default_sampling(engine);
    params.max_tokens = 96;
    params.has_seed = true;
    params.seed = 42;
    static reader readers[2];
    pthread_t threads[2];
    int started = 0, rc = 0;
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "req-%d", i);
        vllm_prompt prompt = {.text = argv[2 + i]};
        readers[i].tag = i;
        if (vllm_async_add_request(engine, id, &prompt, &params, &readers[i].stream) != VLLM_OK) {
            fprintf(stderr, "error: %s\n", vllm_last_error());
            rc = 1;
            break;
        }
        if (pthread_create(&threads[i], NULL, read_stream, &readers[i]) != 0) {
            fprintf(stderr, "error: cannot start a reader thread\n");
            vllm_stream_free(readers[i].stream);
            rc = 1;
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
        vllm_stream_free(readers[i].stream);
    }
    vllm_async_engine_free(engine);
    return rc;
}
