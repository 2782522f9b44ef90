/*
 * engine.c: vllm_engine: creating the backend, model, KV cache, tokenizer,
 * scheduler and input builder together; options, sampling defaults and validation;
 * tokenizer access. Requests and steps are in engine_step.c, the offline
 * batch in generate.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/meminfo.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/engine_internal.h"
#include "hub/hub.h"
#include "structured/so_spec.h"
#include "sample/logits_proc.h"
#include "loader/gguf.h"
#include "dist/tpg_group.h"
#include "dist/tpn_link.h"
#include "loader/gguf_config.h"


vllm_engine_options vllm_engine_default_options(void) {
    vllm_engine_options o;
    memset(&o, 0, sizeof o);
    o.device = "cpu";
    o.num_threads = 0;
    o.block_size = 16;
    o.num_kv_blocks = 0;
    o.kv_cache_memory = 0;
    o.gpu_memory_utilization = 0.9f;
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
    vllm_status st = sampler_validate(p, 0); /* token ranges are checked per engine at add_request */
    if (st != VLLM_OK) return st;
    /* vLLM has no bound; each sample is a request here, so bound the memory a bad n can ask for */
    enum { max_n = 4096 };
    if (p->n > max_n) return vt_error(VLLM_ERR_INVALID_ARG, "n must be at most %d, got %d.", max_n, p->n);
    if ((st = so_spec_validate(&p->structured_outputs)) != VLLM_OK) return st;
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

/* "auto" (or NULL) -> def; "float32" / "bfloat16" / "float16" (vLLM's names, "bf16" / "fp16" too); false
 * for anything else. */
static bool state_dtype_of(const char *s, dtype def, dtype *out) {
    if (!s || !strcmp(s, "auto")) *out = def;
    else if (!strcmp(s, "float32") || !strcmp(s, "float")) *out = DTYPE_F32;
    else if (!strcmp(s, "bfloat16") || !strcmp(s, "bf16")) *out = DTYPE_BF16;
    else if (!strcmp(s, "float16") || !strcmp(s, "half") || !strcmp(s, "fp16")) *out = DTYPE_F16;
    else return false;
    return true;
}

static vllm_status check_options(const vllm_engine_options *o) {
    if (o->block_size < 1 || o->block_size > 1024)
        return vt_error(VLLM_ERR_INVALID_ARG, "block_size must be in [1, 1024], got %d", o->block_size);
    if (o->max_num_seqs < 1) return vt_error(VLLM_ERR_INVALID_ARG, "max_num_seqs must be positive");
    if (o->max_num_batched_tokens < 1) return vt_error(VLLM_ERR_INVALID_ARG, "max_num_batched_tokens must be positive");
    if (!(o->gpu_memory_utilization > 0.0f && o->gpu_memory_utilization <= 1.0f))
        return vt_error(VLLM_ERR_INVALID_ARG, "gpu_memory_utilization must be in (0, 1], got %g",
                        (double)o->gpu_memory_utilization);
    if ((unsigned)o->runner > VLLM_RUNNER_POOLING || (unsigned)o->pooling_type > VLLM_POOLING_CLS)
        return vt_error(VLLM_ERR_INVALID_ARG, "runner %d / pooling_type %d: not a vllm_runner / vllm_pooling_type",
                        (int)o->runner, (int)o->pooling_type);
    if (o->num_kv_blocks < 0 || o->max_model_len < 0 || o->num_threads < 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "num_kv_blocks, max_model_len and num_threads must not be negative");
    if (o->data_parallel_size < 0 || o->data_parallel_size > ENGINE_MAX_DP)
        return vt_error(VLLM_ERR_INVALID_ARG, "data_parallel_size %d: 1 to %d", o->data_parallel_size, ENGINE_MAX_DP);
    if (o->tensor_parallel_size < 0 || o->tensor_parallel_size > TPG_MAX_RANKS)
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor_parallel_size %d: 1 to %d", o->tensor_parallel_size,
                        TPG_MAX_RANKS);
    if (o->nnodes < 0 || o->nnodes > TPN_MAX_NODES || o->master_port < 0 || o->master_port > 65535)
        return vt_error(VLLM_ERR_INVALID_ARG, "nnodes %d / master_port %d: 1 to %d nodes, ports 1 to 65535", o->nnodes,
                        o->master_port, TPN_MAX_NODES);
    const int nn = o->nnodes > 1 ? o->nnodes : 1, tp = o->tensor_parallel_size > 1 ? o->tensor_parallel_size : 1;
    if (o->node_rank < 0 || o->node_rank >= nn)
        return vt_error(VLLM_ERR_INVALID_ARG, "node_rank %d of %d node(s): 0 to %d", o->node_rank, nn, nn - 1);
    if (nn > 1 && tp % nn)
        return vt_error(VLLM_ERR_INVALID_ARG, "nnodes %d: tensor_parallel_size %d must be a multiple of it (each node "
                        "takes an equal share of the ranks)", nn, tp);
    if (nn > 1 && o->data_parallel_size > 1)
        return vt_error(VLLM_ERR_UNSUPPORTED, "nnodes %d with data_parallel_size %d: replicas over several hosts are "
                        "not supported yet", nn, o->data_parallel_size);
    dtype d;
    if (!state_dtype_of(o->mamba_cache_dtype, DTYPE_F32, &d) || !state_dtype_of(o->mamba_ssm_cache_dtype, DTYPE_F32, &d))
        return vt_error(VLLM_ERR_INVALID_ARG, "mamba_cache_dtype / mamba_ssm_cache_dtype '%.32s' / '%.32s': auto, "
                        "float32, bfloat16 or float16", o->mamba_cache_dtype ? o->mamba_cache_dtype : "auto",
                        o->mamba_ssm_cache_dtype ? o->mamba_ssm_cache_dtype : "auto");
    const char *kd = o->kv_cache_dtype;
    if (kd && strcmp(kd, "auto") && strcmp(kd, "fp8") && strcmp(kd, "fp8_e4m3"))
        return vt_error(!strcmp(kd, "fp8_e5m2") ? VLLM_ERR_UNSUPPORTED : VLLM_ERR_INVALID_ARG,
                        "kv_cache_dtype '%.32s': auto, fp8 or fp8_e4m3 (fp8_e5m2 is not supported)", kd);
    return VLLM_OK;
}

