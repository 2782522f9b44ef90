/*
 * model.c: loading a model folder (config -> registry -> weights), the
 * paged KV cache tensors, the recurrent-state pools and their checkpoints,
 * and the per-step metadata upload.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "loader/hf_config.h"
#include "model/blocks.h"
#include "model/model_internal.h"

vllm_status model_buf_ensure(model *m, ws_buf *buf, dtype dt, int64_t rows, int64_t cols, tensor *out) {
    backend *be = m->be;
    int64_t need = rows < 1 ? 1 : rows; /* the buffer always exists; the view has `rows` rows */
    if (!buf->t.data || buf->cap_rows < need || buf->t.shape[1] != cols || buf->t.dtype != dt) {
        bool same_kind = buf->t.data && buf->t.shape[1] == cols && buf->t.dtype == dt;
        int64_t cap = need;
        if (same_kind && cap < 2 * buf->cap_rows) cap = 2 * buf->cap_rows; /* grow geometrically */
        model_buf_release(be, buf);
        buf->t = tensor_2d(dt, NULL, cap, cols);
        vllm_status st = be->ops->alloc(be, &buf->t);
        if (st != VLLM_OK) {
            buf->t.data = NULL;
            return st;
        }
        buf->cap_rows = cap;
        m->buf_gen++; /* recorded graphs point at the old buffer */
    }
    *out = tensor_2d(dt, buf->t.data, rows, cols);
    return VLLM_OK;
}

void model_buf_release(backend *be, ws_buf *buf) {
    if (buf->t.data) be->ops->release(be, &buf->t);
    memset(buf, 0, sizeof *buf);
}

/* Step metadata packed in one buffer (one upload per step), in this order
 * so that every part is aligned: slot_mapping (G, T) I64, then I32 arrays:
 * ids (T), positions (T), logits_idx (N), query_start_loc (S + 1),
 * seq_lens (S), block_tables (G, S, max_blocks), G the KV cache groups, then
 * the linear-attention layers' state_slots (S) and has_initial_state (S).
 * Offsets in int32 units. */
typedef struct meta_layout {
    size_t slots, ids, pos, lidx, qsl, seq_lens, bt, la_slots, la_init, total;
} meta_layout;

static meta_layout meta_plan(int64_t T, int64_t N, int64_t S, int64_t mb, int64_t G) {
    meta_layout l;
    l.slots = 0;
    l.ids = (size_t)(2 * G * T);
    l.pos = l.ids + (size_t)T;
    l.lidx = l.pos + (size_t)T;
    l.qsl = l.lidx + (size_t)N;
    l.seq_lens = l.qsl + (size_t)(S + 1);
    l.bt = l.seq_lens + (size_t)S;
    l.la_slots = l.bt + (size_t)(G * S * mb);
    l.la_init = l.la_slots + (size_t)S;
    l.total = l.la_init + (size_t)S;
    return l;
}

static vllm_status staging_ensure(model *m, size_t n) {
    if (n <= m->meta_host_cap) return VLLM_OK;
    int32_t *h = realloc(m->meta_host, n * sizeof *h);
    if (!h) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (step metadata)");
    m->meta_host = h;
    m->meta_host_cap = n;
    return VLLM_OK;
}

/* The number of block tables a batch carries: one per KV cache group. */
static int num_groups(const model *m) { return m->groups.num_groups > 1 ? m->groups.num_groups : 1; }

/* Checks b, packs it (padded to `pad` sequences of one token each when
 * pad > S: token 0, position 0, slot -1, seq_len 1, block row of zeros,
 * logits row 0, state slot -1) into the staging buffer and uploads it; fills s with views
 * (one attn_meta per KV cache group: its block tables and slot mapping; the linear_attn_meta). */
