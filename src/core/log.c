/* log.c: stderr logger with a level read once from VLLM_LOG_LEVEL; control bytes in messages escaped. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int level_from_env(void) {
    const char *s = getenv("VLLM_LOG_LEVEL");
    if (!s) return LOG_INFO;
    if (!strcmp(s, "debug")) return LOG_DEBUG;
    if (!strcmp(s, "warn") || !strcmp(s, "warning")) return LOG_WARN;
    if (!strcmp(s, "error")) return LOG_ERROR;
    return LOG_INFO;
}

int log_enabled(log_level level) { return (int)level >= level_from_env(); }

/* Length of the valid UTF-8 sequence at s (of at most n bytes) that is not a
 * C1 control (U+0080-U+009F), or 0. */
static size_t utf8_printable(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (len == 0 || len > n || c > 0xF4) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 2 && c == 0xC2 && s[1] < 0xA0) return 0;              /* C1 controls */
    if (len == 3 && c == 0xE0 && s[1] < 0xA0) return 0;              /* overlong */
    if (len == 3 && c == 0xED && s[1] >= 0xA0) return 0;             /* surrogates */
    if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

/* Copies a message with every control character (C0, DEL, C1) and every byte
 * that is not valid UTF-8 written as \xNN: messages carry strings clients
 * chose (request ids, methods, paths, prompts in errors), and a raw newline
 * would forge a log line, an escape byte would reach the terminal. */
static void escape_controls(const char *in, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)in;
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < cap;) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        size_t len = c >= 0x80 ? utf8_printable(s + i, n - i) : 0;
        if (len > 0) {
            if (o + len + 1 >= cap) break;
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
            continue;
        }
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[c >> 4];
        out[o++] = hex[c & 15];
        i++;
    }
    out[o] = 0;
}

void log_msg(log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (!log_enabled(level)) return;
    char buf[2048], safe[4 * sizeof buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    escape_controls(buf, safe, sizeof safe);
    fprintf(stderr, "vllmc %s: %s\n", names[level], safe);
}