/* The hybrid models' state pool dtypes (vLLM's mamba_cache_dtype / mamba_ssm_cache_dtype): "auto" follows
 * the model's activations as the backend runs them (BF16 on a GPU, F32 on the CPU); the recurrent
 * state's "auto" follows the conv's. */
static void state_dtypes(const vllm_engine *e, dtype *conv, dtype *ssm) {
    state_dtype_of(e->opt.mamba_cache_dtype, e->be->act_dtype, conv);
    state_dtype_of(e->opt.mamba_ssm_cache_dtype, *conv, ssm);
}

/* Device memory kept out of the KV cache for cuBLAS workspaces, CUDA graphs
 * and the sampler's buffers. */
#define ENGINE_DEVICE_RESERVE ((size_t)512 << 20)

/* The KV cache budget when kv_cache_memory is 0: 2 GiB on host memory; on a
 * device, what gpu_memory_utilization leaves once the weights and the
 * largest step's activations are allocated (vLLM's determine_available_memory:
 * total * utilization - memory in use). */
static vllm_status kv_budget(vllm_engine *e, size_t *bytes) {
    const vllm_engine_options *o = &e->opt;
    *bytes = o->kv_cache_memory;
    if (*bytes) return VLLM_OK;
    if (!e->be->ops->mem_info) {
        *bytes = (size_t)2 << 30;
        return VLLM_OK;
    }
    int max_blocks = (e->max_model_len + o->block_size - 1) / o->block_size;
    size_t free_b = 0, total = 0;
    vllm_status st = e->be->ops->synchronize(e->be);
    if (st == VLLM_OK) st = e->be->ops->mem_info(e->be, &free_b, &total);
    const double used_weights = (double)(total - free_b); /* the weights and the device context */
    if (st == VLLM_OK) st = model_reserve(e->model, o->max_num_batched_tokens, o->max_num_seqs, max_blocks);
    if (st == VLLM_OK) st = e->be->ops->synchronize(e->be);
    if (st == VLLM_OK) st = e->be->ops->mem_info(e->be, &free_b, &total);
    if (st != VLLM_OK) return st;
    double allowed = (double)total * o->gpu_memory_utilization, used = (double)(total - free_b);
    double left = allowed - used - (double)ENGINE_DEVICE_RESERVE;
    LOG_I("device memory: %.2f GiB total, %.2f GiB allowed (gpu_memory_utilization %.2f): weights %.2f GiB "
          "(with the device context), activations %.2f GiB, %.2f GiB kept for CUDA graphs (every decode "
          "batch size, recorded at start-up), cuBLAS and sampling, the rest for the KV cache",
          total / 1073741824.0, allowed / 1073741824.0, (double)o->gpu_memory_utilization,
          used_weights / 1073741824.0, (used - used_weights) / 1073741824.0,
          (double)ENGINE_DEVICE_RESERVE / 1073741824.0);
    if (left <= 0)
        return vt_error(VLLM_ERR_NO_MEMORY,
                        "no device memory left for the KV cache (%.2f GiB in use of %.2f GiB allowed); raise "
                        "gpu_memory_utilization or lower max_num_batched_tokens",
                        used / 1073741824.0, allowed / 1073741824.0);
    *bytes = (size_t)left;
    return VLLM_OK;
}