static vllm_status upload_batch(model *m, const fwd_batch *b, int block_size, int pad, int max_seq_len,
                                model_step *s) {
    int T = b->num_tokens, S = b->num_seqs, N = b->num_logits, mb = b->max_blocks_per_seq, G = num_groups(m);
    if (T <= 0 || S <= 0 || N < 0 || N > T || mb <= 0)
        return vt_error(VLLM_ERR_INTERNAL, "forward: empty or inconsistent batch");
    if ((b->num_kv_groups > 1 ? b->num_kv_groups : 1) != G)
        return vt_error(VLLM_ERR_INTERNAL, "forward: the batch has %d KV cache groups' block tables, the model %d",
                        b->num_kv_groups, G);
    for (int i = 0; i < T; i++) {
        if (b->token_ids[i] < 0 || b->token_ids[i] >= m->cfg.vocab_size)
            return vt_error(VLLM_ERR_INVALID_ARG, "token id %d out of range [0, %d)", b->token_ids[i],
                            m->cfg.vocab_size);
        if (b->positions[i] < 0 || b->positions[i] >= m->max_pos)
            return vt_error(VLLM_ERR_TOO_LONG, "position %d beyond the model's %d", b->positions[i],
                            m->max_pos);
    }
    int P = pad > S ? pad : S;         /* padded sequences (decode: one token each) */
    int PT = T + (P - S), PN = pad > S ? P : N;
    meta_layout l = meta_plan(PT, PN, P, mb, G);
    vllm_status st = staging_ensure(m, l.total);
    if (st != VLLM_OK) return st;
    int32_t *h = m->meta_host;
    int64_t *slots = (int64_t *)(void *)(h + l.slots);
    size_t bt_rows = (size_t)P * (size_t)mb; /* one group's block tables, padded */
    for (int g = 0; g < G; g++) {
        memcpy(slots + (size_t)g * PT, b->slot_mapping + (size_t)g * T, (size_t)T * sizeof *slots);
        for (int i = T; i < PT; i++) slots[(size_t)g * PT + i] = -1;
        int32_t *bt = h + l.bt + g * bt_rows;
        memcpy(bt, b->block_tables + (size_t)g * S * mb, (size_t)S * (size_t)mb * sizeof *h);
        memset(bt + (size_t)S * (size_t)mb, 0, (size_t)(P - S) * (size_t)mb * sizeof *h);
    }
    memcpy(h + l.ids, b->token_ids, (size_t)T * sizeof *h);
    memcpy(h + l.pos, b->positions, (size_t)T * sizeof *h);
    memcpy(h + l.lidx, b->logits_indices, (size_t)N * sizeof *h);
    memcpy(h + l.qsl, b->query_start_loc, (size_t)(S + 1) * sizeof *h);
    memcpy(h + l.seq_lens, b->seq_lens, (size_t)S * sizeof *h);
    for (int i = T; i < PT; i++) {
        h[l.ids + i] = 0;
        h[l.pos + i] = 0;
    }
    for (int i = N; i < PN; i++) h[l.lidx + i] = 0;
    for (int i = S; i < P; i++) {
        h[l.qsl + i + 1] = h[l.qsl + i] + 1;
        h[l.seq_lens + i] = 1;
    }
    /* state slots: the null slot 0 (or none given) and padding rows are -1 (no state read or written);
     * a sequence continues its state unless its first token this step is at position 0 */
    for (int i = 0; i < P; i++) {
        const int slot = i < S && b->state_slots ? b->state_slots[i] : 0;
        const int t0 = i < S ? b->query_start_loc[i] : 0;
        h[l.la_slots + i] = slot > 0 ? slot : -1;
        h[l.la_init + i] = i < S && t0 < T && b->positions[t0] > 0;
    }
    tensor all;
    if ((st = model_buf_ensure(m, &m->meta, DTYPE_I32, (int64_t)l.total, 1, &all)) ||
        (st = m->be->ops->upload(m->be, &all, h, l.total * sizeof *h)))
        return st;
    int32_t *d = all.data;
    memset(s, 0, sizeof *s);
    s->ids = tensor_1d(DTYPE_I32, d + l.ids, PT);
    s->positions = tensor_1d(DTYPE_I32, d + l.pos, PT);
    s->logits_idx = tensor_1d(DTYPE_I32, d + l.lidx, PN);
    s->num_logits = PN;
    s->hidden_out = b->hidden_out;
    s->meta.query_start_loc = tensor_1d(DTYPE_I32, d + l.qsl, P + 1);
    s->meta.seq_lens = tensor_1d(DTYPE_I32, d + l.seq_lens, P);
    s->meta.block_tables = tensor_2d(DTYPE_I32, d + l.bt, P, mb);
    s->meta.slot_mapping = tensor_1d(DTYPE_I64, d + l.slots, PT);
    s->meta.num_seqs = P;
    s->meta.num_tokens = PT;
    s->meta.block_size = block_size;
    s->meta.max_blocks_per_seq = mb;
    for (int i = 0; i < S; i++) {
        int q = b->query_start_loc[i + 1] - b->query_start_loc[i];
        if (q > s->meta.max_query_len) s->meta.max_query_len = q;
        if (b->seq_lens[i] > s->meta.max_seq_len) s->meta.max_seq_len = b->seq_lens[i];
    }
    if (P > S && s->meta.max_query_len < 1) s->meta.max_query_len = 1;
    if (max_seq_len > s->meta.max_seq_len) s->meta.max_seq_len = max_seq_len; /* a graph's upper bound */
    /* every group's metadata: the shared fields, its own block tables and slot mapping */
    for (int g = 0; g < G; g++) {
        attn_meta *gm = &s->group_meta[g];
        *gm = s->meta;
        gm->block_tables = tensor_2d(DTYPE_I32, d + l.bt + g * bt_rows, P, mb);
        gm->slot_mapping = tensor_1d(DTYPE_I64, (int64_t *)(void *)(d + l.slots) + (size_t)g * PT, PT);
    }
    s->layer_group = G > 1 ? m->groups.layer_group : NULL;
    s->la_meta = (linear_attn_meta){.num_seqs = P, .num_tokens = PT, .max_query_len = s->meta.max_query_len,
                                    .query_start_loc = s->meta.query_start_loc,
                                    .state_slots = tensor_1d(DTYPE_I32, d + l.la_slots, P),
                                    .has_initial_state = tensor_1d(DTYPE_I32, d + l.la_init, P)};
    return VLLM_OK;
}

vllm_status model_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq) {
    return m->tp ? model_tp_reserve(m, max_tokens, max_seqs, max_blocks_per_seq)
                 : model_reserve_rank(m, max_tokens, max_seqs, max_blocks_per_seq);
}

vllm_status model_reserve_rank(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq) {
    tensor t;
    meta_layout l = meta_plan(max_tokens, max_tokens, max_seqs, max_blocks_per_seq, num_groups(m));
    vllm_status st;
    if ((st = staging_ensure(m, l.total)) ||
        (st = model_buf_ensure(m, &m->meta, DTYPE_I32, (int64_t)l.total, 1, &t)))
        return st;
    return m->arch->reserve ? m->arch->reserve(m, max_tokens, max_seqs) : VLLM_OK;
}

