/*
 * test_server_util.h: what the tests/server/test_server_*.c wrappers share:
 *   srv_start   runs `vllmc serve models/stories260K --port 0 --served-model-name stories
 *               --chat-template tests/server/stories260k_chat.jinja EXTRA` with stdout and
 *               stderr in files, and waits for its ready line ("... on http://HOST:PORT")
 *   srv_start_model  the same for another model folder, served name and chat template (NULL: the
 *               model's own)
 *   srv_stop    SIGTERM, then checks the server exits 0 (graceful shutdown) in time
 *   node_setup  the pinned openai npm client (tests/node_setup.sh server-node): 77 = skip
 *   node_run    node tests/server/node/<script> with arguments
 * Paths are absolute (VLLM_SOURCE_DIR), so the tests run from any directory.
 */
#ifndef VLLM_TEST_SERVER_UTIL_H
#define VLLM_TEST_SERVER_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif
#ifndef VLLMC_BIN
#define VLLMC_BIN "build/vllmc"
#endif

#define SRV_MODEL VLLM_SOURCE_DIR "/models/stories260K"
#define SRV_TEMPLATE VLLM_SOURCE_DIR "/tests/server/stories260k_chat.jinja"
#define SRV_NODE_DIR VLLM_SOURCE_DIR "/tests/server/node"

typedef struct srv_proc {
    pid_t pid;
    int port;
    char url[128];        /* http://127.0.0.1:PORT */
    char out[300], err[300];  /* the server's stdout and stderr files */
    char name[32];
} srv_proc;

static char g_srv_tmp[256];

static inline void srv_sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A scratch folder for the servers' output (kept on failure for inspection). */
static inline bool srv_tmpdir(const char *test) {
    snprintf(g_srv_tmp, sizeof g_srv_tmp, "/tmp/vllmc-%s-XXXXXX", test);
    return mkdtemp(g_srv_tmp) != NULL;
}

/* Prints the last lines of a file to stderr (the server's log on failure). */
static inline void srv_dump(const char *path, const char *what) {
    char *s = t_slurp(path);
    if (!s) return;
    size_t n = strlen(s);
    const char *p = n > 4000 ? s + n - 4000 : s;
    fprintf(stderr, "---- %s (%s), last %zu bytes ----\n%s\n---- end ----\n", what, path, strlen(p), p);
    free(s);
}

/* Starts `vllmc serve MODEL --served-model-name SERVED [--chat-template TEMPLATE] EXTRA` (template NULL: the
 * model's own); false (with the log printed) when it does not become ready in timeout_s. */
static inline bool srv_start_model(srv_proc *s, const char *name, const char *model, const char *served,
                                   const char *chat_template, const char *extra, int timeout_s) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->out, sizeof s->out, "%s/%s.out", g_srv_tmp, name);
    snprintf(s->err, sizeof s->err, "%s/%s.err", g_srv_tmp, name);
    char tmpl[1200] = "";
    if (chat_template) snprintf(tmpl, sizeof tmpl, " --chat-template \"%s\"", chat_template);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec \"%s\" serve \"%s\" --port 0 --served-model-name %s%s %s >\"%s\" 2>\"%s\"",
             VLLMC_BIN, model, served, tmpl, extra ? extra : "", s->out, s->err);
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    for (int waited = 0; waited < timeout_s * 1000; waited += 50) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "%s: vllmc serve exited before it was ready (status %d)\n", name,
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            srv_dump(s->err, "server stderr");
            s->pid = 0;
            return false;
        }
        char *out = t_slurp(s->out);
        const char *h = out ? strstr(out, "http://") : NULL;
        if (h && strchr(h, '\n')) {
            /* http://HOST:PORT or http://[V6]:PORT: the port follows the last ':' before the line end */
            const char *eol = strchr(h, '\n');
            const char *colon = NULL;
            for (const char *p = h + 7; p < eol; p++)
                if (*p == ':') colon = p;
            s->port = colon ? atoi(colon + 1) : 0;
            free(out);
            if (s->port <= 0) {
                fprintf(stderr, "%s: no port in the ready line\n", name);
                srv_dump(s->out, "server stdout");
                return false;
            }
            snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
            fprintf(stderr, "%s: ready on %s\n", name, s->url);
            return true;
        }
        free(out);
        srv_sleep_ms(50);
    }
    fprintf(stderr, "%s: no ready line after %d s\n", name, timeout_s);
    srv_dump(s->err, "server stderr");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = 0;
    return false;
}

/* Starts the server on the bundled stories260K (served as "stories", tests/server/stories260k_chat.jinja). */
static inline bool srv_start(srv_proc *s, const char *name, const char *extra, int timeout_s) {
    return srv_start_model(s, name, SRV_MODEL, "stories", SRV_TEMPLATE, extra, timeout_s);
}

/* SIGTERM and wait; the exit code (0 = graceful), or -1 when killed / not exiting in timeout_s. */
static inline int srv_stop(srv_proc *s, int timeout_s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    for (int waited = 0; waited < timeout_s * 1000; waited += 20) {
        int st;
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) {
            s->pid = 0;
            if (WIFEXITED(st)) return WEXITSTATUS(st);
            fprintf(stderr, "%s: server ended by signal %d\n", s->name, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
            return -1;
        }
        if (r < 0 && errno != EINTR) break;
        srv_sleep_ms(20);
    }
    fprintf(stderr, "%s: server still running %d s after SIGTERM: killing it\n", s->name, timeout_s);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    return -1;
}

/* Stops the server and checks the graceful exit; prints its log when anything failed. */
static inline void srv_stop_check(srv_proc *s, bool dump_anyway) {
    int rc = srv_stop(s, 60);
    CHECK_MSG(rc == 0, "%s: vllmc serve exit status %d after SIGTERM (want 0)", s->name, rc);
    if (rc != 0 || dump_anyway) srv_dump(s->err, "server stderr");
}

/* system() with the exit code, or -1. */
static inline int srv_system(const char *cmd) {
    fprintf(stderr, "+ %s\n", cmd);
    fflush(stderr);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* The openai client for the node tests, by tests/node_setup.sh's rule: 0 ready, 77 skip (node or npm
 * not installed, or the npm registry unreachable; never under VLLM_REQUIRE_NODE=1), else fail. */
static inline int node_setup(void) {
    return srv_system("sh \"" VLLM_SOURCE_DIR "/tests/node_setup.sh\" server-node");
}

/* node tests/server/node/<script> <args>: its exit code. */
static inline int node_run(const char *script, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd \"%s\" && node \"%s/%s\" %s", VLLM_SOURCE_DIR, SRV_NODE_DIR, script, args);
    return srv_system(cmd);
}

/* Removes the scratch folder (after a passing run). */
static inline void srv_cleanup(void) {
    char cmd[400];
    if (t_failures == 0 && g_srv_tmp[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf \"%s\"", g_srv_tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_srv_tmp);
    } else if (g_srv_tmp[0]) {
        fprintf(stderr, "server logs kept in %s\n", g_srv_tmp);
    }
}

#endif