/* The most blocks of the shared pool one sequence of at most max_len
 * tokens holds at once, summed over the KV cache groups (vLLM's
 * max_memory_usage_bytes per group spec); the null block not counted. */
static long long seq_blocks(const vllm_engine *e, int max_len) {
    const kv_cache_groups *g = model_get_cache_groups(e->model);
    if (g->num_groups == 0) return (max_len + e->opt.block_size - 1) / e->opt.block_size;
    long long n = 0;
    for (int i = 0; i < g->num_groups; i++)
        n += kv_group_max_blocks(&g->spec[i], e->opt.block_size, max_len, e->opt.max_num_batched_tokens);
    return n;
}

/* The recurrent-state slots of a hybrid model's state pools: one per running request plus the null
 * slot 0 (padding rows); 0 for models without linear-attention layers. */
static int state_slots(const vllm_engine *e) {
    return model_has_recurrent_state(e->model) ? e->opt.max_num_seqs + 1 : 0;
}

/* The most state checkpoints (each save looks over them for the least recently used). */
#define ENGINE_MAX_CKPT 65536

/* The checkpoint interval of a hybrid model's recurrent states (prefix caching, vLLM's mamba_cache_mode
 * "align"), in tokens: as vLLM sizes the hybrid block, the tokens of one attention layer's KV that hold
 * as many bytes as one linear-attention layer's states (conv + recurrent, one sequence), rounded up to a
 * multiple of block_size. Checkpoints then cost about what the KV of the tokens between them does. 0 for
 * models without recurrent state. *layer_bytes / *kv_token_bytes: the two sizes weighed. */
static int ckpt_interval(const vllm_engine *e, size_t *layer_bytes, size_t *kv_token_bytes) {
    const int bs = e->opt.block_size;
    *layer_bytes = model_layer_state_bytes(e->model);
    const kv_cache_groups *g = model_get_cache_groups(e->model);
    *kv_token_bytes = g->num_groups ? (size_t)cache_spec_planes(&g->spec[0]) * (size_t)g->spec[0].num_kv_heads *
                                          (size_t)g->spec[0].head_dim * dtype_size(e->be->kv_dtype)
                                    : 0;
    if (!*layer_bytes) return 0;
    size_t tokens = *kv_token_bytes ? (*layer_bytes + *kv_token_bytes - 1) / *kv_token_bytes : 1;
    size_t c = (tokens + (size_t)bs - 1) / (size_t)bs * (size_t)bs;
    if (c < (size_t)bs) c = (size_t)bs;
    if (c > ((size_t)1 << 30)) c = ((size_t)1 << 30) / (size_t)bs * (size_t)bs; /* past any context anyway */
    return (int)c;
}

/* Sizes the KV cache: explicit blocks, else the memory budget (less the
 * recurrent-state pools of hybrid models and their checkpoints), capped at
 * what max_num_seqs full-length sequences need (+ the null block when a
 * sliding window frees blocks). With interval > 0 (a hybrid model with
 * prefix caching), *num_ckpt state checkpoints take a quarter of the budget
 * left after the state pools (and after explicit KV blocks), at most
 * 4 x max_num_seqs (and ENGINE_MAX_CKPT); 0 when not even one fits. */
