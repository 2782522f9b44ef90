/*
 * generate.c: `vllmc generate`: offline generation from a prompt, token
 * ids or a JSONL file of prompts, printed as text or as JSON lines.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/dataset.h"
#include "core/meminfo.h"
#include "vllm.h"

#define CMD "vllmc generate" /* message prefix */

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc generate --model DIR|ID (--prompt TEXT | --prompt-token-ids 1,2,3 | --prompts-file F.jsonl) [options]\n\n"
            "prompts:\n"
            "  --prompt TEXT               a text prompt (tokenized with special tokens)\n"
            "  --prompt-token-ids IDS      comma-separated token ids (no tokenizer needed)\n"
            "  --prompts-file F            JSONL: {\"prompt\": \"...\"} or {\"prompt_token_ids\": [...]} per line\n"
            "sampling:\n"
            "  --max-tokens N              tokens to generate at most (default 256)\n"
            "  --temperature T             0 = greedy (default: generation_config.json, else 1.0)\n"
            "  --top-k K  --top-p P  --min-p P\n"
            "  --seed S                    seed (same seed, same output)\n"
            "  --min-tokens N  --ignore-eos  --no-skip-special-tokens\n"
            "  --stop S (repeatable)  --include-stop-str-in-output  --stop-token-ids IDS\n"
            "  --presence-penalty P  --frequency-penalty P  --repetition-penalty P\n"
            "  --bad-words W (repeatable)  --allowed-token-ids IDS  --logit-bias ID:VALUE[,ID:VALUE...]\n"
            "  --logprobs K                also print the top K logprobs per generated token (--json)\n"
            "  --n N                       N samples per prompt (printed one after the other, with \"index\" in --json)\n"
            "output:\n"
            "  --json                      one JSON object per prompt: prompt_token_ids, token_ids, logprobs, text, finish_reason\n"
            "  --stats                     print prefill/decode speed and peak memory to stderr\n"
            "engine:\n"
            "  --device cpu|cuda  --threads N  --block-size N (16)  --num-kv-blocks N  --kv-cache-memory MiB\n"
            "  --tensor-parallel-size N (-tp)  the model split over N ranks (the CPU: threads; dense families)\n"
            "  --nnodes N  --master-addr A  --master-port P   the -tp ranks over N hosts (this one node 0; the others\n"
            "                              run vllmc serve with the same options and --node-rank 1 .. N-1)\n"
            "  --max-model-len N  --max-num-seqs N  --max-num-batched-tokens N  --load-format auto|dummy\n"
            "  --tokenizer PATH   a tokenizer folder or GGUF file instead of the model's\n"
            "  --revision REV  --tokenizer-revision REV   a Hugging Face id's branch, tag or commit\n"
            "  --mamba-cache-dtype / --mamba-ssm-cache-dtype auto|float32|bfloat16|float16 (hybrid models' states)\n"
            "  --kv-cache-dtype auto|fp8|fp8_e4m3 (FP8 KV cache: per-layer k_scale / v_scale from the checkpoint)\n"
            "  --gpu-memory-utilization F  (GPU: share of device memory for weights + activations + KV, 0.9)\n"
            "  --enforce-eager             (GPU: no CUDA graphs for decode steps)\n"
            "  --no-enable-prefix-caching\n");
}

