/*
 * engine_step.c: the request-level engine of vllm.h (vLLM's LLMEngine):
 * add_request (tokenize, validate, queue), step (schedule, forward, sample,
 * detokenize incrementally, stop), abort; and the outputs of each step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/engine_internal.h"

/* ---- request lifetime ---- */

static void ereq_free(ereq *q) {
    if (!q) return;
    free(q->r.tokens);
    free(q->r.logprobs);
    free(q->r.blocks);
    tok_stream_free(q->stream);
    free(q->text);
    free(q->id);
    free(q);
}

void engine_requests_free(vllm_engine *e) {
    for (size_t i = 0; i < e->num_reqs; i++) ereq_free(e->reqs[i]);
    free(e->reqs);
    free(e->outs);
    free(e->out_text);
    e->reqs = NULL;
    e->outs = NULL;
    e->out_text = NULL;
    e->num_reqs = e->cap_reqs = e->cap_outs = e->cap_out_text = 0;
}

void engine_drop_all(vllm_engine *e) {
    sched_reset(&e->sched);
    for (size_t i = 0; i < e->num_reqs; i++) ereq_free(e->reqs[i]);
    e->num_reqs = 0;
}

ereq *engine_find(vllm_engine *e, const char *id) {
    for (size_t i = 0; i < e->num_reqs; i++)
        if (!e->reqs[i]->done && !strcmp(e->reqs[i]->id, id)) return e->reqs[i];
    return NULL;
}

bool vllm_engine_has_unfinished(const vllm_engine *e) {
    for (size_t i = 0; i < e->num_reqs; i++)
        if (e->reqs[i]->r.finish == VLLM_FINISH_NONE || !e->reqs[i]->done) return true;
    return false;
}

/* Takes r out of the scheduler (waiting or running), freeing its blocks. */
static void sched_drop(scheduler *s, request *r) {
    for (int i = 0; i < s->num_waiting; i++)
        if (s->waiting[i] == r) {
            memmove(s->waiting + i, s->waiting + i + 1, (size_t)(s->num_waiting - i - 1) * sizeof *s->waiting);
            s->num_waiting--;
            break;
        }
    sched_finish(s, r);
}