static vllm_status plan_cache(vllm_engine *e, int interval, int *num_blocks, int *num_ckpt) {
    const vllm_engine_options *o = &e->opt;
    size_t budget = 0;
    *num_ckpt = 0;
    const size_t state = model_state_bytes(e->model, state_slots(e));
    dtype conv_dt, ssm_dt;
    model_get_state_dtypes(e->model, &conv_dt, &ssm_dt);
    if (state)
        LOG_I("recurrent state: %.1f MiB for %d slots (max_num_seqs %d + the null slot), conv %s, recurrent %s",
              (double)state / (1 << 20), state_slots(e), o->max_num_seqs, dtype_name(conv_dt), dtype_name(ssm_dt));
    size_t per_block = model_cache_bytes_per_token(e->model) * (size_t)o->block_size;
    if (o->num_kv_blocks == 0) {
        vllm_status st = kv_budget(e, &budget);
        if (st != VLLM_OK) return st;
        if (state >= budget)
            return vt_error(VLLM_ERR_NO_MEMORY,
                            "the recurrent state of %d slots (%.1f MiB) leaves nothing of the %.1f MiB cache budget "
                            "for the KV cache; lower max_num_seqs or raise the cache memory",
                            state_slots(e), (double)state / (1 << 20), (double)budget / (1 << 20));
        budget -= state;
    } else if (interval > 0) {
        /* explicit KV blocks come first; checkpoints from what the budget leaves besides them */
        if (kv_budget(e, &budget) != VLLM_OK) {
            vt_error_clear();
            budget = 0;
        }
        size_t used = state + (size_t)o->num_kv_blocks * per_block;
        budget = budget > used ? budget - used : 0;
    }
    const size_t per_ckpt = interval > 0 ? model_state_bytes(e->model, 1) : 0;
    if (per_ckpt) {
        size_t n = budget / 4 / per_ckpt, cap = 4 * (size_t)o->max_num_seqs;
        if (cap > ENGINE_MAX_CKPT) cap = ENGINE_MAX_CKPT;
        if (n > cap) n = cap;
        *num_ckpt = (int)n;
        if (o->num_kv_blocks == 0) budget -= n * per_ckpt;
        if (n > 0)
            LOG_I("state checkpoints: %.1f MiB for %d checkpoints of %.1f %s (a quarter of the cache budget left "
                  "after the recurrent state, at most 4 x max_num_seqs), as the states",
                  (double)(n * per_ckpt) / (1 << 20), *num_ckpt,
                  per_ckpt >= (1 << 20) ? (double)per_ckpt / (1 << 20) : (double)per_ckpt / 1024,
                  per_ckpt >= (1 << 20) ? "MiB" : "KiB");
    }
    int null = kv_cache_groups_free_blocks(model_get_cache_groups(e->model)) ? 1 : 0;
    long long blocks_per_seq = seq_blocks(e, e->max_model_len) + null;
    long long want = (blocks_per_seq - null) * o->max_num_seqs + null;
    long long n = o->num_kv_blocks;
    if (n == 0) {
        n = per_block ? (long long)(budget / per_block) : want;
        if (n > want) n = want;
        if (n < blocks_per_seq && o->max_model_len == 0 && n > 0) {
            /* the longest sequence that fits (seq_blocks grows with the length) */
            int lo = 0, hi = e->max_model_len;
            while (lo < hi) {
                int mid = lo + (hi - lo + 1) / 2;
                if (seq_blocks(e, mid) + null <= n) lo = mid;
                else hi = mid - 1;
            }
            if (lo > 0) {
                LOG_W("KV cache of %zu MiB holds one sequence of %d tokens: max_model_len lowered from %d to %d",
                      budget >> 20, lo, e->max_model_len, lo);
                e->max_model_len = lo;
                blocks_per_seq = seq_blocks(e, lo) + null;
            }
        }
    }
    if (n < blocks_per_seq)
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "KV cache of %lld blocks (%d tokens each) cannot hold one sequence of max_model_len %d "
                        "(%lld blocks over its KV cache groups); raise the KV cache size or lower max_model_len",
                        n, o->block_size, e->max_model_len, blocks_per_seq);
    if (n > 1 << 30) n = 1 << 30;
    *num_blocks = (int)n;
    return VLLM_OK;
}

static vllm_status engine_create_local(vllm_engine *e, const char *model_dir);

/* A Hugging Face model id (the model's, or options->tokenizer's) as a local path from the hub cache,
 * downloaded into it when files are missing (hub.h); a local path is returned as it is (*owned NULL). */
static vllm_status resolve_hub(const char *spec, const char *revision, bool tokenizer_only, bool no_weights,
                               const char **path, char **owned) {
    *owned = NULL;
    *path = spec;
    if (!hub_is_model_id(spec)) return VLLM_OK;
    hub_options ho = {.revision = revision, .tokenizer_only = tokenizer_only, .no_weights = no_weights};
    vllm_status st = hub_resolve(spec, &ho, owned);
    if (!st) *path = *owned;
    return st;
}

vllm_status vllm_engine_create(const char *model_dir, const vllm_engine_options *options, vllm_engine **out) {
    *out = NULL;
    if (options && options->nnodes > 1 && options->node_rank > 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "node_rank %d: the engine runs on node 0; node %d runs vllm_node_run "
                        "(vllmc serve --node-rank %d)", options->node_rank, options->node_rank, options->node_rank);
    if (options && options->data_parallel_size > 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "data_parallel_size %d: replicas run behind the thread-safe front "
                        "(vllm_async_engine_create, vllmc serve), not in one vllm_engine", options->data_parallel_size);
    return engine_create_on(model_dir, options, 0, out);
}

void engine_bind_thread(vllm_engine *e) {
    if (e && e->be && e->be->ops->bind_thread) e->be->ops->bind_thread(e->be);
}

