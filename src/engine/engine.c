/*
 * engine.c: vllm_engine: the backend, model, KV cache, tokenizer and
 * scheduler together, and the offline generation loop of vllm.h
 * (vllm_generate): schedule a step, run the forward, sample, stop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

struct vllm_engine {
    vllm_engine_options opt;
    backend *be;
    model *model;
    model_cache *cache;
    tokenizer *tok;              /* NULL when the folder has none */
    const model_config *cfg;
    int max_model_len;
    int eos_ids[MODEL_MAX_EOS + 1];
    int num_eos;
    scheduler sched;
    sampler_scratch scratch;
    float *logits_host;          /* (max_num_seqs, vocab) */
    uint64_t next_seed;          /* seeds for requests without one */
};

vllm_engine_options vllm_engine_default_options(void) {
    vllm_engine_options o;
    memset(&o, 0, sizeof o);
    o.device = "cpu";
    o.num_threads = 0;
    o.block_size = 16;
    o.num_kv_blocks = 0;
    o.kv_cache_memory = (size_t)2 << 30;
    o.max_model_len = 0;
    o.max_num_seqs = 256;
    o.max_num_batched_tokens = 8192;
    o.enable_prefix_caching = true;
    o.load_format = VLLM_LOAD_AUTO;
    o.seed = 0;
    return o;
}

vllm_sampling_params vllm_sampling_default_params(void) {
    vllm_sampling_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 16;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.skip_special_tokens = true;
    p.n = 1;
    p.repetition_penalty = 1.0f;
    p.logprobs = -1;
    p.prompt_logprobs = -1;
    return p;
}

vllm_sampling_params vllm_engine_default_sampling(const vllm_engine *e) {
    vllm_sampling_params p = vllm_sampling_default_params();
    if (e->cfg->has_temperature) p.temperature = (float)e->cfg->gen_temperature;
    if (e->cfg->has_top_p) p.top_p = (float)e->cfg->gen_top_p;
    if (e->cfg->has_top_k) p.top_k = e->cfg->gen_top_k;
    return p;
}

