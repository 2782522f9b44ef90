/*
 * model.c: loading a model folder (config -> registry -> weights), the
 * paged KV cache tensors and the per-step metadata upload.
 */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "loader/hf_config.h"
#include "model/model_internal.h"

vllm_status model_buf_ensure(backend *be, ws_buf *buf, dtype dt, int64_t rows, int64_t cols, tensor *out) {
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
    }
    *out = tensor_2d(dt, buf->t.data, rows, cols);
    return VLLM_OK;
}

void model_buf_release(backend *be, ws_buf *buf) {
    if (buf->t.data) be->ops->release(be, &buf->t);
    memset(buf, 0, sizeof *buf);
}

static vllm_status upload_array(model *m, ws_buf *buf, dtype dt, int64_t rows, int64_t cols,
                                const void *src, tensor *out) {
    vllm_status st = model_buf_ensure(m->be, buf, dt, rows, cols, out);
    if (st != VLLM_OK) return st;
    size_t n = (size_t)(rows * cols) * dtype_size(dt);
    if (n == 0) return VLLM_OK;
    return m->be->ops->upload(m->be, out, src, n);
}

vllm_status model_upload_batch(model *m, const fwd_batch *b, int block_size, model_step *s) {
    int T = b->num_tokens, S = b->num_seqs;
    if (T <= 0 || S <= 0 || b->num_logits < 0 || b->num_logits > T)
        return vt_error(VLLM_ERR_INTERNAL, "forward: empty or inconsistent batch");
    for (int i = 0; i < T; i++) {
        if (b->token_ids[i] < 0 || b->token_ids[i] >= m->cfg.vocab_size)
            return vt_error(VLLM_ERR_INVALID_ARG, "token id %d out of range [0, %d)", b->token_ids[i],
                            m->cfg.vocab_size);
        if (b->positions[i] < 0 || b->positions[i] >= m->max_pos)
            return vt_error(VLLM_ERR_TOO_LONG, "position %d beyond the model's %d", b->positions[i],
                            m->max_pos);
    }
    vllm_status st;
    memset(s, 0, sizeof *s);
    if ((st = upload_array(m, &m->ids, DTYPE_I32, T, 1, b->token_ids, &s->ids)) ||
        (st = upload_array(m, &m->positions, DTYPE_I32, T, 1, b->positions, &s->positions)) ||
        (st = upload_array(m, &m->logits_idx, DTYPE_I32, b->num_logits, 1, b->logits_indices,
                           &s->logits_idx)) ||
        (st = upload_array(m, &m->qsl, DTYPE_I32, S + 1, 1, b->query_start_loc,
                           &s->meta.query_start_loc)) ||
        (st = upload_array(m, &m->seq_lens, DTYPE_I32, S, 1, b->seq_lens, &s->meta.seq_lens)) ||
        (st = upload_array(m, &m->block_tables, DTYPE_I32, S, b->max_blocks_per_seq, b->block_tables,
                           &s->meta.block_tables)) ||
        (st = upload_array(m, &m->slots, DTYPE_I64, T, 1, b->slot_mapping, &s->meta.slot_mapping)))
        return st;
    /* 1-D views */
    s->ids.ndim = s->positions.ndim = s->logits_idx.ndim = 1;
    s->meta.query_start_loc.ndim = s->meta.seq_lens.ndim = s->meta.slot_mapping.ndim = 1;
    s->logits_idx.shape[0] = b->num_logits;
    s->meta.num_seqs = S;
    s->meta.num_tokens = T;
    s->meta.block_size = block_size;
    s->meta.max_blocks_per_seq = b->max_blocks_per_seq;
    for (int i = 0; i < S; i++) {
        int q = b->query_start_loc[i + 1] - b->query_start_loc[i];
        if (q > s->meta.max_query_len) s->meta.max_query_len = q;
        if (b->seq_lens[i] > s->meta.max_seq_len) s->meta.max_seq_len = b->seq_lens[i];
    }
    return VLLM_OK;
}

vllm_status model_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq) {
    tensor t;
    vllm_status st;
    if ((st = model_buf_ensure(m->be, &m->ids, DTYPE_I32, max_tokens, 1, &t)) ||
        (st = model_buf_ensure(m->be, &m->positions, DTYPE_I32, max_tokens, 1, &t)) ||
        (st = model_buf_ensure(m->be, &m->logits_idx, DTYPE_I32, max_tokens, 1, &t)) ||
        (st = model_buf_ensure(m->be, &m->qsl, DTYPE_I32, max_seqs + 1, 1, &t)) ||
        (st = model_buf_ensure(m->be, &m->seq_lens, DTYPE_I32, max_seqs, 1, &t)) ||
        (st = model_buf_ensure(m->be, &m->block_tables, DTYPE_I32, max_seqs, max_blocks_per_seq, &t)) ||
        (st = model_buf_ensure(m->be, &m->slots, DTYPE_I64, max_tokens, 1, &t)))
        return st;
    return m->arch->reserve ? m->arch->reserve(m, max_tokens, max_seqs) : VLLM_OK;
}

