/*
 * stream.c: incremental detokenization for streaming (tok_stream), vLLM's scheme
 * (vllm/transformers_utils/detokenizer_utils.py: convert_prompt_ids_to_tokens and
 * detokenize_incrementally).
 *
 * The stream keeps the request's ids (special ones dropped when skip_special) and two offsets:
 *   prefix: start of the window that is decoded (a few tokens of context before read),
 *   read:   end of what has already been emitted.
 * On each new id: new  = decode(ids[prefix:]), prev = decode(ids[prefix:read]); when new is
 * longer than prev and does not end in U+FFFD (maybe an unfinished UTF-8 sequence), the piece
 * is new[len(prev):] and the offsets move to (read, n). Decoding a window rather than the
 * whole list keeps context-sensitive decoders (Metaspace's first-token space, Strip) consistent:
 * both decodes start at the same token, so their difference is the full decode's difference.
 */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/internal.h"

/* vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: the prompt's last ids that start the window. */
#define STREAM_INITIAL_OFFSET 5
/* Text ending in U+FFFD is held back while at most this many tokens wait past read: an
 * unfinished UTF-8 sequence is at most 3 bytes, every token adds at least one, so more
 * waiting tokens mean the U+FFFD is final (and the window stays short on garbage ids). */
#define STREAM_HOLD_MAX 8
/* How far the initial window start may move back to reach a character boundary. */
#define STREAM_BACK_MAX 4
/* The id list is compacted once this many ids before prefix are no longer needed. */
#define STREAM_COMPACT 256

struct tok_stream {
    const tokenizer *tok;
    bool skip_special;
    int32_t *ids; /* ids still needed: ids[0] is the oldest one kept */
    size_t n, cap;
    size_t prefix, read; /* offsets into ids */
};

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (stream)"); }

/* An id that adds a token to the list: in the vocabulary, with a piece, not a skipped special. */
static bool keeps(const tok_stream *s, int32_t id) {
    if (!tok_id_to_piece(s->tok, id)) return false;
    return !(s->skip_special && tok_is_special(s->tok, id));
}

static vllm_status push_id(tok_stream *s, int32_t id) {
    if (s->n == s->cap) {
        if (s->prefix >= STREAM_COMPACT) { /* drop ids no window will read again */
            memmove(s->ids, s->ids + s->prefix, (s->n - s->prefix) * sizeof(int32_t));
            s->n -= s->prefix;
            s->read -= s->prefix;
            s->prefix = 0;
        }
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            if (cap > SIZE_MAX / sizeof(int32_t)) return oom();
            int32_t *p = realloc(s->ids, cap * sizeof(int32_t));
            if (!p) return oom();
            s->ids = p;
            s->cap = cap;
        }
    }
    s->ids[s->n++] = id;
    return VLLM_OK;
}

vllm_status tok_stream_create(const tokenizer *tok, const int32_t *prompt, size_t n_prompt, bool skip_special,
                              tok_stream **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_create: NULL output");
    *out = NULL;
    if (!tok || (!prompt && n_prompt)) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_create: NULL argument");
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return oom();
    s->tok = tok;
    s->skip_special = skip_special;
    /* As convert_prompt_ids_to_tokens: the prompt's last ids (specials dropped) are already
     * read; the window starts OFFSET tokens before their end. A few more ids are kept so that
     * the start can move back to a character boundary (below). */
    size_t keep = STREAM_INITIAL_OFFSET + 2 + STREAM_BACK_MAX;
    size_t first = n_prompt > keep ? n_prompt - keep : 0;
    vllm_status st = VLLM_OK;
    for (size_t i = first; i < n_prompt && !st; i++)
        if (keeps(s, prompt[i])) st = push_id(s, prompt[i]);
    s->read = s->n;
    s->prefix = s->n > STREAM_INITIAL_OFFSET ? s->n - STREAM_INITIAL_OFFSET : 0;
    /* A window starting inside a character (a byte token continuing the one before) decodes to
     * U+FFFD there, and with ByteFallback it spoils the whole byte run: start earlier instead. */
    for (int k = 0; k < STREAM_BACK_MAX && s->prefix > 0 && !st; k++) {
        char *text = NULL;
        size_t len = 0;
        st = tok_decode_ex(tok, s->ids + s->prefix, s->read - s->prefix, false, false, &text, &len);
        bool bad = !st && len >= 3 && memcmp(text, "\xEF\xBF\xBD", 3) == 0;
        free(text);
        if (!bad) break;
        s->prefix--;
    }
    if (st) {
        tok_stream_free(s);
        return st;
    }
    *out = s;
    return VLLM_OK;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->ids);
    free(s);
}

