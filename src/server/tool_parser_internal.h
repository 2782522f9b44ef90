/*
 * tool_parser_internal.h: what the tool_parser*.c and reasoning_parser.c files share (buffers, Python-compatible JSON, tag scanning, the stream core).
 */
#ifndef VLLM_SERVER_TOOL_PARSER_INTERNAL_H
#define VLLM_SERVER_TOOL_PARSER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/tool_parser.h"

/* ------------------------------------------------------------------ */
/* Byte buffer                                                         */
/* ------------------------------------------------------------------ */

/* Growable bytes, NUL-terminated when data != NULL; a failed append sets oom
 * and later appends are no-ops. */
typedef struct tp_buf {
    char *data;
    size_t len, cap;
    bool oom;
} tp_buf;

void tp_put(tp_buf *b, const void *s, size_t n);
void tp_puts(tp_buf *b, const char *s);
void tp_putc(tp_buf *b, char c);
void tp_buf_free(tp_buf *b);
/* Drops the first n bytes. */
void tp_buf_drop(tp_buf *b, size_t n);
/* A malloc'd NUL-terminated copy of s[0..n); NULL when out of memory. */
char *tp_strndup(const char *s, size_t n);

/* Trailing bytes of s[0..n) that start a UTF-8 sequence not yet complete (0..3). */
size_t tp_utf8_incomplete_tail(const char *s, size_t n);
/* A JSON string of s[0..n) with invalid UTF-8 replaced by U+FFFD; NULL when out of memory. */
json_t *tp_json_str(const char *s, size_t n);
/* Python's str.isspace() for ASCII (space, \t, \n, \r, \v, \f) and the
 * str.strip() that goes with it. */
bool tp_is_space(unsigned char c);
void tp_strip(const char **s, size_t *n);

/* ------------------------------------------------------------------ */
/* Tag scanning                                                        */
/* ------------------------------------------------------------------ */

/* The earliest complete occurrence in s[0..n) of any of tags[0..ntags):
 * returns its position and sets *which; when none, returns n and sets
 * *which = -1 and *safe to the bytes that cannot begin a tag (n minus the
 * longest suffix that is a proper prefix of a tag). Linear in n x ntags. */
size_t tp_find_tags(const char *s, size_t n, const char *const *tags, int ntags, int *which, size_t *safe);
/* memmem for a NUL-terminated needle; NULL when absent. */
const char *tp_find(const char *s, size_t n, const char *needle);
/* The longest k < strlen(tag) with s ending in tag[0..k). */
size_t tp_partial_overlap(const char *s, size_t n, const char *tag);
bool tp_starts(const char *s, size_t n, const char *prefix);

/* ------------------------------------------------------------------ */
/* Python-compatible JSON values (json.loads / json.dumps / ast.literal_eval) */
/* ------------------------------------------------------------------ */

typedef enum pj_type { PJ_NULL, PJ_FALSE, PJ_TRUE, PJ_INT, PJ_FLOAT, PJ_STR, PJ_ARR, PJ_OBJ } pj_type;

/* Strings are UTF-8 with lone surrogates (from \ud800 escapes) as their
 * 3-byte generalised UTF-8 form; ints are decimal digit strings (any size). */
typedef struct pj {
    pj_type t;
    double d;          /* PJ_FLOAT */
    char *s;           /* PJ_STR bytes / PJ_INT digits with optional '-' */
    size_t n;
    struct pj **v;     /* PJ_ARR items / PJ_OBJ values */
    char **k;          /* PJ_OBJ keys */
    size_t *kn;
    size_t len, cap;
    uint32_t *hidx;    /* PJ_OBJ key hash index (1 + slot), built past a few keys */
    size_t hcap;
} pj;

pj *pj_new(pj_type t);
void pj_free(pj *v);
pj *pj_str(const char *s, size_t n);
/* Appends (arrays); takes item (freed on failure). false when out of memory. */
bool pj_arr_push(pj *a, pj *item);
/* dict[key] = val (Python: a repeated key keeps its place, takes the new value);
 * takes val (freed on failure). false when out of memory. */
bool pj_obj_set(pj *o, const char *key, size_t kn, pj *val);
/* The value under key, or NULL. */
pj *pj_obj_get(const pj *o, const char *key);

/* json.loads(s): the whole text, surrounding whitespace allowed. NULL when it
 * is not JSON Python accepts (or *oom set). Nesting past 1000 fails (Python's
 * RecursionError). */
pj *pj_loads(const char *s, size_t n, bool *oom);
/* json.JSONDecoder().raw_decode(s): a value starting exactly at s[0]; *end is
 * where it stops. */
