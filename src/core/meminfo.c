/* meminfo.c: the process's resident set size (now and peak). */
#define _POSIX_C_SOURCE 200809L
#include "core/meminfo.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

size_t vt_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (n != 2 || page <= 0) return 0;
    return (size_t)resident * (size_t)page;
}

size_t vt_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux: kilobytes */
}
