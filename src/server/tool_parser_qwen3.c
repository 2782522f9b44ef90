/*
 * tool_parser_qwen3.c: the qwen3_coder and qwen3_xml parsers (Qwen3-Coder's
 * <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>), values typed by
 * the request's tool schemas.
 *
 * qwen3_coder follows vllm/tool_parsers/qwen3coder_tool_parser.py@0b13f933 (Qwen3CoderToolParser):
 * - _get_function_calls: the blocks of <tool_call>(.*?)</tool_call>|<tool_call>(.*?)$ (DOTALL; `$` also
 *   matches before a final newline, so an unclosed last block drops the text's final "\n"); no block -> the
 *   whole text; in each block the functions of <function=(.*?)</function>|<function=(.*)$.
 * - _parse_xml_function_call: the name is the text before the first ">" (none: ValueError -> no tools at
 *   all); parameters are <parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$) over the rest,
 *   each "NAME>VALUE" (no ">": ValueError), the value losing one leading and one trailing "\n";
 *   arguments = json.dumps(dict, ensure_ascii=False) (a repeated parameter keeps its first place, last value).
 * - _convert_param_value by the tool's parameters.properties[P].type (str(type).strip().lower()): "null"
 *   (any case) -> None; a parameter not in the schema -> the string; string/str/text/varchar/char/enum ->
 *   the string; names starting int, uint, long, short, unsigned -> int(value) or the string; num.., float.. -> float(value),
 *   an int when integral, the string when float() fails or on NaN, and inf (OverflowError, uncaught) makes
 *   the whole extraction fail; boolean/bool/binary -> value.lower() == "true"; object/array/arr/dict../list..
 *   -> json.loads, then ast.literal_eval, else the string; any other type -> ast.literal_eval or the string.
 * - content = the text before the first <tool_call> (or the first <function= when there is no
 *   <tool_call>), None when empty; ids: ToolCall's default "chatcmpl-tool-<32 hex>" (non-streaming),
 *   _generate_tool_call_id "call_<24 hex>" (streaming).
 * - streaming: the header (id, name, arguments "") once the function name is complete, then each
 *   parameter as it completes ('{"P": v' or ', "P": v'), "}" (or "{}") at </function>: the
 *   fragments join to the non-streaming string (vLLM's newest parser streams the same pieces). Before any
 *   <tool_call> a bare <function= starts a call (the non-streaming fallback when no block exists);
 *   afterwards bare functions are ignored, as the non-streaming path ignores them once a block exists.
 *
 * qwen3_xml follows vllm/tool_parsers/qwen3xml_tool_parser.py@d0ac5791 (an expat-based streaming parser,
 * StreamingXMLToolCallParser) for what reaches the client, with the call structure of qwen3_coder above
 * (an approximation of the expat element splitting, identical on well-formed output):
 * - parameter types by _get_param_type + repair_param_type (unknown or non-lowercase types -> "string");
 *   values: string types -> a JSON string ("null" -> ""); int / num / bool as qwen3_coder's rules;
 *   array/arr/sequence/dict../list.. (and object values holding a bracket and a single quote) -> deferred:
 *   ast.literal_eval then json.dumps, else a JSON string; other object values -> the raw text inserted as is.
 *   Where vLLM would insert text that is not JSON (a failed int or float, a non-string "null", an object
 *   that is not JSON) this port writes a JSON string instead (the null of a non-string type: null).
 * - arguments are built as text, a repeated parameter kept twice; ids "chatcmpl-tool-<32 hex>";
 *   content = the text before the first call plus any non-blank text between </tool_call> and the next
 *   <tool_call> (_end_element("tool_call")).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/tool_parser_internal.h"

static const char TC_OPEN[] = "<tool_call>", TC_CLOSE[] = "</tool_call>";
static const char FN_OPEN[] = "<function=", FN_CLOSE[] = "</function>";
static const char P_OPEN[] = "<parameter=", P_CLOSE[] = "</parameter>";

/* ------------------------------------------------------------------ */
/* Schemas and value conversion                                        */
/* ------------------------------------------------------------------ */