vllm_status vllm_sampling_params_validate(const vllm_sampling_params *p) {
    if (p->max_tokens < 1) return vt_error(VLLM_ERR_INVALID_ARG, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return vt_error(VLLM_ERR_INVALID_ARG, "temperature must be non-negative, got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return vt_error(VLLM_ERR_INVALID_ARG, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (p->top_k < -1) return vt_error(VLLM_ERR_INVALID_ARG, "top_k must be -1 (disable) or at least 1, got %d", p->top_k);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return vt_error(VLLM_ERR_INVALID_ARG, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (p->min_tokens < 0) return vt_error(VLLM_ERR_INVALID_ARG, "min_tokens must be non-negative, got %d", p->min_tokens);
    if (p->n != 1 || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f || p->repetition_penalty != 1.0f ||
        p->num_logit_bias || p->num_allowed_token_ids || p->num_bad_words || p->num_stop || p->num_stop_token_ids ||
        p->logprobs >= 0 || p->prompt_logprobs >= 0)
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "sampling: n, penalties, logit_bias, allowed_token_ids, bad_words, stop, stop_token_ids, "
                        "logprobs and prompt_logprobs are not supported yet");
    if (p->min_tokens > p->max_tokens)
        return vt_error(VLLM_ERR_INVALID_ARG, "min_tokens (%d) must not exceed max_tokens (%d)", p->min_tokens, p->max_tokens);
    return VLLM_OK;
}

const char *vllm_finish_reason_str(vllm_finish_reason r) {
    switch (r) {
    case VLLM_FINISH_STOP: return "stop";
    case VLLM_FINISH_LENGTH: return "length";
    case VLLM_FINISH_ABORT: return "abort";
    default: return "none";
    }
}

static vllm_status check_options(const vllm_engine_options *o) {
    if (o->block_size < 1 || o->block_size > 1024)
        return vt_error(VLLM_ERR_INVALID_ARG, "block_size must be in [1, 1024], got %d", o->block_size);
    if (o->max_num_seqs < 1) return vt_error(VLLM_ERR_INVALID_ARG, "max_num_seqs must be positive");
    if (o->max_num_batched_tokens < 1) return vt_error(VLLM_ERR_INVALID_ARG, "max_num_batched_tokens must be positive");
    if (o->num_kv_blocks < 0 || o->max_model_len < 0 || o->num_threads < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "num_kv_blocks, max_model_len and num_threads must not be negative");
    return VLLM_OK;
}

/* Sizes the KV cache: explicit blocks, else the memory budget, capped at
 * what max_num_seqs full-length sequences need. */
static vllm_status plan_cache(vllm_engine *e, int *num_blocks) {
    const vllm_engine_options *o = &e->opt;
    size_t per_block = model_cache_bytes_per_token(e->model) * (size_t)o->block_size;
    int blocks_per_seq = (e->max_model_len + o->block_size - 1) / o->block_size;
    long long want = (long long)blocks_per_seq * o->max_num_seqs;
    long long n = o->num_kv_blocks;
    if (n == 0) {
        n = per_block ? (long long)(o->kv_cache_memory / per_block) : want;
        if (n > want) n = want;
        if (n < blocks_per_seq && o->max_model_len == 0 && n > 0) {
            int fit = (int)(n * o->block_size);
            LOG_W("KV cache of %zu MiB holds %d tokens: max_model_len lowered from %d to %d",
                  o->kv_cache_memory >> 20, fit, e->max_model_len, fit);
            e->max_model_len = fit;
            blocks_per_seq = (int)n;
        }
    }
    if (n < blocks_per_seq)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "KV cache of %lld blocks (%d tokens each) cannot hold one sequence of max_model_len %d; "
                        "raise the KV cache size or lower max_model_len",
                        n, o->block_size, e->max_model_len);
    if (n > 1 << 30) n = 1 << 30;
    *num_blocks = (int)n;
    return VLLM_OK;
}

vllm_status vllm_engine_create(const char *model_dir, const vllm_engine_options *options, vllm_engine **out) {
    *out = NULL;
    if (!model_dir) return vt_error(VLLM_ERR_INVALID_ARG, "model directory missing");
    vllm_engine_options defaults = vllm_engine_default_options();
    vllm_engine *e = calloc(1, sizeof *e);
    if (!e) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    e->opt = options ? *options : defaults;
    vllm_status st = check_options(&e->opt);
    if (st != VLLM_OK) goto fail;

    backend_options bo = {.num_threads = e->opt.num_threads};
    if ((st = backend_create(e->opt.device, &bo, &e->be))) goto fail;
    model_load_options mo = {
        .dummy = e->opt.load_format == VLLM_LOAD_DUMMY, .seed = e->opt.seed, .max_model_len = e->opt.max_model_len};
    if ((st = model_load(model_dir, e->be, &mo, &e->model))) goto fail;
    e->cfg = model_get_config(e->model);

    st = tok_load_dir(model_dir, &e->tok);
    if (st == VLLM_ERR_NOT_FOUND) {
        e->tok = NULL;
        vt_error_clear();
    } else if (st != VLLM_OK) {
        goto fail;
    }

    e->max_model_len = e->opt.max_model_len ? e->opt.max_model_len : e->cfg->max_position_embeddings;
    if (e->max_model_len > e->cfg->max_position_embeddings) {
        /* as vLLM: a longer context than the model was built for needs rope scaling, not a flag */
        st = vt_error(VLLM_ERR_INVALID_ARG, "max_model_len %d exceeds the model's max_position_embeddings %d",
                      e->max_model_len, e->cfg->max_position_embeddings);
        goto fail;
    }
    /* EOS ids: the tokenizer's eos_token plus generation_config / config's (vLLM stops on both);
     * duplicates and ids outside the vocabulary are dropped */
    int cand[MODEL_MAX_EOS + 1], nc = 0;
    if (e->tok) cand[nc++] = tok_eos_id(e->tok);
    for (int i = 0; i < e->cfg->num_eos && nc < MODEL_MAX_EOS + 1; i++) cand[nc++] = e->cfg->eos_token_ids[i];
    for (int i = 0; i < nc; i++) {
        bool dup = false;
        for (int j = 0; j < e->num_eos; j++) dup |= e->eos_ids[j] == cand[i];
        if (!dup && cand[i] >= 0 && cand[i] < e->cfg->vocab_size) e->eos_ids[e->num_eos++] = cand[i];
    }

    int num_blocks = 0;
    if ((st = plan_cache(e, &num_blocks))) goto fail;
    if ((st = model_cache_create(e->model, num_blocks, e->opt.block_size, &e->cache))) goto fail;
    sched_config sc = {
        .max_num_seqs = e->opt.max_num_seqs,
        .max_num_batched_tokens = e->opt.max_num_batched_tokens,
        .block_size = e->opt.block_size,
        .max_blocks_per_seq = (e->max_model_len + e->opt.block_size - 1) / e->opt.block_size,
    };
    if ((st = sched_init(&e->sched, &sc, num_blocks))) goto fail;
    e->logits_host = malloc((size_t)e->opt.max_num_seqs * (size_t)e->cfg->vocab_size * sizeof(float));
    if (!e->logits_host) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory (logits)");
        goto fail;
    }
    e->next_seed = e->opt.seed;
    LOG_I("KV cache: %d blocks of %d tokens (%.1f MiB), max_model_len %d", num_blocks, e->opt.block_size,
          (double)e->cache->bytes / (1 << 20), e->max_model_len);
    *out = e;
    return VLLM_OK;
