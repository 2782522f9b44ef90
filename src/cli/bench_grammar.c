/*
 * bench_grammar.c: `vllmc bench grammar`: how long structured outputs take to get a grammar ready on a model's
 * tokenizer, per JSON schema of a corpus: the schema compiled to its automaton (what every new constraint costs
 * before its first mask), and its adaptive mask cache filled for every state (what xgrammar computes ahead at
 * compile time; vllm.c classifies a state the first time a mask needs it), on one thread and on --threads.
 *
 *   vllmc bench grammar --model DIR --json-schemas FILE [--threads N]
 *
 * FILE: a JSON list of schemas, or of {"name", "schema"} objects, or an object with such a list under "schemas"
 * (tests/server/node/structured_schemas.json). Results (median and max) go to stdout, one line per schema to
 * stderr.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/progress.h"
#include "core/threadpool.h"
#include "structured/so_match.h"
#include "structured/so_spec.h"
#include "structured/so_vocab.h"
#include "tokenizer/tokenizer.h"

#define CMD "vllmc bench grammar"

static void usage(FILE *f) {
    fprintf(f, "usage: " CMD " --model DIR --json-schemas FILE [--threads N]\n\n"
               "Per JSON schema of FILE, on DIR's tokenizer: the schema compiled to its automaton, then every state\n"
               "of its token-mask cache classified, on one thread and on N threads (default: the cores, at most 8).\n"
               "FILE: a JSON list of schemas (or of {\"name\", \"schema\"}), or {\"schemas\": [...]}.\n");
}

typedef struct classify_job {
    so_mask_cache *mc;
    so_mask_scratch **scratch;
    int failed;
} classify_job;

static void classify_range(void *cls, int64_t start, int64_t end, int tid) {
    classify_job *j = cls;
    for (int64_t s = start; s < end; s++)
        if (so_mask_cache_classify(j->mc, j->scratch[tid], (int32_t)s) != VLLM_OK) j->failed = 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every state of a new mask cache of c classified on pool (1 thread when pool is NULL); seconds, or -1. */
static double classify_all(const so_compiled *c, const so_vocab *v, tp_pool *pool, so_mask_scratch **scratch,
                           int64_t *entries) {
    so_mask_cache *mc = NULL;
    if (so_mask_cache_create(c, v, &mc) != VLLM_OK) return -1;
    classify_job j = {mc, scratch, 0};
    const double t0 = progress_now();
    if (pool) tp_run(pool, so_mask_cache_num_states(mc), classify_range, &j);
    else classify_range(&j, 0, so_mask_cache_num_states(mc), 0);
    const double dt = progress_now() - t0;
    *entries = so_mask_cache_entries(mc);
    so_mask_cache_free(mc);
    return j.failed ? -1 : dt;
}