/* Tokenizes and validates the prompt into q->r. */
static vllm_status request_init(vllm_engine *e, ereq *q, const char *id, const vllm_prompt *p,
                                const vllm_sampling_params *sp) {
    request *r = &q->r;
    r->params = *sp;
    vllm_status st = vllm_sampling_params_validate(sp);
    if (st != VLLM_OK) {
        vt_error_prefix("request %s", id);
        return st;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (p->text && !p->token_ids) {
        if ((st = vllm_tokenize(e, p->text, true, &ids, &n))) {
            vt_error_prefix("request %s", id);
            return st;
        }
    } else {
        n = p->num_token_ids;
        if (n > 0 && !p->token_ids) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: token_ids is NULL", id);
    }
    const int32_t *src = ids ? ids : p->token_ids;
    for (size_t j = 0; j < n; j++)
        if (src[j] < 0 || src[j] >= e->cfg->vocab_size) {
            st = vt_error(VLLM_ERR_INVALID_ARG, "request %s: token id %d out of range [0, %d)", id, src[j],
                          e->cfg->vocab_size);
            free(ids);
            return st;
        }
    if (n == 0) {
        free(ids);
        return vt_error(VLLM_ERR_INVALID_ARG, "request %s: the prompt is empty", id);
    }
    if (n >= (size_t)e->max_model_len) {
        free(ids);
        return vt_error(VLLM_ERR_TOO_LONG, "request %s: the prompt has %zu tokens; max_model_len is %d", id, n,
                        e->max_model_len);
    }
    long long cap = (long long)n + sp->max_tokens;
    if (cap > e->max_model_len) cap = e->max_model_len;
    r->cap_tokens = (int)cap;
    r->num_prompt = r->num_tokens = (int)n;
    r->tokens = malloc((size_t)cap * sizeof *r->tokens);
    r->logprobs = malloc((size_t)(cap - (long long)n + 1) * sizeof *r->logprobs);
    r->blocks = malloc((size_t)e->sched.cfg.max_blocks_per_seq * sizeof *r->blocks);
    if (!r->tokens || !r->logprobs || !r->blocks) {
        free(ids);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(r->tokens, src, n * sizeof *r->tokens);
    free(ids);
    sampler_rng_seed(&r->rng, sp->has_seed ? sp->seed : e->next_seed++ * 0x9E3779B97F4A7C15ull + 1);
    if (e->tok) {
        st = tok_stream_create(e->tok, r->tokens, n, sp->skip_special_tokens, &q->stream);
        if (st != VLLM_OK) return st;
    }
    return VLLM_OK;
}

vllm_status vllm_engine_add_request(vllm_engine *e, const char *id, const vllm_prompt *p,
                                    const vllm_sampling_params *sp) {
    if (!id || !*id) return vt_error(VLLM_ERR_INVALID_ARG, "request id missing");
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: no prompt", id);
    if (engine_find(e, id)) return vt_error(VLLM_ERR_INVALID_ARG, "request id '%s' is already in use", id);
    vllm_sampling_params defaults = vllm_sampling_default_params();
    if (!sp) sp = &defaults;
    if (e->num_reqs == e->cap_reqs) {
        size_t cap = e->cap_reqs ? 2 * e->cap_reqs : 64;
        ereq **nr = realloc(e->reqs, cap * sizeof *nr);
        if (!nr) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        e->reqs = nr;
        e->cap_reqs = cap;
    }
    ereq *q = calloc(1, sizeof *q);
    if (!q || !(q->id = strdup(id))) {
        free(q);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    vllm_status st = request_init(e, q, id, p, sp);
    if (st == VLLM_OK) st = sched_add(&e->sched, &q->r);
    if (st != VLLM_OK) {
        ereq_free(q);
        return st;
    }
    q->r.index = e->num_reqs;
    e->reqs[e->num_reqs++] = q;
    return VLLM_OK;
}

vllm_status vllm_engine_abort_request(vllm_engine *e, const char *id) {
    ereq *q = id ? engine_find(e, id) : NULL;
    if (!q || q->r.finish != VLLM_FINISH_NONE)
        return vt_error(VLLM_ERR_NOT_FOUND, "no unfinished request '%s'", id ? id : "(null)");
    sched_drop(&e->sched, &q->r);
    q->r.finish = VLLM_FINISH_ABORT;
    q->aborted = true;
    return VLLM_OK;
}

/* ---- sampling ---- */

static bool is_eos(const vllm_engine *e, int32_t t) {
    for (int i = 0; i < e->num_eos; i++)
        if (e->eos_ids[i] == t) return true;
    return false;
}

/* Samples the request's next token from its logits row and applies the
 * stop rules; returns the sampled id or -1 on error. */
static int32_t sample_one(vllm_engine *e, request *r, float *row) {
    int V = e->cfg->vocab_size;
    int generated = r->num_tokens - r->num_prompt;
    float saved[MODEL_MAX_EOS + 1];
    bool mask_eos = generated < r->params.min_tokens;
    for (int i = 0; i < V; i++)
        if (isnan(row[i])) {
            vt_error(VLLM_ERR_BACKEND, "the model produced NaN logits");
            return -1;
        }
    if (mask_eos)
        for (int i = 0; i < e->num_eos; i++) {
            saved[i] = row[e->eos_ids[i]];
            row[e->eos_ids[i]] = -INFINITY;
        }
    int32_t t = sampler_sample(row, V, &r->params, &r->rng, &e->scratch);
    if (mask_eos)
        for (int i = e->num_eos - 1; i >= 0; i--) row[e->eos_ids[i]] = saved[i];
    if (t < 0) return -1;
    r->logprobs[generated] = (float)sampler_logprob(row, V, t);
    r->tokens[r->num_tokens++] = t;
    generated++;
    if (!r->params.ignore_eos && is_eos(e, t)) r->finish = VLLM_FINISH_STOP;
    else if (generated >= r->params.max_tokens || r->num_tokens >= e->max_model_len) r->finish = VLLM_FINISH_LENGTH;
    return t;
}

/* ---- outputs ---- */

static vllm_status text_append(ereq *q, const char *s, size_t n) {
    if (q->text_len + n + 1 > q->text_cap) {
        size_t cap = q->text_cap ? q->text_cap : 64;
        while (cap < q->text_len + n + 1) cap *= 2;
        char *t = realloc(q->text, cap);
        if (!t) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        q->text = t;
        q->text_cap = cap;
    }
    memcpy(q->text + q->text_len, s, n);
    q->text_len += n;
    q->text[q->text_len] = '\0';
    return VLLM_OK;
}

/* Detokenizes the request's new tokens (and flushes at the end). */
static vllm_status detokenize_new(ereq *q) {
    if (!q->stream) return VLLM_OK;
    request *r = &q->r;
    vllm_status st = VLLM_OK;
    for (int i = q->r.num_prompt + q->tokens_reported; st == VLLM_OK && i < r->num_tokens; i++) {
        char *piece = NULL;
        size_t n = 0;
        st = tok_stream_push(q->stream, r->tokens[i], &piece, &n);
        if (st == VLLM_OK) st = text_append(q, piece, n);
        free(piece);
    }
    if (st == VLLM_OK && r->finish != VLLM_FINISH_NONE) {
        char *piece = NULL;
        size_t n = 0;
        st = tok_stream_finish(q->stream, &piece, &n);
        if (st == VLLM_OK) st = text_append(q, piece, n);
        free(piece);
    }
    return st;
}

/* Frees requests reported as finished by the previous step. */
static void reap(vllm_engine *e) {
    size_t k = 0;
    for (size_t i = 0; i < e->num_reqs; i++) {
        if (e->reqs[i]->done) ereq_free(e->reqs[i]);
        else e->reqs[k++] = e->reqs[i];
    }
    e->num_reqs = k;
}

/* Fills e->outs with one entry per request that has news. */
static vllm_status collect_outputs(vllm_engine *e, size_t *num_out) {
    size_t n = 0, text_bytes = 0;
    for (size_t i = 0; i < e->num_reqs; i++) {
        ereq *q = e->reqs[i];
        int gen = q->r.num_tokens - q->r.num_prompt;
        if (gen > q->tokens_reported || q->r.finish != VLLM_FINISH_NONE) {
            n++;
            text_bytes += q->text_len - q->text_reported + 1;
        }
    }
    if (n > e->cap_outs) {
        vllm_request_output *o = realloc(e->outs, n * sizeof *o);
        if (!o) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        e->outs = o;
        e->cap_outs = n;
    }
    if (text_bytes > e->cap_out_text) {
        char *t = realloc(e->out_text, text_bytes);
        if (!t) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        e->out_text = t;
        e->cap_out_text = text_bytes;
    }
    size_t k = 0, off = 0;
    for (size_t i = 0; i < e->num_reqs; i++) {
        ereq *q = e->reqs[i];
        request *r = &q->r;
        int gen = r->num_tokens - r->num_prompt;
        if (!(gen > q->tokens_reported || r->finish != VLLM_FINISH_NONE)) continue;
        vllm_request_output *o = &e->outs[k++];
        memset(o, 0, sizeof *o);
        o->request_id = q->id;
        o->new_token_ids = r->tokens + r->num_prompt + q->tokens_reported;
        o->new_logprobs = r->logprobs + q->tokens_reported;
        o->num_new_tokens = (size_t)(gen - q->tokens_reported);
        size_t tl = q->text_len - q->text_reported;
        if (tl) memcpy(e->out_text + off, q->text + q->text_reported, tl);
        e->out_text[off + tl] = '\0';
        o->new_text = e->out_text + off;
        o->new_text_len = tl;
        off += tl + 1;
        o->finish_reason = r->finish;
        o->prompt_tokens = (size_t)r->num_prompt;
        o->completion_tokens = (size_t)gen;
        o->cached_prompt_tokens = 0;
        q->tokens_reported = gen;
        q->text_reported = q->text_len;
        if (r->finish != VLLM_FINISH_NONE) q->done = true;
    }
    *num_out = k;
    return VLLM_OK;
}

/* ---- the step ---- */

vllm_status vllm_engine_step(vllm_engine *e, const vllm_request_output **outputs, size_t *num_outputs) {
    *outputs = NULL;
    *num_outputs = 0;
    reap(e);
    int V = e->cfg->vocab_size;
    vllm_status st = VLLM_OK;
    if (sched_has_work(&e->sched)) {
        fwd_batch b;
        if ((st = sched_step(&e->sched, &b))) return st;
        if (b.num_tokens == 0) return vt_error(VLLM_ERR_INTERNAL, "scheduler made no progress");
        double t0 = progress_now();
        const tensor *logits;
        if ((st = model_forward(e->model, e->cache, &b, &logits)) ||
            (b.num_logits > 0 && (st = e->be->ops->download(e->be, e->logits_host, logits,
                                                           (size_t)b.num_logits * (size_t)V * sizeof(float)))))
            return st;
        bool prefill = false;
        size_t prefill_tokens = 0;
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if (r->num_computed < r->num_prompt) {
                prefill = true;
                prefill_tokens += (size_t)e->sched.step_tokens[i];
            }
        }
        sched_commit(&e->sched);
        int row = 0;
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if (!sched_is_sampled(&e->sched, i)) continue;
            if (sample_one(e, r, e->logits_host + (size_t)row * V) < 0) {
                /* a bad row (NaN logits) ends this request only */
                LOG_W("request %s: %s", ((ereq *)r)->id, vllm_last_error());
                r->finish = VLLM_FINISH_ABORT;
            }
            row++;
        }
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if (r->finish != VLLM_FINISH_NONE && r->state == REQ_RUNNING) sched_finish(&e->sched, r);
            if ((st = detokenize_new((ereq *)r))) return st;
        }
        double dt = progress_now() - t0;
        e->counters.steps++;
        e->counters.sampled_tokens += (size_t)b.num_logits;
        e->counters.prefill_tokens += prefill_tokens;
        if (prefill) e->counters.prefill_seconds += dt;
        else e->counters.decode_seconds += dt;
    }
    /* aborted requests are reported once too */
    for (size_t i = 0; i < e->num_reqs; i++)
        if (e->reqs[i]->aborted && (st = detokenize_new(e->reqs[i]))) return st;
    if ((st = collect_outputs(e, num_outputs))) return st;
    *outputs = e->outs;
    return VLLM_OK;
}
