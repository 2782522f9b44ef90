/* test_tp_model.c: tensor parallelism on the CPU (issue 18): a model split over 2 and 4 ranks (threads, each its CPU
 * backend in one dist/tpg_group) gives the logits of the whole model, for a prefill and a decode step over its KV
 * cache shard, on fixtures of every split path: MHA (TP 4), GQA, per-head q / k norms (Qwen3), q / k / v biases with
 * tied embeddings (Qwen2), a sliding window (Mistral), Gemma 2's sandwich norms and softcaps, one KV head replicated
 * on every rank (Llama 3 MQA, Granite), MoE with tensor-parallel experts (Qwen3-MoE, Qwen2-MoE's shared expert,
 * Mixtral). Models that cannot be split yet (MLA, linear attention) and uneven splits are refused naming why. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/tpg_group.h"
#include "model/model.h"
#include "test.h"

#define FX VLLM_SOURCE_DIR "/tests/fixtures/models/"
enum { T = 12, MAXPOS = 64 };

typedef struct run_out {
    float *logits; /* (T + 1, V): the prefill's rows, then the decode's */
    int vocab;
    vllm_status st;
    char err[300];
} run_out;

/* One model (rank rank of tp, or whole when tp is 1) through a prefill of T tokens and one decode step. */
static void run_model(const char *dir, tpg_group *g, int tp, int rank, run_out *out) {
    backend *be = NULL;
    model *m = NULL;
    model_cache *cache = NULL;
    const backend_options bo = {.num_threads = 1, .tp_group = g, .tp_rank = rank};
    const model_load_options mo = {.max_model_len = MAXPOS, .tp_size = tp, .tp_rank = rank};
    vllm_status st = backend_create("cpu", &bo, &be);
    if (!st) st = model_load(dir, be, &mo, &m);
    if (!st) st = model_cache_create(m, 4, 16, 0, 0, &cache);
    if (!st) {
        const int V = model_get_config(m)->vocab_size, G = model_get_cache_groups(m)->num_groups;
        out->vocab = V;
        out->logits = malloc((size_t)(T + 1) * V * sizeof *out->logits);
        int32_t ids[T], pos[T], lidx[T], bt[2] = {0, 1}; /* KV cache group g: block g (Gemma 2 has two) */
        int64_t sm[2 * T], dsm[2] = {T, 16 + T};
        for (int i = 0; i < T; i++) {
            ids[i] = (i * 37 + 5) % V;
            pos[i] = i;
            lidx[i] = i;
            sm[i] = i;
            sm[T + i] = 16 + i;
        }
        const int32_t qsl[2] = {0, T}, seq_lens[1] = {T};
        const fwd_batch pre = {.num_tokens = T, .num_seqs = 1, .token_ids = ids, .positions = pos,
                               .query_start_loc = qsl, .seq_lens = seq_lens, .num_kv_groups = G, .block_tables = bt,
                               .max_blocks_per_seq = 1, .slot_mapping = sm, .num_logits = T, .logits_indices = lidx};
        const tensor *lg = NULL;
        st = model_forward(m, cache, &pre, &lg);
        if (!st) memcpy(out->logits, lg->data, (size_t)T * V * sizeof(float));
        const int32_t did[1] = {(ids[T - 1] + 11) % V}, dpos[1] = {T}, dqsl[2] = {0, 1}, dlen[1] = {T + 1},
                      didx[1] = {0};
        const fwd_batch dec = {.num_tokens = 1, .num_seqs = 1, .token_ids = did, .positions = dpos,
                               .query_start_loc = dqsl, .seq_lens = dlen, .num_kv_groups = G, .block_tables = bt,
                               .max_blocks_per_seq = 1, .slot_mapping = dsm, .num_logits = 1, .logits_indices = didx};
        if (!st) st = model_forward(m, cache, &dec, &lg);
        if (!st) memcpy(out->logits + (size_t)T * V, lg->data, (size_t)V * sizeof(float));
    }
    out->st = st;
    if (st) {
        snprintf(out->err, sizeof out->err, "%s", vllm_last_error());
        if (g) tpg_abort(g, "a rank failed"); /* the others must not wait for it */
    }
    if (cache) model_cache_free(m, cache);
    model_free(m);
    backend_free(be);
}