/* ---- CUDA-graph-style replay of decode steps ---- */

/* vLLM's cudagraph capture sizes: 1, 2, 4, then every multiple of 8. */
static int graph_size_for(int n) {
    if (n <= 2) return n;
    if (n <= 4) return 4;
    return (n + 7) / 8 * 8;
}

/* The largest capture size (graph_size_for's values) not above n. */
static int graph_size_below(int n) {
    if (n >= 8) return n / 8 * 8;
    return n >= 4 ? 4 : n;
}

bool model_has_recurrent_state(const model *m) {
    for (int l = 0; l < m->cfg.num_layers; l++)
        if (m->cfg.layers[l].kind == LAYER_LINEAR_ATTENTION) return true;
    return false;
}

vllm_status model_enable_graphs(model *m, int max_batch, int max_seq_len) {
    if (m->tp) { /* every rank records and replays its own graphs: the batch, so the choice, is the same on each */
        const vllm_status st = model_tp_enable_graphs(m, max_batch, max_seq_len);
        return st != VLLM_OK ? st : model_enable_graphs_rank(m, max_batch, max_seq_len);
    }
    return model_enable_graphs_rank(m, max_batch, max_seq_len);
}

vllm_status model_enable_graphs_rank(model *m, int max_batch, int max_seq_len) {
    if (!m->be->ops->graph_begin || max_batch <= 0) return VLLM_OK; /* the backend has none */
    if (m->tp_size > 1) { /* the collectives captured too (NCCL records into graphs): not yet run on GPUs */
        const char *on = getenv("VLLM_TP_CUDA_GRAPHS");
        if (!on || strcmp(on, "1")) {
            if (m->tp_rank == 0)
                LOG_I("tensor parallelism runs decode eagerly (VLLM_TP_CUDA_GRAPHS=1 records it with its collectives: "
                      "written, not yet run on two GPUs)");
            return VLLM_OK;
        }
    }
    int top = graph_size_for(max_batch);
    if (blk_has_moe(&m->cfg) && m->be->graph_moe_pairs > 0 && m->cfg.moe.top_k > 0) {
        /* decode batches whose MoE layers the backend can record; larger ones run eagerly (a token's pairs:
         * its routed experts and DeepSeek's shared experts where they ride in the expert op) */
        const int shared = blk_moe_shared(m);
        int cap = graph_size_below(m->be->graph_moe_pairs / (m->cfg.moe.top_k + shared));
        if (cap < top) top = cap;
        LOG_I("CUDA graphs for decode batches of up to %d sequences (%d routed experts per token%s)", top,
              m->cfg.moe.top_k, shared ? " and the shared ones" : "");
        if (top <= 0) return VLLM_OK;
    }
    m->graphs = calloc((size_t)top + 1, sizeof *m->graphs);
    if (!m->graphs) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (graphs)");
    m->graph_max = top;
    m->graph_seq_len = max_seq_len;
    return VLLM_OK;
}

static void graphs_free(model *m) {
    for (int i = 0; m->graphs && i <= m->graph_max; i++)
        if (m->graphs[i]) m->be->ops->graph_free(m->be, m->graphs[i]);
    free(m->graphs);
    m->graphs = NULL;
    m->graph_max = 0;
}

/* Drops every recording when a step buffer was reallocated since they were made. */
static void graphs_check_buffers(model *m) {
    if (m->graph_gen == m->buf_gen) return;
    for (int i = 0; i <= m->graph_max; i++)
        if (m->graphs[i]) {
            m->be->ops->graph_free(m->be, m->graphs[i]);
            m->graphs[i] = NULL;
        }
    m->graph_gen = m->buf_gen;
}

/* A decode-only batch (one token per sequence, every row's logits in order). */
static bool is_plain_decode(const fwd_batch *b) {
    if (b->num_tokens != b->num_seqs || b->num_logits != b->num_seqs) return false;
    for (int i = 0; i < b->num_logits; i++)
        if (b->logits_indices[i] != i) return false;
    return true;
}

vllm_status model_forward(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits) {
    return m->tp ? model_tp_forward(m, cache, b, logits) : model_forward_rank(m, cache, b, logits);
}

vllm_status model_forward_rank(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits) {
    model_step s;
    vllm_status st;
    int g = m->graphs && !b->hidden_out && is_plain_decode(b) ? graph_size_for(b->num_seqs) : 0;
    if (g == 0 || g > m->graph_max) {
        if ((st = upload_batch(m, b, cache->block_size, 0, 0, &s))) return st;
        return m->arch->run(m, cache, &s, logits);
    }
    /* padded to g sequences, with the attention bounds the graph is recorded with */
    if ((st = upload_batch(m, b, cache->block_size, g, m->graph_seq_len, &s))) return st;
    const backend_ops *ops = m->be->ops;
    graphs_check_buffers(m);
    if (m->graphs[g]) {
        if ((st = ops->graph_launch(m->be, m->graphs[g]))) return st;
        st = m->arch->logits(m, b->num_logits, logits);
    } else {
        /* first step of this size: run it eagerly (its results are this step's, and every
         * workspace reaches its size outside the recording), then record it */
        if ((st = m->arch->run(m, cache, &s, logits)) || (st = ops->synchronize(m->be))) return st;
        graphs_check_buffers(m); /* the eager run may have grown buffers */
        if ((st = ops->graph_begin(m->be))) return st;
        const tensor *ignored;
        vllm_status rst = m->arch->run(m, cache, &s, &ignored);
        be_graph *rec = NULL;
        if ((st = ops->graph_end(m->be, &rec)) != VLLM_OK || (st = rst) != VLLM_OK) {
            if (rec) ops->graph_free(m->be, rec);
            return st;
        }
        m->graphs[g] = rec;
        LOG_D("recorded the decode graph for batch size %d", g);
        st = m->arch->logits(m, b->num_logits, logits);
    }
    return st;
}

