/*
 * bench.c: `vllmc bench latency` and `vllmc bench throughput`, vLLM's
 * offline benchmarks (vllm/benchmarks/latency.py, throughput.py) over the
 * public API: option names, sampling (temperature 1, top_p 1, ignore_eos,
 * max_tokens = output length) and the printed result lines follow vLLM.
 *
 * latency:    one batch of --batch-size random prompts, run to completion
 *             --num-iters-warmup then --num-iters times; prints the average,
 *             standard deviation and 10/25/50/75/90/99% percentile latency.
 * throughput: --num-prompts random prompts or a JSONL dataset, all given to
 *             one vllm_generate call (continuous batching); prints requests/s,
 *             total tokens/s and output tokens/s.
 *
 * Results go to stdout, progress lines to stderr.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_hub.h"
#include "cli/dataset.h"
#include "core/error.h"
#include "vllm.h"

/* vLLM's latency benchmark draws prompt ids from [0, 10000). */
#define BENCH_MAX_RANDOM_ID 10000

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc bench latency --model DIR [options]\n"
            "       vllmc bench throughput --model DIR (--input-len N | --dataset F.jsonl) [options]\n"
            "       vllmc bench serve [options]   against a running server (vllmc bench serve --help)\n"
            "       vllmc bench grammar --model DIR --json-schemas F   structured-output grammar set-up times\n\n"
            "latency: one batch of random prompts, timed end to end over several iterations\n"
            "  --input-len N               prompt tokens per request (default 32)\n"
            "  --output-len N              tokens generated per request (default 128)\n"
            "  --batch-size N              prompts in the batch (default 8)\n"
            "  --num-iters-warmup N        untimed iterations first (default 2)\n"
            "  --num-iters N               timed iterations (default 10)\n"
            "throughput: all prompts in one offline generate call (continuous batching)\n"
            "  --num-prompts N             random prompts (default 1000, or the whole dataset)\n"
            "  --input-len N               prompt tokens per random prompt (required without --dataset)\n"
            "  --output-len N              tokens per request (default 128; overrides the dataset's)\n"
            "  --dataset F.jsonl           a JSONL dataset (alias --dataset-path), one object per line:\n"
            "                                {\"prompt\": \"text\", \"output_len\": N}  (needs the model's tokenizer)\n"
            "                                {\"prompt_token_ids\": [1, 2, 3], \"output_len\": N}\n"
            "                              output_len (or output_tokens) may be left out with --output-len;\n"
            "                              --num-prompts takes the first N lines\n"
            "  --json-schema F             structured outputs: every request's output constrained by the JSON\n"
            "                              Schema in file F (the grammar engine's cost; with ignore_eos the output\n"
            "                              goes on unconstrained once the JSON ends); prints the token-mask times\n"
            "  --structured-output-ratio R the fraction of requests constrained (default 1)\n"
            "  --data-parallel-size N (-dp) N engine replicas (the thread-safe front, as vllmc serve -dp), the\n"
            "                              requests added at once and balanced by load\n"
            "both:\n"
            "  --seed S                    seed of the random prompts, dummy weights and sampling (default 0)\n"
            "  --output-json F             also write the results as JSON\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching\n"
            "                              (default: off for latency, on for throughput, as vLLM)\n"
            "  --device cpu|cuda  --threads N  --block-size N (16)  --num-kv-blocks N  --kv-cache-memory MiB\n"
            "  --tensor-parallel-size N (-tp)  the model split over N ranks (the CPU: threads; dense families)\n"
            "  --nnodes N  --master-addr A  --master-port P   the ranks over N hosts, this one node 0 (the others:\n"
            "                              vllmc serve with the same options and --node-rank 1 .. N-1)\n"
            "  --max-model-len N  --max-num-seqs N  --max-num-batched-tokens N  --load-format auto|dummy\n"
            "  --mamba-cache-dtype / --mamba-ssm-cache-dtype auto|float32|bfloat16|float16 (hybrid models' states)\n"
            "  --kv-cache-dtype auto|fp8|fp8_e4m3 (FP8 KV cache: per-layer k_scale / v_scale from the checkpoint)\n"
            "Sampling is vLLM's: temperature 1.0, top_p 1.0, ignore_eos, max_tokens = output length.\n");
}

