/*
 * hf_http.c: libcurl transfers for hub downloads: JSON GETs and resumable, verified file downloads.
 */
#include "hub/hf_http.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/error.h"
#include "core/sha256.h"

#define GET_MAX_BODY ((size_t)64 << 20)
#define ERR_MAX_BODY 4096

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;
static void global_init(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

vllm_status hfh_global_init(void) {
    pthread_once(&g_once, global_init);
    return g_init_rc == CURLE_OK ? VLLM_OK : vt_error(VLLM_ERR_IO, "libcurl: %s", curl_easy_strerror(g_init_rc));
}

void hfh_reply_free(hfh_reply *r) {
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

/* ---- one transfer's state, shared by the header and body callbacks ---- */
typedef struct xfer {
    hfh_reply *r;
    size_t body_cap;          /* bytes of body kept (GET_MAX_BODY or ERR_MAX_BODY) */
    bool to_file;             /* 2xx bodies go to fd (downloads) */
    int fd;
    int64_t have;             /* bytes in the file */
    bool resumed;             /* a Range request was sent */
    bool body_started;
    sha256_ctx sha;
    int write_errno;          /* a failed write(2) */
    bool too_big;
    const hfh_download *d;
} xfer;

static void copy_header_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    while (n && *v == ' ') v++, n--;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    xfer *x = ud;
    size_t n = size * nitems;
    if (n > 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (a redirect's, then the final one) */
        const char *sp = memchr(buf, ' ', n);
        x->r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->r->error_code[0] = x->r->error_message[0] = 0;
        return n;
    }
    const char *colon = memchr(buf, ':', n);
    if (!colon) return n;
    size_t kn = (size_t)(colon - buf);
    if (kn == 12 && !strncasecmp(buf, "X-Error-Code", 12))
        copy_header_value(x->r->error_code, sizeof x->r->error_code, colon + 1, n - kn - 1);
    else if (kn == 15 && !strncasecmp(buf, "X-Error-Message", 15))
        copy_header_value(x->r->error_message, sizeof x->r->error_message, colon + 1, n - kn - 1);
    return n;
}

static bool keep_body(xfer *x, const char *p, size_t n) {
    if (x->r->len + n > x->body_cap) {
        x->too_big = !x->to_file; /* an error body is only cut; a JSON body must be whole */
        n = x->body_cap > x->r->len ? x->body_cap - x->r->len : 0;
        if (x->too_big) return false;
    }
    char *nb = realloc(x->r->body, x->r->len + n + 1);
    if (!nb) return false;
    memcpy(nb + x->r->len, p, n);
    x->r->len += n;
    nb[x->r->len] = 0;
    x->r->body = nb;
    return true;
}

static bool write_all(int fd, const char *p, size_t n, int *err) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            *err = errno;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    long st = x->r->status;
    if (!x->to_file || st < 200 || st >= 300) return keep_body(x, p, n) ? n : 0;
    if (!x->body_started) {
        x->body_started = true;
        if (x->resumed && st == 200) { /* the server ignored the Range: start over */
            if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0) {
                x->write_errno = errno;
                return 0;
            }
            if (x->d->progress) x->d->progress(x->d->ctx, -x->have);
            x->have = 0;
            sha256_init(&x->sha);
        }
    }
    if (!write_all(x->fd, p, n, &x->write_errno)) return 0;
    sha256_update(&x->sha, p, n);
    x->have += (int64_t)n;
    if (x->d->progress) x->d->progress(x->d->ctx, (int64_t)n);
    return n;
}

static CURL *new_handle(const hfh_conf *c, const char *url, xfer *x) {
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "vllmc/" VLLM_VERSION);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, c->connect_timeout > 0 ? c->connect_timeout : 10L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->stall_timeout > 0 ? c->stall_timeout : 30L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (c->token && *c->token) {
        /* credentials set this way go to the first host only, never to a CDN a redirect names */
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, c->token);
    }
    return h;
}

