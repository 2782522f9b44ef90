/*
 * error.h: the thread-local last-error message behind vllm_last_error().
 *
 * Fallible internal functions return a vllm_status and, on failure, call
 * vt_error() with a message naming the file, field or request concerned.
 */
#ifndef VLLM_CORE_ERROR_H
#define VLLM_CORE_ERROR_H

#include "vllm.h"

#if defined(__GNUC__)
#define VT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VT_PRINTF(a, b)
#endif

/* Records the message and returns status, so callers can `return vt_error(...)`. */
vllm_status vt_error(vllm_status status, const char *fmt, ...) VT_PRINTF(2, 3);
/* Prepends "prefix: " to the current message (adds context while unwinding). */
void vt_error_prefix(const char *fmt, ...) VT_PRINTF(1, 2);
/* Clears the current message. */
void vt_error_clear(void);

#endif
