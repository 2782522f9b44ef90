/*
 * cli_test_util.h: running the vllmc binary from a test: t_run_vllmc runs
 * it with arguments (logging at error level) and captures stdout, stderr
 * and the exit code. g_tmp is the test's scratch folder.
 */
#ifndef VLLM_CLI_TEST_UTIL_H
#define VLLM_CLI_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

static char g_tmp[256];

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

#endif