typedef struct bench_args {
    const char *who;             /* "vllmc bench latency" or "vllmc bench throughput", for messages */
    bool latency;
    const char *model, *dataset, *output_json;
    const char *json_schema_path; /* throughput: --json-schema */
    char *json_schema;            /* its text */
    double so_ratio;
    vllm_engine_options eo;
    long long input_len, output_len, batch_size, num_prompts, warmup, iters, seed;
    long long kv_mib;
    bool set_input_len, set_output_len, set_num_prompts, set_kv_mib;
    bool set_batch_size, set_warmup, set_iters;
} bench_args;

/* An integer option: its name, accepted range and destination. */
typedef struct int_opt {
    const char *name;
    long long lo, hi;
    long long *dst;
    bool *set;
    bool latency_only, throughput_only;
} int_opt;

/* Parses argv (argv[0] is the subcommand); 0 ok, 1 help printed, 2 bad option. */
static int parse_args(int argc, char **argv, bench_args *a) {
    long long threads = 0, tp = 1, dp = 1, nnodes = 1, master_port = 0, block_size = a->eo.block_size, num_kv_blocks = 0, max_model_len = 0;
    long long max_num_seqs = a->eo.max_num_seqs, max_batched = a->eo.max_num_batched_tokens;
    const int_opt opts[] = {
        {"--input-len", 1, INT32_MAX, &a->input_len, &a->set_input_len, false, false},
        {"--output-len", 1, INT32_MAX, &a->output_len, &a->set_output_len, false, false},
        {"--batch-size", 1, 1 << 20, &a->batch_size, &a->set_batch_size, true, false},
        {"--num-iters-warmup", 0, 1 << 20, &a->warmup, &a->set_warmup, true, false},
        {"--num-iters", 1, 1 << 20, &a->iters, &a->set_iters, true, false},
        {"--num-prompts", 1, 1 << 24, &a->num_prompts, &a->set_num_prompts, false, true},
        {"--seed", 0, INT64_MAX, &a->seed, NULL, false, false},
        {"--threads", 0, 4096, &threads, NULL, false, false},
        {"--tensor-parallel-size", 1, 64, &tp, NULL, false, false},
        {"-tp", 1, 64, &tp, NULL, false, false},
        {"--data-parallel-size", 1, 64, &dp, NULL, false, true},
        {"-dp", 1, 64, &dp, NULL, false, true},
        {"--nnodes", 1, 64, &nnodes, NULL, false, false},
        {"--master-port", 1, 65535, &master_port, NULL, false, false},
        {"--block-size", 1, 1024, &block_size, NULL, false, false},
        {"--num-kv-blocks", 0, INT32_MAX, &num_kv_blocks, NULL, false, false},
        {"--kv-cache-memory", 1, (long long)1 << 30, &a->kv_mib, &a->set_kv_mib, false, false},
        {"--max-model-len", 0, INT32_MAX, &max_model_len, NULL, false, false},
        {"--max-num-seqs", 1, INT32_MAX, &max_num_seqs, NULL, false, false},
        {"--max-num-batched-tokens", 1, INT32_MAX, &max_batched, NULL, false, false},
    };
    const size_t num_opts = sizeof opts / sizeof opts[0];

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 1;
        }
        if (cli_engine_flag(arg, &a->eo)) continue;
        int hv = cli_hub_opt(a->who, argc, argv, &i, &a->eo); /* --revision, --tokenizer-revision */
        if (hv < 0) return 2;
        if (hv > 0) continue;
        /* everything else takes a value */
        const int_opt *io = NULL;
        for (size_t k = 0; k < num_opts; k++)
            if (!strcmp(arg, opts[k].name)) io = &opts[k];
        if (!strcmp(arg, "--dataset-path")) arg = "--dataset"; /* vLLM's newer name */
        bool known = io || !strcmp(arg, "--model") || !strcmp(arg, "--dataset") || !strcmp(arg, "--json-schema") ||
                     !strcmp(arg, "--structured-output-ratio") ||
                     !strcmp(arg, "--output-json") || !strcmp(arg, "--device") || !strcmp(arg, "--load-format") ||
                     !strcmp(arg, "--gpu-memory-utilization") || !strcmp(arg, "--master-addr") ||
                     cli_is_state_dtype(arg);
        if (!known) {
            fprintf(stderr, "%s: unknown option '%s'\n", a->who, arg);
            return 2;
        }
        if ((io && io->latency_only && !a->latency) || (io && io->throughput_only && a->latency) ||
            ((!strcmp(arg, "--dataset") || !strcmp(arg, "--json-schema") || !strcmp(arg, "--structured-output-ratio")) &&
             a->latency)) {
            fprintf(stderr, "%s: %s is an option of bench %s\n", a->who, arg,
                    a->latency ? "throughput" : "latency");
            return 2;
        }
        if (!cli_has_value(argc, argv, i, a->who)) return 2;
        const char *val = argv[++i];
        if (io) {
            if (!cli_parse_int(val, io->lo, io->hi, io->dst)) {
                fprintf(stderr, "%s: %s must be an integer in [%lld, %lld], got '%s'\n", a->who, arg,
                        io->lo, io->hi, val);
                return 2;
            }
            if (io->set) *io->set = true;
        } else if (!strcmp(arg, "--model")) {
            a->model = val;
        } else if (!strcmp(arg, "--dataset")) {
            a->dataset = val;
        } else if (!strcmp(arg, "--output-json")) {
            a->output_json = val;
        } else if (!strcmp(arg, "--json-schema")) {
            a->json_schema_path = val;
        } else if (!strcmp(arg, "--structured-output-ratio")) {
            if (!cli_parse_float(val, &a->so_ratio) || !(a->so_ratio >= 0.0 && a->so_ratio <= 1.0)) {
                fprintf(stderr, "%s: --structured-output-ratio must be in [0, 1], got '%s'\n", a->who, val);
                return 2;
            }
        } else if (!strcmp(arg, "--device")) {
            a->eo.device = val;
        } else if (!strcmp(arg, "--master-addr")) {
            a->eo.master_addr = val;
        } else if (!strcmp(arg, "--gpu-memory-utilization")) {
            double d;
            if (!cli_parse_float(val, &d) || !(d > 0.0 && d <= 1.0)) {
                fprintf(stderr, "%s: --gpu-memory-utilization must be in (0, 1], got '%s'\n", a->who, val);
                return 2;
            }
            a->eo.gpu_memory_utilization = (float)d;
        } else if (cli_is_state_dtype(arg)) {
            if (!cli_state_dtype(a->who, arg, val, &a->eo)) return 2;
        } else if (!cli_load_format(a->who, val, &a->eo.load_format)) {
            return 2;
        }
    }
    if (!a->model) {
        fprintf(stderr, "%s: --model is required\n", a->who);
        return 2;
    }
    if (!a->latency && !a->dataset && !a->set_input_len) {
        fprintf(stderr, "vllmc bench throughput: --input-len is required for random prompts (or give --dataset)\n");
        return 2;
    }
    if (!a->latency && a->dataset && a->set_input_len) {
        fprintf(stderr, "vllmc bench throughput: --input-len applies to random prompts, not to --dataset\n");
        return 2;
    }
    a->eo.num_threads = (int)threads;
    a->eo.tensor_parallel_size = (int)tp;
    a->eo.data_parallel_size = (int)dp;
    a->eo.nnodes = (int)nnodes; /* node 0 here; the others run vllmc serve --node-rank N */
    a->eo.master_port = (int)master_port;
    a->eo.block_size = (int)block_size;
    a->eo.num_kv_blocks = (int)num_kv_blocks;
    a->eo.max_model_len = (int)max_model_len;
    a->eo.max_num_seqs = (int)max_num_seqs;
    a->eo.max_num_batched_tokens = (int)max_batched;
    if (a->set_kv_mib) a->eo.kv_cache_memory = (size_t)a->kv_mib << 20;
    a->eo.seed = (uint64_t)a->seed;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Prompts                                                             */