typedef struct rank_arg {
    const char *dir;
    tpg_group *g;
    int tp, rank;
    run_out out;
} rank_arg;

static void *rank_main(void *p) {
    rank_arg *a = p;
    run_model(a->dir, a->g, a->tp, a->rank, &a->out);
    return NULL;
}

/* Every rank of a tp-way split against the whole model: max |difference| of the logits over their max |value|. */
static void check_split(const char *name, int tp) {
    char dir[512];
    snprintf(dir, sizeof dir, FX "%s", name);
    run_out whole = {0};
    run_model(dir, NULL, 1, 0, &whole);
    CHECK_MSG(whole.st == VLLM_OK, "%s: the whole model: %s", name, whole.err);
    tpg_group *g = NULL;
    CHECK_OK(tpg_create(tp, &g));
    rank_arg a[4];
    pthread_t th[4];
    for (int r = 0; r < tp; r++) {
        a[r] = (rank_arg){.dir = dir, .g = g, .tp = tp, .rank = r};
        CHECK(pthread_create(&th[r], NULL, rank_main, &a[r]) == 0);
    }
    for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < tp && whole.st == VLLM_OK; r++) {
        CHECK_MSG(a[r].out.st == VLLM_OK, "%s TP %d rank %d: %s", name, tp, r, a[r].out.err);
        if (a[r].out.st) continue;
        double worst = 0, scale = 0;
        const size_t n = (size_t)(T + 1) * whole.vocab;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)a[r].out.logits[i] - whole.logits[i]));
            scale = fmax(scale, fabs((double)whole.logits[i]));
        }
        CHECK_MSG(worst <= 1e-4 * (1 + scale), "%s TP %d rank %d: logits differ by %g (max |logit| %g)", name, tp, r,
                  worst, scale);
        if (r == 0) printf("%-18s TP %d: logits within %.2g of the whole model's (max |logit| %.3g)\n", name, tp, worst,
                           scale);
    }
    for (int r = 0; r < tp; r++) free(a[r].out.logits);
    free(whole.logits);
    tpg_free(g);
}

/* A model or split that is refused at load, the message naming why. */
static void check_refused(const char *name, int tp, const char *want) {
    char dir[512];
    snprintf(dir, sizeof dir, FX "%s", name);
    tpg_group *g = NULL;
    CHECK_OK(tpg_create(tp, &g));
    run_out o = {0};
    run_model(dir, g, tp, 0, &o); /* rank 0 alone: it fails at load, before any collective */
    CHECK_MSG(o.st == VLLM_ERR_UNSUPPORTED, "%s TP %d: status %d, want unsupported", name, tp, o.st);
    CHECK_MSG(strstr(o.err, want) != NULL, "%s TP %d: '%s' not in: %s", name, tp, want, o.err);
    free(o.logits);
    tpg_free(g);
}

/* The driver (model_load with tp_device: it loads and runs the other ranks): a step that fails on every rank
 * (a token id past the vocabulary) leaves the model usable, and the next step gives the whole model's logits. */