/* The function's "parameters" in tools, or NULL (no tools / no such function). */
static const json_t *tool_params(const json_t *tools, const char *fname, size_t fn) {
    size_t i;
    const json_t *t;
    if (!tools) return NULL;
    json_array_foreach(tools, i, t) {
        const json_t *type = json_object_get(t, "type"), *f = json_object_get(t, "function");
        const json_t *name = json_object_get(f, "name");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !json_is_string(name)) continue;
        if (json_string_length(name) == fn && memcmp(json_string_value(name), fname, fn) == 0)
            return json_object_get(f, "parameters");
    }
    return NULL;
}

/* The schema of parameter pname: properties[pname] when the parameters have
 * "properties", else parameters[pname]; NULL when absent. */
static const json_t *param_schema(const json_t *params, const char *pname, size_t pn, bool *in_config) {
    *in_config = false;
    if (!json_is_object(params)) return NULL;
    const json_t *cfg = json_object_get(params, "properties");
    if (!cfg) cfg = params;
    if (!json_is_object(cfg)) return NULL;
    const json_t *ps = json_object_getn(cfg, pname, pn);
    *in_config = ps != NULL;
    return ps;
}

static bool lower_eq(const char *s, size_t n, const char *w) {
    if (strlen(w) != n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != w[i]) return false;
    }
    return true;
}

static bool in_list(const char *t, const char *const *l) {
    for (; *l; l++)
        if (strcmp(t, *l) == 0) return true;
    return false;
}
static bool has_prefix(const char *t, const char *const *l) {
    for (; *l; l++)
        if (strncmp(t, *l, strlen(*l)) == 0) return true;
    return false;
}

static const char *const STR_T[] = {"string", "str", "text", "varchar", "char", "enum", NULL};
static const char *const INT_P[] = {"int", "uint", "long", "short", "unsigned", NULL};
static const char *const NUM_P[] = {"num", "float", NULL};
static const char *const BOOL_T[] = {"boolean", "bool", "binary", NULL};
static const char *const OBJ_T[] = {"object", "array", "arr", NULL};
static const char *const DL_P[] = {"dict", "list", NULL};
static const char *const XML_COMPLEX_T[] = {"array", "arr", "sequence", NULL};

/* float(value) as an int when integral ("%.0f" is exact for doubles), else the float. */
static pj *number_value(double d) {
    pj *v;
    if (d == trunc(d)) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.0f", d == 0 ? 0.0 : d);
        v = pj_new(PJ_INT);
        if (v && !(v->s = tp_strndup(buf, strlen(buf)))) {
            free(v);
            return NULL;
        }
        if (v) v->n = strlen(buf);
    } else {
        v = pj_new(PJ_FLOAT);
        if (v) v->d = d;
    }
    return v;
}

/* qwen3_coder's _convert_param_value. NULL with *fail set: the whole
 * extraction fails (inf's OverflowError); NULL with *oom: out of memory. */
