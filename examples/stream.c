/*
 * stream.c: the request-level engine: two requests run together, their text
 * streamed step by step as it is produced (vllm_engine_add_request / step).
 *
 *   build/example_stream models/stories260K
 */
#include <stdio.h>
#include <string.h>

#include "vllm.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
        return 2;
    }
    vllm_engine_options opts = vllm_engine_default_options();
    vllm_engine *engine = NULL;
    if (vllm_engine_create(argv[1], &opts, &engine) != VLLM_OK) {
        fprintf(stderr, "error: %s\n", vllm_last_error());
        return 1;
    }
    vllm_sampling_params params = vllm_sampling_default_params();
    params.max_tokens = 48;
    params.temperature = 0.8f;
    params.has_seed = true;
    params.seed = 42;
    const char *stop[] = {"."};
    params.stop = stop;            /* end each story at its first full stop */
    params.num_stop = 1;
    params.include_stop_str_in_output = true;
    vllm_prompt a = {.text = "Once upon a time"}, b = {.text = "The little dog"};
    if (vllm_engine_add_request(engine, "a", &a, &params) != VLLM_OK ||
        vllm_engine_add_request(engine, "b", &b, &params) != VLLM_OK) {
        fprintf(stderr, "error: %s\n", vllm_last_error());
        vllm_engine_free(engine);
        return 1;
    }
    while (vllm_engine_has_unfinished(engine)) {
        const vllm_request_output *out;
        size_t n;
        if (vllm_engine_step(engine, &out, &n) != VLLM_OK) {
            fprintf(stderr, "error: %s\n", vllm_last_error());
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (out[i].new_text_len) printf("[%s] %s\n", out[i].request_id, out[i].new_text);
            if (out[i].finish_reason != VLLM_FINISH_NONE)
                printf("[%s] finished (%s), %zu tokens\n", out[i].request_id,
                       vllm_finish_reason_str(out[i].finish_reason), out[i].completion_tokens);
        }
    }
    vllm_engine_free(engine);
    return 0;
}
