/*
 * test.h: the tiny test harness: CHECK macros that report file:line and
 * keep going, and a summary exit code (0 pass, 1 fail or no check ran, 77 skip).
 */
#ifndef VLLM_TEST_H
#define VLLM_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures = 0;
static int t_checks = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        t_checks++;                                                              \
        if (!(cond)) {                                                           \
            t_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        t_checks++;                                                              \
        if (!(cond)) {                                                           \
            t_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double t_a = (double)(a), t_b = (double)(b);                             \
        t_checks++;                                                              \
        if (!(fabs(t_a - t_b) <= (tol)) || isnan(t_a) || isnan(t_b)) {          \
            t_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s=%.9g %s=%.9g tol=%g\n", \
                    __FILE__, __LINE__, #a, t_a, #b, t_b, (double)(tol));        \
        }                                                                        \
    } while (0)

#define CHECK_OK(expr)                                                           \
    do {                                                                         \
        int t_st = (int)(expr);                                                  \
        t_checks++;                                                              \
        if (t_st != 0) {                                                         \
            t_failures++;                                                        \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, \
                    t_st, vllm_last_error());                                    \
        }                                                                        \
    } while (0)

/* A call that must fail with status `want` and a message holding w1 and w2. */
#define EXPECT_ERR(expr, want, w1, w2)                                                               \
    do {                                                                                             \
        vllm_status s_ = (expr);                                                                     \
        CHECK_MSG(s_ == (want), "status %d (%s), want %d: %s", s_, vllm_status_str(s_), (int)(want), \
                  vllm_last_error());                                                                \
        CHECK_MSG(strstr(vllm_last_error(), (w1)) != NULL, "'%s' not in: %s", (w1), vllm_last_error()); \
        CHECK_MSG(strstr(vllm_last_error(), (w2)) != NULL, "'%s' not in: %s", (w2), vllm_last_error()); \
    } while (0)

/* A whole file as a NUL-terminated string (malloc'd), or NULL. */
static inline char *t_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) s = malloc((size_t)n + 1);
    if (s) s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    return s;
}

/* Runs a shell command, its stdout into out (at most cap - 1 bytes, NUL-terminated); true when it ran and exited 0. */
static inline bool t_capture(const char *cmd, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    const size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    return pclose(f) == 0;
}

/* The end of a test: prints the summary line (stderr) and gives ctest's exit code: 1 when a check failed;
 * 77 (skip) when `skipped` names a part that could not run (see TEST_END_SKIPPING); 1 when no check ran at
 * all, because a test that checks nothing proves nothing (a test that cannot run must skip, TEST_SKIP); else 0. */
static inline int t_end(const char *file, const char *skipped) {
    fprintf(stderr, "%s: %d checks, %d failures\n", file, t_checks, t_failures);
    if (t_failures) return 1;
    if (skipped) {
        printf("skipped: %s\n", skipped);
        return 77;
    }
    if (t_checks == 0) {
        fprintf(stderr, "%s: FAILED: no check ran (a test that cannot run must skip: TEST_SKIP, exit 77)\n", file);
        return 1;
    }
    return 0;
}

/* Ends main: prints a summary line, returns the ctest exit code. */
#define TEST_END() return t_end(__FILE__, NULL)

/* Ends main as a skip (77) when `why` is not NULL: a part of the test could not run (its reference is
 * unavailable), the other parts ran; a failed check still fails the test. */
#define TEST_END_SKIPPING(why) return t_end(__FILE__, (why))

#define TEST_SKIP(why)                                                           \
    do {                                                                         \
        printf("skipped: %s\n", why);                                            \
        return 77;                                                               \
    } while (0)

#endif