static pj *coder_convert(const char *v, size_t n, const json_t *params, const char *pname, size_t pn, bool *fail,
                         bool *oom) {
    if (lower_eq(v, n, "null")) {
        pj *x = pj_new(PJ_NULL);
        if (!x) *oom = true;
        return x;
    }
    bool in_cfg;
    const json_t *ps = param_schema(params, pname, pn, &in_cfg);
    pj *x = NULL;
    if (!in_cfg) goto str;
    char type[64] = "string";
    const json_t *jt = json_is_object(ps) ? json_object_get(ps, "type") : NULL;
    if (jt) {
        if (json_is_string(jt)) {
            const char *t = json_string_value(jt);
            size_t tn = json_string_length(jt);
            tp_strip(&t, &tn);
            if (tn >= sizeof type) tn = sizeof type - 1;
            for (size_t i = 0; i < tn; i++) type[i] = (char)(t[i] >= 'A' && t[i] <= 'Z' ? t[i] - 'A' + 'a' : t[i]);
            type[tn] = 0;
        } else {
            strcpy(type, "\x01"); /* str() of a list / number / ...: matches no name */
        }
    }
    if (in_list(type, STR_T)) goto str;
    if (has_prefix(type, INT_P)) {
        x = pj_py_int(v, n, oom);
        if (x || *oom) return x;
        goto str;
    }
    if (has_prefix(type, NUM_P)) {
        double d;
        if (pj_py_float(v, n, &d) != 0 || isnan(d)) goto str;
        if (isinf(d)) {
            *fail = true;
            return NULL;
        }
        x = number_value(d);
        if (!x) *oom = true;
        return x;
    }
    if (in_list(type, BOOL_T)) {
        x = pj_new(lower_eq(v, n, "true") ? PJ_TRUE : PJ_FALSE);
        if (!x) *oom = true;
        return x;
    }
    if (in_list(type, OBJ_T) || has_prefix(type, DL_P)) {
        x = pj_loads(v, n, oom);
        if (x || *oom) return x;
    }
    x = pj_literal_eval(v, n, oom);
    if (x || *oom) return x;
str:
    x = pj_str(v, n);
    if (!x) *oom = true;
    return x;
}

/* qwen3_xml's type: _get_param_type + repair_param_type (case kept). */
static void xml_type(const json_t *params, const char *pname, size_t pn, char type[64]) {
    strcpy(type, "string");
    bool in_cfg;
    const json_t *ps = param_schema(params, pname, pn, &in_cfg);
    if (!json_is_object(ps)) return;
    const json_t *jt = json_object_get(ps, "type");
    if (!json_is_string(jt) || json_string_length(jt) >= 64) return;
    const char *t = json_string_value(jt);
    if (in_list(t, STR_T) || has_prefix(t, INT_P) || has_prefix(t, NUM_P) || in_list(t, BOOL_T) ||
        in_list(t, OBJ_T) || in_list(t, XML_COMPLEX_T) || has_prefix(t, DL_P))
        strcpy(type, t);
}

/* The raw text when it is JSON (what vLLM inserts as is), else a JSON string of it. */
static void raw_or_str(tp_buf *out, const char *v, size_t n, bool *oom) {
    pj *x = pj_loads(v, n, oom);
    if (x) tp_put(out, v, n);
    else pj_dump_str(out, v, n, false);
    pj_free(x);
}

/* qwen3_xml: the JSON text a parameter value becomes. */
static void xml_value(tp_buf *out, const char *v, size_t n, const json_t *params, const char *pname, size_t pn,
                      bool *oom) {
    char type[64];
    xml_type(params, pname, pn, type);
    bool complex = in_list(type, XML_COMPLEX_T) || has_prefix(type, DL_P);
    if (!complex && strcmp(type, "object") == 0 && memchr(v, '\'', n) &&
        (memchr(v, '[', n) || memchr(v, '{', n) || memchr(v, '(', n)))
        complex = true;
    if (complex) { /* deferred: literal_eval + json.dumps, else json.dumps(raw) */
        pj *x = pj_literal_eval(v, n, oom);
        if (x) pj_dumps(out, x, false);
        else pj_dump_str(out, v, n, false);
        pj_free(x);
        return;
    }
    bool str_t = in_list(type, STR_T);
    if (lower_eq(v, n, "null")) {
        tp_puts(out, str_t ? "\"\"" : "null");
        return;
    }
    if (str_t) {
        pj_dump_str(out, v, n, false);
    } else if (has_prefix(type, INT_P)) {
        pj *x = pj_py_int(v, n, oom);
        if (x) pj_dumps(out, x, false);
        else raw_or_str(out, v, n, oom);
        pj_free(x);
    } else if (has_prefix(type, NUM_P)) {
        double d;
        pj *x = pj_py_float(v, n, &d) == 0 && isfinite(d) ? number_value(d) : NULL;
        if (x) pj_dumps(out, x, false);
        else raw_or_str(out, v, n, oom);
        pj_free(x);
    } else if (in_list(type, BOOL_T)) {
        tp_puts(out, lower_eq(v, n, "true") ? "true" : "false");
    } else {
        raw_or_str(out, v, n, oom); /* object: the raw text */
    }
}