int cmd_bench_grammar(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    long long threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) {
            CLI_NEED_VALUE(CMD);
            model = argv[++i];
        } else if (!strcmp(a, "--json-schemas")) {
            CLI_NEED_VALUE(CMD);
            file = argv[++i];
        } else if (!strcmp(a, "--threads")) {
            CLI_NEED_VALUE(CMD);
            if (!cli_parse_int(argv[++i], 1, 256, &threads)) {
                fprintf(stderr, CMD ": --threads needs an integer in [1, 256], got '%s'\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, CMD ": unknown option '%s'\n", a);
            goto bad;
        }
    }
    if (!model || !file) {
        fprintf(stderr, CMD ": --model and --json-schemas are required\n");
        goto bad;
    }
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je), *list = json_is_object(root) ? json_object_get(root, "schemas") : root;
    if (!json_is_array(list) || !json_array_size(list)) {
        fprintf(stderr, CMD ": %s: %s\n", file, root ? "no list of schemas" : je.text);
        json_decref(root);
        return 1;
    }
    tokenizer *tok = NULL;
    so_vocab *v = NULL;
    tp_pool *pool = NULL;
    so_mask_scratch **scratch = NULL;
    int rc = 1, nt = 0;
    if (tok_load_dir(model, &tok) != VLLM_OK) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error());
        goto out;
    }
    int32_t eos = tok_eos_id(tok) >= 0 ? tok_eos_id(tok) : 0;
    double t0 = progress_now();
    if (so_vocab_build(tok, tok_vocab_size(tok), &eos, 1, &v) != VLLM_OK) {
        fprintf(stderr, CMD ": %s\n", vllm_last_error());
        goto out;
    }
    printf("Vocabulary: %d tokens (%d sorted) indexed in %.3f s\n", so_vocab_size(v), so_vocab_n_sorted(v),
           progress_now() - t0);
    if (tp_create(threads ? (int)threads : 0, &pool) != VLLM_OK) goto out;
    nt = tp_num_threads(pool);
    if (!threads && nt > 8) { /* the engine's mask threads: at most 8 */
        tp_free(pool);
        if (tp_create(8, &pool) != VLLM_OK) goto out;
        nt = tp_num_threads(pool);
    }
    scratch = calloc((size_t)nt, sizeof *scratch);
    for (int i = 0; scratch && i < nt; i++)
        if (so_mask_scratch_create(&scratch[i]) != VLLM_OK) goto out;
    if (!scratch) goto out;
    const size_t n = json_array_size(list);
    double *compile = calloc(n, sizeof *compile), *one = calloc(n, sizeof *one), *many = calloc(n, sizeof *many);
    size_t ok = 0;
    for (size_t i = 0; compile && one && many && i < n; i++) {
        json_t *item = json_array_get(list, i), *schema = json_object_get(item, "schema");
        const char *name = json_string_value(json_object_get(item, "name"));
        if (!schema) schema = item;
        char *text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        vllm_structured_outputs s = {.json = text};
        so_compiled *c = NULL;
        t0 = progress_now();
        vllm_status st = text ? so_spec_compile(&s, &c) : VLLM_ERR_NO_MEMORY;
        const double tc = progress_now() - t0;
        free(text);
        if (st != VLLM_OK) {
            fprintf(stderr, "  schema %zu (%s): refused: %s\n", i, name ? name : "-", vllm_last_error());
            continue;
        }
        int64_t entries = 0;
        const double t1 = classify_all(c, v, NULL, scratch, &entries), tn = classify_all(c, v, pool, scratch, &entries);
        so_compiled_free(c);
        if (t1 < 0 || tn < 0) {
            fprintf(stderr, CMD ": schema %zu: out of memory\n", i);
            goto out_arrays;
        }
        fprintf(stderr, "  schema %zu (%s): compiled in %.2f ms; %lld states classified in %.3f s (%.3f s on %d threads)\n",
                i, name ? name : "-", 1e3 * tc, (long long)entries, t1, tn, nt);
        compile[ok] = tc, one[ok] = t1, many[ok] = tn;
        ok++;
    }
    if (ok) {
        double cmax = 0, omax = 0, mmax = 0;
        for (size_t i = 0; i < ok; i++) {
            if (compile[i] > cmax) cmax = compile[i];
            if (one[i] > omax) omax = one[i];
            if (many[i] > mmax) mmax = many[i];
        }
        printf("Schemas: %zu compiled (of %zu)\n", ok, n);
        printf("Grammar compile (schema to automaton): median %.2f ms, max %.2f ms\n", 1e3 * median(compile, ok), 1e3 * cmax);
        printf("Mask cache, every state classified, 1 thread: median %.3f s, max %.3f s\n", median(one, ok), omax);
        printf("Mask cache, every state classified, %d threads: median %.3f s, max %.3f s\n", nt, median(many, ok), mmax);
        rc = 0;
    }
out_arrays:
    free(compile), free(one), free(many);
out:
    for (int i = 0; scratch && i < nt; i++) so_mask_scratch_free(scratch[i]);
    free(scratch);
    tp_free(pool);
    so_vocab_free(v);
    tok_free(tok);
    json_decref(root);
    return rc;
bad:
    usage(stderr);
    return 2;
}
