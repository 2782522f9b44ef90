/*
 * test_stories260k.c: the bundled model (models/stories260K, converted from
 * llama2.c by tools/convert_llama2c.py) must reproduce its model card: the
 * greedy story from BOS, word for word (tests/fixtures/stories260K_greedy.txt,
 * copied from the card). Also the same story through a text prompt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vllm.h"

int main(void) {
    char *card = t_slurp(VLLM_SOURCE_DIR "/tests/fixtures/stories260K_greedy.txt");
    CHECK(card != NULL);
    vllm_engine *e = NULL;
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    CHECK_OK(vllm_engine_create(VLLM_SOURCE_DIR "/models/stories260K", &o, &e));
    if (!e || !card) {
        free(card);
        TEST_END();
    }
    CHECK(vllm_engine_has_tokenizer(e));

    /* greedy from BOS, 256 tokens: the card's text is a prefix */
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 256;
    vllm_completion *c = NULL;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
    if (c) {
        CHECK_MSG(c[0].text && !strncmp(c[0].text, card, strlen(card)), "story differs from the model card:\n%s",
                  c[0].text ? c[0].text : "(null)");
        for (size_t i = 0; i < c[0].num_tokens; i++) CHECK(c[0].logprobs[i] <= 0.0f);
    }
    vllm_completions_free(c, 1);

    /* a text prompt: "Once upon a time" + BOS continues with the card's words */
    vllm_prompt tp = {.text = "Once upon a time"};
    sp.max_tokens = 20;
    CHECK_OK(vllm_generate(e, &tp, 1, &sp, false, &c, NULL));
    if (c) {
        CHECK(c[0].num_prompt_tokens >= 2 && c[0].prompt_token_ids[0] == 1);
        const char *rest = card + strlen("Once upon a time");
        CHECK_MSG(c[0].text && !strncmp(c[0].text, rest, strlen(c[0].text) > 40 ? 40 : strlen(c[0].text)),
                  "text prompt continuation '%s' vs card '%.60s'", c[0].text ? c[0].text : "(null)", rest);
    }
    vllm_completions_free(c, 1);

    /* two engines in one process, and a batch of identical prompts agree */
    vllm_engine *e2 = NULL;
    CHECK_OK(vllm_engine_create(VLLM_SOURCE_DIR "/models/stories260K", &o, &e2));
    vllm_prompt many[5];
    for (int i = 0; i < 5; i++) many[i] = p;
    sp.max_tokens = 64;
    CHECK_OK(vllm_generate(e2, many, 5, &sp, false, &c, NULL));
    for (int i = 1; c && i < 5; i++)
        CHECK(c[i].num_tokens == c[0].num_tokens && !memcmp(c[i].token_ids, c[0].token_ids, c[0].num_tokens * 4));
    vllm_completions_free(c, 5);
    vllm_engine_free(e2);
    vllm_engine_free(e);
    free(card);
    TEST_END();
}