/* One leading and one trailing "\n" off (vLLM: startswith / endswith "\n"). */
static void strip_nl(const char **v, size_t *n) {
    if (*n && (*v)[0] == '\n') (*v)++, (*n)--;
    if (*n && (*v)[*n - 1] == '\n') (*n)--;
}

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

typedef struct qx {
    const toolp_parser *p;
    toolp_result *r;
    bool xml, fail, oom;
    tp_buf args;
} qx;

/* One function's text F (after "<function=", without "</function>"). */
static void parse_function(qx *q, const char *F, size_t fn) {
    const char *gt = memchr(F, '>', fn);
    if (!gt) {
        q->fail = true;
        return;
    }
    size_t nn = (size_t)(gt - F);
    const json_t *params = tool_params(q->p->tools, F, nn);
    const char *P = gt + 1;
    size_t pn = fn - nn - 1;
    pj *dict = q->xml ? NULL : pj_new(PJ_OBJ);
    if (!q->xml && !dict) {
        q->oom = true;
        return;
    }
    q->args.len = 0;
    size_t np = 0, pos = 0;
    static const char *const ends[] = {P_CLOSE, P_OPEN, FN_CLOSE};
    for (;;) {
        const char *a = tp_find(P + pos, pn - pos, P_OPEN);
        if (!a) break;
        size_t ms = (size_t)(a - P) + strlen(P_OPEN), safe;
        int w;
        size_t e = ms + tp_find_tags(P + ms, pn - ms, ends, 3, &w, &safe);
        /* `$`: the end, or just before a final newline */
        size_t dollar = pn && P[pn - 1] == '\n' && pn - 1 >= ms ? pn - 1 : pn;
        if (w < 0 || dollar < e) e = dollar, w = -1;
        const char *M = P + ms;
        size_t mn = e - ms;
        pos = w == 0 ? e + strlen(P_CLOSE) : e;
        const char *mg = memchr(M, '>', mn);
        if (!mg) {
            q->fail = true;
            break;
        }
        const char *v = mg + 1;
        size_t vn = mn - (size_t)(mg - M) - 1, kn = (size_t)(mg - M);
        strip_nl(&v, &vn);
        if (q->xml) {
            tp_puts(&q->args, np ? ", " : "{");
            pj_dump_str(&q->args, M, kn, false);
            tp_puts(&q->args, ": ");
            xml_value(&q->args, v, vn, params, M, kn, &q->oom);
        } else {
            pj *x = coder_convert(v, vn, params, M, kn, &q->fail, &q->oom);
            if (!x) break;
            if (!pj_obj_set(dict, M, kn, x)) {
                q->oom = true;
                break;
            }
        }
        np++;
        if (q->oom) break;
    }
    if (!q->fail && !q->oom) {
        if (q->xml) tp_puts(&q->args, np ? "}" : "{}");
        else pj_dumps(&q->args, dict, false);
        if (q->args.oom) q->oom = true;
        else if (!tp_result_add(q->r, F, nn, q->args.data, q->args.len, TP_ID_CHATCMPL)) q->oom = true;
    }
    pj_free(dict);
}

/* The functions of one block. */
static void parse_block(qx *q, const char *B, size_t bn) {
    size_t pos = 0;
    while (!q->fail && !q->oom) {
        const char *f = tp_find(B + pos, bn - pos, FN_OPEN);
        if (!f) break;
        size_t fs = (size_t)(f - B) + strlen(FN_OPEN);
        const char *e = tp_find(B + fs, bn - fs, FN_CLOSE);
        size_t fe = e ? (size_t)(e - B) : bn;
        parse_function(q, B + fs, fe - fs);
        pos = e ? fe + strlen(FN_CLOSE) : bn;
    }
}