static vllm_status empty_piece(char **piece, size_t *len) {
    if (len) *len = 0;
    *piece = malloc(1);
    if (!*piece) return oom();
    (*piece)[0] = '\0';
    return VLLM_OK;
}

static bool ends_with_fffd(const char *t, size_t len) {
    return len >= 3 && memcmp(t + len - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Decodes the window and emits new[len(prev):] when allowed (force: even if it ends in U+FFFD). */
static vllm_status advance(tok_stream *s, bool force, char **piece, size_t *len) {
    char *prev = NULL, *cur = NULL;
    size_t prev_len = 0, cur_len = 0;
    vllm_status st = tok_decode_ex(s->tok, s->ids + s->prefix, s->read - s->prefix, false, false, &prev, &prev_len);
    if (!st) st = tok_decode_ex(s->tok, s->ids + s->prefix, s->n - s->prefix, false, false, &cur, &cur_len);
    if (st) {
        free(prev);
        free(cur);
        return st;
    }
    bool patient = !force && s->n - s->read <= STREAM_HOLD_MAX;
    if (cur_len <= prev_len) { /* nothing new (yet): a token that decodes to no text */
        st = empty_piece(piece, len);
        if (!st && !patient) {
            s->prefix = s->read;
            s->read = s->n;
        }
    } else if (patient && ends_with_fffd(cur, cur_len)) {
        st = empty_piece(piece, len);
    } else {
        /* new normally starts with prev; if a decoder rewrote it, cut at the next char boundary
         * after len(prev) (as vLLM's slice by length) so the piece stays valid UTF-8. */
        size_t at = prev_len;
        while (at < cur_len && ((unsigned char)cur[at] & 0xC0) == 0x80) at++;
        tok_buf b = {0};
        if (tok_utf8_valid(cur + at, cur_len - at)) st = tok_buf_append(&b, cur + at, cur_len - at);
        else st = tok_utf8_lossy(cur + at, cur_len - at, &b);
        if (!st && !b.data) st = tok_buf_append(&b, "", 0);
        if (st) {
            tok_buf_free(&b);
        } else {
            *piece = b.data;
            if (len) *len = b.len;
        }
        if (!st) {
            s->prefix = s->read;
            s->read = s->n;
        }
    }
    free(prev);
    free(cur);
    return st;
}

vllm_status tok_stream_push(tok_stream *s, int32_t id, char **piece, size_t *len) {
    if (len) *len = 0;
    if (!piece) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_push: NULL output");
    *piece = NULL;
    if (!s) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_push: NULL stream");
    if (!keeps(s, id)) return empty_piece(piece, len);
    vllm_status st = push_id(s, id);
    if (st) return st;
    return advance(s, false, piece, len);
}

vllm_status tok_stream_finish(tok_stream *s, char **piece, size_t *len) {
    if (len) *len = 0;
    if (!piece) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_finish: NULL output");
    *piece = NULL;
    if (!s) return vt_error(VLLM_ERR_INVALID_ARG, "tok_stream_finish: NULL stream");
    if (s->read == s->n) return empty_piece(piece, len);
    return advance(s, true, piece, len);
}
