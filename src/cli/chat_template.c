/*
 * chat_template.c: `vllmc chat-template`: renders the model folder's chat template for a
 * conversation and prints the prompt exactly (no added newline) to stdout. Errors are one
 * "vllmc: ..." line on stderr with exit code 1 (2 for usage errors).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_hub.h"
#include "template/chat_template.h"
#include "vllm.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc chat-template --model DIR|ID --messages F.json [--no-generation-prompt] [--revision REV]\n"
            "                           [--tools F.json] [--var key=value ...]\n\n"
            "Renders DIR's chat template (chat_template.jinja or tokenizer_config.json) and prints\n"
            "the prompt exactly. F.json is an array of messages or {\"messages\": [...], \"tools\": [...]}.\n"
            "--var values are parsed as JSON when valid (true, 3, {...}), else taken as strings.\n");
}

static int fail(json_t *ctx, const char *what) {
    fprintf(stderr, "vllmc: %s\n", what);
    json_decref(ctx);
    return EXIT_FAIL;
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *tools = NULL;
    bool gen_prompt = true;
    vllm_engine_options eo = vllm_engine_default_options(); /* --revision */
    json_t *ctx = json_object();
    if (!ctx) return fail(NULL, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); json_decref(ctx); return 0; }
        if (!strcmp(a, "--no-generation-prompt")) { gen_prompt = false; continue; }
        int hv = cli_hub_opt("vllmc: chat-template", argc, argv, &i, &eo);
        if (hv < 0) goto bad;
        if (hv > 0) continue;
        if (!strcmp(a, "--model")) { CLI_NEED_VALUE("vllmc"); model = argv[++i]; }
        else if (!strcmp(a, "--messages")) { CLI_NEED_VALUE("vllmc"); messages = argv[++i]; }
        else if (!strcmp(a, "--tools")) { CLI_NEED_VALUE("vllmc"); tools = argv[++i]; }
        else if (!strcmp(a, "--var")) {
            CLI_NEED_VALUE("vllmc");
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq || eq == kv) {
                fprintf(stderr, "vllmc: --var needs key=value, got '%s'\n", kv);
                goto bad;
            }
            char *key = strndup(kv, (size_t)(eq - kv));
            if (!key) return fail(ctx, "out of memory");
            json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
            if (!v) v = json_string(eq + 1);
            if (!v) { free(key); return fail(ctx, "--var: value is not valid UTF-8"); }
            json_object_set_new(ctx, key, v);
            free(key);
        } else {
            fprintf(stderr, "vllmc: chat-template: unknown option '%s'\n", a);
            usage(stderr);
            goto bad;
        }
    }
    if (!model || !messages) {
        fprintf(stderr, "vllmc: chat-template needs --model DIR and --messages F.json\n");
        usage(stderr);
        goto bad;
    }
    char msg[4600];
    json_error_t jerr;
    json_t *m = json_load_file(messages, 0, &jerr);
    if (!m) {
        snprintf(msg, sizeof msg, "%s: line %d: %s", messages, jerr.line, jerr.text);
        return fail(ctx, msg);
    }
    if (json_is_object(m)) {
        /* {"messages": [...], "tools": [...], other vars...}: merged under the --var values */
        const char *k;
        json_t *x;
        json_object_foreach(m, k, x) if (!json_object_get(ctx, k)) json_object_set(ctx, k, x);
        json_decref(m);
        if (!json_is_array(json_object_get(ctx, "messages"))) {
            snprintf(msg, sizeof msg, "%s: \"messages\" must be an array", messages);
            return fail(ctx, msg);
        }
    } else if (json_is_array(m)) {
        json_object_set_new(ctx, "messages", m);
    } else {
        json_decref(m);
        snprintf(msg, sizeof msg, "%s: expected an array of messages or {\"messages\": [...]}", messages);
        return fail(ctx, msg);
    }
    if (tools) {
        json_t *t = json_load_file(tools, 0, &jerr);
        if (!t) {
            snprintf(msg, sizeof msg, "%s: line %d: %s", tools, jerr.line, jerr.text);
            return fail(ctx, msg);
        }
        json_object_set_new(ctx, "tools", t);
    }
    vllm_status st_load;
    if (!json_object_get(ctx, "add_generation_prompt")) json_object_set_new(ctx, "add_generation_prompt", json_boolean(gen_prompt));
    char *tpl = NULL, *bos = NULL, *eos = NULL, *hub_model = NULL, *hub_tok = NULL;
    if (!cli_hub_resolve("vllmc", &model, &eo, true, &hub_model, &hub_tok)) {
        json_decref(ctx);
        return EXIT_FAIL;
    }
    st_load = ct_load_dir(model, &tpl, &bos, &eos);
    free(hub_model);
    free(hub_tok);
    if (st_load != VLLM_OK) return fail(ctx, vllm_last_error());
    if (bos && !json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", json_string(bos));
    if (eos && !json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", json_string(eos));
    free(bos), free(eos);
    char *out = NULL;
    vllm_status st = ct_render(tpl, ctx, &out);
    free(tpl);
    if (st != VLLM_OK) return fail(ctx, vllm_last_error());
    size_t n = strlen(out);
    bool ok = fwrite(out, 1, n, stdout) == n && fflush(stdout) == 0;
    free(out);
    json_decref(ctx);
    if (!ok) { fprintf(stderr, "vllmc: cannot write the prompt to stdout\n"); return EXIT_FAIL; }
    return 0;
bad:
    json_decref(ctx);
    return EXIT_USAGE;
}
