/* model_tp_wire.c: a forward batch as bytes for another node's ranks (multi-host tensor parallelism), and back. */
#include <string.h>

#include "core/error.h"
#include "model/model_internal.h"

/* Layout: 8 int32 (T, S, G, max_blocks_per_seq, num_logits, hidden_out, has_state_slots, 0), then slot_mapping
 * (G' T int64, G' = max(G, 1)), token_ids (T), positions (T), query_start_loc (S + 1), seq_lens (S), block_tables
 * (G' S max_blocks), state_slots (S, when present), logits_indices (num_logits), int32 each. */
enum { HDR = 8 };

static int groups_of(const fwd_batch *b) { return b->num_kv_groups > 0 ? b->num_kv_groups : 1; }

size_t tpw_batch_bytes(const fwd_batch *b) {
    const size_t T = (size_t)b->num_tokens, S = (size_t)b->num_seqs, G = (size_t)groups_of(b);
    const size_t n32 = HDR + 2 * T + (S + 1) + S + G * S * (size_t)b->max_blocks_per_seq + (b->state_slots ? S : 0) +
                       (size_t)b->num_logits;
    return G * T * sizeof(int64_t) + n32 * sizeof(int32_t);
}

static char *put(char *p, const void *src, size_t bytes) {
    if (bytes) memcpy(p, src, bytes);
    return p + bytes;
}

void tpw_batch_pack(const fwd_batch *b, void *out) {
    const size_t T = (size_t)b->num_tokens, S = (size_t)b->num_seqs, G = (size_t)groups_of(b);
    const int32_t h[HDR] = {b->num_tokens, b->num_seqs, b->num_kv_groups, b->max_blocks_per_seq, b->num_logits,
                            b->hidden_out, b->state_slots != NULL, 0};
    char *p = put(out, h, sizeof h);
    p = put(p, b->slot_mapping, G * T * sizeof(int64_t));
    p = put(p, b->token_ids, T * 4);
    p = put(p, b->positions, T * 4);
    p = put(p, b->query_start_loc, (S + 1) * 4);
    p = put(p, b->seq_lens, S * 4);
    p = put(p, b->block_tables, G * S * (size_t)b->max_blocks_per_seq * 4);
    if (b->state_slots) p = put(p, b->state_slots, S * 4);
    put(p, b->logits_indices, (size_t)b->num_logits * 4);
}

vllm_status tpw_batch_unpack(const void *buf, size_t len, fwd_batch *b) {
    memset(b, 0, sizeof *b);
    if (len < HDR * sizeof(int32_t)) return vt_error(VLLM_ERR_FORMAT, "a forward batch from node 0: %zu bytes", len);
    int32_t h[HDR];
    memcpy(h, buf, sizeof h);
    if (h[0] < 0 || h[1] < 0 || h[2] < 0 || h[2] > KV_MAX_GROUPS || h[3] < 0 || h[4] < 0 || (h[5] | h[6]) & ~1)
        return vt_error(VLLM_ERR_FORMAT, "a forward batch from node 0 with bad sizes");
    *b = (fwd_batch){.num_tokens = h[0], .num_seqs = h[1], .num_kv_groups = h[2], .max_blocks_per_seq = h[3],
                     .num_logits = h[4], .hidden_out = h[5] != 0};
    const size_t T = (size_t)h[0], S = (size_t)h[1], G = (size_t)groups_of(b);
    b->state_slots = h[6] ? (const int32_t *)buf : NULL; /* (a placeholder for the size; set below) */
    if (tpw_batch_bytes(b) != len)
        return vt_error(VLLM_ERR_FORMAT, "a forward batch from node 0: %zu bytes for its sizes' %zu", len,
                        tpw_batch_bytes(b));
    const char *p = (const char *)buf + sizeof h;
    b->slot_mapping = (const int64_t *)p; /* 8-aligned: the buffer is malloc's, the header 32 bytes */
    p += G * T * sizeof(int64_t);
    b->token_ids = (const int32_t *)p, p += T * 4;
    b->positions = (const int32_t *)p, p += T * 4;
    b->query_start_loc = (const int32_t *)p, p += (S + 1) * 4;
    b->seq_lens = (const int32_t *)p, p += S * 4;
    b->block_tables = (const int32_t *)p, p += G * S * (size_t)b->max_blocks_per_seq * 4;
    if (h[6]) b->state_slots = (const int32_t *)p, p += S * 4;
    b->logits_indices = (const int32_t *)p;
    return VLLM_OK;
}
