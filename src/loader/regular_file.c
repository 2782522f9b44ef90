/* regular_file.c: non-blocking open of regular files only (regular_file.h). */
#include "loader/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

/* "a FIFO", "a directory", ... for a file type that is not S_IFREG. */
static const char *rf_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "an unknown kind of file";
}

vllm_status rf_open(const char *path, int *fd, struct stat *sb) {
    *fd = -1;
    if (!path) return vt_error(VLLM_ERR_INVALID_ARG, "rf_open: path is NULL");
    /* O_NONBLOCK: a FIFO without a writer (or a device that waits) must not hang the open;
     * O_NOCTTY: a terminal given by mistake does not become ours */
    int f;
    do f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    while (f < 0 && errno == EINTR);
    if (f < 0) {
        int err = errno;
        return vt_error(err == ENOENT ? VLLM_ERR_NOT_FOUND : VLLM_ERR_IO, "%s: %s", path, strerror(err));
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        int err = errno;
        close(f);
        return vt_error(VLLM_ERR_IO, "%s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return vt_error(VLLM_ERR_IO, "%s: not a regular file (%s)", path, rf_kind(st.st_mode));
    }
    if (sb) *sb = st;
    *fd = f;
    return VLLM_OK;
}

vllm_status rf_read(const char *path, size_t max, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    int fd;
    struct stat sb;
    vllm_status st = rf_open(path, &fd, &sb);
    if (st) return st;
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)max) {
        close(fd);
        return vt_error(VLLM_ERR_FORMAT, "%s: %lld bytes is too large (at most %zu)", path, (long long)sb.st_size, max);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", path, size + 1);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* an error, or the file shrank under us */
            int err = n < 0 ? errno : 0;
            close(fd);
            free(buf);
            return vt_error(VLLM_ERR_IO, "%s: read failed%s%s", path, err ? ": " : " (the file shrank)",
                            err ? strerror(err) : "");
        }
        got += (size_t)n;
    }
    close(fd);
    buf[size] = '\0';
    *data = buf;
    if (len) *len = size;
    return VLLM_OK;
}
