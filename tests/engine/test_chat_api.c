/* test_chat_api.c: vllm_chat_apply_template: the model's template as `vllmc chat-template` renders it, options, errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vllm.h"

#define JSON_TINY VLLM_SOURCE_DIR "/tests/fixtures/models/json_tiny"
#define STORIES VLLM_SOURCE_DIR "/models/stories260K"

static vllm_engine *make(const char *dir) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    o.max_model_len = 256;
    o.num_kv_blocks = 64;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    return e;
}

/* The prompt rendered by options (NULL on error, which is then vllm_last_error()). */
static char *render(vllm_engine *e, const char *messages, const vllm_chat_template_options *o) {
    char *out = NULL;
    if (vllm_chat_apply_template(e, messages, o, &out) != VLLM_OK) return NULL;
    return out;
}

static const char *const CONV = "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
                                " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"},"
                                " {\"type\": \"text\", \"text\": \"there\"}]}]";

/* `vllmc chat-template` of the same conversation (text parts joined as the C API does). */
static void test_same_as_cli(vllm_engine *e) {
    const char *path = "/tmp/vllmc_test_chat_api_messages.json";
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\\nthere\"}]", f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' chat-template --model '%s' --messages %s", VLLMC_BIN, JSON_TINY, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p) return;
    char cli[4096];
    size_t n = fread(cli, 1, sizeof cli - 1, p);
    cli[n] = 0;
    CHECK(pclose(p) == 0);
    remove(path);
    char *got = render(e, CONV, NULL);
    CHECK_MSG(got != NULL, "%s", vllm_last_error());
    if (!got) return;
    CHECK_MSG(!strcmp(got, cli), "api '%s' cli '%s'", got, cli);
    CHECK(!strcmp(got, "<s>system: Be brief.\nuser: Hi\nthere\nassistant: "));
    /* tokenized without special tokens (the template wrote <s>): one BOS, the first id */
    int32_t *ids = NULL, *ids2 = NULL;
    size_t nids = 0, nids2 = 0;
    CHECK_OK(vllm_tokenize(e, got, false, &ids, &nids));
    CHECK_OK(vllm_tokenize(e, got, true, &ids2, &nids2));
    CHECK(nids > 2 && ids[0] == 1 && ids[1] != 1);
    CHECK(nids2 == nids + 1 && ids2[0] == 1 && ids2[1] == 1); /* with them, a second BOS */
    vllm_free(ids);
    vllm_free(ids2);
    vllm_free(got);
}

static void test_options(vllm_engine *e) {
    vllm_chat_template_options o = vllm_chat_template_default_options();
    CHECK(o.add_generation_prompt && !o.continue_final_message && !o.chat_template && !o.tools_json &&
          !o.chat_template_kwargs_json);
    o.add_generation_prompt = false;
    char *s = render(e, "[{\"role\": \"user\", \"content\": \"Hi\"}]", &o);
    CHECK(s && !strcmp(s, "<s>user: Hi\n"));
    free(s);
    /* kwargs override the special tokens, as in transformers */
    o.chat_template_kwargs_json = "{\"bos_token\": \"[B]\"}";
    s = render(e, "[{\"role\": \"user\", \"content\": \"Hi\"}]", &o);
    CHECK(s && !strcmp(s, "[B]user: Hi\n"));
    free(s);
    /* continue_final_message: the render ends after the final message's content */
    o.chat_template_kwargs_json = NULL;
    o.continue_final_message = true;
    s = render(e, "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Once upon\"}]", &o);
    CHECK_MSG(s && !strcmp(s, "<s>user: Hi\nassistant: Once upon"), "%s", s ? s : vllm_last_error());
    free(s);
    /* an override (text), with tools and a kwarg it reads; assistant null content with tool_calls */
    o = vllm_chat_template_default_options();
    o.chat_template = "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{{ greeting }}|"
                      "{% for m in messages %}{{ m.role }}={{ m.content }}"
                      "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.x }}{% endif %};{% endfor %}"
                      "{{ eos_token }}";
    o.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
    o.chat_template_kwargs_json = "{\"greeting\": \"hey\"}";
    s = render(e,
               "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\":"
               " [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 7}\"}}]}]",
               &o);
    CHECK_MSG(s && !strcmp(s, "[f]hey|user=q;assistant=7;</s>"), "%s", s ? s : vllm_last_error());
    free(s);
    /* an override from a file */
    const char *path = "/tmp/vllmc_test_chat_api_template.jinja";
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{{ messages | length }} messages", f);
        fclose(f);
        o = vllm_chat_template_default_options();
        o.chat_template = path;
        s = render(e, CONV, &o);
        CHECK(s && !strcmp(s, "2 messages"));
        free(s);
        remove(path);
    }
}