fail:
    vllm_engine_free(e);
    return st;
}

void vllm_engine_free(vllm_engine *e) {
    if (!e) return;
    sched_destroy(&e->sched);
    sampler_scratch_free(&e->scratch);
    free(e->logits_host);
    if (e->model) model_cache_free(e->model, e->cache);
    model_free(e->model);
    tok_free(e->tok);
    backend_free(e->be);
    free(e);
}

bool vllm_engine_has_tokenizer(const vllm_engine *e) { return e && e->tok; }

vllm_status vllm_tokenize(vllm_engine *e, const char *text, bool add_special, int32_t **ids, size_t *n) {
    if (!e->tok) return vt_error(VLLM_ERR_UNSUPPORTED, "the model folder has no tokenizer.json");
    return tok_encode(e->tok, text, strlen(text), add_special, ids, n);
}

vllm_status vllm_detokenize(vllm_engine *e, const int32_t *ids, size_t n, bool skip_special, char **text) {
    if (!e->tok) return vt_error(VLLM_ERR_UNSUPPORTED, "the model folder has no tokenizer.json");
    return tok_decode(e->tok, ids, n, skip_special, text);
}

static void request_free(request *r) {
    if (!r) return;
    free(r->tokens);
    free(r->logprobs);
    free(r->blocks);
}