static vllm_status qwen3_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *r) {
    if (!tp_find(text, len, FN_OPEN)) return tp_result_plain(r, text, len);
    qx q = {p, r, p->kind == TOOLP_QWEN3_XML, false, false, {0}};
    tp_buf inter = {0}; /* qwen3_xml: non-blank text between blocks */
    const char *first_tc = tp_find(text, len, TC_OPEN);
    if (!first_tc) {
        parse_block(&q, text, len);
    } else {
        size_t pos = 0;
        long prev_end = -1;
        while (!q.fail && !q.oom) {
            const char *a = tp_find(text + pos, len - pos, TC_OPEN);
            if (!a) break;
            size_t bs = (size_t)(a - text) + strlen(TC_OPEN);
            if (q.xml && prev_end >= 0) {
                const char *t = text + prev_end;
                size_t tn = (size_t)(a - text) - (size_t)prev_end, sn = tn;
                const char *st = t;
                tp_strip(&st, &sn);
                if (sn) tp_put(&inter, t, tn);
            }
            const char *b = tp_find(text + bs, len - bs, TC_CLOSE);
            if (b) {
                parse_block(&q, text + bs, (size_t)(b - text) - bs);
                pos = (size_t)(b - text) + strlen(TC_CLOSE);
                prev_end = (long)pos;
            } else {
                size_t be = len > bs && text[len - 1] == '\n' ? len - 1 : len;
                parse_block(&q, text + bs, be - bs);
                pos = len;
            }
        }
    }
    tp_buf_free(&q.args);
    if (q.oom || inter.oom) {
        tp_buf_free(&inter);
        return vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
    }
    if (q.fail || !r->num_calls) {
        tp_buf_free(&inter);
        return tp_result_plain(r, text, len);
    }
    r->tools_called = true;
    size_t cl = first_tc ? (size_t)(first_tc - text) : (size_t)(tp_find(text, len, FN_OPEN) - text);
    tp_buf c = {0};
    tp_put(&c, text, cl);
    tp_put(&c, inter.data ? inter.data : "", inter.len);
    tp_buf_free(&inter);
    bool ok = !c.oom && (!c.len || tp_result_content(r, c.data, c.len));
    tp_buf_free(&c);
    return ok ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "tool call parser: out of memory");
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

enum { Q_TEXT, Q_AFTER, Q_BLOCK, Q_FNAME, Q_FBODY, Q_PNAME, Q_PVALUE };

typedef struct qwen_st {
    bool xml;
    int state;
    bool in_block;   /* the current function is inside <tool_call> */
    bool seen_block; /* a <tool_call> was seen: bare functions no longer count */
    tp_buf acc;      /* function name / parameter name being read */
    tp_buf pname, value;
    tp_buf inter;    /* qwen3_xml: text after a block */
    size_t call;     /* the current call */
    bool has_call;
    size_t nparams;
    const json_t *params;
} qwen_st;

static bool qwen_init(toolp_stream *s) {
    qwen_st *q = calloc(1, sizeof *q);
    if (!q) return false;
    q->xml = s->p->kind == TOOLP_QWEN3_XML;
    s->impl = q;
    return true;
}

static void qwen_free(void *impl) {
    qwen_st *q = impl;
    tp_buf_free(&q->acc);
    tp_buf_free(&q->pname);
    tp_buf_free(&q->value);
    tp_buf_free(&q->inter);
    free(q);
}

static bool ends_with(const tp_buf *b, const char *suffix) {
    size_t m = strlen(suffix);
    return b->len >= m && memcmp(b->data + b->len - m, suffix, m) == 0;
}

