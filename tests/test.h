/*
 * test.h: the tiny test harness: CHECK macros that report file:line and
 * keep going, and a summary exit code (0 pass, 1 fail, 77 skip).
 */
#ifndef VLLM_TEST_H
#define VLLM_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
