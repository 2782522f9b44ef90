/*
 * engine_step.c: the request-level engine of vllm.h (vLLM's LLMEngine):
 * add_request (tokenize, validate, queue; n > 1 as n child requests),
 * step (schedule, build the batch, forward, prompt logprobs, sample,
 * detokenize incrementally, stop), abort; and the outputs of each step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/engine_internal.h"

/* ---- request lifetime ---- */

void ereq_free(ereq *q) {
    if (!q) return;
    free(q->pool_acc);
    free(q->embedding);
    free(q->r.tokens);
    free(q->r.logprobs);
    free(q->r.blocks);
    tok_stream_free(q->stream);
    free(q->text);
    free(q->id);
    free(q->child_id);
    free(q->prompt_lps);
    free(q->prompt_top_ids);
    free(q->prompt_top_lps);
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
    engine_so_detach(q);
    free(q->own_so_json);
    free(q->own_so_regex);
    free(q->own_so_grammar);
    free(q->own_so_think_start);
    free(q->own_so_think_end);
    for (size_t i = 0; q->own_so_choice && i < q->r.params.structured_outputs.num_choice; i++) free(q->own_so_choice[i]);
    free(q->own_so_choice);
    free(q);
}

void engine_requests_free(vllm_engine *e) {
    for (size_t i = 0; i < e->num_reqs; i++) ereq_free(e->reqs[i]);
    engine_so_free(e);
    free(e->reqs);
    free(e->outs);
    free(e->out_reqs);
    free(e->out_text);
    step_sampling_free(&e->ss);
    e->reqs = NULL;
    e->outs = NULL;
    e->out_reqs = NULL;
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
    const vllm_structured_outputs *so = &sp->structured_outputs;
    if (so->json && !(q->own_so_json = strdup(so->json))) ok = false;
    if (so->regex && !(q->own_so_regex = strdup(so->regex))) ok = false;
    if (so->grammar && !(q->own_so_grammar = strdup(so->grammar))) ok = false;
    if (so->reasoning_start && !(q->own_so_think_start = strdup(so->reasoning_start))) ok = false;
    if (so->reasoning_end && !(q->own_so_think_end = strdup(so->reasoning_end))) ok = false;
    p->structured_outputs.reasoning_start = q->own_so_think_start;
    p->structured_outputs.reasoning_end = q->own_so_think_end;
    if (so->choice && so->num_choice) q->own_so_choice = dup_strings(so->choice, so->num_choice, &ok);
    p->structured_outputs.json = q->own_so_json;
    p->structured_outputs.regex = q->own_so_regex;
    p->structured_outputs.grammar = q->own_so_grammar;
    p->structured_outputs.choice = so->choice ? (const char *const *)q->own_so_choice : NULL;
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

/* Prompt logprob arrays, all NaN (ids -1) until computed; entry 0 stays so. */
static vllm_status prompt_logprobs_init(ereq *q) {
    const request *r = &q->r;
    int k = r->params.prompt_logprobs;
    if (k < 0) return VLLM_OK;
    size_t n = (size_t)r->num_prompt, cells = n * (size_t)k;
    q->prompt_lps = malloc(n * sizeof *q->prompt_lps);
    if (k > 0) {
        q->prompt_top_ids = malloc(cells * sizeof *q->prompt_top_ids);
        q->prompt_top_lps = malloc(cells * sizeof *q->prompt_top_lps);
    }
    if (!q->prompt_lps || (k > 0 && (!q->prompt_top_ids || !q->prompt_top_lps)))
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (prompt logprobs)");
    for (size_t i = 0; i < n; i++) q->prompt_lps[i] = NAN;
    for (size_t i = 0; i < cells; i++) {
        q->prompt_top_ids[i] = -1;
        q->prompt_top_lps[i] = NAN;
    }
    q->r.prompt_lp_done = 1;
    return VLLM_OK;
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
    r->blocks = malloc(sched_blocks_per_request(&e->sched) * sizeof *r->blocks);
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
    if ((st = prompt_logprobs_init(q))) return st;
    if ((st = engine_so_attach(e, q))) { /* (after the prompt: a reasoning end in it starts the constraint) */
        vt_error_prefix("request %s", id);
        return st;
    }
    sampler_rng_seed(&r->rng, sp->has_seed ? sp->seed : e->next_seed++ * 0x9E3779B97F4A7C15ull + 1);
    if (e->tok) {
        st = tok_stream_create(e->tok, r->tokens, n, sp->skip_special_tokens, &q->stream);
        if (st != VLLM_OK) return st;
    }
    return VLLM_OK;
}

/* Child i's parameters (vLLM's ParentRequest._get_child_sampling_params):
 * n = 1, seed + i when seeded; prompt logprobs only for child 0. */
static vllm_sampling_params child_params(const vllm_sampling_params *sp, int i) {
    vllm_sampling_params c = *sp;
    c.n = 1;
    if (sp->has_seed) c.seed = sp->seed + (uint64_t)i;
    if (i > 0) c.prompt_logprobs = -1;
    return c;
}

vllm_status engine_reqs_reserve(vllm_engine *e, size_t n) {
    if (e->num_reqs + n > e->cap_reqs) {
        size_t cap = e->cap_reqs ? e->cap_reqs : 64;
        while (cap < e->num_reqs + n) cap *= 2;
        ereq **nr = realloc(e->reqs, cap * sizeof *nr);
        if (!nr) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        e->reqs = nr;
        e->cap_reqs = cap;
    }
    return VLLM_OK;
}

vllm_status vllm_engine_add_request(vllm_engine *e, const char *id, const vllm_prompt *p,
                                    const vllm_sampling_params *sp) {
    if (!id || !*id) return vt_error(VLLM_ERR_INVALID_ARG, "request id missing");
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: no prompt", id);
    if (engine_find(e, id)) return vt_error(VLLM_ERR_INVALID_ARG, "request id '%s' is already in use", id);
    if (e->pooling) /* vLLM: a pooling model has no generate task (LLM.generate refuses it) */
        return vt_error(VLLM_ERR_UNSUPPORTED, "request %s: the engine runs the pooling runner (embeddings): it does "
                        "not generate text", id);
    vllm_sampling_params defaults = vllm_sampling_default_params();
    if (!sp) sp = &defaults;
    vllm_status st = vllm_sampling_params_validate(sp);
    if (st != VLLM_OK) {
        vt_error_prefix("request %s", id);
        return st;
    }
    size_t n = (size_t)sp->n;
    if ((st = engine_reqs_reserve(e, n))) return st;
    /* n > 1: n children, all queued or none */
    size_t first = e->num_reqs;
    for (size_t i = 0; i < n; i++) {
        ereq *q = calloc(1, sizeof *q);
        if (!q || !(q->id = strdup(id))) {
            free(q);
            st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        } else {
            q->index = i;
            if (n > 1 && !(q->child_id = malloc(strlen(id) + 24))) st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
            else if (n > 1) sprintf(q->child_id, "%zu_%s", i, id);
            vllm_sampling_params cp = child_params(sp, (int)i);
            if (st == VLLM_OK) st = request_init(e, q, id, p, &cp);
            if (st == VLLM_OK) st = sched_add(&e->sched, &q->r);
            if (st != VLLM_OK) ereq_free(q);
        }
        if (st != VLLM_OK) {
            while (e->num_reqs > first) {
                ereq *prev = e->reqs[--e->num_reqs];
                sched_drop(&e->sched, &prev->r);
                ereq_free(prev);
            }
            return st;
        }
        q->r.index = e->num_reqs;
        e->reqs[e->num_reqs++] = q;
    }
    return VLLM_OK;
}

vllm_status vllm_engine_abort_request(vllm_engine *e, const char *id) {
    size_t hits = 0;
    for (size_t i = 0; id && i < e->num_reqs; i++) {
        ereq *q = e->reqs[i];
        if (q->done || q->r.finish != VLLM_FINISH_NONE || strcmp(q->id, id)) continue;
        sched_drop(&e->sched, &q->r);
        q->r.finish = VLLM_FINISH_ABORT;
        q->aborted = true;
        hits++;
    }
    if (!hits) return vt_error(VLLM_ERR_NOT_FOUND, "no unfinished request '%s'", id ? id : "(null)");
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

/* Appends the token the backend sampled for q and applies the stop rules
 * (vllm/v1/core/sched/utils.py check_stop). */
static void accept_token(vllm_engine *e, ereq *q, int32_t t, float logprob) {
    request *r = &q->r;
    const vllm_sampling_params *p = &r->params;
    int generated = r->num_tokens - r->num_prompt;
    r->logprobs[generated] = logprob;
    r->tokens[r->num_tokens++] = t;
    generated++;
    bool so_ok;
    if (q->so) {
        const double ta = progress_now();
        so_ok = engine_so_accept(e, q, t);
        e->counters.so_advance_seconds += progress_now() - ta;
    } else {
        so_ok = true;
    }
    if (!so_ok) { /* (the mask allowed it: a bug; vLLM ends such a request with an error) */
        LOG_W("request %s: the structured-output grammar refused token %d", q->child_id ? q->child_id : q->id, t);
        r->finish = VLLM_FINISH_ABORT;
        return;
    }
    if (generated < p->min_tokens) {
        if (r->num_tokens >= e->max_model_len) r->finish = VLLM_FINISH_LENGTH;
    } else if (!p->ignore_eos && is_eos(e, t)) {
        r->finish = VLLM_FINISH_STOP;
    } else if (in_list(p->stop_token_ids, p->num_stop_token_ids, t)) {
        r->finish = VLLM_FINISH_STOP;
    } else if (generated >= p->max_tokens || r->num_tokens >= e->max_model_len) {
        r->finish = VLLM_FINISH_LENGTH;
    }
}

/* ---- prompt logprobs ---- */

void step_sampling_free(step_sampling *ss) {
    free(ss->rows);
    free(ss->params);
    free(ss->ctx);
    free(ss->uniform);
    free(ss->tokens);
    free(ss->logprobs);
    free(ss->top_ids);
    free(ss->top_lps);
    free(ss->reqs);
    free(ss->lp_rows);
    free(ss->lp_targets);
    free(ss->lp_k);
    free(ss->lp_vals);
    free(ss->lp_top_ids);
    free(ss->lp_top_lps);
    free(ss->lp_reqs);
    free(ss->lp_pos);
    memset(ss, 0, sizeof *ss);
}

/* The step's arrays, sized once for the scheduler's limits. */
static vllm_status step_arrays_init(vllm_engine *e) {
    if (e->ss.rows) return VLLM_OK;
    size_t S = (size_t)e->sched.cfg.max_num_seqs, T = (size_t)e->sched.cfg.max_num_batched_tokens;
    step_sampling *ss = &e->ss;
    ss->rows = malloc(S * sizeof *ss->rows);
    ss->params = malloc(S * sizeof *ss->params);
    ss->ctx = malloc(S * sizeof *ss->ctx);
    ss->uniform = malloc(S * sizeof *ss->uniform);
    ss->tokens = malloc(S * sizeof *ss->tokens);
    ss->logprobs = malloc(S * sizeof *ss->logprobs);
    ss->top_ids = malloc(S * sizeof *ss->top_ids);
    ss->top_lps = malloc(S * sizeof *ss->top_lps);
    ss->reqs = malloc(S * sizeof *ss->reqs);
    ss->lp_rows = malloc(T * sizeof *ss->lp_rows);
    ss->lp_targets = malloc(T * sizeof *ss->lp_targets);
    ss->lp_k = malloc(T * sizeof *ss->lp_k);
    ss->lp_vals = malloc(T * sizeof *ss->lp_vals);
    ss->lp_top_ids = malloc(T * sizeof *ss->lp_top_ids);
    ss->lp_top_lps = malloc(T * sizeof *ss->lp_top_lps);
    ss->lp_reqs = malloc(T * sizeof *ss->lp_reqs);
    ss->lp_pos = malloc(T * sizeof *ss->lp_pos);
    if (!ss->rows || !ss->params || !ss->ctx ||
        !ss->uniform || !ss->tokens || !ss->logprobs || !ss->top_ids || !ss->top_lps || !ss->reqs || !ss->lp_rows ||
        !ss->lp_targets || !ss->lp_k || !ss->lp_vals || !ss->lp_top_ids || !ss->lp_top_lps || !ss->lp_reqs ||
        !ss->lp_pos) {
        step_sampling_free(ss);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (step arrays)");
    }
    return VLLM_OK;
}

/* Builds the step's sampling work from the input builder's logits rows
 * (row i of the logits is the batch row logits_indices[i]): the
 * prompt-logprob rows into *lb and the sampled rows into *sb, with outputs
 * pointing into the requests' buffers. Draws each sampled row's uniform
 * from its request's generator (only when temperature > 0, as the sampler
 * consumes it). */
static void build_sampling(vllm_engine *e, const sched_output *so, sample_batch *sb, logprob_batch *lb) {
    const input_builder *ib = &e->ib;
    step_sampling *ss = &e->ss;
    int row = 0, ns = 0, nl = 0;
    for (int i = 0; i < so->num_reqs; i++) {
        ereq *q = (ereq *)so->reqs[i];
        request *r = &q->r;
        int k = r->params.prompt_logprobs;
        for (int j = 0; j < ib->lp_count[i]; j++, row++, nl++) {
            int pos = ib->lp_from[i] + j, p = pos + 1;
            ss->lp_rows[nl] = row;
            ss->lp_targets[nl] = r->tokens[p];
            ss->lp_k[nl] = k > 0 ? k : 0;
            ss->lp_top_ids[nl] = k > 0 ? q->prompt_top_ids + (size_t)p * (size_t)k : NULL;
            ss->lp_top_lps[nl] = k > 0 ? q->prompt_top_lps + (size_t)p * (size_t)k : NULL;
            ss->lp_reqs[nl] = q;
            ss->lp_pos[nl] = p;
        }
        if (!ib->sampled[i]) continue;
        const vllm_sampling_params *p = &r->params;
        size_t generated = (size_t)(r->num_tokens - r->num_prompt);
        ss->rows[ns] = row++;
        ss->params[ns] = p;
        ss->ctx[ns] = (sampler_context){
            .prompt = r->tokens, .n_prompt = (size_t)r->num_prompt,
            .output = r->tokens + r->num_prompt, .n_output = generated,
            .eos_ids = e->eos_ids, .n_eos = (size_t)e->num_eos,
            .bad_words = q->bad.num ? &q->bad : NULL,
        };
        ss->uniform[ns] = p->temperature > 0.0f ? sampler_rng_uniform(&r->rng) : 0.0;
        ss->top_ids[ns] = p->logprobs > 0 ? q->top_ids + generated * (size_t)p->logprobs : NULL;
        ss->top_lps[ns] = p->logprobs > 0 ? q->top_lps + generated * (size_t)p->logprobs : NULL;
        ss->reqs[ns] = q;
        ns++;
    }
    *sb = (sample_batch){
        .num_rows = ns, .rows = ss->rows, .params = ss->params, .ctx = ss->ctx, .uniform = ss->uniform,
        .tokens = ss->tokens, .logprobs = ss->logprobs, .top_ids = ss->top_ids, .top_lps = ss->top_lps,
    };
    *lb = (logprob_batch){
        .num_rows = nl, .rows = ss->lp_rows, .targets = ss->lp_targets, .k = ss->lp_k, .logprobs = ss->lp_vals,
        .top_ids = ss->lp_top_ids, .top_lps = ss->lp_top_lps,
    };
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
    /* vLLM's IncrementalDetokenizer.update(stop_terminated): the EOS / stop_token_ids token that ended the
       request is not detokenized unless include_stop_str_in_output (stop strings set stop_reason instead) */
    int end = r->num_tokens;
    if (r->finish == VLLM_FINISH_STOP && !q->stop_reason && !r->params.include_stop_str_in_output &&
        end > r->num_prompt + q->tokens_reported)
        end--;
    for (int i = q->r.num_prompt + q->tokens_reported; st == VLLM_OK && i < end; i++) {
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
        ereq **oq = realloc(e->out_reqs, n * sizeof *oq);
        if (!oq) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        e->out_reqs = oq;
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
        e->out_reqs[k] = q;
        vllm_request_output *o = &e->outs[k++];
        memset(o, 0, sizeof *o);
        o->request_id = q->id;
        o->index = q->index;
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
        if (q->prompt_lps && !q->prompt_lp_reported && r->prompt_lp_done == r->num_prompt) {
            o->prompt_logprobs = q->prompt_lps;
            if (r->params.prompt_logprobs > 0) {
                o->num_prompt_top_logprobs = r->params.prompt_logprobs;
                o->prompt_top_logprob_ids = q->prompt_top_ids;
                o->prompt_top_logprobs = q->prompt_top_lps;
            }
            q->prompt_lp_reported = true;
        }
        if (q->embedding) {
            o->embedding = q->embedding;
            o->embedding_dim = q->embedding_dim;
        }
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
    vllm_status st = VLLM_OK;
    if (sched_has_work(&e->sched)) {
        /* the scheduler decides, the input builder makes the batch, the model runs it */
        sched_output so;
        fwd_batch b;
        if ((st = sched_step(&e->sched, &so))) return st;
        if (so.total_tokens == 0) return vt_error(VLLM_ERR_INTERNAL, "scheduler made no progress");
        if ((st = step_arrays_init(e)) || (st = ib_build(&e->ib, &so, &b))) return st;
        double t0 = progress_now();
        /* hybrid models' prefix hits resume from state checkpoints: copied into the admitted requests'
         * slots before the forward, and the states of chunks ending on a checkpoint boundary copied out
         * right after it (copies on the backend's stream, in order with the forward's ops) */
        for (int i = 0; i < so.num_restores; i++)
            if ((st = model_state_restore(e->model, e->cache, so.restores[i].ckpt_slot, so.restores[i].state_slot)))
                return st;
        /* the sampled rows and their token masks (from the matchers as the last step left them): on an async
         * backend the mask threads fill them while the device runs the forward */
        sample_batch sb = {0};
        logprob_batch lb = {0};
        const bool overlap = !e->pooling && e->so_overlap;
        if (!e->pooling) build_sampling(e, &so, &sb, &lb);
        if (overlap) engine_so_masks_start(e, e->ss.reqs, e->ss.ctx, sb.num_rows);
        const tensor *logits;
        double tf = progress_now();
        st = model_forward(e->model, e->cache, &b, &logits);
        e->counters.forward_seconds += progress_now() - tf;
        for (int i = 0; st == VLLM_OK && i < so.num_saves; i++)
            st = model_state_save(e->model, e->cache, so.saves[i].state_slot, so.saves[i].ckpt_slot);
        if (overlap) engine_so_masks_wait(e);
        if (st) return st;
        /* prompt logprobs and sampling run on the backend over the (num_logits, V)
         * logits; only ids and logprobs come back (the pooling runner: the hidden rows
         * come back, pooled per request on the host) */
        if (e->pooling) {
            if ((st = engine_pooling_rows(e, &so, logits))) return st;
        } else {
            if (!overlap) engine_so_fill_masks(e, e->ss.reqs, e->ss.ctx, sb.num_rows);
            tensor lt = *logits;
            double ts = progress_now();
            if ((lb.num_rows > 0 && (st = e->be->ops->logprobs(e->be, &lt, &lb))) ||
                (sb.num_rows > 0 && (st = e->be->ops->sample(e->be, &lt, &sb))))
                return st;
            e->counters.sample_seconds += progress_now() - ts;
        }
        bool prefill = false;
        size_t prefill_tokens = 0;
        for (int i = 0; i < so.num_reqs; i++) {
            request *r = so.reqs[i];
            if (r->num_computed < r->num_prompt) {
                prefill = true;
                prefill_tokens += (size_t)so.num_tokens[i];
            }
        }
        sched_commit(&e->sched);
        if (e->pooling && (st = engine_pooling_finish(e, &so))) return st;
        for (int j = 0; j < lb.num_rows; j++) {
            ereq *q = e->ss.lp_reqs[j];
            int p = e->ss.lp_pos[j];
            q->prompt_lps[p] = lb.logprobs[j];
            if (p + 1 > q->r.prompt_lp_done) q->r.prompt_lp_done = p + 1;
        }
        for (int j = 0; j < sb.num_rows; j++) {
            ereq *q = e->ss.reqs[j];
            int32_t t = sb.tokens[j];
            if (t < 0) {
                /* a bad row ends this request only */
                LOG_W("request %s: %s", q->child_id ? q->child_id : q->id,
                      t == SAMPLE_NAN_LOGITS   ? "the model produced NaN logits"
                      : t == SAMPLE_ALL_BANNED ? "every token is banned (structured outputs, allowed_token_ids, "
                                                 "bad_words, min_tokens, logit_bias)"
                                               : "sampling failed");
                q->r.finish = VLLM_FINISH_ABORT;
                continue;
            }
            accept_token(e, q, t, sb.logprobs[j]);
        }
        size_t sampled = (size_t)sb.num_rows;
        for (int i = 0; i < so.num_reqs; i++) {
            request *r = so.reqs[i];
            if ((st = detokenize_new((ereq *)r))) return st; /* may stop on a stop string */
            if (r->finish != VLLM_FINISH_NONE && r->state == REQ_RUNNING) sched_finish(&e->sched, r);
        }
        double dt = progress_now() - t0;
        e->counters.steps++;
        e->counters.sampled_tokens += sampled;
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