vllm_status model_capture_graphs(model *m, model_cache *cache, int max_blocks_per_seq, int *count) {
    *count = 0;
    if (!m->graphs || m->graph_max <= 0) return VLLM_OK;
    const int n = m->graph_max, G = num_groups(m), mb = max_blocks_per_seq;
    if (mb <= 0) return vt_error(VLLM_ERR_INTERNAL, "graph capture: no block table width");
    int32_t *ints = calloc((size_t)(4 * n + 1) + (size_t)G * (size_t)n * (size_t)mb, sizeof *ints);
    int64_t *slots = calloc((size_t)G * (size_t)n, sizeof *slots); /* slot 0 */
    if (!ints || !slots) {
        free(ints);
        free(slots);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory (graph capture)");
    }
    int32_t *zeros = ints, *ones = ints + n, *iota = ones + n, *bt = iota + n + 1; /* token ids and positions 0 */
    for (int i = 0; i < n; i++) ones[i] = 1;
    for (int i = 0; i <= n; i++) iota[i] = i;
    vllm_status st = VLLM_OK;
    for (int g = n; g >= 1 && st == VLLM_OK; g = g > 8 ? g - 8 : g / 2) {
        if (graph_size_for(g) != g || m->graphs[g]) continue;
        const fwd_batch b = {.num_tokens = g, .num_seqs = g, .token_ids = zeros, .positions = zeros,
                             .query_start_loc = iota, .seq_lens = ones, .num_kv_groups = G, .block_tables = bt,
                             .max_blocks_per_seq = mb, .slot_mapping = slots, .num_logits = g, .logits_indices = iota};
        const tensor *logits;
        st = model_forward(m, cache, &b, &logits);
        if (st == VLLM_OK && m->graphs[g]) ++*count;
    }
    if (st == VLLM_OK) st = m->be->ops->synchronize(m->be);
    free(ints);
    free(slots);
    return st;
}

/* An FP8 KV cache's per-layer scales (vLLM's Attention k_scale / v_scale and the checkpoint names its
 * maybe_remap_kv_scale_name reads: "<attn>.k_scale" / "<attn>.v_scale" (compressed-tensors kv_cache_scheme),
 * "<attn>.k_proj.output_scale" / "<attn>.v_proj.output_scale", one "<attn>.kv_scale" for both, ModelOpt's
 * "<attn>.k_proj.k_scale" / "<attn>.v_proj.v_scale"); 1
 * where the checkpoint has none, as vLLM. */
static vllm_status kv_scales_load(model *m) {
    const int L = m->cfg.num_layers;
    const weight_names *nm = m->cfg.names ? m->cfg.names : &weight_names_llama;
    if (!(m->kv_scales = malloc((size_t)(L > 0 ? L : 1) * 2 * sizeof *m->kv_scales)))
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    const char *o = nm->o ? nm->o : "self_attn.o_proj", *dot = strrchr(o, '.');
    const int alen = dot ? (int)(dot - o) : (int)strlen(o); /* the attention module: "self_attn" */
    int found = 0;
    for (int l = 0; l < L; l++)
        for (int kv = 0; kv < 2; kv++) {
            const char *proj = kv ? nm->v : nm->k;
            char names[4][320];
            snprintf(names[0], sizeof names[0], "%slayers.%d.%.*s.%s", m->cfg.weight_prefix, l, alen, o,
                     kv ? "v_scale" : "k_scale");
            snprintf(names[1], sizeof names[1], "%slayers.%d.%s.output_scale", m->cfg.weight_prefix, l,
                     proj ? proj : "-");
            snprintf(names[2], sizeof names[2], "%slayers.%d.%.*s.kv_scale", m->cfg.weight_prefix, l, alen, o);
            snprintf(names[3], sizeof names[3], "%slayers.%d.%s.%s", m->cfg.weight_prefix, l, proj ? proj : "-",
                     kv ? "v_scale" : "k_scale"); /* ModelOpt's k_proj.k_scale / v_proj.v_scale */
            float s = 1.0f;
            for (int i = 0; i < 4; i++) {
                vllm_status st = m->ws ? ws_get_scalar(m->ws, names[i], &s) : VLLM_ERR_NOT_FOUND;
                if (st == VLLM_ERR_NOT_FOUND) {
                    vt_error_clear();
                    s = 1.0f;
                    continue;
                }
                if (st != VLLM_OK) return st;
                if (!(s > 0.0f) || !isfinite(s))
                    return vt_error(VLLM_ERR_FORMAT, "tensor '%s': a KV cache scale must be positive and finite, got %g",
                                    names[i], (double)s);
                found++;
                break;
            }
            m->kv_scales[2 * l + kv] = s;
        }
    if (found)
        LOG_I("FP8 KV cache (E4M3): %d of the %d k_scale / v_scale values from the checkpoint%s", found, 2 * L,
              found < 2 * L ? ", 1.0 for the others" : "");
    else
        LOG_I("FP8 KV cache (E4M3): no k_scale / v_scale in the checkpoint: scales 1.0 (as vLLM; values past +-448 "
              "saturate)");
    return VLLM_OK;
}

