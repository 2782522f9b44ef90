/* log.c: stderr logger with a level read once from VLLM_LOG_LEVEL. */
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

void log_msg(log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (!log_enabled(level)) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "vllmc %s: %s\n", names[level], buf);
}