static void check_driver_recovers(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, FX "%s", name);
    run_out whole = {0};
    run_model(dir, NULL, 1, 0, &whole);
    tpg_group *g = NULL;
    CHECK_OK(tpg_create(2, &g));
    backend *be = NULL;
    model *m = NULL;
    model_cache *cache = NULL;
    const backend_options bo = {.num_threads = 1, .tp_group = g, .tp_rank = 0};
    const model_load_options mo = {.max_model_len = MAXPOS, .tp_size = 2, .tp_rank = 0, .tp_device = "cpu",
                                   .tp_backend_options = &bo, .tp_group = g};
    CHECK_OK(backend_create("cpu", &bo, &be));
    CHECK_OK(model_load(dir, be, &mo, &m));
    if (m) CHECK_OK(model_cache_create(m, 4, 16, 0, 0, &cache));
    if (cache && whole.logits) {
        const int32_t bad[1] = {1 << 20}, pos[1] = {0}, qsl[2] = {0, 1}, len[1] = {1}, bt[2] = {0, 1}, idx[1] = {0};
        const int64_t sm[2] = {0, 16};
        const fwd_batch b1 = {.num_tokens = 1, .num_seqs = 1, .token_ids = bad, .positions = pos,
                              .query_start_loc = qsl, .seq_lens = len, .num_kv_groups = 1, .block_tables = bt,
                              .max_blocks_per_seq = 1, .slot_mapping = sm, .num_logits = 1, .logits_indices = idx};
        const tensor *lg = NULL;
        vllm_status st = model_forward(m, cache, &b1, &lg);
        if (st == VLLM_OK) st = be->ops->synchronize(be);
        CHECK_MSG(st != VLLM_OK, "%s: a token id past the vocabulary was accepted", name);
        be->ops->synchronize(be); /* rank 0's error cleared, as the engine's step does */
        int32_t ids[T], p2[T], lidx[T];
        int64_t sm2[T];
        const int V = whole.vocab;
        for (int i = 0; i < T; i++) {
            ids[i] = (i * 37 + 5) % V;
            p2[i] = i;
            lidx[i] = i;
            sm2[i] = i;
        }
        const int32_t q2[2] = {0, T}, l2[1] = {T};
        const fwd_batch b2 = {.num_tokens = T, .num_seqs = 1, .token_ids = ids, .positions = p2, .query_start_loc = q2,
                              .seq_lens = l2, .num_kv_groups = 1, .block_tables = bt, .max_blocks_per_seq = 1,
                              .slot_mapping = sm2, .num_logits = T, .logits_indices = lidx};
        st = model_forward(m, cache, &b2, &lg);
        CHECK_MSG(st == VLLM_OK, "%s: the step after a failed one: %s", name, vllm_last_error());
        double worst = 0;
        for (size_t i = 0; st == VLLM_OK && i < (size_t)T * V; i++)
            worst = fmax(worst, fabs((double)((const float *)lg->data)[i] - whole.logits[i]));
        CHECK_MSG(worst < 1e-3, "%s: after the failed step the logits differ by %g", name, worst);
        printf("%-18s TP 2 (the driver): a failed step, then the whole model's logits within %.2g\n", name, worst);
    }
    if (cache) model_cache_free(m, cache);
    model_free(m);
    backend_free(be);
    tpg_free(g);
    free(whole.logits);
}

int main(void) {
    check_driver_recovers("llama_gqa");
    check_split("llama_mha_f16", 2);
    check_split("llama_mha_f16", 4);
    check_split("llama_gqa", 2);
    check_split("qwen3_qknorm", 2);
    check_split("qwen2_bias_tied", 2);
    check_split("mistral_swa", 2);
    check_split("gemma2_softcap", 2);
    check_split("llama3_mqa_tied", 2); /* one KV head: replicated on every rank */
    check_split("llama3_mqa_tied", 4);
    check_split("granite_mult", 2);    /* one KV head, Granite's multipliers */
    check_split("llama_gqa", 4);       /* 2 KV heads over 4 ranks: each on 2 */
    check_split("qwen2_bias_tied", 4); /* and their k / v biases */
    check_split("qwen3_moe", 2);       /* tensor-parallel experts: each expert's width split */
    check_split("qwen3_moe", 4);
    check_split("qwen2_moe_shared", 2); /* and a shared expert with its sigmoid gate */
    check_split("mixtral_moe", 2);
    check_refused("deepseek_v2_lite", 2, "MLA");
    check_refused("qwen3_next", 2, "output gate"); /* (its gated attention is the first thing named) */
    check_refused("llama_mha_f16", 3, "divide");
    TEST_END();
}
