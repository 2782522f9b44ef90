/*
 * oai_util.c: the small helpers behind oai_internal.h: string buffer, UTF-8
 * checks and repair, compact JSON dumping, random hex ids.
 */
#include "server/oai_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* ------------------------------------------------------------------ */
/* Buffer                                                              */
/* ------------------------------------------------------------------ */

void oai_buf_put(oai_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1) {
        b->oom = true;
        return;
    }
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d, b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void oai_buf_puts(oai_buf *b, const char *s) { oai_buf_put(b, s, strlen(s)); }

void oai_buf_free(oai_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

char *oai_buf_take(oai_buf *b, size_t *len) {
    if (!b->oom && !b->data) oai_buf_put(b, "", 0);
    if (b->oom) {
        oai_buf_free(b);
        if (len) *len = 0;
        return NULL;
    }
    char *d = b->data;
    if (len) *len = b->len;
    memset(b, 0, sizeof *b);
    return d;
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */
/* ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

bool oai_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

size_t oai_utf8_chars(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        size_t k = utf8_seq(p + i, n - i);
        i += k ? k : 1;
    }
    return chars;
}

/* s with every invalid byte replaced by U+FFFD, into b. */
static void utf8_repair(oai_buf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        oai_buf_put(b, s + start, i - start);
        oai_buf_put(b, "\xEF\xBF\xBD", 3);
        i++;
        start = i;
    }
    oai_buf_put(b, s + start, n - start);
}

json_t *oai_json_str(const char *s, size_t n) {
    if (!s) s = "", n = 0;
    if (oai_utf8_valid(s, n) && !memchr(s, 0, n)) return json_stringn(s, n);
    oai_buf b = {0};
    utf8_repair(&b, s, n);
    if (b.oom) {
        oai_buf_free(&b);
        return NULL;
    }
    /* json_stringn accepts embedded NULs (\u0000 in the output) */
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    oai_buf_free(&b);
    return j;
}

json_t *oai_json_bytes(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s);
    oai_buf b = {0};
    utf8_repair(&b, s, n);
    json_t *arr = json_array();
    if (!arr || b.oom) {
        json_decref(arr);
        oai_buf_free(&b);
        return NULL;
    }
    for (size_t i = 0; i < b.len; i++) {
        if (json_array_append_new(arr, json_integer((unsigned char)b.data[i]))) {
            json_decref(arr);
            arr = NULL;
            break;
        }
    }
    oai_buf_free(&b);
    return arr;
}

json_t *oai_json_logprob(float x) {
    if (isnan(x)) return json_null();
    double d = x < -9999.0f ? -9999.0 : (double)x; /* vLLM: max(logprob, -9999.0) */
    return json_real(d);
}

char *oai_json_dump(const json_t *j, size_t *len) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9) | JSON_ENCODE_ANY);
    if (len) *len = s ? strlen(s) : 0;
    return s;
}

/* ------------------------------------------------------------------ */
/* Ids                                                                 */
/* ------------------------------------------------------------------ */

void oai_random_hex(char *out, size_t nhex) {
    static const char hex[] = "0123456789abcdef";
    unsigned char bytes[128];
    size_t nb = (nhex + 1) / 2;
    if (nb > sizeof bytes) nb = sizeof bytes, nhex = 2 * nb;
    if (getentropy(bytes, nb) != 0) {
        /* no kernel entropy: time, a stack address and a counter, mixed (ids need
           only be unique, not secret) */
        static _Atomic unsigned long long counter;
        unsigned long long x = (unsigned long long)time(NULL) ^ (unsigned long long)(uintptr_t)&nb;
        x ^= ++counter * 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < nb; i++) {
            x ^= x >> 33, x *= 0xFF51AFD7ED558CCDull, x ^= x >> 33;
            bytes[i] = (unsigned char)x;
        }
    }
    for (size_t i = 0; i < nhex; i++) out[i] = hex[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[nhex] = 0;
}

uint64_t oai_next_serial(void) {
    /* process-wide on purpose: ids stay unique across every server (and engine)
       of the process; an atomic counter is the only state, and never reset */
    static _Atomic uint64_t serial;
    return atomic_fetch_add_explicit(&serial, 1, memory_order_relaxed) + 1;
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

void oai_release_memory(size_t bytes) {
    if (bytes < OAI_TRIM_BYTES) return;
#if defined(__GLIBC__)
    /* a large reply is millions of small blocks (JSON nodes, logprob arrays) spread
       over the arenas of the HTTP threads: free() keeps them for reuse, malloc_trim
       returns the whole free pages of every arena to the system */
    malloc_trim(0);
#endif
}

/* ------------------------------------------------------------------ */
/* Numbers                                                             */
/* ------------------------------------------------------------------ */

void oai_py_float(double x, char out[32]) {
    if (isnan(x)) {
        snprintf(out, 32, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, 32, "%s", x < 0 ? "-inf" : "inf");
        return;
    }
    if (x == 0) {
        snprintf(out, 32, "%s", signbit(x) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back as x (Python's repr), from "%.*e" */
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof digits - 1) digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e pads; repr does not */
    digits[nd] = 0;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0; /* x = d.ddd * 10^exp10 */
    char *o = out;
    size_t room = 32;
#define PUT(...) (o += (size_t)snprintf(o, room - (size_t)(o - out), __VA_ARGS__))
    if (neg) PUT("-");
    if (exp10 < -4 || exp10 >= 16) {
        /* repr switches to exponent form outside [1e-4, 1e16): 1e-05, 1.5e+16 */
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        PUT("0.");
        for (int i = 0; i < -exp10 - 1; i++) PUT("0");
        PUT("%s", digits);
    } else {
        size_t ip = (size_t)exp10 + 1; /* digits before the point */
        for (size_t i = 0; i < ip; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".%s", nd > ip ? digits + ip : "0");
    }
#undef PUT
}

/* ------------------------------------------------------------------ */
/* Param guess                                                         */
/* ------------------------------------------------------------------ */

static bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

const char *oai_guess_param(const char *msg) {
    /* the request fields a vllm_sampling_params / engine message can name */
    static const char *const fields[] = {
        "n", "temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "logit_bias", "allowed_token_ids", "bad_words", "stop",
        "stop_token_ids", "logprobs", "prompt_logprobs", "seed", "prompt",
    };
    if (!msg) return NULL;
    const char *best = NULL;
    size_t best_pos = SIZE_MAX, best_len = 0;
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        size_t len = strlen(fields[f]);
        for (const char *p = strstr(msg, fields[f]); p; p = strstr(p + 1, fields[f])) {
            bool left = p == msg || !is_word(p[-1]);
            bool right = !is_word(p[len]);
            if (!left || !right) continue;
            size_t pos = (size_t)(p - msg);
            if (pos < best_pos || (pos == best_pos && len > best_len)) best = fields[f], best_pos = pos, best_len = len;
            break;
        }
    }
    return best;
}
