/*
 * test.h: the tiny test harness: CHECK macros that report file:line and
 * keep going, and a summary exit code (0 pass, 1 fail, 77 skip).
 */
#ifndef VLLM_TEST_H
#define VLLM_TEST_H

#include <math.h>
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

/* Ends main: prints a summary line, returns the ctest exit code. */
#define TEST_END()                                                               \
    do {                                                                         \
        fprintf(stderr, "%s: %d checks, %d failures\n", __FILE__, t_checks, t_failures); \
        return t_failures ? 1 : 0;                                               \
    } while (0)

#define TEST_SKIP(why)                                                           \
    do {                                                                         \
        printf("skipped: %s\n", why);                                            \
        return 77;                                                               \
    } while (0)

#endif