static void print_json(const vllm_completion *c, bool with_index) {
    json_t *o = json_object();
    json_t *p = json_array(), *t = json_array(), *lp = json_array();
    for (size_t i = 0; i < c->num_prompt_tokens; i++) json_array_append_new(p, json_integer(c->prompt_token_ids[i]));
    for (size_t i = 0; i < c->num_tokens; i++) {
        json_array_append_new(t, json_integer(c->token_ids[i]));
        json_array_append_new(lp, isfinite(c->logprobs[i]) ? json_real((double)c->logprobs[i]) : json_null());
    }
    json_object_set_new(o, "prompt_token_ids", p);
    json_object_set_new(o, "token_ids", t);
    json_object_set_new(o, "logprobs", lp);
    if (c->text) json_object_set_new(o, "text", json_string(c->text));
    json_object_set_new(o, "finish_reason", json_string(vllm_finish_reason_str(c->finish_reason)));
    if (with_index) json_object_set_new(o, "index", json_integer((json_int_t)c->index));
    if (c->stop_reason) json_object_set_new(o, "stop_reason", json_string(c->stop_reason));
    if (c->num_top_logprobs > 0) {
        /* top_logprobs[i] = [[id, logprob], ...] for generated token i */
        json_t *all = json_array();
        for (size_t i = 0; i < c->num_tokens; i++) {
            json_t *row = json_array();
            for (int j = 0; j < c->num_top_logprobs; j++) {
                size_t at = i * (size_t)c->num_top_logprobs + (size_t)j;
                json_t *pair = json_array();
                json_array_append_new(pair, json_integer(c->top_logprob_ids[at]));
                json_array_append_new(pair, isfinite(c->top_logprobs[at]) ? json_real(c->top_logprobs[at]) : json_null());
                json_array_append_new(row, pair);
            }
            json_array_append_new(all, row);
        }
        json_object_set_new(o, "top_logprobs", all);
    }
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *ids_arg = NULL, *file = NULL;
    bool json = false, stats_flag = false;
    /* sampling overrides (applied over the model's defaults) and engine options */
    cli_gen_opts go;
    cli_gen_opts_init(&go);
    vllm_engine_options eo;
    int rc = 1;
    cli_dataset prompts = {0};
    vllm_prompt *items = NULL;  /* (prompts.n) views of prompts */
    vllm_engine *engine = NULL;
    vllm_completion *comps = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int taken;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            cli_gen_opts_free(&go);
            return 0;
        } else if (!strcmp(a, "--model")) { CLI_NEED_VALUE(CMD); model = argv[++i];
        } else if (!strcmp(a, "--prompt")) { CLI_NEED_VALUE(CMD); prompt = argv[++i];
        } else if (!strcmp(a, "--prompt-token-ids")) { CLI_NEED_VALUE(CMD); ids_arg = argv[++i];
        } else if (!strcmp(a, "--prompts-file")) { CLI_NEED_VALUE(CMD); file = argv[++i];
        } else if (!strcmp(a, "--json")) { json = true;
        } else if (!strcmp(a, "--stats")) { stats_flag = true;
        } else if ((taken = cli_gen_opt(CMD, argc, argv, &i, &go)) != 0) { /* sampling and engine options */
            if (taken == -1) goto bad;
            if (taken == -2) goto out;
        } else {
            fprintf(stderr, CMD ": unknown option '%s'\n", a);
            goto bad;
        }
    }
    eo = go.eo;
    if (!model) { fprintf(stderr, CMD ": --model is required\n"); goto bad; }
    if (!!prompt + !!ids_arg + !!file != 1) {
        fprintf(stderr, CMD ": give exactly one of --prompt, --prompt-token-ids, --prompts-file\n");
        goto bad;
    }
    if (prompt) {
        cli_prompt p = {.text = strdup(prompt)};
        if (!p.text || !cli_dataset_push(&prompts, p)) { free(p.text); goto out; }
    } else if (ids_arg) {
        cli_prompt p = {0};
        if (!cli_parse_ids(ids_arg, &p.ids, &p.num_ids)) {
            fprintf(stderr, CMD ": --prompt-token-ids must be comma-separated non-negative integers\n");
            goto bad;
        }
        if (!cli_dataset_push(&prompts, p)) { free(p.ids); goto out; }
    } else if (!cli_dataset_read_jsonl("vllmc", file, SIZE_MAX, CLI_OUTPUT_LEN_IGNORE, &prompts)) {
        goto out;
    }
    if (!(items = cli_dataset_prompts(&prompts))) goto out;
    if (go.seed >= 0) eo.seed = (uint64_t)go.seed;

    if (vllm_engine_create(model, &eo, &engine) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto out;
    }
    for (size_t i = 0; i < prompts.n; i++)
        if (prompts.items[i].text && !vllm_engine_has_tokenizer(engine)) {
            fprintf(stderr, "vllmc: %s has no tokenizer.json: use --prompt-token-ids\n", model);
            goto out;
        }
    vllm_sampling_params sp = cli_gen_sampling(&go, vllm_engine_default_sampling(engine));
    if (vllm_sampling_params_validate(&sp) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto bad;
    }
    vllm_generate_stats st;
    if (vllm_generate(engine, items, prompts.n, &sp, false, &comps, &st) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto out;
    }
    for (size_t i = 0; i < prompts.n; i++) {
        /* with --n, the prompt's samples follow each other (index 0 .. n-1) */
        for (size_t k = 0; k <= comps[i].num_siblings; k++) {
            const vllm_completion *c = k ? &comps[i].siblings[k - 1] : &comps[i];
            if (json) {
                print_json(c, go.n_samples > 1);
            } else if (c->text) {
                printf("%s\n", c->text);
            } else {
                for (size_t j = 0; j < c->num_tokens; j++) printf("%s%d", j ? "," : "", c->token_ids[j]);
                printf("\n");
            }
        }
    }
    fflush(stdout);
    if (stats_flag) {
        size_t decoded = st.generated_tokens > prompts.n ? st.generated_tokens - prompts.n : 0;
        fprintf(stderr, "prefill: %zu tokens in %.4f s (%.1f tok/s)\n", st.prompt_tokens, st.prefill_seconds,
                st.prefill_seconds > 0 ? (double)st.prompt_tokens / st.prefill_seconds : 0.0);
        fprintf(stderr, "decode: %zu tokens in %.4f s (%.1f tok/s)\n", decoded, st.decode_seconds,
                st.decode_seconds > 0 ? (double)decoded / st.decode_seconds : 0.0);
        fprintf(stderr, "steps: %zu, peak RSS: %.1f MiB\n", st.steps, (double)vt_peak_rss_bytes() / (1 << 20));
    }
    rc = 0;
    goto out;
bad:
    rc = 2;
out:
    vllm_completions_free(comps, prompts.n);
    vllm_engine_free(engine);
    free(items);
    cli_dataset_free(&prompts);
    cli_gen_opts_free(&go);
    return rc;
}
