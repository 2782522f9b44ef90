/*
 * generate.c: the smallest libvllmc program: load a model folder, generate
 * greedily from a prompt, print the completion.
 *
 *   build/example_generate models/stories260K "Once upon a time"
 */
#include <stdio.h>

#include "vllm.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT\n", argv[0]);
        return 2;
    }
    vllm_engine_options opts = vllm_engine_default_options();
    vllm_engine *engine = NULL;
    if (vllm_engine_create(argv[1], &opts, &engine) != VLLM_OK) {
        fprintf(stderr, "error: %s\n", vllm_last_error());
        return 1;
    }
    vllm_sampling_params params = vllm_sampling_default_params();
    params.temperature = 0.0f;  /* greedy */
    params.max_tokens = 64;
    vllm_prompt prompt = {.text = argv[2]};
    vllm_completion *out = NULL;
    if (vllm_generate(engine, &prompt, 1, &params, false, &out, NULL) != VLLM_OK) {
        fprintf(stderr, "error: %s\n", vllm_last_error());
        vllm_engine_free(engine);
        return 1;
    }
    printf("%s%s\n", argv[2], out[0].text ? out[0].text : "");
    vllm_completions_free(out, 1);
    vllm_engine_free(engine);
    return 0;
}