vllm_status engine_create_on(const char *model_dir, const vllm_engine_options *options, int device_id,
                             vllm_engine **out) {
    *out = NULL;
    if (!model_dir) return vt_error(VLLM_ERR_INVALID_ARG, "model directory missing");
    vllm_engine_options defaults = vllm_engine_default_options();
    vllm_engine *e = calloc(1, sizeof *e);
    if (!e) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    e->opt = options ? *options : defaults;
    e->device_id = device_id;
    vllm_status st = check_options(&e->opt);
    if (st != VLLM_OK) goto fail;

    /* Hugging Face ids: the model's files, and a --tokenizer id's (vLLM's --revision / --tokenizer-revision) */
    char *hub_model = NULL;
    const char *model_arg = model_dir; /* as given: a --tokenizer naming the same id takes its revision */
    if ((st = resolve_hub(model_dir, e->opt.revision, false, e->opt.load_format == VLLM_LOAD_DUMMY, &model_dir,
                          &hub_model)))
        goto fail;
    if (e->opt.tokenizer) {
        const char *trev = e->opt.tokenizer_revision
                               ? e->opt.tokenizer_revision
                               : (!strcmp(e->opt.tokenizer, model_arg) ? e->opt.revision : NULL);
        st = resolve_hub(e->opt.tokenizer, trev, true, true, &e->opt.tokenizer, &e->hub_tokenizer);
        /* the engine keeps its own copy: vllm_chat_apply_template reads it after creation */
        if (!st && !e->hub_tokenizer && !(e->hub_tokenizer = strdup(e->opt.tokenizer)))
            st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        if (st) {
            free(hub_model);
            goto fail;
        }
        e->opt.tokenizer = e->hub_tokenizer;
    }
    st = engine_create_local(e, model_dir);
    free(hub_model);
    if (st != VLLM_OK) goto fail;
    *out = e;
    return VLLM_OK;
fail:
    vllm_engine_free(e);
    return st;
}

/* The backend and load options of this process's ranks, and (tensor_parallel_size > 1) their group: threads of
 * this process, or this node's share of ranks spread over nnodes hosts (the links to the others opened here,
 * waiting for them). e->pooling is resolved. */
static vllm_status engine_rank_setup(vllm_engine *e, backend_options *bo, model_load_options *mo) {
    *bo = (backend_options){.num_threads = e->opt.num_threads, .device_id = e->device_id,
                            .kv_cache_fp8 = e->opt.kv_cache_dtype && !strncmp(e->opt.kv_cache_dtype, "fp8", 3)};
    const int tp = e->opt.tensor_parallel_size > 1 ? e->opt.tensor_parallel_size : 1;
    const int nn = e->opt.nnodes > 1 ? e->opt.nnodes : 1;
    const char *device = e->opt.device ? e->opt.device : "cpu";
    *mo = (model_load_options){.dummy = e->opt.load_format == VLLM_LOAD_DUMMY, .seed = e->opt.seed,
                               .max_model_len = e->opt.max_model_len, .no_lm_head = e->pooling, .tp_size = tp,
                               .tp_device = tp > 1 ? device : NULL, .tp_backend_options = bo};
    if (tp == 1) return VLLM_OK;
    vllm_status st;
    if (nn > 1) { /* several hosts: what every node must agree on, then the links */
        char fp[512];
        const char *kd = e->opt.kv_cache_dtype && strcmp(e->opt.kv_cache_dtype, "auto") ? e->opt.kv_cache_dtype : "auto";
        snprintf(fp, sizeof fp, "tensor_parallel_size %d, nnodes %d, device %s, load_format %s, seed %llu, "
                 "max_model_len %d, kv_cache_dtype %s, runner %s", tp, nn, device,
                 mo->dummy ? "dummy" : "auto", mo->dummy ? (unsigned long long)e->opt.seed : 0ULL, e->opt.max_model_len,
                 kd, e->pooling ? "pooling" : "generate");
        const char *to = getenv("VLLM_DIST_TIMEOUT");
        const tpn_options no = {.nnodes = nn, .node_rank = e->opt.node_rank,
                                .master_addr = e->opt.master_addr ? e->opt.master_addr : "127.0.0.1",
                                .master_port = e->opt.master_port ? e->opt.master_port : 29501, .fingerprint = fp,
                                .timeout_s = to && *to ? atof(to) : 0};
        tpn_net *net = NULL;
        if ((st = tpn_open(&no, &net))) return st;
        if ((st = tpg_create_nodes(tp, net, &e->tp_group))) {
            tpn_close(net);
            return st;
        }
    } else if ((st = tpg_create(tp, &e->tp_group))) {
        return st;
    }
    const int local = tpg_local_size(e->tp_group), first = tpg_first_rank(e->tp_group);
    if (bo->num_threads == 0) { /* the CPU's ranks share the cores rather than each taking them all */
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bo->num_threads = cores > local ? (int)(cores / local) : 1;
    }
    bo->tp_group = e->tp_group;
    bo->tp_rank = first;
    mo->tp_rank = first;
    mo->tp_group = e->tp_group;
    if (nn > 1)
        LOG_I("tensor parallelism: %d ranks of device %s over %d nodes; this is node %d with ranks %d .. %d", tp, device,
              nn, e->opt.node_rank, first, first + local - 1);
    else
        LOG_I("tensor parallelism: %d ranks of device %s", tp, device);
    return VLLM_OK;
}