vllm_status model_load(const char *dir, backend *be, const model_load_options *opt, model **out) {
    model_load_options defaults = {0};
    if (!opt) opt = &defaults;
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    m->be = be;
    vllm_status st = hf_config_load(dir, &m->cfg);
    if (st != VLLM_OK) goto fail;
    m->arch = model_arch_find(m->cfg.architecture);
    if (!m->arch) {
        st = vt_error(VLLM_ERR_UNSUPPORTED, "%s/config.json: architecture '%s' is not supported (supported: %s)",
                      dir, m->cfg.architecture, model_arch_list());
        goto fail;
    }
    m->max_pos = m->cfg.max_position_embeddings;
    if (opt->max_model_len > m->max_pos) m->max_pos = opt->max_model_len;
    LOG_I("loading %s (%s, %d layers, hidden %d)%s", dir, m->cfg.architecture, m->cfg.num_layers,
          m->cfg.hidden_size, opt->dummy ? " with dummy weights" : "");
    st = ws_open(dir, &m->cfg, opt->dummy, opt->seed, &m->ws);
    if (st != VLLM_OK) goto fail;
    st = m->arch->build(m, m->ws);
    if (st != VLLM_OK) goto fail;
    if (be->import_copies) { /* the device holds its own copy: drop the mapping / dummy buffers */
        ws_close(m->ws);
        m->ws = NULL;
    }
    *out = m;
    return VLLM_OK;
fail:
    model_free(m);
    return st;
}

void model_free(model *m) {
    if (!m) return;
    if (m->arch && m->impl) m->arch->destroy(m);
    ws_buf *bufs[] = {&m->ids, &m->positions, &m->logits_idx, &m->qsl, &m->seq_lens, &m->block_tables, &m->slots};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) model_buf_release(m->be, bufs[i]);
    ws_close(m->ws);
    free(m);
}

const model_config *model_get_config(const model *m) { return &m->cfg; }

size_t model_cache_bytes_per_token(const model *m) {
    size_t per_layer = 2 * (size_t)m->cfg.num_kv_heads * (size_t)m->cfg.head_dim * dtype_size(m->be->kv_dtype);
    size_t n = 0;
    for (int l = 0; l < m->cfg.num_layers; l++)
        if (m->cfg.layer_kinds[l] == LAYER_ATTENTION) n += per_layer;
    return n;
}

vllm_status model_cache_create(model *m, int num_blocks, int block_size, model_cache **out) {
    *out = NULL;
    if (num_blocks <= 0 || block_size <= 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "KV cache: num_blocks and block_size must be positive");
    model_cache *c = calloc(1, sizeof *c);
    if (!c) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    c->num_blocks = num_blocks;
    c->block_size = block_size;
    c->num_layers = m->cfg.num_layers;
    c->k = calloc((size_t)c->num_layers, sizeof *c->k);
    c->v = calloc((size_t)c->num_layers, sizeof *c->v);
    if (!c->k || !c->v) {
        model_cache_free(m, c);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    for (int l = 0; l < c->num_layers; l++) {
        if (m->cfg.layer_kinds[l] != LAYER_ATTENTION) continue;
        int64_t shape[4] = {num_blocks, block_size, m->cfg.num_kv_heads, m->cfg.head_dim};
        c->k[l] = tensor_make(m->be->kv_dtype, NULL, 4, shape);
        c->v[l] = tensor_make(m->be->kv_dtype, NULL, 4, shape);
        vllm_status st = m->be->ops->alloc(m->be, &c->k[l]);
        if (st == VLLM_OK) st = m->be->ops->alloc(m->be, &c->v[l]);
        if (st != VLLM_OK) {
            model_cache_free(m, c);
            vt_error_prefix("KV cache (%d blocks of %d tokens)", num_blocks, block_size);
            return st;
        }
        c->bytes += 2 * tensor_nbytes(&c->k[l]);
    }
    *out = c;
    return VLLM_OK;
}

void model_cache_free(model *m, model_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->num_layers; l++) {
        if (c->k && c->k[l].data) m->be->ops->release(m->be, &c->k[l]);
        if (c->v && c->v[l].data) m->be->ops->release(m->be, &c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

vllm_status model_forward(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits) {
    vllm_status st = m->arch->forward(m, cache, b, logits);
    if (st != VLLM_OK) return st;
    /* ops report failures (bad arguments, device errors) at the next synchronize */
    return m->be->ops->synchronize(m->be);
}