pj *pj_raw_decode(const char *s, size_t n, size_t *end, bool *oom);
/* json.dumps(v, ensure_ascii=ascii) appended to b. Lone surrogates are written
 * as \udXXX escapes in both modes. */
void pj_dumps(tp_buf *b, const pj *v, bool ascii);
/* repr(float) as json.dumps writes it ("1.0", "1e-05", "NaN", "Infinity"). */
void pj_float_repr(tp_buf *b, double d);
/* One string's JSON text (with its quotes). */
void pj_dump_str(tp_buf *b, const char *s, size_t n, bool ascii);

/* int(s) for a str: decimal with surrounding whitespace, sign and single
 * underscores between digits; NULL when Python raises ValueError. */
pj *pj_py_int(const char *s, size_t n, bool *oom);
/* float(s): 0 and *out, or -1 when Python raises ValueError. */
int pj_py_float(const char *s, size_t n, double *out);
/* ast.literal_eval(s) for the literals JSON can hold: str (quotes of both
 * kinds, triple quotes, escapes, r/u prefixes, adjacent concatenation),
 * int (any size decimal; hex/octal/binary up to 64 bits), float, True /
 * False / None, list, tuple (-> array), dict, unary +/- on numbers. NULL
 * for anything else (Python's ValueError / SyntaxError; also sets, bytes,
 * complex and Ellipsis, which literal_eval accepts but json.dumps refuses). */
pj *pj_literal_eval(const char *s, size_t n, bool *oom);

/* ------------------------------------------------------------------ */
/* Incremental JSON re-serialiser                                      */
/* ------------------------------------------------------------------ */

/* Reads one JSON value byte by byte (Python's json.loads rules) and writes,
 * as soon as each part is certain, what json.dumps would write for it. For
 * the formats whose JSON holds the call ("name" / "arguments" members) it
 * routes each member value of a call object to a sink chosen by the caller. */
enum { PJS_DROP = 0, PJS_ARGS = 1, PJS_NAME = 2 };

typedef enum pjs_mode {
    PJS_VALUE = 0,  /* the value itself -> PJS_ARGS */
    PJS_OBJECT,     /* one call object: each member value -> the sink key() picks */
    PJS_ARRAY,      /* an array of call objects */
} pjs_mode;

typedef struct pjs_hooks {
    void *ctx;
    /* a call object's member key (decoded); returns the sink of its value */
    int (*key)(void *ctx, const char *k, size_t n);
    /* canonical JSON text (PJS_ARGS) or a string value's decoded bytes (PJS_NAME) */
    void (*out)(void *ctx, int sink, const char *s, size_t n);
    /* a member value ended; is_str: it was a string */
    void (*value_end)(void *ctx, int sink, bool is_str);
    void (*call_begin)(void *ctx);
    void (*call_end)(void *ctx);
} pjs_hooks;

typedef struct pj_stream pj_stream;

/* hooks may be NULL in PJS_VALUE mode with only out used; copied. */
pj_stream *pjs_new(pjs_mode mode, bool ascii, const pjs_hooks *hooks);
void pjs_free(pj_stream *p);
/* Consumes bytes up to the end of the top-level value (leading whitespace
 * skipped); returns how many were consumed (< n only once the value ended). */
size_t pjs_feed(pj_stream *p, const char *s, size_t n);
/* End of input: ends a top-level number. */
void pjs_finish(pj_stream *p);
bool pjs_done(const pj_stream *p);   /* the top-level value ended */
bool pjs_error(const pj_stream *p);  /* not JSON (Python would raise) */
bool pjs_started(const pj_stream *p); /* a non-blank byte was read */

/* ------------------------------------------------------------------ */
/* Parser and stream core                                              */
/* ------------------------------------------------------------------ */

struct toolp_parser {
    toolp_kind kind;
    json_t *tools;        /* referenced, may be NULL */
    int mistral_version;
};

/* Id styles: vLLM's make_tool_call_id "chatcmpl-tool-<32 hex>", Qwen3-Coder's
 * streaming "call_<24 hex>", Mistral's 9 alphanumerics. */
typedef enum { TP_ID_CHATCMPL = 0, TP_ID_CALL24, TP_ID_MISTRAL } tp_id_style;
void tp_make_id(tp_id_style style, char out[48]);

typedef struct tp_callst {
    char id[48];
    char *name;
    tp_buf args;         /* every argument byte produced */
    size_t sent;         /* args bytes handed out */
    bool announced;      /* the first delta (id, name) handed out */
    char *xid;           /* an id the model wrote (kimi_k2), handed out instead of id; malloc'd or NULL */
} tp_callst;

/* One output text and how much of it was handed out. */
typedef struct tp_out {
    tp_buf b;
    size_t sent;
} tp_out;

typedef struct tp_family tp_family;