vllm_status vllm_node_run(const char *model_dir, const vllm_engine_options *options) {
    if (!model_dir || !options) return vt_error(VLLM_ERR_INVALID_ARG, "vllm_node_run: a model and options are needed");
    if (options->nnodes < 2 || options->node_rank < 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "vllm_node_run: nnodes %d, node_rank %d: it runs nodes 1 .. nnodes - 1 "
                        "(node 0 runs the engine)", options->nnodes, options->node_rank);
    vllm_engine *e = calloc(1, sizeof *e); /* the parts of an engine a node needs: options, runner, group */
    if (!e) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    e->opt = *options;
    char *hub_model = NULL;
    vllm_status st = check_options(&e->opt);
    if (!st) st = resolve_hub(model_dir, e->opt.revision, false, e->opt.load_format == VLLM_LOAD_DUMMY, &model_dir,
                              &hub_model);
    if (!st) st = engine_pooling_resolve(e, model_dir);
    backend_options bo;
    model_load_options mo;
    if (!st) st = engine_rank_setup(e, &bo, &mo);
    if (!st) st = model_tp_node_run(model_dir, &mo);
    char msg[512] = "";
    if (st) snprintf(msg, sizeof msg, "%s", vllm_last_error());
    free(hub_model);
    vllm_engine_free(e);
    if (st) vt_error(st, "%s", msg);
    return st;
}

