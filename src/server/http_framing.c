/* http_framing.c: strict request-framing checks against request smuggling (see http_framing.h). */
#include "server/http_framing.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

bool http_check_target(const char *t, oai_error *err) {
    for (const char *c = t; c && *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u <= 0x20 || u == 0x7f) {
            oai_error_set(err, 400, NULL, "Invalid request target: it contains a space or control character.");
            return false;
        }
        if (u == '%' && c[1] == '0' && c[2] == '0') {
            oai_error_set(err, 400, NULL, "Invalid request target: it contains an encoded NUL (%%00).");
            return false;
        }
    }
    return true;
}

typedef struct scan {
    int num_cl, num_te, num_host;
    char cl[32];            /* the first Content-Length value */
    char te[64];            /* the first Transfer-Encoding value */
    bool cl_conflict, cl_bad, bad_name, bad_value;
    char field[64];         /* the offending field's name (for the message) */
} scan;

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || strchr("!#$%&'*+-.^_`|~", c);
}

static void name_of(scan *s, const char *key, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof s->field; i++)
        s->field[k++] = is_tchar((unsigned char)key[i]) ? key[i] : '?';
    s->field[k] = 0;
}

static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size, const char *value,
                                size_t value_size) {
    (void)kind;
    scan *s = cls;
    bool name_ok = key_size > 0;
    for (size_t i = 0; i < key_size; i++) name_ok &= is_tchar((unsigned char)key[i]);
    if (!name_ok) {
        s->bad_name = true;
        name_of(s, key, key_size);
        return MHD_NO;
    }
    for (size_t i = 0; value && i < value_size; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            s->bad_value = true;
            name_of(s, key, key_size);
            return MHD_NO;
        }
    }
    /* libmicrohttpd measures a value with strlen, so a NUL inside it cuts the value short
     * silently. Header lines end in CRLF, which it overwrites with two NULs: a value whose
     * terminating NUL is followed by anything else had a NUL inside it (or, rarely, the
     * line ended in a bare LF or was folded: both refused as well, RFC 9112 2.2 and 5.2). */
    if (value && value[value_size + 1] != 0) {
        s->bad_value = true;
        name_of(s, key, key_size);
        return MHD_NO;
    }
    if (!value) value = "", value_size = 0;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        bool digits = value_size > 0 && value_size < sizeof s->cl;
        for (size_t i = 0; i < value_size; i++) digits &= value[i] >= '0' && value[i] <= '9';
        if (!digits) s->cl_bad = true;
        else if (s->num_cl == 0) memcpy(s->cl, value, value_size + 1);
        else if (strcmp(s->cl, value) != 0) s->cl_conflict = true;
        s->num_cl++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        if (s->num_te++ == 0) snprintf(s->te, sizeof s->te, "%s", value);
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
        s->num_host++;
    }
    return MHD_YES;
}

bool http_check_framing(struct MHD_Connection *conn, const char *version, oai_error *err) {
    scan s;
    memset(&s, 0, sizeof s);
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, on_field, &s);
    bool v11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    if (s.bad_name) {
        oai_error_set(err, 400, NULL, "Malformed header field name \"%s\" (whitespace before the colon?).", s.field);
    } else if (s.bad_value) {
        oai_error_set(err, 400, NULL, "Header field %s contains a control character.", s.field);
    } else if (s.cl_bad) {
        oai_error_set(err, 400, NULL, "Malformed Content-Length.");
    } else if (s.cl_conflict) {
        oai_error_set(err, 400, NULL, "Conflicting Content-Length values.");
    } else if (s.num_te > 0 && s.num_cl > 0) {
        oai_error_set(err, 400, NULL, "A request may not carry both Content-Length and Transfer-Encoding.");
    } else if (s.num_te > 0 && !v11) {
        oai_error_set(err, 400, NULL, "Transfer-Encoding is not allowed in an HTTP/1.0 request.");
    } else if (s.num_te > 1 || (s.num_te == 1 && strcasecmp(s.te, "chunked") != 0)) {
        oai_error_set(err, 501, NULL, "Transfer-Encoding other than \"chunked\" is not supported.");
    } else if (v11 && s.num_host != 1) {
        oai_error_set(err, 400, NULL, s.num_host ? "More than one Host header." : "An HTTP/1.1 request needs a Host header.");
    } else {
        return true;
    }
    return false;
}
