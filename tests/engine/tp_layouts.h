/* tp_layouts.h: the engine layouts and greedy prompts the tensor-parallel tests compare (test_tp_engine.c,
 * test_multinode.c): NP prompts of PLEN tokens sharing their first 8, NEW greedy tokens each. */
#ifndef VLLM_TEST_TP_LAYOUTS_H
#define VLLM_TEST_TP_LAYOUTS_H

#include <stdbool.h>

#include "vllm.h"

enum { NP = 3, PLEN = 14, NEW = 12 };

typedef struct layout {
    const char *name;
    int batched, blocks; /* max_num_batched_tokens, num_kv_blocks (0: sized) */
    bool prefix;
} layout;

static const layout LAYOUTS[] = {
    {"one batch", 8192, 0, false},
    {"chunked prefill (5 tokens a step)", 5, 0, false},
    {"prefix caching", 8192, 0, true},
    {"preemption (16 blocks of 4)", 8192, 16, false},
};

/* The layout's options on o (block size 4, max_model_len 28). */
static inline void layout_apply(const layout *ly, vllm_engine_options *o) {
    o->block_size = 4;
    o->max_model_len = 28;
    o->max_num_batched_tokens = ly->batched;
    o->num_kv_blocks = ly->blocks;
    o->enable_prefix_caching = ly->prefix;
}

/* The NP greedy completions of NEW tokens; false when the engine failed (vllm_last_error says why). */
static inline bool layout_generate(vllm_engine *e, int32_t tok[NP][NEW], float lp[NP][NEW]) {
    int32_t ids[NP][PLEN];
    vllm_prompt p[NP];
    for (int i = 0; i < NP; i++) {
        for (int j = 0; j < PLEN; j++) ids[i][j] = (int32_t)((j < 8 ? j * 7 + 3 : j * 13 + i * 29) % 60 + 1);
        p[i] = (vllm_prompt){.token_ids = ids[i], .num_token_ids = PLEN};
    }
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = NEW;
    vllm_completion *c = NULL;
    const vllm_status st = vllm_generate(e, p, NP, &sp, false, &c, NULL);
    for (int i = 0; st == VLLM_OK && i < NP; i++)
        for (int j = 0; j < NEW; j++) {
            tok[i][j] = j < (int)c[i].num_tokens ? c[i].token_ids[j] : -1;
            lp[i][j] = j < (int)c[i].num_tokens ? c[i].logprobs[j] : 0;
        }
    if (c) vllm_completions_free(c, NP);
    return st == VLLM_OK;
}

#endif
