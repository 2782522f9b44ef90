/*
 * engine_pooling.c: the pooling runner (vLLM's --runner pooling with the embed task):
 * choosing the runner and the pooler at create, pooling requests (prompt only, never
 * sampled), the per-step pooling of the forward's final-normed hidden rows, the
 * embedding head, and vllm_embed, the offline batch.
 *
 * vLLM followed:
 *  - runner: vllm/config/model.py _get_default_runner_type (a sentence-transformers
 *    Pooling module -> pooling; a supported architecture by what it is; else the
 *    name's suffix: *Model -> pooling, --convert embed) and the registry's
 *    _normalize_arch (Qwen3Model runs as Qwen3ForCausalLM without its LM head:
 *    model_executor/models/adapters.py as_embedding_model);
 *  - pooler: _init_pooler_config (--pooler-config over the sentence-transformers
 *    config over the model's default: LAST for converted causal LMs) and
 *    PoolingParams (normalize / use_activation: the pooler config's, else true);
 *  - prefix caching off with MEAN / CLS pooling (ModelConfig.is_prefix_caching_supported:
 *    a cached prefix would skip rows they read); vLLM also turns chunked prefill off for
 *    them, here a chunk's rows are summed on the host in double across steps instead,
 *    which gives the same mean (up to summation order);
 *  - pooling: layers/pooler/seqwise/methods.py (CLSPool, LastPool, MeanPool in float32),
 *    heads.py EmbeddingPoolerHead (dimensions, then normalisation), pooling_params.py
 *    (the Matryoshka checks), the embedding input limit (a prompt may fill max_model_len:
 *    "This model's maximum context length is N tokens. However, you requested M tokens in
 *    the input for embedding generation. Please reduce the length of the input.").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine_internal.h"
#include "engine/pooling.h"

static const char *pool_name(vllm_pooling_type t) {
    return t == VLLM_POOLING_MEAN ? "MEAN" : t == VLLM_POOLING_CLS ? "CLS" : "LAST";
}

vllm_pooling_params vllm_pooling_default_params(void) {
    vllm_pooling_params p;
    memset(&p, 0, sizeof p);
    return p;
}

vllm_status engine_pooling_resolve(vllm_engine *e, const char *model_dir) {
    pooling_config *pc = &e->pool_cfg;
    vllm_status st = pooling_config_load(model_dir, pc);
    if (st != VLLM_OK && e->opt.runner != VLLM_RUNNER_GENERATE) return st;
    if (st != VLLM_OK) { /* generation reads none of it */
        vt_error_clear();
        memset(pc, 0, sizeof *pc);
    }
    if (!(e->model_name = strdup(model_dir))) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    const bool named_pooling = pc->architecture[0] && model_arch_default_pooling(pc->architecture);
    vllm_runner runner = e->opt.runner;
    if (runner == VLLM_RUNNER_AUTO) {
        runner = pc->found || named_pooling ? VLLM_RUNNER_POOLING : VLLM_RUNNER_GENERATE;
        if (runner == VLLM_RUNNER_POOLING)
            LOG_I("resolved runner auto to pooling (%s)",
                  pc->found ? "the folder has a sentence-transformers Pooling module"
                            : "architectures[0] names a model without an LM head");
    } else if (runner == VLLM_RUNNER_GENERATE && named_pooling) {
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s has no LM head to generate with: run it with runner pooling "
                        "(--runner pooling)", model_dir, pc->architecture);
    }
    e->pooling = runner == VLLM_RUNNER_POOLING;
    if (!e->pooling) return VLLM_OK;
    /* --pooler-config over the sentence-transformers config over the model's default (LAST, normalised) */
    e->pool_type = e->opt.pooling_type != VLLM_POOLING_AUTO ? e->opt.pooling_type
                   : pc->found && pc->type != VLLM_POOLING_AUTO ? pc->type
                                                               : VLLM_POOLING_LAST;
    e->pool_normalize = e->opt.pooler_normalize != 0 ? e->opt.pooler_normalize > 0 : pc->found ? pc->normalize : true;
    if (pc->is_matryoshka && !e->pool_normalize)
        LOG_W("a Matryoshka model's embeddings are not normalised by default (vLLM requires normalize for them)");
    LOG_I("pooling runner (embed): %s pooling of the final-normed hidden states, %s by default%s",
          pool_name(e->pool_type), e->pool_normalize ? "L2-normalised" : "not normalised",
          pc->is_matryoshka ? ", Matryoshka dimensions allowed" : "");
    if (e->pool_type != VLLM_POOLING_LAST && e->opt.enable_prefix_caching) {
        LOG_I("prefix caching is off: %s pooling reads rows a cached prefix would skip (as vLLM)",
              pool_name(e->pool_type));
        e->opt.enable_prefix_caching = false;
    }
    return VLLM_OK;
}

