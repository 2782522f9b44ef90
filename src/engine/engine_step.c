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
    free(q->own_bias_ids);
    free(q->own_bias_vals);
    free(q->own_allowed);
    free(q->own_stop_ids);
    for (size_t i = 0; q->own_stop && i < q->r.params.num_stop; i++) free(q->own_stop[i]);
    free(q->own_stop);
    for (size_t i = 0; q->own_bad && i < q->r.params.num_bad_words; i++) free(q->own_bad[i]);
    free(q->own_bad);
    free(q->bad_ids);
    free(q->bad_offsets);
    free(q->top_ids);
    free(q->top_lps);
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

static void *dup_array(const void *src, size_t n, size_t size, bool *ok) {
    if (!n) return NULL;
    void *d = malloc(n * size);
    if (!d) *ok = false;
    else memcpy(d, src, n * size);
    return d;
}

static char **dup_strings(const char *const *src, size_t n, bool *ok) {
    if (!n) return NULL;
    char **d = calloc(n, sizeof *d);
    if (!d) {
        *ok = false;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (!(d[i] = strdup(src[i]))) *ok = false;
    return d;
}

/* Bad words as token sequences, as vLLM's update_from_tokenizer: each word
 * (left-stripped) encoded alone, and with a leading space when that gives a
 * different first token and the same length. */
static vllm_status tokenize_bad_words(vllm_engine *e, ereq *q) {
    const vllm_sampling_params *p = &q->r.params;
    if (!p->num_bad_words) return VLLM_OK;
    if (!e->tok) return vt_error(VLLM_ERR_UNSUPPORTED, "bad_words needs the model's tokenizer");
    size_t cap_ids = 0, n_ids = 0, n_seq = 0;
    q->bad_offsets = malloc((2 * p->num_bad_words + 1) * sizeof *q->bad_offsets);
    if (!q->bad_offsets) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    q->bad_offsets[0] = 0;
    for (size_t w = 0; w < p->num_bad_words; w++) {
        const char *word = p->bad_words[w];
        while (*word == ' ' || *word == '\t' || *word == '\n' || *word == '\r') word++;
        char *spaced = malloc(strlen(word) + 2);
        if (!spaced) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        spaced[0] = ' ';
        strcpy(spaced + 1, word);
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        vllm_status st = tok_encode(e->tok, word, strlen(word), false, &a, &na);
        if (st == VLLM_OK) st = tok_encode(e->tok, spaced, strlen(spaced), false, &b, &nb);
        free(spaced);
        if (st == VLLM_OK) {
            const int32_t *seqs[2] = {a, b};
            size_t lens[2] = {na, (nb == na && nb > 0 && na > 0 && b[0] != a[0]) ? nb : 0};
            for (int k = 0; k < 2 && st == VLLM_OK; k++) {
                if (!lens[k]) continue;
                if (n_ids + lens[k] > cap_ids) {
                    cap_ids = 2 * (n_ids + lens[k]);
                    int32_t *ni = realloc(q->bad_ids, cap_ids * sizeof *ni);
                    if (!ni) st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
                    else q->bad_ids = ni;
                }
                if (st == VLLM_OK) {
                    memcpy(q->bad_ids + n_ids, seqs[k], lens[k] * sizeof(int32_t));
                    n_ids += lens[k];
                    q->bad_offsets[++n_seq] = n_ids;
                }
            }
        }
        free(a);
        free(b);
        if (st != VLLM_OK) return st;
    }
    q->bad = (sampler_token_seqs){.ids = q->bad_ids, .offsets = q->bad_offsets, .num = n_seq};
    return VLLM_OK;
}

/* Copies the parameters with every caller-owned array, so the request does
 * not depend on the caller's memory after add_request returns. */
static vllm_status copy_params(vllm_engine *e, ereq *q, const vllm_sampling_params *sp) {
    vllm_sampling_params *p = &q->r.params;
    *p = *sp;
    bool ok = true;
    q->own_bias_ids = dup_array(sp->logit_bias_ids, sp->num_logit_bias, sizeof(int32_t), &ok);
    q->own_bias_vals = dup_array(sp->logit_bias_values, sp->num_logit_bias, sizeof(float), &ok);
    q->own_allowed = dup_array(sp->allowed_token_ids, sp->num_allowed_token_ids, sizeof(int32_t), &ok);
    q->own_stop_ids = dup_array(sp->stop_token_ids, sp->num_stop_token_ids, sizeof(int32_t), &ok);
    q->own_stop = dup_strings(sp->stop, sp->num_stop, &ok);
    q->own_bad = dup_strings(sp->bad_words, sp->num_bad_words, &ok);
    p->logit_bias_ids = q->own_bias_ids;
    p->logit_bias_values = q->own_bias_vals;
    p->allowed_token_ids = q->own_allowed;
    p->stop_token_ids = q->own_stop_ids;
    p->stop = (const char *const *)q->own_stop;
    p->bad_words = (const char *const *)q->own_bad;
    if (!ok) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < p->num_stop; i++)
        if (strlen(p->stop[i]) > q->max_stop_len) q->max_stop_len = strlen(p->stop[i]);
    if (p->num_stop && !e->tok) return vt_error(VLLM_ERR_UNSUPPORTED, "stop strings need the model's tokenizer");
    return tokenize_bad_words(e, q);
}