/* Tensor parallelism: the rank's share of the config (heads, KV heads, the MLP width), or why the model cannot be
 * split yet. What runs split: attention (full or sliding, per-head q / k norms, q / k / v biases) and the dense
 * MLP (gated or plain) of float checkpoints; the embeddings, norms and LM head are whole on every rank. */
static vllm_status tp_shard_config(model *m, model_config *c) {
    const int n = m->tp_size;
    const char *why = NULL;
    if (!m->be->ops->all_reduce) why = "the device has no all-reduce";
    else if (c->quant.method != QUANT_NONE) why = "quantized checkpoints are not split yet";
    else if (c->attn_output_gate || c->attn_sinks) why = "the attention's output gate / sinks are not split yet";
    else if (c->qk_norm && c->qk_norm_kind == QK_NORM_PROJ) why = "q / k norms over the whole projection need it whole";
    else if (c->o_bias || c->mlp_bias) why = "o_proj / down_proj biases are not split yet";
    else if (c->num_heads % n || (c->num_kv_heads % n && n % c->num_kv_heads))
        why = "the attention heads must divide by it, and the KV heads divide by it or it by them";
    for (int l = 0; !why && l < c->num_layers; l++)
        if (c->layers[l].kind != LAYER_ATTENTION)
            why = "only attention layers are split so far (MLA and linear-attention layers: not yet)";
        else if (c->layers[l].mlp != MLP_MOE && c->intermediate_size % n)
            why = "intermediate_size must divide by it";
        else if (c->layers[l].mlp == MLP_MOE && (c->moe.intermediate_size % n || c->moe.shared_intermediate_size % n ||
                                                 c->moe.expert_bias || c->shared_experts_size > 0))
            why = "MoE layers split their experts' width: moe_intermediate_size (and a shared expert's) must divide "
                  "by it; experts with biases and DeepSeek's shared experts: not yet";
    if (why)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor parallelism over %d ranks: %s (%d heads, %d KV heads, "
                        "intermediate_size %d)", c->architecture, n, why, c->num_heads, c->num_kv_heads,
                        c->intermediate_size);
    c->num_heads /= n; /* head_dim was fixed by the parse (hidden_size / num_heads by default) */
    if (c->num_kv_heads >= n) { /* split */
        m->tp_kv_shards = n;
        m->tp_kv_shard = m->tp_rank;
        c->num_kv_heads /= n;
    } else { /* fewer KV heads than ranks: each on n / kv ranks, as vLLM's QKVParallelLinear replicates them */
        m->tp_kv_shards = c->num_kv_heads;
        m->tp_kv_shard = m->tp_rank / (n / c->num_kv_heads);
        c->num_kv_heads = 1;
    }
    c->intermediate_size /= c->intermediate_size % n ? 1 : n; /* (an MoE-only model's may not divide: unused) */
    c->moe.shared_intermediate_size /= n; /* the experts' own width is sliced at load (block_moe.c) */
    return VLLM_OK;
}

