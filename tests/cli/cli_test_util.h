/*
 * cli_test_util.h: running the vllmc binary from a test: run() runs it
 * with arguments (logging at error level) and captures stdout, stderr
 * and the exit code; expect_error_rc checks a failing run. g_tmp is the
 * test's scratch folder (cli_tmp_begin / cli_tmp_end).
 */
#ifndef VLLM_CLI_TEST_UTIL_H
#define VLLM_CLI_TEST_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

static char g_tmp[256];

/* Makes g_tmp, /tmp/PREFIX_XXXXXX; false when it cannot. */
static inline bool cli_tmp_begin(const char *prefix) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(g_tmp) != NULL;
}

/* Removes g_tmp and what the test wrote there. */
static inline void cli_tmp_end(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    CHECK(system(cmd) == 0);
}

/* Runs vllmc with args; returns the exit code, fills out/err (malloc'd). */
static int run(const char *args, char **out, char **err) {
    char cmd[4096], o[300], e[300];
    snprintf(o, sizeof o, "%s/stdout", g_tmp);
    snprintf(e, sizeof e, "%s/stderr", g_tmp);
    snprintf(cmd, sizeof cmd, "VLLM_LOG_LEVEL=error %s %s >%s 2>%s", VLLMC_BIN, args, o, e);
    int rc = system(cmd);
    *out = t_slurp(o);
    *err = t_slurp(e);
    if (!*out) *out = strdup("");
    if (!*err) *err = strdup("");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static inline int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Expects exit code want_rc (-1: any failure, not a crash) with exactly one
 * stderr line containing `needle` and nothing on stdout. */
static inline void expect_error_rc(const char *args, const char *needle, int want_rc) {
    char *out, *err;
    int rc = run(args, &out, &err);
    if (want_rc < 0) CHECK_MSG(rc != 0 && rc != 128, "exit %d for: %s", rc, args);
    else CHECK_MSG(rc == want_rc, "exit %d (want %d) for: %s", rc, want_rc, args);
    CHECK_MSG(strstr(err, needle) != NULL, "stderr '%s' lacks '%s' for: %s", err, needle, args);
    CHECK_MSG(count_lines(err) == 1, "expected one error line, got: %s", err);
    CHECK_MSG(out[0] == 0, "stdout not empty: %s", out);
    free(out);
    free(err);
}

#endif
