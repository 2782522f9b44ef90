/*
 * regular_file.h: opening the files of a model folder (config.json,
 * generation_config.json, tokenizer.json, tokenizer_config.json,
 * chat_template.jinja, *.safetensors, the shard index) without blocking, and
 * only when they are regular files.
 *
 * A plain open() of a FIFO waits for a writer forever and a device can hand
 * out endless bytes; the folder's files are opened with O_NONBLOCK (which a
 * regular file ignores) and anything fstat does not call a regular file is
 * refused with "PATH: not a regular file (a FIFO)" and VLLM_ERR_IO.
 */
#ifndef VLLM_LOADER_REGULAR_FILE_H
#define VLLM_LOADER_REGULAR_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "vllm.h"

/* Opens path read-only (O_NONBLOCK | O_CLOEXEC) and checks it is a regular
 * file: *fd receives the descriptor (the caller closes it), sb (may be NULL)
 * its fstat. A missing path: VLLM_ERR_NOT_FOUND "PATH: No such file or
 * directory"; another open failure: VLLM_ERR_IO "PATH: <strerror>"; not a
 * regular file: VLLM_ERR_IO "PATH: not a regular file (a KIND)". *fd is -1 on
 * failure. */
vllm_status rf_open(const char *path, int *fd, struct stat *sb);

/* Reads the whole regular file at path into a malloc'd NUL-terminated buffer
 * (*len, may be NULL, gets its size without the NUL). Larger than max bytes:
 * VLLM_ERR_FORMAT "PATH: N bytes is too large (at most MAX)". Other errors
 * as rf_open; *data is NULL on failure. */
vllm_status rf_read(const char *path, size_t max, char **data, size_t *len);

#endif