vllm_status model_load(const char *dir, backend *be, const model_load_options *opt, model **out) {
    model_load_options defaults = {0};
    if (!opt) opt = &defaults;
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    m->be = be;
    m->no_lm_head = opt->no_lm_head;
    m->tp_size = opt->tp_size > 1 ? opt->tp_size : 1;
    m->tp_rank = opt->tp_rank;
    gguf_file *gf = NULL; /* a GGUF file: config and weights from it */
    vllm_status st;
    if (ggc_is_gguf_path(dir)) {
        char *json = NULL;
        const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
        if (!(st = gguf_open(dir, &gf)) && !(st = ggc_hf_config(gf, base, &json))) st = hf_config_parse(json, NULL, base, &m->cfg);
        free(json);
    } else {
        st = hf_config_load(dir, &m->cfg);
    }
    if (st != VLLM_OK) goto fail;
    if (m->tp_size > 1 && (opt->tp_rank < 0 || opt->tp_rank >= m->tp_size)) {
        st = vt_error(VLLM_ERR_INVALID_ARG, "tensor-parallel rank %d of %d", opt->tp_rank, m->tp_size);
        goto fail;
    }
    if (m->tp_size > 1 && (st = tp_shard_config(m, &m->cfg))) goto fail;
    if ((st = kv_cache_groups_plan(&m->cfg, &m->groups))) goto fail;
    m->arch = model_arch_find(m->cfg.architecture);
    if (!m->arch) {
        st = vt_error(VLLM_ERR_UNSUPPORTED, "%s/config.json: architecture '%s' is not supported (supported: %s)",
                      dir, m->cfg.architecture, model_arch_list());
        goto fail;
    }
    /* the RoPE table covers the positions the engine allows (max_model_len), not the config's
     * whole context (a 128k-context model at head_dim 128 would take 64 MB for it) */
    m->max_pos = opt->max_model_len > 0 ? opt->max_model_len : m->cfg.max_position_embeddings;
    LOG_I("loading %s (%s, %d layers, hidden %d)%s", dir, m->cfg.architecture, m->cfg.num_layers,
          m->cfg.hidden_size, opt->dummy ? " with dummy weights" : "");
    if (gf && !opt->dummy) {
        /* VLLM_GGUF_DEQUANTIZE=1: every block type dequantized to F32 at load (no activation quantization:
         * the float reference path, e.g. against transformers on gguf-py's dequantized weights) */
        const char *dq = getenv("VLLM_GGUF_DEQUANTIZE");
        st = ws_open_gguf(gf, dq && !strcmp(dq, "1") ? 0u : be->native_blocks, &m->ws); /* takes the file over */
        gf = NULL;
    } else {
        /* VLLM_FP8_DEQUANTIZE=1: an FP8 checkpoint's weights as F32 copies (no activation quantization: the
         * float reference path, against transformers on the dequantized weights) */
        const char *dq = getenv("VLLM_FP8_DEQUANTIZE"), *dq4 = getenv("VLLM_INT4_DEQUANTIZE");
        st = ws_open(dir, &m->cfg, opt->dummy, be->dummy_fill, opt->seed, &m->ws);
        if (st == VLLM_OK) /* (VLLM_INT4_DEQUANTIZE=1 likewise for AWQ / GPTQ's 4-bit weights) */
            ws_set_native_blocks(m->ws, be->native_blocks &
                                            ~(dq && !strcmp(dq, "1") ? 1u << (DTYPE_FP8_B128 - DTYPE_FIRST_BLOCK) : 0u) &
                                            ~(dq4 && !strcmp(dq4, "1") ? 1u << (DTYPE_I4_B128 - DTYPE_FIRST_BLOCK) : 0u));
    }
    if (st != VLLM_OK) goto fail;
    st = m->arch->build(m, m->ws);
    if (st == VLLM_OK && be->kv_dtype == DTYPE_F8_E4M3) st = kv_scales_load(m);
    else if (st == VLLM_OK && m->cfg.quant.kv_fp8_scales) /* vLLM too ignores them with the auto cache dtype */
        LOG_I("the checkpoint has FP8 KV-cache scales (kv_cache_scheme); the cache is %s: --kv-cache-dtype fp8 uses "
              "them", dtype_name(be->kv_dtype));
    if (st != VLLM_OK) goto fail;
    ws_log_summary(m->ws);
    if (m->tp_size > 1 && m->tp_rank == 0 && opt->tp_device && (st = model_tp_start(m, dir, opt))) goto fail;
    if (be->import_copies) { /* the device holds its own copy: drop the mapping / dummy buffers */
        ws_close(m->ws);
        m->ws = NULL;
        for (int i = 0; i < m->n_tp_bufs; i++) free(m->tp_bufs[i]); /* the row-parallel slices too */
        m->n_tp_bufs = 0;
    }
    *out = m;
    return VLLM_OK;
fail:
    gguf_close(gf);
    model_free(m);
    return st;
}

void model_free(model *m) {
    if (!m) return;
    model_tp_stop(m); /* the worker ranks first: their threads use the group */
    if (m->arch && m->impl) m->arch->destroy(m);
    graphs_free(m);
    model_buf_release(m->be, &m->meta);
    free(m->meta_host);
    ws_close(m->ws);
    free(m->kv_scales);
    for (int i = 0; i < m->n_tp_bufs; i++) free(m->tp_bufs[i]);
    free(m->tp_bufs);
    free(m);
}

const model_config *model_get_config(const model *m) { return &m->cfg; }

const kv_cache_groups *model_get_cache_groups(const model *m) { return &m->groups; }

size_t model_cache_bytes_per_token(const model *m) {
    /* a block holds one page per physical slot (with one group: per caching layer); a page is the group
     * spec's planes (K and V, or MLA's one latent plane) of its heads (every group has the same page size) */
    if (m->groups.num_groups == 0) return 0;
    const cache_spec *s = &m->groups.spec[0];
    size_t page = (size_t)cache_spec_planes(s) * (size_t)s->num_kv_heads * (size_t)s->head_dim *
                  dtype_size(m->be->kv_dtype);
    return page * (size_t)m->groups.group_size;
}

/* A linear-attention layer's pool shapes: conv (slots, conv_dim, K - 1), recurrent (slots, H_v, d_k, d_v),
 * conv_dim = 2 H_k d_k + H_v d_v (the q | k | v channels the conv runs over). */
static void state_shapes(const model_config *c, int num_state_slots, int64_t conv[3], int64_t ssm[4]) {
    const int64_t kd = (int64_t)c->linear_attn.num_k_heads * c->linear_attn.k_head_dim,
                  vd = (int64_t)c->linear_attn.num_v_heads * c->linear_attn.v_head_dim;
    conv[0] = num_state_slots;
    conv[1] = 2 * kd + vd;
    conv[2] = c->linear_attn.conv_kernel - 1;
    ssm[0] = num_state_slots;
    ssm[1] = c->linear_attn.num_v_heads;
    ssm[2] = c->linear_attn.k_head_dim;
    ssm[3] = c->linear_attn.v_head_dim;
}

