/*
 * progress.h: periodic progress lines on stderr for long work (model
 * loading, benchmarks): at most one line a second, and a final line when
 * the work took longer than that.
 */
#ifndef VLLM_CORE_PROGRESS_H
#define VLLM_CORE_PROGRESS_H

#include <stdint.h>

typedef struct progress {
    const char *what;     /* "loading weights" */
    int64_t total;        /* units of work */
    double start, last;   /* monotonic seconds */
    int printed;          /* lines printed so far */
} progress;

double progress_now(void);
void progress_start(progress *p, const char *what, int64_t total);
/* Reports `done` of total units; prints when a second passed since the last line. */
void progress_update(progress *p, int64_t done);

#endif