static void call_out(toolp_stream *s, qwen_st *q, const char *t, size_t n) {
    if (q->has_call) tp_call_args(s, &s->calls[q->call], t, n);
}

/* The current function ended. */
static void function_end(toolp_stream *s, qwen_st *q) {
    if (q->has_call) call_out(s, q, q->nparams ? "}" : "{}", q->nparams ? 1 : 2);
    q->has_call = false;
    q->state = q->in_block ? Q_BLOCK : Q_AFTER;
}

/* The current parameter's value ended; end_of_p: by the end of the
 * function's text (`$` drops a final "\n"), text_end: by the end of the
 * text inside an open <tool_call> (the block's `$` drops one more). */
static void param_end(toolp_stream *s, qwen_st *q, bool end_of_p, bool text_end) {
    const char *v = q->value.data ? q->value.data : "";
    size_t vn = q->value.len;
    if (text_end && q->in_block && vn && v[vn - 1] == '\n') vn--;
    if (end_of_p && vn && v[vn - 1] == '\n') vn--;
    strip_nl(&v, &vn);
    const char *pn = q->pname.data ? q->pname.data : "";
    tp_buf out = {0};
    bool oom = false, fail = false;
    tp_puts(&out, q->nparams ? ", " : "{");
    pj_dump_str(&out, pn, q->pname.len, false);
    tp_puts(&out, ": ");
    if (q->xml) {
        xml_value(&out, v, vn, q->params, pn, q->pname.len, &oom);
    } else {
        pj *x = coder_convert(v, vn, q->params, pn, q->pname.len, &fail, &oom);
        if (x) pj_dumps(&out, x, false);
        pj_free(x);
    }
    if (oom || out.oom) s->oom = true;
    else if (!fail) { /* fail: the non-streaming path drops every call; the parameter is left out here */
        call_out(s, q, out.data, out.len);
        q->nparams++;
    }
    tp_buf_free(&out);
    q->value.len = 0;
}