vllm_status model_set_state_dtypes(model *m, dtype conv, dtype ssm) {
    for (int i = 0; i < 2; i++) {
        const dtype d = i ? ssm : conv;
        if (d != DTYPE_F32 && d != DTYPE_BF16 && d != DTYPE_F16)
            return vt_error(VLLM_ERR_INVALID_ARG, "recurrent state dtype %s: float32, bfloat16 or float16",
                            dtype_name(d));
    }
    m->conv_state_dtype = conv;
    m->ssm_state_dtype = ssm;
    return VLLM_OK;
}

void model_get_state_dtypes(const model *m, dtype *conv, dtype *ssm) {
    *conv = m->conv_state_dtype;
    *ssm = m->ssm_state_dtype;
}

size_t model_layer_state_bytes(const model *m) {
    if (!model_has_recurrent_state(m)) return 0;
    int64_t conv[3], ssm[4];
    state_shapes(&m->cfg, 1, conv, ssm);
    return (size_t)(conv[1] * conv[2]) * dtype_size(m->conv_state_dtype) +
           (size_t)(ssm[1] * ssm[2] * ssm[3]) * dtype_size(m->ssm_state_dtype);
}

size_t model_state_bytes(const model *m, int num_state_slots) {
    if (!model_has_recurrent_state(m) || num_state_slots <= 0) return 0;
    int64_t conv[3], ssm[4];
    state_shapes(&m->cfg, num_state_slots, conv, ssm);
    size_t per_layer = (size_t)(conv[0] * conv[1] * conv[2]) * dtype_size(m->conv_state_dtype) +
                       (size_t)(ssm[0] * ssm[1] * ssm[2] * ssm[3]) * dtype_size(m->ssm_state_dtype);
    size_t n = 0;
    for (int l = 0; l < m->cfg.num_layers; l++) n += m->cfg.layers[l].kind == LAYER_LINEAR_ATTENTION;
    return n * per_layer;
}

/* Per linear-attention layer of c, a conv and a recurrent pool of `slots` slots in the model's state dtypes,
 * zeroed, into the
 * per-layer arrays *conv_out / *ssm_out (allocated here); *bytes counts them. */
static vllm_status pools_create(model *m, model_cache *c, int slots, const char *what, tensor **conv_out,
                                tensor **ssm_out, size_t *bytes) {
    *conv_out = calloc((size_t)c->num_layers, sizeof **conv_out);
    *ssm_out = calloc((size_t)c->num_layers, sizeof **ssm_out);
    if (!*conv_out || !*ssm_out) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    int64_t conv[3], ssm[4];
    state_shapes(&m->cfg, slots, conv, ssm);
    backend *be = m->be;
    for (int l = 0; l < c->num_layers; l++) {
        if (m->cfg.layers[l].kind != LAYER_LINEAR_ATTENTION) continue;
        tensor *cv = &(*conv_out)[l], *sv = &(*ssm_out)[l];
        *cv = tensor_make(m->conv_state_dtype, NULL, 3, conv);
        *sv = tensor_make(m->ssm_state_dtype, NULL, 4, ssm);
        vllm_status st;
        if ((st = be->ops->alloc(be, cv)) || (st = be->ops->zero(be, cv)) || (st = be->ops->alloc(be, sv)) ||
            (st = be->ops->zero(be, sv))) {
            vt_error_prefix("%s (%d slots)", what, slots);
            return st;
        }
        *bytes += tensor_nbytes(cv) + tensor_nbytes(sv);
    }
    return VLLM_OK;
}

/* The state pools of c's linear-attention layers (slot 0, the null slot, stays zero) and their
 * checkpoint pools. */
static vllm_status state_pools_create(model *m, model_cache *c, int num_state_slots, int num_ckpt_slots) {
    if (!model_has_recurrent_state(m)) return VLLM_OK;
    if (num_state_slots < 2)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s keeps a recurrent state per sequence: the cache needs at least "
                        "2 state slots (the null slot and one sequence's)", m->cfg.architecture);
    if (num_ckpt_slots < 0) return vt_error(VLLM_ERR_INVALID_ARG, "%d state checkpoint slots", num_ckpt_slots);
    c->num_state_slots = num_state_slots;
    vllm_status st = pools_create(m, c, num_state_slots, "recurrent state", &c->conv_state, &c->ssm_state,
                                  &c->state_bytes);
    if (st != VLLM_OK || num_ckpt_slots == 0) return st;
    c->num_ckpt_slots = num_ckpt_slots;
    return pools_create(m, c, num_ckpt_slots, "state checkpoints", &c->ckpt_conv, &c->ckpt_ssm, &c->ckpt_bytes);
}

/* Copies every linear-attention layer's states between state slot `slot` and checkpoint `ckpt` (save:
 * into the checkpoint), as rows of the pools on the backend's stream. */
static vllm_status state_copy(model *m, model_cache *c, int slot, int ckpt, bool save) {
    if (slot < 1 || slot >= c->num_state_slots || ckpt < 0 || ckpt >= c->num_ckpt_slots)
        return vt_error(VLLM_ERR_INTERNAL, "state %s: slot %d / checkpoint %d outside the pools' %d / %d",
                        save ? "save" : "restore", slot, ckpt, c->num_state_slots, c->num_ckpt_slots);
    backend *be = m->be;
    if (!be->ops->copy) return vt_error(VLLM_ERR_UNSUPPORTED, "the %s backend cannot copy states", be->name);
    for (int l = 0; l < c->num_layers; l++) {
        if (!c->conv_state[l].data) continue;
        tensor sc = tensor_rows(&c->conv_state[l], slot, 1), cc = tensor_rows(&c->ckpt_conv[l], ckpt, 1);
        tensor ss = tensor_rows(&c->ssm_state[l], slot, 1), cs = tensor_rows(&c->ckpt_ssm[l], ckpt, 1);
        if (save) {
            be->ops->copy(be, &sc, &cc);
            be->ops->copy(be, &ss, &cs);
        } else {
            be->ops->copy(be, &cc, &sc);
            be->ops->copy(be, &cs, &ss);
        }
    }
    return VLLM_OK;
}

