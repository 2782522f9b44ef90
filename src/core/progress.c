/* progress.c: rate-limited progress lines through the logger. */
#include "core/progress.h"

#include <time.h>

#include <stdbool.h>

#include "core/log.h"

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(progress *p, const char *what, int64_t total) {
    p->what = what;
    p->total = total > 0 ? total : 1;
    p->start = p->last = progress_now();
    p->printed = 0;
}

void progress_update(progress *p, int64_t done) {
    double now = progress_now();
    bool finished = done >= p->total;
    if (now - p->last < 1.0 && !(finished && p->printed)) return;
    p->last = now;
    p->printed++;
    LOG_I("%s: %lld/%lld (%.0f%%), %.1f s", p->what, (long long)done, (long long)p->total,
          100.0 * (double)done / (double)p->total, now - p->start);
}