/* The rest of vllm_engine_create once the model is a local folder or file. */
static vllm_status engine_create_local(vllm_engine *e, const char *model_dir) {
    vllm_status st;

    /* the runner (generate or pooling) decides what the model loads: the pooling runner no LM head */
    if ((st = engine_pooling_resolve(e, model_dir))) goto fail;
    backend_options bo;
    model_load_options mo;
    if ((st = engine_rank_setup(e, &bo, &mo))) goto fail;
    if ((st = backend_create(e->opt.device, &bo, &e->be))) goto fail;
    {
        const char *ov = getenv("VLLM_MASKS_OVERLAP");
        e->so_overlap = ov && *ov ? strcmp(ov, "0") != 0 : e->be->async;
    }
    if ((st = model_load(model_dir, e->be, &mo, &e->model))) goto fail;
    e->cfg = model_get_config(e->model);
    {
        dtype conv_dt, ssm_dt;
        state_dtypes(e, &conv_dt, &ssm_dt);
        if ((st = model_set_state_dtypes(e->model, conv_dt, ssm_dt))) goto fail;
    }

    /* the tokenizer: --tokenizer's folder or GGUF file, else the model's */
    const char *tok_src = e->opt.tokenizer ? e->opt.tokenizer : model_dir;
    if (ggc_is_gguf_path(tok_src)) { /* the vocabulary in the file's metadata */
        gguf_file *gf = NULL;
        if (!(st = gguf_open(tok_src, &gf)))
            st = gguf_find_key(gf, "tokenizer.ggml.model") < 0 /* no vocabulary: token-id prompts only */
                     ? vt_error(VLLM_ERR_NOT_FOUND, "%s: no tokenizer.ggml.model", tok_src)
                     : tok_load_gguf(gf, &e->tok);
        gguf_close(gf);
    } else {
        st = tok_load_dir(tok_src, &e->tok);
    }
    if (st == VLLM_ERR_NOT_FOUND && e->opt.tokenizer) goto fail; /* asked for: must be there */
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
    int32_t cand[MODEL_MAX_EOS + 1];
    int nc = 0;
    if (e->tok) cand[nc++] = tok_eos_id(e->tok);
    for (int i = 0; i < e->cfg->num_eos && nc < MODEL_MAX_EOS + 1; i++) cand[nc++] = e->cfg->eos_token_ids[i];
    for (int i = 0; i < nc; i++) {
        bool dup = false;
        for (int j = 0; j < e->num_eos; j++) dup |= e->eos_ids[j] == cand[i];
        if (!dup && cand[i] >= 0 && cand[i] < e->cfg->vocab_size) e->eos_ids[e->num_eos++] = cand[i];
    }

    /* hybrid models: a recurrent-state slot per running request; with prefix caching, checkpoints of
     * those states every `interval` tokens (a hit resumes the recurrent layers from one) */
    const bool recurrent = model_has_recurrent_state(e->model);
    size_t layer_bytes = 0, kv_token_bytes = 0;
    int interval = recurrent && e->opt.enable_prefix_caching ? ckpt_interval(e, &layer_bytes, &kv_token_bytes) : 0;
    if (interval > 0)
        LOG_I("state checkpoints every %d tokens: a layer's state (%.1f KiB) fits in %d tokens of one attention "
              "layer's KV (%zu bytes per token), rounded up to a multiple of block_size %d (vLLM's mamba_cache_mode "
              "align)",
              interval, (double)layer_bytes / 1024, interval, kv_token_bytes, e->opt.block_size);
    int num_blocks = 0, num_ckpt = 0;
    if ((st = plan_cache(e, interval, &num_blocks, &num_ckpt))) goto fail;
    if (interval > 0 && num_ckpt < 1) {
        LOG_I("prefix caching is off for %s: the cache budget leaves no room for one checkpoint of its "
              "linear-attention layers' states (%.1f KiB)",
              e->cfg->architecture, (double)model_state_bytes(e->model, 1) / 1024);
        e->opt.enable_prefix_caching = false;
        interval = 0;
    }
    if ((st = model_cache_create(e->model, num_blocks, e->opt.block_size, state_slots(e), num_ckpt, &e->cache)))
        goto fail;
    sched_config sc = {
        .num_state_slots = recurrent ? e->opt.max_num_seqs : 0,
        .num_ckpt_slots = num_ckpt,
        .ckpt_interval = interval,
        .max_num_seqs = e->opt.max_num_seqs,
        .max_num_batched_tokens = e->opt.max_num_batched_tokens,
        .block_size = e->opt.block_size,
        .max_blocks_per_seq = (e->max_model_len + e->opt.block_size - 1) / e->opt.block_size,
        .enable_prefix_caching = e->opt.enable_prefix_caching,
        .groups = model_get_cache_groups(e->model),
    };
    if ((st = sched_init(&e->sched, &sc, num_blocks))) goto fail;
    /* the model runner's input builder, its buffers sized for the largest step up front */
    ib_init(&e->ib, e->sched.kv.num_groups, sc.block_size, sc.max_blocks_per_seq);
    if (e->pooling) ib_set_pooling(&e->ib, e->pool_type);
    if ((st = ib_reserve(&e->ib, sc.max_num_batched_tokens, sc.max_num_seqs))) goto fail;
    /* decode steps as recorded graphs (vLLM's cudagraph capture sizes, capped at max_num_seqs); the
     * pooling runner never decodes */
    if (!e->opt.enforce_eager && !e->pooling) {
        int max_batch = e->opt.max_num_seqs < 512 ? e->opt.max_num_seqs : 512;
        if (max_batch > e->opt.max_num_batched_tokens) max_batch = e->opt.max_num_batched_tokens;
        if ((st = model_enable_graphs(e->model, max_batch, e->max_model_len))) goto fail;
        /* every capture size recorded now, as vLLM's capture_model at start-up, rather than on each size's first
         * step (inside a request's time: a recording is an eager step, a synchronize, the recording and its
         * instantiation): the 8B-shape throughput run is 5% faster so (docs/benchmarks.md, session 22);
         * VLLM_GRAPH_CAPTURE=lazy records on first use instead */
        const char *cap = getenv("VLLM_GRAPH_CAPTURE");
        if (cap && strcmp(cap, "start") != 0 && strcmp(cap, "lazy") != 0)
            LOG_W("VLLM_GRAPH_CAPTURE=%s: not start or lazy; recording at start-up", cap);
        if (!cap || strcmp(cap, "lazy") != 0) {
            const double t0 = progress_now();
            int n = 0;
            if ((st = model_capture_graphs(e->model, e->cache, sc.max_blocks_per_seq, &n))) goto fail;
            if (n > 0) LOG_I("CUDA graphs: %d decode batch sizes recorded in %.1f s", n, progress_now() - t0);
        }
    }
    e->next_seed = e->opt.seed;
    /* tokens: what every group can hold at once (vLLM's num_blocks // num_groups * block_size);
     * concurrency: max_model_len sequences that fit (vLLM's get_max_concurrency_for_kv_cache_config) */
    const kv_cache_groups *kg = model_get_cache_groups(e->model);
    int ng = kg->num_groups > 0 ? kg->num_groups : 1, usable = kv_num_usable(&e->sched.kv.pool);
    if (ng == 1) {
        LOG_I("KV cache: %d blocks of %d tokens = %lld tokens (%.1f MiB, %s, %zu bytes per token%s), max_model_len %d",
              usable, e->opt.block_size, (long long)usable * e->opt.block_size, (double)e->cache->bytes / (1 << 20),
              dtype_name(e->be->kv_dtype), model_cache_bytes_per_token(e->model),
              kg->num_groups > 0 && kg->spec[0].kind == CACHE_MLA ? ": MLA latent, no V" : "", e->max_model_len);
    } else {
        LOG_I("KV cache: %d blocks of %d tokens in %d groups of %d layers = %lld tokens per group (%.1f MiB, %s, "
              "%zu bytes per block token), max_model_len %d: %.2fx concurrency",
              usable, e->opt.block_size, ng, kg->group_size, (long long)(usable / ng) * e->opt.block_size,
              (double)e->cache->bytes / (1 << 20), dtype_name(e->be->kv_dtype), model_cache_bytes_per_token(e->model),
              e->max_model_len,
              (double)usable / (double)seq_blocks(e, e->max_model_len));
    }
    LOG_I("host memory after load: %.1f MiB resident (peak %.1f MiB)", (double)vt_rss_bytes() / (1 << 20),
          (double)vt_peak_rss_bytes() / (1 << 20));
    return VLLM_OK;
fail:
    return st;
}

