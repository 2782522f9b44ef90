/*
 * test_stories260k.c: the bundled model (models/stories260K, converted from
 * llama2.c by tools/convert_llama2c.py) must reproduce its model card: the
 * greedy story from BOS, word for word (tests/fixtures/stories260K_greedy.txt,
 * copied from the card). Also the same story through a text prompt, compared whole.
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

    /* greedy from BOS, 256 tokens (llama2.c's run.c steps, BOS included, as on the card): the card's
     * whole text is a prefix of the story */
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 256;
    vllm_completion *c = NULL;
    char *story = NULL;
    size_t story_tokens = 0;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
    if (c) {
        CHECK_MSG(c[0].text && !strncmp(c[0].text, card, strlen(card)), "story differs from the model card:\n%s",
                  c[0].text ? c[0].text : "(null)");
        for (size_t i = 0; i < c[0].num_tokens; i++) CHECK(c[0].logprobs[i] <= 0.0f);
        story = c[0].text ? strdup(c[0].text) : NULL;
        story_tokens = c[0].num_tokens;
    }
    vllm_completions_free(c, 1);
    /* the fixture is the card's whole story (565 characters), not a part of it */
    const char *last = "Her mom said, \"Don't worry, Lily. We can help you.";
    CHECK_MSG(strlen(card) == 565 && !strcmp(card + strlen(card) - strlen(last), last),
              "tests/fixtures/stories260K_greedy.txt: %zu characters, not the card's whole story", strlen(card));

    /* a text prompt: "Once upon a time" (BOS + 4 tokens, the story's first 4) continues with the rest of the
     * card, all of it: the continuation of the same 256 positions is the BOS story from its 5th token on, and the
     * card's text after "Once upon a time" is a prefix of it */
    vllm_prompt tp = {.text = "Once upon a time"};
    const char *head = "Once upon a time";
    sp.max_tokens = 256 - 4;
    CHECK_OK(vllm_generate(e, &tp, 1, &sp, false, &c, NULL));
    if (c) {
        CHECK(c[0].num_prompt_tokens == 5 && c[0].prompt_token_ids[0] == 1);
        CHECK_MSG(c[0].num_tokens + 4 == story_tokens, "%zu tokens after the text prompt, %zu from BOS", c[0].num_tokens,
                  story_tokens);
        const char *rest = card + strlen(head);
        size_t got = c[0].text ? strlen(c[0].text) : 0;
        CHECK_MSG(got >= strlen(rest) && !strncmp(c[0].text, rest, strlen(rest)),
                  "text prompt continuation (%zu characters) differs from the card's %zu:\n%s\nvs the card:\n%s", got,
                  strlen(rest), c[0].text ? c[0].text : "(null)", rest);
        CHECK_MSG(story && c[0].text && !strncmp(story, head, strlen(head)) && !strcmp(c[0].text, story + strlen(head)),
                  "text prompt continuation differs from the BOS story after '%s':\n%s", head,
                  c[0].text ? c[0].text : "(null)");
    }
    vllm_completions_free(c, 1);
    free(story);

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
