/*
 * hf_http.h: the HTTP side of Hugging Face hub downloads, over libcurl: small GETs (the API's JSON) and
 * file downloads into a .incomplete file, resumed with a Range request after an interruption (within the
 * call, up to `retries` times, or by a later call that finds the partial file), with the size and, for
 * LFS files, the sha256 verified before the caller publishes the blob.
 */
#ifndef VLLM_HUB_HF_HTTP_H
#define VLLM_HUB_HF_HTTP_H

#include <stdint.h>

#include "vllm.h"

/* Connection settings for every request of one resolution. */
typedef struct hfh_conf {
    const char *token;      /* bearer token (HF_TOKEN) or NULL; never sent to another host on a redirect */
    long connect_timeout;   /* seconds (HF_HUB_ETAG_TIMEOUT, default 10) */
    long stall_timeout;     /* seconds without a byte before a transfer is retried (HF_HUB_DOWNLOAD_TIMEOUT) */
    int retries;            /* retries of an interrupted download (default 5) */
    int retry_delay_ms;     /* first wait before a retry, doubled each time */
} hfh_conf;

/* What an HTTP exchange ended with: the final status, the hub's X-Error-Code / X-Error-Message headers,
 * and the body (the whole body for hfh_get, at most 4 KiB of an error body for hfh_download). */
typedef struct hfh_reply {
    long status;            /* 0 when no HTTP response arrived (then the error message says why) */
    char *body;
    size_t len;
    char error_code[64];
    char error_message[256];
} hfh_reply;

void hfh_reply_free(hfh_reply *r);

/* Initialises libcurl once per process (thread-safe). In a build without libcurl (-DVLLM_CURL=OFF:
 * hf_http_none.c) every call below returns VLLM_ERR_UNSUPPORTED saying so. */
vllm_status hfh_global_init(void);

/* GET url into r (bodies up to 64 MiB). Returns VLLM_ERR_IO when no response arrived; an HTTP error status
 * is VLLM_OK with r->status set (the caller words the error). */
vllm_status hfh_get(const hfh_conf *c, const char *url, hfh_reply *r);

/* Called with the bytes added to (or, negative, dropped from) a download. */
typedef void (*hfh_progress_fn)(void *ctx, int64_t delta);

typedef struct hfh_download {
    const char *url;
    const char *path;        /* the .incomplete file: appended to, created when absent */
    int64_t size;            /* expected bytes (-1: unknown, not checked) */
    const char *sha256;      /* expected lowercase hex digest, or NULL */
    hfh_progress_fn progress;
    void *ctx;
} hfh_download;

/* Downloads d->url into d->path. VLLM_OK when the file is complete and verified; an HTTP error status
 * returns VLLM_ERR_IO with r->status set and the partial file kept; a size or sha256 mismatch deletes the
 * partial file and returns VLLM_ERR_FORMAT; a write failure (disk full) VLLM_ERR_IO naming the file. */
vllm_status hfh_fetch_file(const hfh_conf *c, const hfh_download *d, hfh_reply *r);

#endif
