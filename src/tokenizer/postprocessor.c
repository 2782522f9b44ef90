/*
 * postprocessor.c: tokenizer.json "post_processor" components, applied when encoding with
 * add_special: TemplateProcessing (the single-sequence template), BertProcessing and
 * RobertaProcessing ([cls] $A [sep]), ByteLevel (offsets only: a no-op for ids) and Sequence.
 * Other types are VLLM_ERR_UNSUPPORTED at load.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

typedef enum tok_post_type {
    TOK_POST_TEMPLATE, /* also Bert / Roberta, turned into a template at load */
    TOK_POST_BYTELEVEL,
    TOK_POST_SEQUENCE,
} tok_post_type;

/* One template piece: the input sequence, or the ids of a special token. */
typedef struct tok_post_item {
    bool is_sequence;
    int32_t *ids;
    size_t n_ids;
} tok_post_item;

struct tok_postprocessor {
    tok_post_type type;
    tok_post_item *single;
    size_t n_single;
    tok_postprocessor **children;
    size_t n_children;
};

void tok_postprocessor_free(tok_postprocessor *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_single; i++) free(p->single[i].ids);
    free(p->single);
    for (size_t i = 0; i < p->n_children; i++) tok_postprocessor_free(p->children[i]);
    free(p->children);
    free(p);
}

static vllm_status oom(void) { return vt_error(VLLM_ERR_NO_MEMORY, "tokenizer: out of memory (post_processor)"); }

static vllm_status item_ids(tok_post_item *it, const int32_t *ids, size_t n) {
    it->ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!it->ids) return oom();
    if (n) memcpy(it->ids, ids, n * sizeof(int32_t));
    it->n_ids = n;
    return VLLM_OK;
}

static vllm_status check_id(json_t *v, const char *path, int32_t *id) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_MAX_ID)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be a token id in [0, %d)", path, TOK_MAX_ID);
    *id = (int32_t)json_integer_value(v);
    return VLLM_OK;
}

/* Resolves special token `name` through the template's special_tokens map. */
static vllm_status special_ids(json_t *specials, const char *name, const char *path, tok_post_item *it) {
    json_t *sp = json_is_object(specials) ? json_object_get(specials, name) : NULL;
    if (!sp)
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: missing SpecialToken '%s' in special_tokens", path, name);
    json_t *ids = json_object_get(sp, "ids");
    if (!json_is_array(ids))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.special_tokens['%s'].ids must be an array", path, name);
    size_t n = json_array_size(ids);
    it->ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!it->ids) return oom();
    for (size_t i = 0; i < n; i++) {
        char sub[TOK_PATH_MAX];
        tok_pathf(sub, "%s.special_tokens['%s'].ids[%zu]", path, name, i);
        vllm_status st = check_id(json_array_get(ids, i), sub, &it->ids[i]);
        if (st) return st;
        it->n_ids++;
    }
    return VLLM_OK;
}

/* A template piece: {"Sequence": {"id": "A", ...}}, {"SpecialToken": {"id": name, ...}}, or the
 * string forms "$A", "$B", "$0", "name", each optionally with ":type_id". */
static vllm_status load_piece(json_t *piece, json_t *specials, const char *path, const char *ipath,
                              tok_post_item *it) {
    const char *seq = NULL, *name = NULL;
    char *buf = NULL; /* string form, without its ":type_id" */
    if (json_is_object(piece)) {
        json_t *s = json_object_get(piece, "Sequence"), *t = json_object_get(piece, "SpecialToken");
        if (s) {
            seq = json_string_value(json_object_get(s, "id"));
            if (!seq) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.Sequence.id must be a string", ipath);
        } else if (t) {
            name = json_string_value(json_object_get(t, "id"));
            if (!name) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.SpecialToken.id must be a string", ipath);
        } else {
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be a Sequence or a SpecialToken", ipath);
        }
    } else if (json_is_string(piece)) {
        const char *str = json_string_value(piece);
        vllm_status st = tok_strndup(str, strcspn(str, ":"), &buf);
        if (st) return st;
        if (buf[0] == '$') {
            const char *r = buf + 1;
            seq = (*r == '\0' || strcmp(r, "A") == 0 || strcmp(r, "a") == 0 || strspn(r, "0123456789") == strlen(r))
                      ? "A" : (strcmp(r, "B") == 0 || strcmp(r, "b") == 0) ? "B" : NULL;
            if (!seq) {
                st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: bad template piece '%s'", ipath, str);
                free(buf);
                return st;
            }
        } else {
            name = buf;
        }
    } else {
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s must be an object or a string", ipath);
    }
    vllm_status st = VLLM_OK;
    if (seq && strcmp(seq, "A") != 0)
        st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s: the single template may only use sequence A", ipath);
    else if (seq)
        it->is_sequence = true;
    else
        st = special_ids(specials, name, path, it);
    free(buf);
    return st;
}