static void qwen_step(toolp_stream *s, bool at_end) {
    qwen_st *q = s->impl;
    static const char *const t_text[] = {TC_OPEN, FN_OPEN};
    static const char *const t_block[] = {TC_CLOSE, FN_OPEN};
    static const char *const t_body[] = {P_OPEN, FN_CLOSE, TC_CLOSE};
    static const char *const t_value[] = {P_CLOSE, P_OPEN, FN_CLOSE, TC_CLOSE};
    for (;;) {
        const char *in = tp_in(s);
        size_t n = tp_in_len(s), safe;
        if (!n) break;
        int w;
        switch (q->state) {
        case Q_TEXT:
        case Q_AFTER: {
            size_t pos = tp_find_tags(in, n, t_text, 2, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            if (q->state == Q_TEXT) {
                tp_emit_content(s, in, take);
            } else {
                tp_withhold(s, in, take);
                if (q->xml) tp_put(&q->inter, in, take);
            }
            tp_consume(s, take);
            if (w < 0) {
                if (take < n) return;
                continue;
            }
            size_t tl = strlen(t_text[w]);
            tp_withhold(s, in + pos, tl);
            tp_consume(s, tl);
            if (w == 0) {
                if (q->xml && q->state == Q_AFTER) {
                    const char *t = q->inter.data ? q->inter.data : "";
                    size_t tn = q->inter.len;
                    tp_strip(&t, &tn);
                    if (tn) tp_emit_content(s, q->inter.data, q->inter.len);
                }
                q->inter.len = 0;
                q->seen_block = q->in_block = true;
                q->state = Q_BLOCK;
            } else if (!q->seen_block) {
                q->in_block = false;
                q->state = Q_FNAME;
                q->acc.len = 0;
            } else {
                q->state = Q_AFTER; /* a bare function once blocks exist: ignored */
                if (q->xml) tp_put(&q->inter, t_text[1], tl);
            }
            continue;
        }
        case Q_BLOCK: {
            size_t pos = tp_find_tags(in, n, t_block, 2, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            tp_withhold(s, in, take);
            tp_consume(s, take);
            if (w < 0) {
                if (take < n) return;
                continue;
            }
            size_t tl = strlen(t_block[w]);
            tp_withhold(s, in + pos, tl);
            tp_consume(s, tl);
            q->state = w == 0 ? Q_AFTER : Q_FNAME;
            q->acc.len = 0;
            continue;
        }
        case Q_FNAME:
        case Q_PNAME: {
            const char *gt = memchr(in, '>', n);
            size_t take = gt ? (size_t)(gt - in) + 1 : n;
            tp_put(&q->acc, in, take);
            tp_withhold(s, in, take);
            tp_consume(s, take);
            if (!gt) continue;
            q->acc.len--; /* the '>' */
            bool fn_end = ends_with(&q->acc, "</function"), tc_end = q->in_block && ends_with(&q->acc, "</tool_call");
            if (q->state == Q_FNAME) {
                if (fn_end || tc_end) { /* no ">" in the function: ValueError (no call) */
                    q->state = tc_end ? Q_AFTER : q->in_block ? Q_BLOCK : Q_AFTER;
                    continue;
                }
                if (q->acc.oom || !tp_call_new(s, q->acc.data ? q->acc.data : "", q->acc.len,
                                               q->xml ? TP_ID_CHATCMPL : TP_ID_CALL24)) {
                    s->oom = true;
                    return;
                }
                q->call = s->ncalls - 1;
                q->has_call = true;
                q->nparams = 0;
                q->params = tool_params(s->p->tools, q->acc.data ? q->acc.data : "", q->acc.len);
                q->state = Q_FBODY;
            } else {
                bool p_end = ends_with(&q->acc, "</parameter") ||
                             (q->acc.data && tp_find(q->acc.data, q->acc.len, P_OPEN));
                if (fn_end || tc_end) { /* no ">" in the parameter: ValueError */
                    if (tc_end) q->in_block = false;
                    function_end(s, q);
                    if (tc_end) q->state = Q_AFTER;
                } else if (p_end) {
                    q->state = Q_FBODY;
                } else {
                    q->pname.len = 0;
                    tp_put(&q->pname, q->acc.data, q->acc.len);
                    q->value.len = 0;
                    q->state = Q_PVALUE;
                }
            }
            q->acc.len = 0;
            continue;
        }
        case Q_FBODY:
        case Q_PVALUE: {
            bool val = q->state == Q_PVALUE;
            const char *const *tags = val ? t_value : t_body;
            int nt = val ? 4 : 3;
            if (!q->in_block) nt--; /* </tool_call> ends nothing in a bare function */
            size_t pos = tp_find_tags(in, n, tags, nt, &w, &safe);
            size_t take = w >= 0 ? pos : at_end ? n : safe;
            if (val) tp_put(&q->value, in, take);
            tp_consume(s, take);
            if (w < 0) {
                if (take < n) return;
                continue;
            }
            const char *tag = tags[w];
            tp_consume(s, strlen(tag));
            if (tag == P_OPEN) {
                if (val) param_end(s, q, false, false);
                q->acc.len = 0;
                q->state = Q_PNAME;
            } else if (tag == P_CLOSE) {
                param_end(s, q, false, false);
                q->state = Q_FBODY;
            } else if (tag == FN_CLOSE) {
                if (val) param_end(s, q, true, false);
                function_end(s, q);
            } else { /* </tool_call>: the block and its unclosed function end */
                if (val) param_end(s, q, true, false);
                q->in_block = false;
                function_end(s, q);
            }
            continue;
        }
        }
    }
    if (!at_end) return;
    if (q->state == Q_PVALUE) param_end(s, q, true, true);
    if (q->state == Q_PVALUE || q->state == Q_FBODY || q->state == Q_PNAME) function_end(s, q);
}

const tp_family tp_fam_qwen3 = {qwen3_extract, qwen_init, qwen_step, qwen_free};