/* Builds request i from its prompt: tokenizes text, validates lengths. */
static vllm_status request_init(vllm_engine *e, request *r, size_t i, const vllm_prompt *p,
                                const vllm_sampling_params *sp) {
    memset(r, 0, sizeof *r);
    r->index = i;
    r->params = *sp;
    vllm_status st = vllm_sampling_params_validate(sp);
    if (st != VLLM_OK) {
        vt_error_prefix("prompt %zu", i);
        return st;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (p->text && !p->token_ids) {
        if ((st = vllm_tokenize(e, p->text, true, &ids, &n))) {
            vt_error_prefix("prompt %zu", i);
            return st;
        }
    } else {
        n = p->num_token_ids;
        if (n > 0 && !p->token_ids) return vt_error(VLLM_ERR_INVALID_ARG, "prompt %zu: token_ids is NULL", i);
    }
    const int32_t *src = ids ? ids : p->token_ids;
    for (size_t j = 0; j < n; j++)
        if (src[j] < 0 || src[j] >= e->cfg->vocab_size) {
            st = vt_error(VLLM_ERR_INVALID_ARG, "prompt %zu: token id %d out of range [0, %d)", i, src[j],
                          e->cfg->vocab_size);
            free(ids);
            return st;
        }
    if (n == 0) {
        free(ids);
        return vt_error(VLLM_ERR_INVALID_ARG, "prompt %zu is empty", i);
    }
    if (n >= (size_t)e->max_model_len) {
        free(ids);
        return vt_error(VLLM_ERR_TOO_LONG, "prompt %zu has %zu tokens; max_model_len is %d", i, n, e->max_model_len);
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
    return VLLM_OK;
}

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
    if (mask_eos)
        for (int i = 0; i < e->num_eos; i++) {
            saved[i] = row[e->eos_ids[i]];
            row[e->eos_ids[i]] = -INFINITY;
        }
    for (int i = 0; i < V; i++)
        if (isnan(row[i])) {
            vt_error(VLLM_ERR_BACKEND, "request %zu: the model produced NaN logits", r->index);
            return -1;
        }
    int32_t t = sampler_sample(row, V, &r->params, &r->rng, &e->scratch);
    if (mask_eos)
        for (int i = 0; i < e->num_eos; i++) row[e->eos_ids[i]] = saved[i];
    if (t < 0) return -1;
    r->logprobs[generated] = (float)sampler_logprob(row, V, t);
    r->tokens[r->num_tokens++] = t;
    generated++;
    if (!r->params.ignore_eos && is_eos(e, t)) r->finish = VLLM_FINISH_STOP;
    else if (generated >= r->params.max_tokens || r->num_tokens >= e->max_model_len) r->finish = VLLM_FINISH_LENGTH;
    return t;
}

/* The completion's text as it continues the prompt's: decode(prompt +
 * generated) minus decode(prompt), which keeps the space a SentencePiece
 * "▁word" token carries after a prompt (what vLLM's incremental detokenizer
 * yields); decode(generated) alone when the two do not line up (a character
 * split between prompt and completion). */
static vllm_status decode_continuation(vllm_engine *e, request *r, vllm_completion *c) {
    bool skip = r->params.skip_special_tokens;
    char *full = NULL, *pre = NULL;
    /* no clean_up_tokenization_spaces: vLLM's detokenizer never applies it */
    vllm_status st = tok_decode_ex(e->tok, r->tokens, (size_t)r->num_tokens, skip, false, &full, NULL);
    if (st == VLLM_OK) st = tok_decode_ex(e->tok, r->tokens, (size_t)r->num_prompt, skip, false, &pre, NULL);
    if (st == VLLM_OK && !strncmp(full, pre, strlen(pre))) {
        size_t n = strlen(pre);
        memmove(full, full + n, strlen(full) - n + 1);
        c->text = full;
        full = NULL;
    } else if (st == VLLM_OK) {
        st = tok_decode_ex(e->tok, c->token_ids, c->num_tokens, skip, false, &c->text, NULL);
    }
    free(full);
    free(pre);
    return st;
}

static vllm_status fill_completion(vllm_engine *e, request *r, vllm_completion *c) {
    size_t ng = (size_t)(r->num_tokens - r->num_prompt);
    c->num_prompt_tokens = (size_t)r->num_prompt;
    c->num_tokens = ng;
    c->finish_reason = r->finish;
    c->prompt_token_ids = malloc(((size_t)r->num_prompt) * sizeof(int32_t));
    c->token_ids = malloc((ng + 1) * sizeof(int32_t));
    c->logprobs = malloc((ng + 1) * sizeof(float));
    if (!c->prompt_token_ids || !c->token_ids || !c->logprobs) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    memcpy(c->prompt_token_ids, r->tokens, (size_t)r->num_prompt * sizeof(int32_t));
    memcpy(c->token_ids, r->tokens + r->num_prompt, ng * sizeof(int32_t));
    memcpy(c->logprobs, r->logprobs, ng * sizeof(float));
    if (e->tok) return decode_continuation(e, r, c);
    return VLLM_OK;
}

void vllm_completions_free(vllm_completion *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        free(c[i].prompt_token_ids);
        free(c[i].token_ids);
        free(c[i].logprobs);
        free(c[i].text);
    }
    free(c);
}