static vllm_status load_template(tok_postprocessor *p, json_t *j, const char *path) {
    json_t *single = json_object_get(j, "single");
    json_t *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single)) return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.single must be an array", path);
    if (specials && !json_is_object(specials))
        return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.special_tokens must be an object", path);
    size_t n = json_array_size(single);
    p->single = calloc(n ? n : 1, sizeof *p->single);
    if (!p->single) return oom();
    for (size_t i = 0; i < n; i++) {
        char ipath[TOK_PATH_MAX];
        tok_pathf(ipath, "%s.single[%zu]", path, i);
        vllm_status st = load_piece(json_array_get(single, i), specials, path, ipath, &p->single[i]);
        p->n_single++; /* counted even on failure so free releases its ids */
        if (st) return st;
    }
    return VLLM_OK;
}

/* Bert/Roberta: "cls": [token, id], "sep": [token, id] -> single = cls $A sep. */
static vllm_status load_cls_sep(tok_postprocessor *p, json_t *j, const char *path) {
    static const char *keys[2] = {"cls", "sep"};
    int32_t ids[2];
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(j, keys[k]);
        char sub[TOK_PATH_MAX];
        tok_pathf(sub, "%s.%s[1]", path, keys[k]);
        if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(json_array_get(v, 0)))
            return vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.%s must be [token, id]", path, keys[k]);
        vllm_status st = check_id(json_array_get(v, 1), sub, &ids[k]);
        if (st) return st;
    }
    p->single = calloc(3, sizeof *p->single);
    if (!p->single) return oom();
    p->n_single = 3;
    p->single[1].is_sequence = true;
    vllm_status st = item_ids(&p->single[0], &ids[0], 1);
    return st ? st : item_ids(&p->single[2], &ids[1], 1);
}

vllm_status tok_postprocessor_load(json_t *j, const char *path, tok_postprocessor **out) {
    *out = NULL;
    const char *type;
    vllm_status st = tok_json_type(j, path, &type);
    if (st) return st;
    tok_postprocessor *p = calloc(1, sizeof *p);
    if (!p) return oom();
    if (strcmp(type, "TemplateProcessing") == 0) {
        p->type = TOK_POST_TEMPLATE;
        st = load_template(p, j, path);
    } else if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        p->type = TOK_POST_TEMPLATE;
        st = load_cls_sep(p, j, path);
    } else if (strcmp(type, "ByteLevel") == 0) {
        p->type = TOK_POST_BYTELEVEL;
    } else if (strcmp(type, "Sequence") == 0) {
        p->type = TOK_POST_SEQUENCE;
        json_t *arr = json_object_get(j, "processors");
        if (!json_is_array(arr)) {
            st = vt_error(VLLM_ERR_FORMAT, TOK_FILE ": %s.processors must be an array", path);
        } else {
            size_t n = json_array_size(arr);
            p->children = calloc(n ? n : 1, sizeof *p->children);
            if (!p->children) st = oom();
            for (size_t i = 0; i < n && !st; i++) {
                char sub[TOK_PATH_MAX];
                tok_pathf(sub, "%s.processors[%zu]", path, i);
                st = tok_postprocessor_load(json_array_get(arr, i), sub, &p->children[i]);
                if (!st) p->n_children++;
            }
        }
    } else {
        st = vt_error(VLLM_ERR_UNSUPPORTED, TOK_FILE ": %s type '%s' not supported yet", path, type);
    }
    if (st) {
        tok_postprocessor_free(p);
        return st;
    }
    *out = p;
    return VLLM_OK;
}

bool tok_postprocessor_adds_tokens(const tok_postprocessor *p) {
    if (!p) return false;
    if (p->type == TOK_POST_TEMPLATE) return true;
    for (size_t i = 0; i < p->n_children; i++)
        if (tok_postprocessor_adds_tokens(p->children[i])) return true;
    return false;
}

vllm_status tok_postprocessor_apply(const tok_postprocessor *p, tok_ids *ids) {
    vllm_status st = VLLM_OK;
    if (p->type == TOK_POST_SEQUENCE) {
        for (size_t i = 0; i < p->n_children && !st; i++) st = tok_postprocessor_apply(p->children[i], ids);
        return st;
    }
    if (p->type != TOK_POST_TEMPLATE) return VLLM_OK;
    tok_ids out = {0};
    for (size_t i = 0; i < p->n_single && !st; i++) {
        const tok_post_item *it = &p->single[i];
        const int32_t *src = it->is_sequence ? ids->data : it->ids;
        size_t n = it->is_sequence ? ids->n : it->n_ids;
        for (size_t k = 0; k < n && !st; k++) st = tok_ids_push(&out, src[k]);
    }
    if (st) {
        tok_ids_free(&out);
        return st;
    }
    tok_ids_free(ids);
    *ids = out;
    return VLLM_OK;
}