vllm_status hfh_get(const hfh_conf *c, const char *url, hfh_reply *r) {
    memset(r, 0, sizeof *r);
    vllm_status st = hfh_global_init();
    if (st) return st;
    xfer x = {.r = r, .body_cap = GET_MAX_BODY, .fd = -1};
    CURL *h = new_handle(c, url, &x);
    if (!h) return vt_error(VLLM_ERR_NO_MEMORY, "libcurl: out of memory");
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    if (x.too_big || rc != CURLE_OK) hfh_reply_free(r); /* a failed call leaves no body to free */
    if (x.too_big) return vt_error(VLLM_ERR_FORMAT, "%s: the reply is larger than %zu MiB", url, GET_MAX_BODY >> 20);
    if (rc != CURLE_OK) {
        r->status = 0;
        return vt_error(VLLM_ERR_IO, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    }
    if (!r->body) r->body = calloc(1, 1);
    return r->body ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Hashes the partial file's bytes so the digest covers the whole file once the rest arrives. */
static vllm_status hash_existing(int fd, int64_t n, sha256_ctx *sha, const char *path) {
    char *buf = malloc(1 << 20);
    if (!buf) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    int64_t off = 0;
    while (off < n) {
        size_t want = (size_t)(n - off < (1 << 20) ? n - off : (1 << 20));
        ssize_t got = pread(fd, buf, want, off);
        if (got <= 0) {
            free(buf);
            return vt_error(VLLM_ERR_IO, "cannot read %s: %s", path, got < 0 ? strerror(errno) : "short file");
        }
        sha256_update(sha, buf, (size_t)got);
        off += got;
    }
    free(buf);
    return VLLM_OK;
}

static bool transient(CURLcode rc, long status) {
    if (rc == CURLE_OK) return status >= 500 || status == 429;
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT || rc == CURLE_GOT_NOTHING ||
           rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM || rc == CURLE_SSL_CONNECT_ERROR;
}

vllm_status hfh_fetch_file(const hfh_conf *c, const hfh_download *d, hfh_reply *r) {
    memset(r, 0, sizeof *r);
    vllm_status st = hfh_global_init();
    if (st) return st;
    int fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return vt_error(VLLM_ERR_IO, "cannot write %s: %s", d->path, strerror(errno));
    struct stat sb;
    int64_t have = fstat(fd, &sb) == 0 ? (int64_t)sb.st_size : 0;
    if (d->size >= 0 && have > d->size) { /* longer than the file: not ours to resume */
        if (ftruncate(fd, 0) != 0) have = -1;
        else have = 0;
    }
    if (have < 0) {
        st = vt_error(VLLM_ERR_IO, "cannot truncate %s: %s", d->path, strerror(errno));
        close(fd);
        return st;
    }
    xfer x = {.r = r, .body_cap = ERR_MAX_BODY, .to_file = true, .fd = fd, .have = have, .d = d};
    sha256_init(&x.sha);
    if (have > 0 && d->sha256 && (st = hash_existing(fd, have, &x.sha, d->path))) {
        close(fd);
        return st;
    }
    if (d->progress && have > 0) d->progress(d->ctx, have);
    if (lseek(fd, 0, SEEK_END) < 0) {
        st = vt_error(VLLM_ERR_IO, "cannot seek %s: %s", d->path, strerror(errno));
        close(fd);
        return st;
    }

    char errbuf[CURL_ERROR_SIZE];
    int delay = c->retry_delay_ms > 0 ? c->retry_delay_ms : 500;
    for (int attempt = 0;; attempt++) {
        if (d->size >= 0 && x.have == d->size) break; /* complete (a previous run or attempt got it all) */
        hfh_reply_free(r);
        r->status = 0;
        x.resumed = x.have > 0;
        x.body_started = false;
        x.write_errno = 0;
        CURL *h = new_handle(c, d->url, &x);
        if (!h) {
            close(fd);
            return vt_error(VLLM_ERR_NO_MEMORY, "libcurl: out of memory");
        }
        errbuf[0] = 0;
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        if (x.resumed) curl_easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)x.have);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_cleanup(h);
        if (x.write_errno) {
            st = vt_error(VLLM_ERR_IO, "cannot write %s: %s%s", d->path, strerror(x.write_errno),
                          x.write_errno == ENOSPC  ? " (the disk is full)"
                          : x.write_errno == EFBIG ? " (the file size limit was reached)"
                                                   : "");
            close(fd);
            return st;
        }
        if (rc == CURLE_RANGE_ERROR && x.resumed && attempt < c->retries + 1) {
            /* the server (a mirror, a proxy) answered the Range request with the whole file, which libcurl
             * refuses to append: start the file over without a Range */
            if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
                st = vt_error(VLLM_ERR_IO, "cannot truncate %s: %s", d->path, strerror(errno));
                close(fd);
                return st;
            }
            if (d->progress) d->progress(d->ctx, -x.have);
            x.have = 0;
            sha256_init(&x.sha);
            continue;
        }
        if (rc == CURLE_OK && r->status == 416 && x.resumed) { /* nothing left to send, or a bad range */
            if (d->size < 0 || x.have == d->size) break;
            if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
                st = vt_error(VLLM_ERR_IO, "cannot truncate %s: %s", d->path, strerror(errno));
                close(fd);
                return st;
            }
            if (d->progress) d->progress(d->ctx, -x.have);
            x.have = 0;
            sha256_init(&x.sha);
            continue;
        }
        if (rc == CURLE_OK && r->status >= 200 && r->status < 300) {
            if (d->size < 0 || x.have >= d->size) break;
            rc = CURLE_PARTIAL_FILE; /* the connection closed early without saying so */
        }
        if (attempt < c->retries && transient(rc, r->status)) {
            sleep_ms(delay);
            if (delay < 8000) delay *= 2;
            continue;
        }
        close(fd);
        if (rc != CURLE_OK)
            return vt_error(VLLM_ERR_IO, "%s: %s (%lld of %lld bytes kept in %s; run again to resume)", d->url,
                            errbuf[0] ? errbuf : curl_easy_strerror(rc), (long long)x.have, (long long)d->size,
                            d->path);
        return vt_error(VLLM_ERR_IO, "%s: HTTP %ld", d->url, r->status);
    }
    close(fd);
    if (d->size >= 0 && x.have != d->size) {
        unlink(d->path);
        return vt_error(VLLM_ERR_FORMAT, "%s: got %lld bytes, the hub lists %lld: the partial file is deleted",
                        d->url, (long long)x.have, (long long)d->size);
    }
    if (d->sha256) {
        uint8_t dig[32];
        char hex[65];
        sha256_final(&x.sha, dig);
        sha256_hex(dig, hex);
        if (strcmp(hex, d->sha256) != 0) {
            unlink(d->path);
            return vt_error(VLLM_ERR_FORMAT,
                            "%s: the downloaded file is corrupt (sha256 %s, the hub lists %s): it is deleted", d->url,
                            hex, d->sha256);
        }
    }
    return VLLM_OK;
}