/* Runs steps until every request finished. */
static vllm_status run_loop(vllm_engine *e, vllm_generate_stats *stats) {
    int V = e->cfg->vocab_size;
    size_t preempt0 = e->sched.num_preemptions;
    while (sched_has_work(&e->sched)) {
        fwd_batch b;
        vllm_status st = sched_step(&e->sched, &b);
        if (st != VLLM_OK) return st;
        if (b.num_tokens == 0) return vt_error(VLLM_ERR_INTERNAL, "scheduler made no progress");
        double t0 = progress_now();
        const tensor *logits;
        if ((st = model_forward(e->model, e->cache, &b, &logits))) return st;
        if (b.num_logits > 0 &&
            (st = e->be->ops->download(e->be, e->logits_host, logits, (size_t)b.num_logits * (size_t)V * sizeof(float))))
            return st;
        bool prefill = false;
        for (int i = 0; i < e->sched.num_step; i++)
            if (e->sched.step_reqs[i]->num_computed < e->sched.step_reqs[i]->num_prompt) prefill = true;
        sched_commit(&e->sched);
        int row = 0;
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if (!sched_is_sampled(&e->sched, i)) continue;
            if (sample_one(e, r, e->logits_host + (size_t)row * V) < 0) return VLLM_ERR_BACKEND;
            row++;
        }
        for (int i = 0; i < e->sched.num_step; i++) {
            request *r = e->sched.step_reqs[i];
            if (r->finish != VLLM_FINISH_NONE && r->state == REQ_RUNNING) sched_finish(&e->sched, r);
        }
        double dt = progress_now() - t0;
        if (stats) {
            stats->steps++;
            stats->generated_tokens += (size_t)b.num_logits;
            if (prefill) stats->prefill_seconds += dt;
            else stats->decode_seconds += dt;
            stats->preemptions = e->sched.num_preemptions - preempt0;
        }
    }
    return VLLM_OK;
}

vllm_status vllm_generate(vllm_engine *e, const vllm_prompt *prompts, size_t num, const vllm_sampling_params *params,
                          bool per_prompt, vllm_completion **out, vllm_generate_stats *stats) {
    *out = NULL;
    if (stats) memset(stats, 0, sizeof *stats);
    if (num == 0) return vt_error(VLLM_ERR_INVALID_ARG, "no prompts");
    vllm_sampling_params defaults = vllm_sampling_default_params();
    request *reqs = calloc(num, sizeof *reqs);
    vllm_completion *comp = calloc(num, sizeof *comp);
    vllm_status st = VLLM_OK;
    if (!reqs || !comp) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < num; i++) {
        const vllm_sampling_params *sp = params ? (per_prompt ? &params[i] : params) : &defaults;
        if ((st = request_init(e, &reqs[i], i, &prompts[i], sp))) goto done;
        if (stats) stats->prompt_tokens += (size_t)reqs[i].num_prompt;
    }
    for (size_t i = 0; i < num; i++)
        if ((st = sched_add(&e->sched, &reqs[i]))) goto done;
    if ((st = run_loop(e, stats))) goto done;
    for (size_t i = 0; i < num; i++)
        if ((st = fill_completion(e, &reqs[i], &comp[i]))) goto done;
done:
    if (st != VLLM_OK) {
        /* drop whatever is still queued so the engine stays usable */
        sched_reset(&e->sched);
        vllm_completions_free(comp, num);
        comp = NULL;
    }
    for (size_t i = 0; reqs && i < num; i++) request_free(&reqs[i]);
    free(reqs);
    *out = comp;
    return st;
}
