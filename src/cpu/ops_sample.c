/*
 * ops_sample.c: the CPU backend's sample and logprobs ops: the reference
 * (src/sample/sample.c) over the batch's rows, in parallel on the pool,
 * each thread with its own vocabulary-sized workspace.
 */
#include <stdlib.h>

#include "core/error.h"
#include "cpu/cpu_internal.h"

/* Workspaces for every thread of the pool, sized for vocab. */
static vllm_status cpu_sample_ws(cpu_state *cpu, int vocab) {
    if (!cpu->sample_ws) {
        cpu->sample_ws = calloc((size_t)cpu->num_threads, sizeof *cpu->sample_ws);
        if (!cpu->sample_ws) return vt_error(VLLM_ERR_NO_MEMORY, "cpu sample: out of memory");
    }
    for (int t = 0; t < cpu->num_threads; t++) {
        vllm_status st = sample_ws_init(&cpu->sample_ws[t], vocab);
        if (st != VLLM_OK) return st;
    }
    return VLLM_OK;
}

void cpu_sample_free(cpu_state *cpu) {
    for (int t = 0; cpu->sample_ws && t < cpu->num_threads; t++) sample_ws_free(&cpu->sample_ws[t]);
    free(cpu->sample_ws);
    cpu->sample_ws = NULL;
}

/* The logits must be a host F32 matrix whose rows the batch names. */
static vllm_status check_logits(const tensor *logits, const int32_t *rows, int n, const char *op) {
    if (logits->dtype != DTYPE_F32 || logits->ndim != 2 || !logits->data || logits->shape[1] <= 0 ||
        logits->shape[1] > INT32_MAX)
        return vt_error(VLLM_ERR_INVALID_ARG, "cpu %s: logits must be a (rows, vocab) F32 matrix", op);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= logits->shape[0])
            return vt_error(VLLM_ERR_INVALID_ARG, "cpu %s: row %d outside the %lld logits rows", op, (int)rows[i],
                            (long long)logits->shape[0]);
    return VLLM_OK;
}

static float *logits_row(const tensor *logits, int32_t r) {
    int64_t stride = logits->row_stride ? logits->row_stride : logits->shape[1];
    return (float *)logits->data + (size_t)r * (size_t)stride;
}

typedef struct sample_job {
    cpu_state *cpu;
    const tensor *logits;
    const sample_batch *sb;
    const logprob_batch *lb;
} sample_job;

static void sample_rows(void *ctx, int64_t start, int64_t end, int tid) {
    const sample_job *j = ctx;
    int V = (int)j->logits->shape[1];
    for (int64_t i = start; i < end; i++)
        sample_row_ref(logits_row(j->logits, j->sb->rows[i]), V, j->sb, (int)i, &j->cpu->sample_ws[tid]);
}

static void logprob_rows(void *ctx, int64_t start, int64_t end, int tid) {
    (void)tid;
    const sample_job *j = ctx;
    int V = (int)j->logits->shape[1];
    for (int64_t i = start; i < end; i++) logprob_row_ref(logits_row(j->logits, j->lb->rows[i]), V, j->lb, (int)i);
}

vllm_status cpu_sample(backend *be, tensor *logits, const sample_batch *b) {
    cpu_state *cpu = cpu_of(be);
    if (b->num_rows <= 0) return VLLM_OK;
    vllm_status st = check_logits(logits, b->rows, b->num_rows, "sample");
    if (st == VLLM_OK) st = cpu_sample_ws(cpu, (int)logits->shape[1]);
    if (st != VLLM_OK) return st;
    sample_job j = {.cpu = cpu, .logits = logits, .sb = b};
    /* a row costs a few passes over the vocabulary */
    tp_run_cost(cpu->pool, b->num_rows, 8.0 * (double)logits->shape[1], sample_rows, &j);
    return VLLM_OK;
}

vllm_status cpu_logprobs(backend *be, const tensor *logits, const logprob_batch *b) {
    cpu_state *cpu = cpu_of(be);
    if (b->num_rows <= 0) return VLLM_OK;
    vllm_status st = check_logits(logits, b->rows, b->num_rows, "logprobs");
    if (st != VLLM_OK) return st;
    sample_job j = {.cpu = cpu, .logits = logits, .lb = b};
    tp_run_cost(cpu->pool, b->num_rows, 4.0 * (double)logits->shape[1], logprob_rows, &j);
    return VLLM_OK;
}