struct toolp_stream {
    const toolp_parser *p;
    const tp_family *fam;
    void *impl;
    tp_buf in;           /* input not consumed yet: in.data[in_off..in.len) */
    size_t in_off;
    tp_out content, reasoning;
    tp_callst *calls;
    size_t ncalls, capcalls;
    toolp_call_delta *deltas;
    size_t capdeltas;
    bool finished, oom;
    /* Text withheld from content since the first tag, kept while no call has
     * been announced: flushed as content at the end if none ever is. */
    tp_buf withheld;
    bool withholding;
};

struct tp_family {
    /* non-streaming extraction into a cleared result (content/calls malloc'd) */
    vllm_status (*extract)(const toolp_parser *p, const char *text, size_t len, toolp_result *out);
    bool (*init)(toolp_stream *s);         /* s->impl; false when out of memory */
    /* consume s->in as far as possible; at_end: the text ended, consume all */
    void (*step)(toolp_stream *s, bool at_end);
    void (*free_impl)(void *impl);
};

extern const tp_family tp_fam_hermes, tp_fam_llama, tp_fam_mistral, tp_fam_qwen3, tp_fam_deepseek, tp_fam_openai,
    tp_fam_deepseek_v31, tp_fam_kimi_k2;

/* The unconsumed input. */
static inline const char *tp_in(const toolp_stream *s) { return s->in.data ? s->in.data + s->in_off : ""; }
static inline size_t tp_in_len(const toolp_stream *s) { return s->in.len - s->in_off; }
void tp_consume(toolp_stream *s, size_t n);

void tp_emit_content(toolp_stream *s, const char *t, size_t n);
void tp_emit_reasoning(toolp_stream *s, const char *t, size_t n);
/* Text that is not content now but would be if no call ever comes. */
void tp_withhold(toolp_stream *s, const char *t, size_t n);
/* Announces a new call (index = its position); returns it or NULL (oom). */
tp_callst *tp_call_new(toolp_stream *s, const char *name, size_t n, tp_id_style style);
void tp_call_args(toolp_stream *s, tp_callst *c, const char *t, size_t n);

/* Result helpers for the extract functions. */
bool tp_result_add(toolp_result *r, const char *name, size_t nn, const char *args, size_t an, tp_id_style style);
bool tp_result_content(toolp_result *r, const char *s, size_t n); /* copies; n may be 0 (content "") */
/* The fallback every parser uses on malformed output: no calls, the whole text as content. */
vllm_status tp_result_plain(toolp_result *r, const char *text, size_t len);

/* ------------------------------------------------------------------ */
/* Call objects read by pj_stream (hermes, llama3_json, mistral < v11)  */
/* ------------------------------------------------------------------ */

/* Collects one call object at a time: its "name" member (a string) announces
 * the call; the first member named in args_keys streams as the arguments
 * (held until the name is known). A second "name" or arguments member is
 * ignored (Python would keep the last: a documented disagreement). */
typedef struct tp_jcall {
    toolp_stream *s;
    const char *const *args_keys;
    int nargs_keys;
    tp_id_style style;
    tp_buf name, pending;
    bool name_seen, args_seen, has_call;
    size_t call; /* s->calls index once announced */
} tp_jcall;

pjs_hooks tp_jcall_hooks(tp_jcall *j);
void tp_jcall_free(tp_jcall *j);

/* ------------------------------------------------------------------ */
/* Harmony (gpt-oss) messages, shared with reasoning_parser.c          */
/* ------------------------------------------------------------------ */

/* A streaming reader of harmony output after the prompt's
 * "<|start|>assistant": headers up to <|message|>, contents up to <|end|> /
 * <|call|> / <|return|>, then <|start|> and the next header. */
typedef struct hm_reader hm_reader;

typedef struct hm_events {
    void *ctx;
    /* a message's header was read: channel, recipient ("" when none), content type */
    void (*begin)(void *ctx, const char *channel, const char *recipient, const char *ctype);
    /* content bytes of the current message */
    void (*text)(void *ctx, const char *s, size_t n);
    /* the current message ended (complete: by a stop token, not by the end of the text) */
    void (*end)(void *ctx, bool complete);
} hm_events;

hm_reader *hm_new(const hm_events *ev);
void hm_free(hm_reader *h);
/* Reads what it can of s[0..n) and returns how many bytes it consumed (the
 * rest may be the start of a marker: pass it again with more text). at_end:
 * consume everything and end an open message. */
size_t hm_feed(hm_reader *h, const char *s, size_t n, bool at_end);
/* vLLM's strip_harmony_control_tokens: removes <|...|> markers (regex <\|[^>]*?\|>). */
void hm_strip_markers(tp_buf *out, const char *s, size_t n);

#endif
