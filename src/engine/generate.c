/*
 * generate.c: vllm_generate, the offline batch of vllm.h, on top of the
 * request-level engine: add every prompt, step until all finish, collect
 * each completion in input order (with n > 1, samples 1 .. n-1 of a prompt
 * in its siblings).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_internal.h"

void vllm_completions_free(vllm_completion *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        free(c[i].prompt_token_ids);
        free(c[i].token_ids);
        free(c[i].logprobs);
        free(c[i].text);
        free(c[i].stop_reason);
        free(c[i].top_logprob_ids);
        free(c[i].top_logprobs);
        free(c[i].prompt_logprobs);
        free(c[i].prompt_top_logprob_ids);
        free(c[i].prompt_top_logprobs);
        vllm_completions_free(c[i].siblings, c[i].num_siblings);
    }
    free(c);
}

/* Copies a finished request into its completion. */
static vllm_status fill_completion(const vllm_engine *e, const ereq *q, vllm_completion *c) {
    const request *r = &q->r;
    size_t ng = (size_t)(r->num_tokens - r->num_prompt);
    c->index = q->index;
    c->num_prompt_tokens = (size_t)r->num_prompt;
    c->num_tokens = ng;
    c->finish_reason = r->finish;
    c->prompt_token_ids = malloc((size_t)r->num_prompt * sizeof(int32_t));
    c->token_ids = malloc((ng + 1) * sizeof(int32_t));
    c->logprobs = malloc((ng + 1) * sizeof(float));
    if (!c->prompt_token_ids || !c->token_ids || !c->logprobs) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    memcpy(c->prompt_token_ids, r->tokens, (size_t)r->num_prompt * sizeof(int32_t));
    memcpy(c->token_ids, r->tokens + r->num_prompt, ng * sizeof(int32_t));
    memcpy(c->logprobs, r->logprobs, ng * sizeof(float));
    int k = r->params.logprobs;
    if (k > 0) {
        c->num_top_logprobs = k;
        c->top_logprob_ids = malloc((ng + 1) * (size_t)k * sizeof(int32_t));
        c->top_logprobs = malloc((ng + 1) * (size_t)k * sizeof(float));
        if (!c->top_logprob_ids || !c->top_logprobs) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        memcpy(c->top_logprob_ids, q->top_ids, ng * (size_t)k * sizeof(int32_t));
        memcpy(c->top_logprobs, q->top_lps, ng * (size_t)k * sizeof(float));
    }
    if (q->prompt_lps) {
        size_t np = (size_t)r->num_prompt;
        int pk = r->params.prompt_logprobs;
        if (!(c->prompt_logprobs = malloc(np * sizeof(float)))) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        memcpy(c->prompt_logprobs, q->prompt_lps, np * sizeof(float));
        if (pk > 0) {
            c->num_prompt_top_logprobs = pk;
            c->prompt_top_logprob_ids = malloc(np * (size_t)pk * sizeof(int32_t));
            c->prompt_top_logprobs = malloc(np * (size_t)pk * sizeof(float));
            if (!c->prompt_top_logprob_ids || !c->prompt_top_logprobs)
                return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
            memcpy(c->prompt_top_logprob_ids, q->prompt_top_ids, np * (size_t)pk * sizeof(int32_t));
            memcpy(c->prompt_top_logprobs, q->prompt_top_lps, np * (size_t)pk * sizeof(float));
        }
    }
    if (q->stop_reason && !(c->stop_reason = strdup(q->stop_reason)))
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    if (e->tok) {
        c->text = malloc(q->text_len + 1);
        if (!c->text) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        memcpy(c->text, q->text ? q->text : "", q->text_len);
        c->text[q->text_len] = '\0';
    }
    return VLLM_OK;
}

vllm_status vllm_generate(vllm_engine *e, const vllm_prompt *prompts, size_t num, const vllm_sampling_params *params,
                          bool per_prompt, vllm_completion **out, vllm_generate_stats *stats) {
    *out = NULL;
    if (stats) memset(stats, 0, sizeof *stats);
    if (num == 0) return vt_error(VLLM_ERR_INVALID_ARG, "no prompts");
    if (vllm_engine_has_unfinished(e))
        return vt_error(VLLM_ERR_INVALID_ARG, "vllm_generate: the engine has unfinished requests");
    vllm_completion *comp = calloc(num, sizeof *comp);
    if (!comp) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    engine_counters c0 = e->counters;
    size_t preempt0 = e->sched.num_preemptions, total = 0, finished = 0;
    vllm_status st = VLLM_OK;
    char id[64];
    for (size_t i = 0; i < num && st == VLLM_OK; i++) {
        snprintf(id, sizeof id, "generate-%zu", i);
        const vllm_sampling_params *sp = params ? (per_prompt ? &params[i] : params) : NULL;
        st = vllm_engine_add_request(e, id, &prompts[i], sp);
        if (st != VLLM_OK) {
            vt_error_prefix("prompt %zu", i);
            break;
        }
        size_t n = sp ? (size_t)sp->n : 1;
        total += n;
        if (n > 1) {
            if (!(comp[i].siblings = calloc(n - 1, sizeof *comp[i].siblings)))
                st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
            else
                comp[i].num_siblings = n - 1;
        }
    }
    while (st == VLLM_OK && finished < total) {
        const vllm_request_output *o;
        size_t n;
        if ((st = vllm_engine_step(e, &o, &n))) break;
        for (size_t k = 0; k < n && st == VLLM_OK; k++) {
            if (o[k].finish_reason == VLLM_FINISH_NONE) continue;
            const ereq *q = e->out_reqs[k];
            bool ours = !strncmp(o[k].request_id, "generate-", strlen("generate-"));
            size_t i = ours ? (size_t)strtoull(o[k].request_id + strlen("generate-"), NULL, 10) : num;
            if (i >= num || q->index > comp[i].num_siblings) {
                st = vt_error(VLLM_ERR_INTERNAL, "vllm_generate: lost request %s", o[k].request_id);
                break;
            }
            st = fill_completion(e, q, q->index ? &comp[i].siblings[q->index - 1] : &comp[i]);
            finished++;
        }
    }
    if (st != VLLM_OK) {
        /* drop every request so the engine stays usable */
        vllm_status keep = st;
        engine_drop_all(e);
        vllm_completions_free(comp, num);
        return keep;
    }
    if (stats) {
        stats->steps = e->counters.steps - c0.steps;
        stats->generated_tokens = e->counters.sampled_tokens - c0.sampled_tokens;
        stats->prefill_seconds = e->counters.prefill_seconds - c0.prefill_seconds;
        stats->decode_seconds = e->counters.decode_seconds - c0.decode_seconds;
        stats->structured_masks = e->counters.so_masks - c0.so_masks;
        stats->structured_mask_seconds = e->counters.so_mask_seconds - c0.so_mask_seconds;
        stats->structured_advance_seconds = e->counters.so_advance_seconds - c0.so_advance_seconds;
        uint32_t h[ENGINE_MASK_HIST];
        for (int b = 0; b < ENGINE_MASK_HIST; b++) h[b] = e->counters.so_mask_hist[b] - c0.so_mask_hist[b];
        stats->structured_mask_p50_us = engine_hist_quantile(h, 0.5);
        stats->structured_mask_p99_us = engine_hist_quantile(h, 0.99);
        stats->preemptions = e->sched.num_preemptions - preempt0;
        for (size_t i = 0; i < num; i++) stats->prompt_tokens += comp[i].num_prompt_tokens;
    }
    *out = comp;
    return VLLM_OK;
}
