/* error.c: thread-local last-error storage and status names. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VT_ERROR_MAX 1024

static _Thread_local char g_error[VT_ERROR_MAX];

vllm_status vt_error(vllm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return status;
}

void vt_error_prefix(const char *fmt, ...) {
    char prefix[VT_ERROR_MAX];
    char old[VT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_error, sizeof old);
    size_t n = strlen(prefix);
    if (n > VT_ERROR_MAX - 3) n = VT_ERROR_MAX - 3;
    memcpy(g_error, prefix, n);
    memcpy(g_error + n, ": ", 2);
    size_t room = VT_ERROR_MAX - n - 3, m = strlen(old);
    if (m > room) m = room;
    memcpy(g_error + n + 2, old, m);
    g_error[n + 2 + m] = '\0';
}

void vt_error_clear(void) { g_error[0] = '\0'; }

const char *vllm_last_error(void) { return g_error; }

const char *vllm_status_str(vllm_status status) {
    switch (status) {
    case VLLM_STREAM_TIMEOUT: return "timed out (no chunk yet)";
    case VLLM_OK: return "ok";
    case VLLM_ERR_INVALID_ARG: return "invalid argument";
    case VLLM_ERR_IO: return "i/o error";
    case VLLM_ERR_FORMAT: return "malformed input";
    case VLLM_ERR_UNSUPPORTED: return "unsupported";
    case VLLM_ERR_NO_MEMORY: return "out of memory";
    case VLLM_ERR_BACKEND: return "backend error";
    case VLLM_ERR_TOO_LONG: return "too long";
    case VLLM_ERR_NOT_FOUND: return "not found";
    case VLLM_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