/* ------------------------------------------------------------------ */

/* n prompts of len random ids in [0, min(vocab, 10000)), each with output_len. */
static bool random_prompts(cli_dataset *d, size_t n, size_t len, int output_len, long long vocab, uint64_t seed) {
    uint64_t state = seed;
    uint64_t range = vocab > 0 && vocab < BENCH_MAX_RANDOM_ID ? (uint64_t)vocab : BENCH_MAX_RANDOM_ID;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids = malloc(len * sizeof *ids);
        if (!ids) return false;
        for (size_t j = 0; j < len; j++) ids[j] = (int32_t)(cli_rng_next(&state) % range);
        if (!cli_dataset_push(d, (cli_prompt){.ids = ids, .num_ids = len, .output_len = output_len})) {
            free(ids);
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* Shared by both                                                      */
/* ------------------------------------------------------------------ */

static bool write_json(const char *path, json_t *o, const char *who) {
    char *text = json_dumps(o, JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    FILE *f = text ? fopen(path, "w") : NULL;
    bool ok = f && fprintf(f, "%s\n", text) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    if (!ok) fprintf(stderr, "%s: %s: cannot write\n", who, path);
    return ok;
}

/* vLLM's benchmark sampling: temperature 1, top_p 1, ignore_eos. */
static vllm_sampling_params bench_sampling(int max_tokens) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    return sp;
}

/* ------------------------------------------------------------------ */
/* latency                                                             */
/* ------------------------------------------------------------------ */

/* One batch run to completion; *seconds is its wall time. Returns 0, 1
 * (engine error) or 2 (the lengths do not fit max_model_len). */
static int latency_once(vllm_engine *engine, const vllm_prompt *prompts, size_t n, const vllm_sampling_params *sp,
                        double *seconds) {
    vllm_completion *comps = NULL;
    double t0 = cli_now();
    vllm_status st = vllm_generate(engine, prompts, n, sp, false, &comps, NULL);
    *seconds = cli_now() - t0;
    if (st != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (comps[i].num_tokens != (size_t)sp->max_tokens) {
            fprintf(stderr,
                    "vllmc bench latency: a request stopped after %zu of %d output tokens: input-len + output-len "
                    "must fit in max_model_len\n",
                    comps[i].num_tokens, sp->max_tokens);
            rc = 2;
        }
    vllm_completions_free(comps, n);
    return rc;
}

static int run_latency(const bench_args *a, vllm_engine *engine, const vllm_prompt *prompts, size_t num_prompts) {
    size_t n = (size_t)a->iters;
    double *lat = malloc(n * sizeof *lat), *sorted = malloc(n * sizeof *sorted);
    int rc = 1;
    if (!lat || !sorted) {
        fprintf(stderr, "vllmc bench latency: out of memory\n");
        goto out;
    }
    vllm_sampling_params sp = bench_sampling((int)a->output_len);
    for (long long i = 0; i < a->warmup; i++) {
        double s;
        if ((rc = latency_once(engine, prompts, num_prompts, &sp, &s)) != 0) goto out;
        fprintf(stderr, "Warmup iteration %lld/%lld: %.4f s\n", i + 1, a->warmup, s);
    }
    for (long long i = 0; i < a->iters; i++) {
        if ((rc = latency_once(engine, prompts, num_prompts, &sp, &lat[i])) != 0) goto out;
        fprintf(stderr, "Bench iteration %lld/%lld: %.4f s\n", i + 1, a->iters, lat[i]);
    }

    /* latency.py: np.mean, np.std and np.percentile of the iterations' latencies */
    double mean, std;
    memcpy(sorted, lat, n * sizeof *sorted);
    cli_sort_mean_std(sorted, n, &mean, &std);
    static const int pcts[] = {10, 25, 50, 75, 90, 99};
    double pv[6];
    for (int k = 0; k < 6; k++) pv[k] = cli_percentile(sorted, n, pcts[k]);

    printf("Avg latency: %.6f seconds\n", mean);
    printf("Std latency: %.6f seconds\n", std);
    for (int k = 0; k < 6; k++) printf("%d%% percentile latency: %.6f seconds\n", pcts[k], pv[k]);
    fflush(stdout);

    rc = 0;
    if (a->output_json) {
        json_t *o = json_object(), *l = json_array(), *pc = json_object();
        for (size_t i = 0; i < n; i++) json_array_append_new(l, json_real(lat[i]));
        for (int k = 0; k < 6; k++) {
            char key[8];
            snprintf(key, sizeof key, "%d", pcts[k]);
            json_object_set_new(pc, key, json_real(pv[k]));
        }
        json_object_set_new(o, "avg_latency", json_real(mean));
        json_object_set_new(o, "std_latency", json_real(std));
        json_object_set_new(o, "latencies", l);
        json_object_set_new(o, "percentiles", pc);
        if (!write_json(a->output_json, o, a->who)) rc = 1;
        json_decref(o);
    }
out:
    free(lat);
    free(sorted);
    return rc;
}

/* ------------------------------------------------------------------ */
/* throughput                                                          */
/* ------------------------------------------------------------------ */

/* --data-parallel-size: every request added to the replicas' front at once, then each stream read to its end;
 * the prompt and output token counts summed (short: requests that stopped before max_tokens). */
static vllm_status dp_generate(vllm_async_engine *ae, const vllm_prompt *prompts, size_t n,
                               const vllm_sampling_params *sps, size_t *prompt_tokens, size_t *output_tokens,
                               size_t *short_requests) {
    vllm_stream **ss = calloc(n ? n : 1, sizeof *ss);
    if (!ss) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < n && st == VLLM_OK; i++) {
        char id[32];
        snprintf(id, sizeof id, "bench-%zu", i);
        st = vllm_async_add_request(ae, id, &prompts[i], &sps[i], &ss[i]);
    }
    for (size_t i = 0; i < n && st == VLLM_OK; i++) {
        size_t got = 0;
        for (;;) {
            vllm_stream_chunk c;
            if ((st = vllm_stream_next(ss[i], &c, -1)) != VLLM_OK) break;
            got += c.num_tokens;
            const bool last = c.last;
            if (c.error) st = vt_error(VLLM_ERR_BACKEND, "request %zu: %s", i, c.error);
            if (last) *prompt_tokens += c.prompt_tokens;
            vllm_stream_chunk_clear(&c);
            if (last || st != VLLM_OK) break;
        }
        *output_tokens += got;
        *short_requests += got < (size_t)sps[i].max_tokens;
    }
    for (size_t i = 0; i < n; i++) vllm_stream_free(ss[i]);
    free(ss);
    return st;
}

static int run_throughput(const bench_args *a, vllm_engine *engine, vllm_async_engine *ae, const cli_dataset *d,
                          const vllm_prompt *prompts) {
    const size_t n = d->n;
    vllm_sampling_params *sps = NULL;
    vllm_completion *comps = NULL;
    int rc = 1;
    const bool has_tok = ae ? vllm_async_engine_has_tokenizer(ae) : vllm_engine_has_tokenizer(engine);
    for (size_t i = 0; i < n; i++)
        if (d->items[i].text && !has_tok) {
            fprintf(stderr, "vllmc bench throughput: %s has text prompts but %s has no tokenizer.json\n", a->dataset,
                    a->model);
            return 2;
        }
    sps = malloc(n * sizeof *sps);
    if (!sps) {
        fprintf(stderr, "vllmc bench throughput: out of memory\n");
        goto out;
    }
    size_t requested = 0, constrained = 0;
    for (size_t i = 0; i < n; i++) {
        sps[i] = bench_sampling(d->items[i].output_len); /* --output-len, else the dataset's */
        requested += (size_t)sps[i].max_tokens;
        /* --structured-output-ratio R: requests spread evenly, floor((i + 1) R) > floor(i R) */
        if (a->json_schema && (size_t)((double)(i + 1) * a->so_ratio) > (size_t)((double)i * a->so_ratio)) {
            sps[i].structured_outputs.json = a->json_schema;
            constrained++;
        }
    }
    if (a->json_schema) fprintf(stderr, "%zu of the requests constrained by %s\n", constrained, a->json_schema_path);

    fprintf(stderr, "Running %zu prompts (up to %zu output tokens, max_num_seqs %d, max_num_batched_tokens %d)\n",
            n, requested, a->eo.max_num_seqs, a->eo.max_num_batched_tokens);
    vllm_generate_stats st;
    memset(&st, 0, sizeof st);
    size_t prompt_tokens = 0, output_tokens = 0, short_requests = 0;
    double t0 = cli_now();
    vllm_status s = ae ? dp_generate(ae, prompts, n, sps, &prompt_tokens, &output_tokens, &short_requests)
                       : vllm_generate(engine, prompts, n, sps, true, &comps, &st);
    double elapsed = cli_now() - t0;
    if (s != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        goto out;
    }
    if (ae) { /* the replicas' summed counters (structured-output mask times are the offline path's) */
        vllm_engine_stats es;
        vllm_async_engine_get_stats(ae, &es);
        st.steps = (size_t)es.steps;
        st.preemptions = (size_t)es.num_preemptions;
    }
    for (size_t i = 0; !ae && i < n; i++) {
        prompt_tokens += comps[i].num_prompt_tokens;
        output_tokens += comps[i].num_tokens;
        short_requests += comps[i].num_tokens < (size_t)sps[i].max_tokens;
    }
    fprintf(stderr, "Done: %zu requests in %.3f s (%zu engine steps, %zu preemptions)\n", n, elapsed, st.steps,
            st.preemptions);
    if (short_requests)
        fprintf(stderr, "warning: %zu requests stopped before their output length (max_model_len)\n", short_requests);
    if (elapsed <= 0) elapsed = 1e-9;
    size_t total = prompt_tokens + output_tokens;
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", (double)n / elapsed,
           (double)total / elapsed, (double)output_tokens / elapsed);
    printf("Total num prompt tokens:  %zu\n", prompt_tokens);
    printf("Total num output tokens:  %zu\n", output_tokens);
    if (a->json_schema)
        printf("Token masks: %zu, %.3f s on the engine thread, per mask median %.1f us, p99 %.1f us; grammar advance "
               "%.3f s\n",
               st.structured_masks, st.structured_mask_seconds, st.structured_mask_p50_us, st.structured_mask_p99_us,
               st.structured_advance_seconds);
    fflush(stdout);

    rc = 0;
    if (a->output_json) {
        json_t *o = json_object();
        json_object_set_new(o, "elapsed_time", json_real(elapsed));
        json_object_set_new(o, "num_requests", json_integer((json_int_t)n));
        json_object_set_new(o, "total_num_tokens", json_integer((json_int_t)total));
        json_object_set_new(o, "total_output_tokens", json_integer((json_int_t)output_tokens));
        json_object_set_new(o, "requests_per_second", json_real((double)n / elapsed));
        json_object_set_new(o, "tokens_per_second", json_real((double)total / elapsed));
        json_object_set_new(o, "output_tokens_per_second", json_real((double)output_tokens / elapsed));
        if (a->json_schema) {
            json_object_set_new(o, "structured_masks", json_integer((json_int_t)st.structured_masks));
            json_object_set_new(o, "structured_mask_seconds", json_real(st.structured_mask_seconds));
            json_object_set_new(o, "structured_mask_p50_us", json_real(st.structured_mask_p50_us));
            json_object_set_new(o, "structured_mask_p99_us", json_real(st.structured_mask_p99_us));
            json_object_set_new(o, "structured_advance_seconds", json_real(st.structured_advance_seconds));
        }
        if (!write_json(a->output_json, o, a->who)) rc = 1;
        json_decref(o);
    }
out:
    vllm_completions_free(comps, n);
    free(sps);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Entry                                                               */
/* ------------------------------------------------------------------ */

int cmd_bench_serve(int argc, char **argv); /* bench_serve.c: `vllmc bench serve` (online, over HTTP) */
int cmd_bench_grammar(int argc, char **argv); /* bench_grammar.c: `vllmc bench grammar` (structured outputs) */

int cmd_bench(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "vllmc bench: give a benchmark: latency or throughput (or serve; vllmc bench --help)\n");
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "serve")) return cmd_bench_serve(argc - 1, argv + 1);
    if (!strcmp(sub, "grammar")) return cmd_bench_grammar(argc - 1, argv + 1);
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    bench_args a;
    memset(&a, 0, sizeof a);
    if (!strcmp(sub, "latency")) {
        a.latency = true;
        a.who = "vllmc bench latency";
    } else if (!strcmp(sub, "throughput")) {
        a.who = "vllmc bench throughput";
    } else {
        fprintf(stderr, "vllmc bench: unknown benchmark '%s' (latency, throughput, serve or grammar)\n", sub);
        return 2;
    }
    a.eo = vllm_engine_default_options();
    /* vLLM's latency benchmark turns prefix caching off: the same batch
     * runs every iteration and would otherwise be served from the cache. */
    if (a.latency) a.eo.enable_prefix_caching = false;
    a.input_len = 32;
    a.output_len = 128;
    a.batch_size = 8;
    a.warmup = 2;
    a.iters = 10;
    a.num_prompts = 1000;
    a.so_ratio = 1.0;
    int prc = parse_args(argc - 1, argv + 1, &a);
    if (prc) return prc == 1 ? 0 : 2;
    if (a.json_schema_path) { /* read (and checked to be JSON) before the model loads */
        json_error_t je;
        json_t *schema = json_load_file(a.json_schema_path, 0, &je);
        a.json_schema = schema ? json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
        json_decref(schema);
        if (!a.json_schema) {
            fprintf(stderr, "%s: %s: not a JSON schema (line %d: %s)\n", a.who, a.json_schema_path, je.line, je.text);
            return 2;
        }
    }

    /* a Hugging Face id: its snapshot in the hub cache (downloaded when missing) */
    char *hub_model = NULL, *hub_tok = NULL;
    if (!cli_hub_resolve(a.who, &a.model, &a.eo, false, &hub_model, &hub_tok)) {
        free(a.json_schema);
        return 1;
    }

    /* the prompts first, so that a bad dataset fails before the model loads */
    cli_dataset d = {0};
    if (a.dataset) {
        size_t max = a.set_num_prompts ? (size_t)a.num_prompts : SIZE_MAX;
        int output_len = a.set_output_len ? (int)a.output_len : CLI_OUTPUT_LEN_FROM_FILE;
        if (!cli_dataset_read_jsonl(a.who, a.dataset, max, output_len, &d)) {
            cli_dataset_free(&d);
            free(a.json_schema);
            free(hub_model);
            free(hub_tok);
            return 2;
        }
    } else {
        size_t n = (size_t)(a.latency ? a.batch_size : a.num_prompts);
        if (!random_prompts(&d, n, (size_t)a.input_len, (int)a.output_len, cli_model_vocab_size(a.model),
                            (uint64_t)a.seed)) {
            fprintf(stderr, "%s: out of memory\n", a.who);
            cli_dataset_free(&d);
            free(a.json_schema);
            free(hub_model);
            free(hub_tok);
            return 1;
        }
    }
    vllm_prompt *prompts = cli_dataset_prompts(&d);
    vllm_engine *engine = NULL;
    vllm_async_engine *ae = NULL;
    int rc = 1;
    if (!prompts) {
        fprintf(stderr, "%s: out of memory\n", a.who);
    } else if (a.eo.data_parallel_size > 1) { /* replicas: the thread-safe front */
        if (vllm_async_engine_create(a.model, &a.eo, &ae) != VLLM_OK) fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        else rc = run_throughput(&a, NULL, ae, &d, prompts);
    } else if (vllm_engine_create(a.model, &a.eo, &engine) != VLLM_OK) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
    } else {
        rc = a.latency ? run_latency(&a, engine, prompts, d.n) : run_throughput(&a, engine, NULL, &d, prompts);
    }
    vllm_async_engine_free(ae);
    vllm_engine_free(engine);
    free(prompts);
    cli_dataset_free(&d);
    free(a.json_schema);
    free(hub_model);
    free(hub_tok);
    return rc;
}