/* Tokenizes and validates the prompt into q->r. */
static vllm_status request_init(vllm_engine *e, ereq *q, const char *id, const vllm_prompt *p,
                                const vllm_sampling_params *sp) {
    request *r = &q->r;
    vllm_status st = vllm_sampling_params_validate(sp);
    if (st == VLLM_OK) st = sampler_validate(sp, e->cfg->vocab_size);
    if (st == VLLM_OK) st = copy_params(e, q, sp);
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
    if (sp->logprobs > 0) {
        size_t cells = (size_t)(cap - (long long)n + 1) * (size_t)sp->logprobs;
        q->top_ids = malloc(cells * sizeof *q->top_ids);
        q->top_lps = malloc(cells * sizeof *q->top_lps);
        if (!q->top_ids || !q->top_lps) {
            free(ids);
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        }
    }
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

static bool in_list(const int32_t *a, size_t n, int32_t t) {
    for (size_t i = 0; i < n; i++)
        if (a[i] == t) return true;
    return false;
}

/* Samples the request's next token from its logits row (vLLM v1 order:
 * raw logprobs, logits processors and penalties, then the sampler) and
 * applies the stop rules (vllm/v1/core/sched/utils.py check_stop).
 * Returns the sampled id or -1 on error. */
static int32_t sample_one(vllm_engine *e, ereq *q, float *row) {
    request *r = &q->r;
    const vllm_sampling_params *p = &r->params;
    int V = e->cfg->vocab_size;
    int generated = r->num_tokens - r->num_prompt;
    for (int i = 0; i < V; i++)
        if (isnan(row[i])) {
            vt_error(VLLM_ERR_BACKEND, "the model produced NaN logits");
            return -1;
        }
    memcpy(e->raw_row, row, (size_t)V * sizeof *row);
    int32_t eos[MODEL_MAX_EOS + 1];
    for (int i = 0; i < e->num_eos; i++) eos[i] = e->eos_ids[i];
    sampler_context ctx = {
        .prompt = r->tokens, .n_prompt = (size_t)r->num_prompt,
        .output = r->tokens + r->num_prompt, .n_output = (size_t)generated,
        .eos_ids = eos, .n_eos = (size_t)e->num_eos,
        .bad_words = q->bad.num ? &q->bad : NULL,
    };
    if (sampler_process_logits(row, V, p, &ctx, &e->proc) != VLLM_OK) return -1;
    int32_t t = sampler_sample(row, V, p, &r->rng, &e->scratch);
    if (t < 0) return -1;
    r->logprobs[generated] = (float)sampler_logprob(e->raw_row, V, t);
    if (p->logprobs > 0)
        sampler_top_logprobs(e->raw_row, V, p->logprobs, q->top_ids + (size_t)generated * (size_t)p->logprobs,
                             q->top_lps + (size_t)generated * (size_t)p->logprobs);
    r->tokens[r->num_tokens++] = t;
    generated++;
    if (generated < p->min_tokens) {
        if (r->num_tokens >= e->max_model_len) r->finish = VLLM_FINISH_LENGTH;
    } else if (!p->ignore_eos && is_eos(e, t)) {
        r->finish = VLLM_FINISH_STOP;
    } else if (in_list(p->stop_token_ids, p->num_stop_token_ids, t)) {
        r->finish = VLLM_FINISH_STOP;
    } else if (generated >= p->max_tokens || r->num_tokens >= e->max_model_len) {
        r->finish = VLLM_FINISH_LENGTH;
    }
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
/* Looks for a stop string that ends in the text added since `from`
 * (vLLM's check_stop_strings); on a match truncates the text and stops. */
static void check_stop_strings(ereq *q, size_t from) {
    const vllm_sampling_params *p = &q->r.params;
    if (!p->num_stop || q->r.num_tokens - q->r.num_prompt <= p->min_tokens) return;
    size_t start = from > q->max_stop_len ? from - q->max_stop_len + 1 : 0, best = SIZE_MAX;
    const char *hit = NULL;
    for (size_t i = 0; i < p->num_stop; i++) {
        const char *m = strstr(q->text + start, p->stop[i]);
        if (m && (size_t)(m - q->text) < best) {
            best = (size_t)(m - q->text);
            hit = p->stop[i];
        }
    }
    if (!hit) return;
    q->text_len = best + (p->include_stop_str_in_output ? strlen(hit) : 0);
    q->text[q->text_len] = '\0';
    q->stop_reason = hit;
    q->r.finish = VLLM_FINISH_STOP;
}

static vllm_status detokenize_new(ereq *q) {
    if (!q->stream) return VLLM_OK;
    request *r = &q->r;
    vllm_status st = VLLM_OK;
    bool was_running = r->finish == VLLM_FINISH_NONE;
    for (int i = q->r.num_prompt + q->tokens_reported; st == VLLM_OK && i < r->num_tokens; i++) {
        char *piece = NULL;
        size_t n = 0, before = q->text_len;
        st = tok_stream_push(q->stream, r->tokens[i], &piece, &n);
        if (st == VLLM_OK) st = text_append(q, piece, n);
        free(piece);
        if (st == VLLM_OK && (was_running || r->finish != VLLM_FINISH_ABORT) && !q->stop_reason)
            check_stop_strings(q, before);
        if (q->stop_reason) return VLLM_OK;
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
        /* with stop strings, hold back what could still become one (vLLM's stop_buffer_length) */
        size_t limit = q->text_len;
        if (r->finish == VLLM_FINISH_NONE && q->max_stop_len > 1) {
            limit = q->text_len > q->max_stop_len - 1 ? q->text_len - (q->max_stop_len - 1) : 0;
            while (limit > q->text_reported && ((unsigned char)q->text[limit] & 0xC0) == 0x80) limit--;
            if (limit < q->text_reported) limit = q->text_reported;
        }
        size_t tl = limit - q->text_reported;
        if (tl) memcpy(e->out_text + off, q->text + q->text_reported, tl);
        e->out_text[off + tl] = '\0';
        o->new_text = e->out_text + off;
        o->new_text_len = tl;
        off += tl + 1;
        o->finish_reason = r->finish;
        o->stop_reason = q->stop_reason;
        if (r->params.logprobs > 0) {
            o->num_top_logprobs = r->params.logprobs;
            o->top_logprob_ids = q->top_ids + (size_t)q->tokens_reported * (size_t)r->params.logprobs;
            o->top_logprobs = q->top_lps + (size_t)q->tokens_reported * (size_t)r->params.logprobs;
        }
        o->prompt_tokens = (size_t)r->num_prompt;
        o->completion_tokens = (size_t)gen;
        o->cached_prompt_tokens = (size_t)r->num_cached_tokens;
        q->tokens_reported = gen;
        q->text_reported = limit;
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
            if (sample_one(e, (ereq *)r, e->logits_host + (size_t)row * V) < 0) {
                /* a bad row (NaN logits) ends this request only */
                LOG_W("request %s: %s", ((ereq *)r)->id, vllm_last_error());
                r->finish = VLLM_FINISH_ABORT;
            }
            row++;
        }
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if ((st = detokenize_new((ereq *)r))) return st; /* may stop on a stop string */
            if (r->finish != VLLM_FINISH_NONE && r->state == REQ_RUNNING) sched_finish(&e->sched, r);
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