static void test_errors(vllm_engine *e, vllm_engine *stories) {
    char *out = (char *)"x";
    EXPECT_ERR(vllm_chat_apply_template(e, "[{\"role\": ", NULL, &out), VLLM_ERR_INVALID_ARG, "messages", "JSON");
    CHECK(out == NULL);
    EXPECT_ERR(vllm_chat_apply_template(e, "[]", NULL, &out), VLLM_ERR_INVALID_ARG, "messages", "non-empty");
    EXPECT_ERR(vllm_chat_apply_template(e, "[{\"content\": \"x\"}]", NULL, &out), VLLM_ERR_INVALID_ARG, "messages[0]",
               "role");
    EXPECT_ERR(vllm_chat_apply_template(e, "[{\"role\": \"user\"}]", NULL, &out), VLLM_ERR_INVALID_ARG,
               "messages[0].content", "required");
    EXPECT_ERR(vllm_chat_apply_template(
                   e, "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]", NULL, &out),
               VLLM_ERR_INVALID_ARG, "image_url", "not supported");
    vllm_chat_template_options o = vllm_chat_template_default_options();
    o.continue_final_message = true;
    EXPECT_ERR(vllm_chat_apply_template(e, CONV, &o, &out), VLLM_ERR_INVALID_ARG, "continue_final_message",
               "add_generation_prompt");
    o = vllm_chat_template_default_options();
    o.tools_json = "{}";
    EXPECT_ERR(vllm_chat_apply_template(e, CONV, &o, &out), VLLM_ERR_INVALID_ARG, "tools", "array");
    o = vllm_chat_template_default_options();
    o.chat_template_kwargs_json = "[1]";
    EXPECT_ERR(vllm_chat_apply_template(e, CONV, &o, &out), VLLM_ERR_INVALID_ARG, "chat_template_kwargs", "object");
    o = vllm_chat_template_default_options();
    o.chat_template = "{{ raise_exception('no system messages') }}";
    EXPECT_ERR(vllm_chat_apply_template(e, CONV, &o, &out), VLLM_ERR_INVALID_ARG, "no system messages", "");
    o.chat_template = "/nonexistent/template.jinja";
    EXPECT_ERR(vllm_chat_apply_template(e, CONV, &o, &out), VLLM_ERR_NOT_FOUND, "/nonexistent/template.jinja",
               "chat_template");
    if (stories) {
        /* no template in the folder: NOT_FOUND, vLLM's message; an override works */
        EXPECT_ERR(vllm_chat_apply_template(stories, CONV, NULL, &out), VLLM_ERR_NOT_FOUND, "stories260K",
                   "no chat template");
        o = vllm_chat_template_default_options();
        o.chat_template = "{{ bos_token }}{{ messages[-1].content }}";
        char *s = render(stories, CONV, &o);
        CHECK_MSG(s && !strcmp(s, "<s>Hi\nthere"), "%s", s ? s : vllm_last_error());
        free(s);
    }
    vllm_free(NULL);
}

int main(void) {
    vllm_engine *e = make(JSON_TINY), *stories = make(STORIES);
    if (e) {
        test_same_as_cli(e);
        test_options(e);
        test_errors(e, stories);
    }
    vllm_engine_free(e);
    vllm_engine_free(stories);
    TEST_END();
}