vllm_status model_state_save(model *m, model_cache *c, int slot, int ckpt) {
    return state_copy(m, c, slot, ckpt, true);
}

vllm_status model_state_restore(model *m, model_cache *c, int ckpt, int slot) {
    return state_copy(m, c, slot, ckpt, false);
}

vllm_status model_cache_create(model *m, int num_blocks, int block_size, int num_state_slots, int num_ckpt_slots,
                               model_cache **out) {
    return m->tp ? model_tp_cache_create(m, num_blocks, block_size, num_state_slots, num_ckpt_slots, out)
                 : model_cache_create_rank(m, num_blocks, block_size, num_state_slots, num_ckpt_slots, out);
}

vllm_status model_cache_create_rank(model *m, int num_blocks, int block_size, int num_state_slots,
                                    int num_ckpt_slots, model_cache **out) {
    *out = NULL;
    if (num_blocks <= 0 || block_size <= 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "KV cache: num_blocks and block_size must be positive");
    model_cache *c = calloc(1, sizeof *c);
    if (!c) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    c->num_blocks = num_blocks;
    c->block_size = block_size;
    c->num_layers = m->cfg.num_layers;
    c->num_slots = m->groups.group_size;
    c->k = calloc((size_t)c->num_layers, sizeof *c->k);
    c->v = calloc((size_t)c->num_layers, sizeof *c->v);
    c->slot_k = calloc((size_t)c->num_slots + 1, sizeof *c->slot_k);
    c->slot_v = calloc((size_t)c->num_slots + 1, sizeof *c->slot_v);
    if (!c->k || !c->v || !c->slot_k || !c->slot_v) {
        model_cache_free(m, c);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    /* one K and one V tensor per physical slot (vLLM's KVCacheTensor shared_by the slot's layers), shaped by
     * the groups' spec: (num_blocks, block_size, heads, head_dim); an MLA spec has its latent plane as K and no V */
    const cache_spec *spec = &m->groups.spec[0];
    for (int j = 0; j < c->num_slots; j++) {
        int64_t shape[4] = {num_blocks, block_size, spec->num_kv_heads, spec->head_dim};
        c->slot_k[j] = tensor_make(m->be->kv_dtype, NULL, 4, shape);
        vllm_status st = m->be->ops->alloc(m->be, &c->slot_k[j]);
        if (st == VLLM_OK && cache_spec_planes(spec) == 2) {
            c->slot_v[j] = tensor_make(m->be->kv_dtype, NULL, 4, shape);
            st = m->be->ops->alloc(m->be, &c->slot_v[j]);
        }
        if (st != VLLM_OK) {
            model_cache_free(m, c);
            vt_error_prefix("KV cache (%d blocks of %d tokens)", num_blocks, block_size);
            return st;
        }
        c->bytes += (size_t)cache_spec_planes(spec) * tensor_nbytes(&c->slot_k[j]);
    }
    for (int l = 0; l < c->num_layers; l++) {
        int j = m->groups.layer_slot[l];
        if (m->groups.layer_group[l] < 0 || j < 0) continue;
        c->k[l] = c->slot_k[j];
        c->v[l] = c->slot_v[j];
        if (m->kv_scales) c->k[l].qscale = m->kv_scales[2 * l], c->v[l].qscale = m->kv_scales[2 * l + 1];
    }
    vllm_status st = state_pools_create(m, c, num_state_slots, num_ckpt_slots);
    if (st != VLLM_OK) {
        model_cache_free(m, c);
        return st;
    }
    *out = c;
    return VLLM_OK;
}

void model_cache_free(model *m, model_cache *c) {
    if (m && m->tp) model_tp_cache_free(m, c);
    else model_cache_free_rank(m, c);
}

void model_cache_free_rank(model *m, model_cache *c) {
    if (!c) return;
    for (int j = 0; j < c->num_slots; j++) {
        if (c->slot_k && c->slot_k[j].data) m->be->ops->release(m->be, &c->slot_k[j]);
        if (c->slot_v && c->slot_v[j].data) m->be->ops->release(m->be, &c->slot_v[j]);
    }
    for (int l = 0; l < c->num_layers; l++) {
        tensor *pools[4] = {c->conv_state ? &c->conv_state[l] : NULL, c->ssm_state ? &c->ssm_state[l] : NULL,
                            c->ckpt_conv ? &c->ckpt_conv[l] : NULL, c->ckpt_ssm ? &c->ckpt_ssm[l] : NULL};
        for (int p = 0; p < 4; p++)
            if (pools[p] && pools[p]->data) m->be->ops->release(m->be, pools[p]);
    }
    free(c->conv_state);
    free(c->ssm_state);
    free(c->ckpt_conv);
    free(c->ckpt_ssm);
    free(c->slot_k);
    free(c->slot_v);
    free(c->k);
    free(c->v);
    free(c);
}