/* The request's prompt ids (tokenized with special tokens when text), checked: ids in range, not empty, at
 * most max_model_len tokens (an embedding may fill the context: no output follows). */
static vllm_status pooling_request_init(vllm_engine *e, ereq *q, const char *id, const vllm_prompt *p,
                                        const vllm_pooling_params *pp) {
    request *r = &q->r;
    q->pooling = true;
    q->pool_params = *pp;
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    if (pp->dimensions != 0 && pool_check_dimensions(&info, pp->dimensions, e->model_name) != VLLM_OK) {
        vt_error_prefix("request %s", id);
        return VLLM_ERR_INVALID_ARG;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    vllm_status st;
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
    st = VLLM_OK;
    for (size_t j = 0; j < n && st == VLLM_OK; j++)
        if (src[j] < 0 || src[j] >= e->cfg->vocab_size)
            st = vt_error(VLLM_ERR_INVALID_ARG, "request %s: token id %d out of range [0, %d)", id, src[j],
                          e->cfg->vocab_size);
    if (st == VLLM_OK && n == 0) st = vt_error(VLLM_ERR_INVALID_ARG, "request %s: the prompt is empty", id);
    if (st == VLLM_OK && n > (size_t)e->max_model_len)
        st = vt_error(VLLM_ERR_TOO_LONG,
                      "This model's maximum context length is %d tokens. However, you requested %zu tokens in the "
                      "input for embedding generation. Please reduce the length of the input.",
                      e->max_model_len, n);
    if (st == VLLM_OK) {
        r->params = vllm_sampling_default_params(); /* never sampled; prompt_logprobs -1 lets it read the cache */
        r->params.max_tokens = 0;
        r->cap_tokens = r->num_prompt = r->num_tokens = (int)n;
        r->tokens = malloc(n * sizeof *r->tokens);
        r->logprobs = malloc(sizeof *r->logprobs);
        r->blocks = malloc(sched_blocks_per_request(&e->sched) * sizeof *r->blocks);
        q->pool_acc = calloc((size_t)e->cfg->hidden_size, sizeof *q->pool_acc);
        if (!r->tokens || !r->logprobs || !r->blocks || !q->pool_acc)
            st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        else
            memcpy(r->tokens, src, n * sizeof *r->tokens);
    }
    free(ids);
    return st;
}

vllm_status vllm_engine_add_pooling_request(vllm_engine *e, const char *id, const vllm_prompt *p,
                                            const vllm_pooling_params *params) {
    if (!id || !*id) return vt_error(VLLM_ERR_INVALID_ARG, "request id missing");
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "request %s: no prompt", id);
    if (!e->pooling)
        return vt_error(VLLM_ERR_UNSUPPORTED, "request %s: the engine runs the generate runner: embeddings need the "
                        "pooling runner (runner pooling, --runner pooling)", id);
    if (engine_find(e, id)) return vt_error(VLLM_ERR_INVALID_ARG, "request id '%s' is already in use", id);
    vllm_pooling_params defaults = vllm_pooling_default_params();
    vllm_status st = engine_reqs_reserve(e, 1);
    if (st != VLLM_OK) return st;
    ereq *q = calloc(1, sizeof *q);
    if (!q || !(q->id = strdup(id))) {
        free(q);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    if ((st = pooling_request_init(e, q, id, p, params ? params : &defaults)) || (st = sched_add(&e->sched, &q->r))) {
        ereq_free(q);
        return st;
    }
    q->r.index = e->num_reqs;
    e->reqs[e->num_reqs++] = q;
    return VLLM_OK;
}

vllm_status engine_pooling_rows(vllm_engine *e, const sched_output *so, const tensor *out) {
    const input_builder *ib = &e->ib;
    const int D = e->cfg->hidden_size, N = ib->num_pool_rows;
    if (N == 0) return VLLM_OK;
    if (out->ndim != 2 || out->shape[0] != N || out->shape[1] != D)
        return vt_error(VLLM_ERR_INTERNAL, "pooling: the forward returned %lld x %lld hidden rows, %d x %d expected",
                        (long long)out->shape[0], (long long)(out->ndim > 1 ? out->shape[1] : 0), N, D);
    const size_t row = (size_t)D * dtype_size(out->dtype), bytes = (size_t)N * row;
    if (bytes > e->pool_rows_cap) {
        unsigned char *b = realloc(e->pool_rows, bytes);
        if (!b) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (pooling rows)");
        e->pool_rows = b;
        e->pool_rows_cap = bytes;
    }
    vllm_status st = e->be->ops->download(e->be, e->pool_rows, out, bytes);
    if (st != VLLM_OK) return st;
    int k = 0;
    for (int i = 0; i < so->num_reqs; i++) {
        ereq *q = (ereq *)so->reqs[i];
        for (int j = 0; j < ib->pool_count[i]; j++, k++) {
            const unsigned char *src = e->pool_rows + (size_t)k * row;
            /* MEAN: a chunk starting at position 0 starts the sum (again, after a preemption) */
            if (e->pool_type == VLLM_POOLING_MEAN && ib->pool_from[i] + j > 0)
                pool_add_row(q->pool_acc, src, out->dtype, D);
            else
                pool_set_row(q->pool_acc, src, out->dtype, D);
        }
    }
    return VLLM_OK;
}

vllm_status engine_pooling_finish(vllm_engine *e, const sched_output *so) {
    const int D = e->cfg->hidden_size;
    for (int i = 0; i < so->num_reqs; i++) {
        ereq *q = (ereq *)so->reqs[i];
        request *r = &q->r;
        if (!q->pooling || r->num_computed < r->num_prompt || q->embedding) continue;
        const vllm_pooling_params *pp = &q->pool_params;
        size_t dim = pool_embedding_dim(D, pp->dimensions);
        if (!(q->embedding = malloc(dim * sizeof *q->embedding)))
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (embedding)");
        bool normalize = pp->normalize != 0 ? pp->normalize > 0 : e->pool_normalize;
        double count = e->pool_type == VLLM_POOLING_MEAN ? (double)r->num_prompt : 1.0;
        q->embedding_dim = pool_finish(q->pool_acc, D, count, pp->dimensions, normalize, q->embedding);
        r->finish = VLLM_FINISH_STOP; /* vLLM: a pooled request finishes as FINISHED_STOPPED */
    }
    return VLLM_OK;
}

void vllm_embeddings_free(vllm_embedding *emb, size_t n) {
    if (!emb) return;
    for (size_t i = 0; i < n; i++) free(emb[i].data);
    free(emb);
}

vllm_status vllm_embed(vllm_engine *e, const vllm_prompt *prompts, size_t num, const vllm_pooling_params *params,
                       vllm_embedding **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_embed: out missing");
    *out = NULL;
    if (!e || (num > 0 && !prompts)) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_embed: engine or prompts missing");
    if (num == 0) return vt_error(VLLM_ERR_INVALID_ARG, "no prompts");
    if (vllm_engine_has_unfinished(e))
        return vt_error(VLLM_ERR_INVALID_ARG, "vllm_embed: the engine has unfinished requests");
    vllm_embedding *emb = calloc(num, sizeof *emb);
    if (!emb) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    vllm_status st = VLLM_OK;
    char id[64];
    for (size_t i = 0; i < num && st == VLLM_OK; i++) {
        snprintf(id, sizeof id, "embed-%zu", i);
        if ((st = vllm_engine_add_pooling_request(e, id, &prompts[i], params))) vt_error_prefix("prompt %zu", i);
    }
    size_t finished = 0;
    while (st == VLLM_OK && finished < num) {
        const vllm_request_output *o;
        size_t n;
        if ((st = vllm_engine_step(e, &o, &n))) break;
        for (size_t k = 0; k < n && st == VLLM_OK; k++) {
            if (o[k].finish_reason == VLLM_FINISH_NONE) continue;
            size_t i = (size_t)strtoull(o[k].request_id + strlen("embed-"), NULL, 10);
            if (strncmp(o[k].request_id, "embed-", 6) || i >= num || emb[i].data || !o[k].embedding) {
                st = vt_error(VLLM_ERR_INTERNAL, "vllm_embed: request %s ended without its embedding (%s)",
                              o[k].request_id, vllm_finish_reason_str(o[k].finish_reason));
                break;
            }
            if (!(emb[i].data = malloc(o[k].embedding_dim * sizeof *emb[i].data))) {
                st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
                break;
            }
            memcpy(emb[i].data, o[k].embedding, o[k].embedding_dim * sizeof *emb[i].data);
            emb[i].dim = o[k].embedding_dim;
            emb[i].num_prompt_tokens = o[k].prompt_tokens;
            finished++;
        }
    }
    if (st != VLLM_OK) {
        vllm_status keep = st;
        engine_drop_all(e); /* the engine stays usable */
        vllm_embeddings_free(emb, num);
        return keep;
    }
    *out = emb;
    return VLLM_OK;
}
