/*
 * fuzz_util.h: helpers shared by the libFuzzer targets of tests/fuzz (header only):
 * splitting an input into NUL-separated parts, a private scratch folder for the
 * loaders that read files, and silencing the messages that code under test prints.
 */
#ifndef VLLM_TESTS_FUZZ_UTIL_H
#define VLLM_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef VLLM_SOURCE_DIR
#define FUZZ_ROOT VLLM_SOURCE_DIR
#else
#define FUZZ_ROOT "."
#endif

/* Walks an input split at its NUL bytes: "a\0b" is the parts "a" and "b", "a" is "a" alone. */
typedef struct fuzz_parts {
    const uint8_t *p, *end;
    int done;
} fuzz_parts;

static inline fuzz_parts fuzz_parts_of(const uint8_t *data, size_t size) {
    return (fuzz_parts){.p = data, .end = data + size, .done = 0};
}

/* The next part, malloc'd and NUL-terminated (its length in *len), or NULL after the last one. */
static inline char *fuzz_next_part(fuzz_parts *it, size_t *len) {
    if (it->done) return NULL;
    const uint8_t *nul = it->p < it->end ? memchr(it->p, 0, (size_t)(it->end - it->p)) : NULL;
    size_t n = nul ? (size_t)(nul - it->p) : (size_t)(it->end - it->p);
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, it->p, n);
    s[n] = 0;
    if (len) *len = n;
    if (nul) it->p = nul + 1;
    else it->done = 1;
    return s;
}

/* A scratch folder for this process (created once, removed at exit with what is in it). */
static char fuzz_dir_path[256];

static void fuzz_dir_cleanup(void) {
    char cmd[300];
    if (!fuzz_dir_path[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

static inline const char *fuzz_dir(void) {
    if (fuzz_dir_path[0]) return fuzz_dir_path;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/vllmc-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_cleanup);
    return fuzz_dir_path;
}

/* Writes fuzz_dir()/name with n bytes of data (data NULL: removes the file). */
static inline void fuzz_write_file(const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    if (!data) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Sends what the code under test writes to stderr (error lines, warnings) to /dev/null: the
 * fuzzer would otherwise print millions of them. libFuzzer keeps its own copy of the original
 * stderr FILE and the sanitizers write to fd 2, so their reports still show. The original is
 * returned for the target's own messages. */
static inline FILE *fuzz_quiet_stderr(void) {
    static FILE *orig;
    if (orig) return orig;
    orig = stderr;
    FILE *null = fopen("/dev/null", "w");
    if (null) stderr = null;
    return orig;
}

#endif
