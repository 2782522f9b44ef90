/*
 * meminfo.h: the process's host memory use, for start-up logs and
 * benchmarks (how much host memory a loaded model keeps).
 */
#ifndef VLLM_CORE_MEMINFO_H
#define VLLM_CORE_MEMINFO_H

#include <stddef.h>

/* Resident set size now, in bytes; 0 where the system does not say
 * (Linux: /proc/self/statm). */
size_t vt_rss_bytes(void);

/* Peak resident set size so far, in bytes (getrusage); 0 if unknown. */
size_t vt_peak_rss_bytes(void);

#endif
