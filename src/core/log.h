/*
 * log.h: leveled logging to stderr, one line per event.
 * VLLM_LOG_LEVEL=debug|info|warn|error (default info). Never writes stdout.
 */
#ifndef VLLM_CORE_LOG_H
#define VLLM_CORE_LOG_H

#include "core/error.h"

typedef enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 } log_level;

void log_msg(log_level level, const char *fmt, ...) VT_PRINTF(2, 3);
/* True when messages of this level are printed. */
int log_enabled(log_level level);

#define LOG_D(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define LOG_I(...) log_msg(LOG_INFO, __VA_ARGS__)
#define LOG_W(...) log_msg(LOG_WARN, __VA_ARGS__)
#define LOG_E(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
