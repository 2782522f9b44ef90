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
            "usage: vllmc generate --model DIR (--prompt TEXT | --prompt-token-ids 1,2,3 | --prompts-file F.jsonl) [options]\n\n"
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
            "  --max-model-len N  --max-num-seqs N  --max-num-batched-tokens N  --load-format auto|dummy\n"
            "  --tokenizer PATH   a tokenizer folder or GGUF file instead of the model's\n"
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
    vllm_engine_options eo = vllm_engine_default_options();
    bool json = false, stats_flag = false;
    /* sampling overrides (applied over the model's defaults) */
    long long max_tokens = 256, top_k = 0, min_tokens = 0, seed = -1, v;
    double temperature = 0, top_p = 0, min_p = 0;
    bool set_temperature = false, set_top_p = false, set_min_p = false, set_top_k = false;
    bool ignore_eos = false, keep_special = false, include_stop = false;
    double presence = 0, frequency = 0, repetition = 1;
    long long logprobs_k = -1, n_samples = 1;
    const char **stops = NULL, **bad_words = NULL;
    size_t num_stops = 0, num_bad = 0;
    int32_t *stop_ids = NULL, *allowed = NULL, *bias_ids = NULL;
    float *bias_vals = NULL;
    size_t num_stop_ids = 0, num_allowed = 0, num_bias = 0;
    int rc = 1;
    cli_dataset prompts = {0};
    vllm_prompt *items = NULL;  /* (prompts.n) views of prompts */
    vllm_engine *engine = NULL;
    vllm_completion *comps = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double d;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) { CLI_NEED_VALUE(CMD); model = argv[++i];
        } else if (!strcmp(a, "--prompt")) { CLI_NEED_VALUE(CMD); prompt = argv[++i];
        } else if (!strcmp(a, "--prompt-token-ids")) { CLI_NEED_VALUE(CMD); ids_arg = argv[++i];
        } else if (!strcmp(a, "--prompts-file")) { CLI_NEED_VALUE(CMD); file = argv[++i];
        } else if (!strcmp(a, "--json")) { json = true;
        } else if (!strcmp(a, "--stats")) { stats_flag = true;
        } else if (!strcmp(a, "--ignore-eos")) { ignore_eos = true;
        } else if (!strcmp(a, "--no-skip-special-tokens")) { keep_special = true;
        } else if (!strcmp(a, "--include-stop-str-in-output")) { include_stop = true;
        } else if (cli_engine_flag(a, &eo)) { /* --enforce-eager, --[no-]enable-prefix-caching */
        } else if (!strcmp(a, "--stop") || !strcmp(a, "--bad-words")) {
            CLI_NEED_VALUE(CMD);
            const char ***list = !strcmp(a, "--stop") ? &stops : &bad_words;
            size_t *cnt = !strcmp(a, "--stop") ? &num_stops : &num_bad;
            const char **nl = realloc(*list, (*cnt + 1) * sizeof *nl);
            if (!nl) goto out;
            *list = nl;
            nl[(*cnt)++] = argv[++i];
        } else if (!strcmp(a, "--stop-token-ids") || !strcmp(a, "--allowed-token-ids")) {
            CLI_NEED_VALUE(CMD);
            int32_t **dst = !strcmp(a, "--stop-token-ids") ? &stop_ids : &allowed;
            size_t *cnt = !strcmp(a, "--stop-token-ids") ? &num_stop_ids : &num_allowed;
            free(*dst);
            if (!cli_parse_ids(argv[++i], dst, cnt)) {
                fprintf(stderr, CMD ": %s must be comma-separated token ids\n", a);
                goto bad;
            }
        } else if (!strcmp(a, "--logit-bias")) {
            CLI_NEED_VALUE(CMD);
            const char *q = argv[++i];
            size_t cap = 1;
            for (const char *t = q; *t; t++) cap += *t == ',';
            free(bias_ids);
            free(bias_vals);
            bias_ids = malloc(cap * sizeof *bias_ids);
            bias_vals = malloc(cap * sizeof *bias_vals);
            if (!bias_ids || !bias_vals) goto out;
            num_bias = 0;
            while (*q) {
                char *end;
                long id = strtol(q, &end, 10);
                if (end == q || *end != ':' || id < 0 || id > INT32_MAX) break;
                q = end + 1;
                double v = strtod(q, &end);
                if (end == q) break;
                bias_ids[num_bias] = (int32_t)id;
                bias_vals[num_bias++] = (float)v;
                q = end;
                if (*q == ',') q++;
                else if (*q) break;
            }
            if (*q || num_bias == 0) {
                fprintf(stderr, CMD ": --logit-bias must be ID:VALUE[,ID:VALUE...]\n");
                goto bad;
            }
        } else if (!strcmp(a, "--presence-penalty") || !strcmp(a, "--frequency-penalty") ||
                   !strcmp(a, "--repetition-penalty")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_float(argv[++i], &d)) { fprintf(stderr, CMD ": %s needs a number\n", a); goto bad; }
            if (!strcmp(a, "--presence-penalty")) presence = d;
            else if (!strcmp(a, "--frequency-penalty")) frequency = d;
            else repetition = d;
        } else if (!strcmp(a, "--n")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_int(argv[++i], 1, 4096, &n_samples)) {
                fprintf(stderr, CMD ": --n needs an integer in [1, 4096]\n");
                goto bad;
            }
        } else if (!strcmp(a, "--logprobs")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_int(argv[++i], 0, 1000, &logprobs_k)) {
                fprintf(stderr, CMD ": --logprobs needs a non-negative integer\n");
                goto bad;
            }
        } else if (!strcmp(a, "--device")) { CLI_NEED_VALUE(CMD); eo.device = argv[++i];
        } else if (!strcmp(a, "--tokenizer")) { CLI_NEED_VALUE(CMD); eo.tokenizer = argv[++i];
        } else if (!strcmp(a, "--load-format")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_load_format(CMD, argv[++i], &eo.load_format)) goto bad;
        } else if (cli_is_state_dtype(a)) {
            CLI_NEED_VALUE(CMD);
            if (!cli_state_dtype(CMD, a, argv[++i], &eo)) goto bad;
        } else if (!strcmp(a, "--gpu-memory-utilization")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_float(argv[++i], &d)) { fprintf(stderr, CMD ": %s needs a number\n", a); goto bad; }
            eo.gpu_memory_utilization = (float)d;
        } else if (!strcmp(a, "--temperature") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_float(argv[++i], &d)) { fprintf(stderr, CMD ": %s needs a number\n", a); goto bad; }
            if (!strcmp(a, "--temperature")) temperature = d, set_temperature = true;
            else if (!strcmp(a, "--top-p")) top_p = d, set_top_p = true;
            else min_p = d, set_min_p = true;
        } else if (!strcmp(a, "--max-tokens") || !strcmp(a, "--top-k") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--min-tokens") || !strcmp(a, "--threads") || !strcmp(a, "--block-size") ||
                   !strcmp(a, "--num-kv-blocks") || !strcmp(a, "--max-model-len") || !strcmp(a, "--max-num-seqs") ||
                   !strcmp(a, "--max-num-batched-tokens") || !strcmp(a, "--kv-cache-memory")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_int(argv[++i], -1, INT32_MAX, &v)) {
                fprintf(stderr, CMD ": %s needs an integer, got '%s'\n", a, argv[i]);
                goto bad;
            }
            if (!strcmp(a, "--max-tokens")) max_tokens = v;
            else if (!strcmp(a, "--top-k")) top_k = v, set_top_k = true;
            else if (!strcmp(a, "--seed")) seed = v;
            else if (!strcmp(a, "--min-tokens")) min_tokens = v;
            else if (!strcmp(a, "--threads")) eo.num_threads = (int)v;
            else if (!strcmp(a, "--block-size")) eo.block_size = (int)v;
            else if (!strcmp(a, "--num-kv-blocks")) eo.num_kv_blocks = (int)v;
            else if (!strcmp(a, "--max-model-len")) eo.max_model_len = (int)v;
            else if (!strcmp(a, "--max-num-seqs")) eo.max_num_seqs = (int)v;
            else if (!strcmp(a, "--max-num-batched-tokens")) eo.max_num_batched_tokens = (int)v;
            else eo.kv_cache_memory = (size_t)(v < 0 ? 0 : v) << 20;
        } else {
            fprintf(stderr, CMD ": unknown option '%s'\n", a);
            goto bad;
        }
    }
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
    if (seed >= 0) eo.seed = (uint64_t)seed;

    if (vllm_engine_create(model, &eo, &engine) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto out;
    }
    for (size_t i = 0; i < prompts.n; i++)
        if (prompts.items[i].text && !vllm_engine_has_tokenizer(engine)) {
            fprintf(stderr, "vllmc: %s has no tokenizer.json: use --prompt-token-ids\n", model);
            goto out;
        }
    vllm_sampling_params sp = vllm_engine_default_sampling(engine);
    sp.max_tokens = (int)max_tokens;
    if (set_temperature) sp.temperature = (float)temperature;
    if (set_top_p) sp.top_p = (float)top_p;
    if (set_min_p) sp.min_p = (float)min_p;
    if (set_top_k) sp.top_k = (int)top_k;
    sp.min_tokens = (int)min_tokens;
    sp.ignore_eos = ignore_eos;
    sp.skip_special_tokens = !keep_special;
    sp.stop = stops;
    sp.num_stop = num_stops;
    sp.include_stop_str_in_output = include_stop;
    sp.bad_words = bad_words;
    sp.num_bad_words = num_bad;
    sp.stop_token_ids = stop_ids;
    sp.num_stop_token_ids = num_stop_ids;
    sp.allowed_token_ids = allowed;
    sp.num_allowed_token_ids = num_allowed;
    sp.logit_bias_ids = bias_ids;
    sp.logit_bias_values = bias_vals;
    sp.num_logit_bias = num_bias;
    sp.presence_penalty = (float)presence;
    sp.frequency_penalty = (float)frequency;
    sp.repetition_penalty = (float)repetition;
    sp.logprobs = (int)logprobs_k;
    sp.n = (int)n_samples;
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
                print_json(c, n_samples > 1);
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
    free(stops);
    free(bad_words);
    free(stop_ids);
    free(allowed);
    free(bias_ids);
    free(bias_vals);
    return rc;
}