void vllm_engine_free(vllm_engine *e) {
    if (!e) return;
    const engine_counters *k = &e->counters;
    if (k->steps)
        LOG_D("engine: %zu steps, %.3f s prefill + %.3f s decode; host time in the forward %.3f s, token masks %.3f s "
              "(%zu steps waited over 0.2 ms, %.3f s; per mask p99 %.0f us, p99.9 %.0f us, max %.0f us), sampling %.3f s, "
              "grammar advance %.3f s",
              k->steps, k->prefill_seconds, k->decode_seconds, k->forward_seconds, k->so_mask_seconds, k->so_long_waits,
              k->so_long_wait_seconds, engine_hist_quantile(k->so_mask_hist, 0.99),
              engine_hist_quantile(k->so_mask_hist, 0.999), engine_hist_quantile(k->so_mask_hist, 1.0), k->sample_seconds,
              k->so_advance_seconds);
    engine_requests_free(e);
    ib_destroy(&e->ib);
    sched_destroy(&e->sched);
    if (e->model) model_cache_free(e->model, e->cache);
    model_free(e->model); /* its worker ranks too: they use the group */
    tok_free(e->tok);
    backend_free(e->be);
    tpg_free(e->tp_group);
    free(e->pool_rows);
    free(e->model_name);
    free(e->hub_tokenizer);
    free(e);
}

vllm_status vllm_engine_check_health(const vllm_engine *e) {
    return e ? model_check_health(e->model) : vt_error(VLLM_ERR_INVALID_ARG, "no engine");
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


void vllm_engine_get_info(const vllm_engine *e, vllm_engine_info *out) {
    *out = (vllm_engine_info){
        .architecture = e->cfg->architecture,
        .vocab_size = e->cfg->vocab_size,
        .max_model_len = e->max_model_len,
        .block_size = e->opt.block_size,
        .num_kv_blocks = e->sched.kv.pool.num_blocks,
        .max_num_seqs = e->opt.max_num_seqs,
        .max_num_batched_tokens = e->opt.max_num_batched_tokens,
        .runner = e->pooling ? VLLM_RUNNER_POOLING : VLLM_RUNNER_GENERATE,
    };
    if (e->pooling) {
        out->embedding_size = e->cfg->hidden_size;
        out->pooling_type = e->pool_type;
        out->pooling_normalize = e->pool_normalize;
        out->is_matryoshka = e->pool_cfg.is_matryoshka;
        out->matryoshka_dimensions = e->pool_cfg.num_matryoshka_dims ? e->pool_cfg.matryoshka_dims : NULL;
        out->num_matryoshka_dimensions = e->pool_cfg.num_matryoshka_dims;
    }
}

void vllm_engine_get_stats(const vllm_engine *e, vllm_engine_stats *out) {
    const kv_manager *kv = &e->sched.kv.pool;
    int free_blocks = kv_num_free(kv), usable = kv_num_usable(kv);
    *out = (vllm_engine_stats){
        .num_running = e->sched.num_running,
        .num_waiting = e->sched.num_waiting,
        .num_free_kv_blocks = free_blocks,
        .kv_cache_usage = usable ? 1.0 - (double)free_blocks / usable : 0.0,
        .prefix_cache_queries = kv->stats.queries,
        .prefix_cache_hits = kv->stats.hits,
        .num_preemptions = e->sched.num_preemptions,
        .prompt_tokens = e->counters.prefill_tokens,
        .generation_tokens = e->counters.sampled_tokens,
        .steps = e->counters.steps,
    };
}
