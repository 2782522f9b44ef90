/*
 * hub.c: resolving a Hugging Face model id to local files: the cache first, then the hub's API
 * (GET /api/models/ID/revision/REV?blobs=true: the commit and every file's size and LFS sha256, as
 * huggingface_hub's model_info(files_metadata=True)), then the files vllm.c reads, downloaded in parallel
 * from /ID/resolve/COMMIT/PATH into the cache's blobs and linked from the snapshot.
 */
#include "hub/hub.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include <jansson.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "hub/hf_cache.h"
#include "hub/hf_http.h"

#define MAX_WORKERS 8

/* ------------------------------------------------------------------ */
/* ids                                                                 */
/* ------------------------------------------------------------------ */

/* Splits "org/name:QUANT" into the repository id and the GGUF quantization tag. */
static bool split_spec(const char *spec, char *id, size_t cap, const char **quant) {
    const char *slash = strrchr(spec, '/');
    const char *colon = strchr(slash ? slash : spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n >= cap) return false;
    memcpy(id, spec, n);
    id[n] = 0;
    *quant = colon ? colon + 1 : NULL;
    if (*quant && !**quant) return false;
    return hfc_valid_repo_id(id);
}

bool hub_is_model_id(const char *s) {
    if (!s || !*s || s[0] == '/' || s[0] == '.' || s[0] == '~') return false;
    struct stat sb;
    if (stat(s, &sb) == 0) return false;
    char id[256];
    const char *quant;
    return split_spec(s, id, sizeof id, &quant);
}

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "ON") || !strcasecmp(v, "YES") || !strcasecmp(v, "TRUE"));
}

static long env_long(const char *name, long def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 ? def : x;
}

/* HF_TOKEN, else the token file huggingface_hub's `hf auth login` writes ($HF_TOKEN_PATH, $HF_HOME/token). */
static char *read_token(void) {
    const char *v = getenv("HF_TOKEN");
    if (!v || !*v) v = getenv("HUGGING_FACE_HUB_TOKEN");
    if (v && *v) return strdup(v);
    char path[4096];
    const char *tp = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
               *h = getenv("HOME");
    char *tpx = tp && *tp ? hfc_expand_user(tp) : NULL, *homex = home && *home ? hfc_expand_user(home) : NULL;
    if (tpx) snprintf(path, sizeof path, "%s", tpx);
    else if (homex) snprintf(path, sizeof path, "%s/token", homex);
    else if (xdg && *xdg) snprintf(path, sizeof path, "%s/huggingface/token", xdg);
    else if (h && *h) snprintf(path, sizeof path, "%s/.cache/huggingface/token", h);
    else path[0] = 0;
    free(tpx);
    free(homex);
    if (!path[0]) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    return n ? strdup(buf) : NULL;
}

/* ------------------------------------------------------------------ */
/* the files a model needs                                             */
/* ------------------------------------------------------------------ */

/* Optional files: used when the repository has them. The first four decide whether a cached snapshot is
 * complete (present, or known missing from a .no_exist marker). */
static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                              "special_tokens_map.json"};
static const char *const MODEL_EXTRA_FILES[] = {"generation_config.json", "modules.json",
                                                "sentence_bert_config.json", "config_sentence_transformers.json"};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct hub_file {
    char *path;        /* in the repository */
    int64_t size;      /* -1: unknown */
    char *etag;        /* blob name: the LFS sha256, else the git blob id */
    bool lfs;
    bool need;         /* to be fetched */
} hub_file;

typedef struct repo_info {
    char commit[41];
    hub_file *files;
    size_t n;
} repo_info;

static void info_free(repo_info *ri) {
    for (size_t i = 0; i < ri->n; i++) {
        free(ri->files[i].path);
        free(ri->files[i].etag);
    }
    free(ri->files);
    memset(ri, 0, sizeof *ri);
}

static hub_file *info_find(repo_info *ri, const char *path) {
    for (size_t i = 0; i < ri->n; i++)
        if (!strcmp(ri->files[i].path, path)) return &ri->files[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

/* The GGUF tag of a file name matches QUANT: "...[-._]QUANT[-.]..." case-insensitively. */
static bool gguf_matches(const char *name, const char *quant) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (!ends_with(base, ".gguf") || strcasestr(base, "mmproj")) return false;
    if (!quant) return true;
    size_t q = strlen(quant);
    for (const char *p = base; (p = strcasestr(p, quant)); p++) {
        bool before = p == base || p[-1] == '-' || p[-1] == '.' || p[-1] == '_';
        bool after = p[q] == '-' || p[q] == '.';
        if (before && after) return true;
    }
    return false;
}

/* A split GGUF file's part ("NAME-00002-of-00003.gguf": 2, *count 3; llama.cpp's gguf-split naming); 0 when
 * the name is not a split part. */
static int split_part(const char *name, int *count) {
    size_t n = strlen(name);
    *count = 0;
    if (n < 20 || strcasecmp(name + n - 5, ".gguf")) return 0;
    const char *s = name + n - 20; /* "-XXXXX-of-YYYYY.gguf" */
    if (s[0] != '-' || strncmp(s + 6, "-of-", 4)) return 0;
    for (int i = 1; i <= 5; i++)
        if (s[i] < '0' || s[i] > '9' || s[9 + i] < '0' || s[9 + i] > '9') return 0;
    int part = atoi(s + 1), total = atoi(s + 10);
    if (part < 1 || total < 1 || part > total) return 0;
    *count = total;
    return part;
}

/* A loadable GGUF name: a whole file or the first part of a split one (the loader opens the rest). */
static bool gguf_entry(const char *name) {
    int count;
    int part = split_part(name, &count);
    return part == 0 || part == 1;
}

/* Whether every part of the split file whose first part is `first` (a path) exists; true for a whole file. */
static bool split_complete(const char *first) {
    int count;
    if (split_part(first, &count) != 1) return true;
    size_t n = strlen(first);
    char *p = strdup(first);
    bool ok = p != NULL;
    for (int k = 2; ok && k <= count; k++) {
        char suf[48];
        ok = snprintf(suf, sizeof suf, "-%05d-of-%05d.gguf", k, count) == 20; /* counts are 5 digits */
        if (ok) memcpy(p + n - 20, suf, 20);
        ok = ok && access(p, R_OK) == 0;
    }
    free(p);
    return ok;
}

/* ------------------------------------------------------------------ */
/* the cache alone                                                     */
/* ------------------------------------------------------------------ */

static bool present_or_missing(const char *repo_dir, const char *commit, const char *path) {
    return hfc_have(repo_dir, commit, path) || hfc_known_missing(repo_dir, commit, path);
}

/* The shards a safetensors index names (unique, in first-seen order); NULL on a bad index. */
static json_t *index_shards(const char *index_path) {
    json_error_t jerr;
    json_t *idx = json_load_file(index_path, 0, &jerr);
    json_t *wm = idx ? json_object_get(idx, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        json_decref(idx);
        vt_error(VLLM_ERR_FORMAT, "%s: no weight_map object", index_path);
        return NULL;
    }
    json_t *out = json_array(), *seen = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        if (!f) continue;
        if (json_object_get(seen, f)) continue;
        json_object_set_new(seen, f, json_true());
        json_array_append_new(out, json_string(f));
    }
    json_decref(seen);
    json_decref(idx);
    return out;
}

/* The GGUF file of a cached snapshot whose name carries tag (NULL: any GGUF file), the first in name order at
 * the top level, else one folder down (repositories keep quantizations in folders: Q4_K_M/name-Q4_K_M.gguf);
 * NULL when there is none. */
static char *cached_gguf(const char *snap, const char *tag) {
    struct dirent **ents = NULL;
    int n = scandir(snap, &ents, NULL, alphasort);
    char *found = NULL;
    for (int pass = 0; pass < 2 && !found; pass++) {
        for (int i = 0; i < n && !found; i++) {
            const char *name = ents[i]->d_name;
            if (name[0] == '.') continue;
            char *p = NULL;
            if (asprintf(&p, "%s/%s", snap, name) < 0) break;
            struct stat sb;
            if (stat(p, &sb) == 0) {
                if (pass == 0 && S_ISREG(sb.st_mode) && gguf_matches(name, tag) && gguf_entry(name) &&
                    split_complete(p)) {
                    found = p;
                    p = NULL;
                } else if (pass == 1 && S_ISDIR(sb.st_mode)) {
                    struct dirent **sub = NULL;
                    int m = scandir(p, &sub, NULL, alphasort);
                    for (int j = 0; j < m; j++) {
                        struct stat sb2;
                        char *q = NULL;
                        if (!found && sub[j]->d_name[0] != '.' && gguf_matches(sub[j]->d_name, tag) &&
                            gguf_entry(sub[j]->d_name) && asprintf(&q, "%s/%s", p, sub[j]->d_name) >= 0) {
                            if (stat(q, &sb2) == 0 && S_ISREG(sb2.st_mode) && split_complete(q)) {
                                found = q;
                                q = NULL;
                            }
                        }
                        free(q);
                        free(sub[j]);
                    }
                    free(sub);
                }
            }
            free(p);
        }
    }
    for (int i = 0; i < n; i++) free(ents[i]);
    free(ents);
    return found;
}

/* Whether the snapshot at commit serves the request without the network: complete (every file is there
 * or known missing) or usable (what is needed to load is there). *out is the path to return. */
static void cache_check(const char *repo_dir, const char *commit, const hub_options *o, const char *quant,
                        bool *complete, bool *usable, char **out) {
    *complete = *usable = false;
    *out = NULL;
    char *snap = hfc_snapshot_path(repo_dir, commit, NULL);
    if (!snap) return;
    if (quant || (!o->tokenizer_only && !hfc_have(repo_dir, commit, "config.json"))) {
        /* a GGUF repository: the tagged file; with no tag the one the hub would be asked for (Q4_K_M, as
         * llama-cli -hf), and, offline, any cached GGUF file */
        char *g = cached_gguf(snap, quant ? quant : "Q4_K_M");
        if (g) {
            *complete = *usable = true;
        } else if (!quant && (g = cached_gguf(snap, NULL))) {
            *usable = true;
        }
        *out = g;
        free(snap);
        return;
    }
    bool tok_ok = true;
    for (size_t i = 0; i < NELEM(TOKENIZER_FILES); i++)
        tok_ok = tok_ok && present_or_missing(repo_dir, commit, TOKENIZER_FILES[i]);
    if (o->tokenizer_only) {
        *usable = hfc_have(repo_dir, commit, "tokenizer.json");
        *complete = tok_ok;
        if (*usable || *complete) *out = snap;
        else free(snap);
        return;
    }
    bool weights = o->no_weights;
    if (!weights) {
        if (hfc_have(repo_dir, commit, "model.safetensors.index.json")) {
            char *ip = hfc_snapshot_path(repo_dir, commit, "model.safetensors.index.json");
            json_t *sh = ip ? index_shards(ip) : NULL;
            free(ip);
            weights = sh != NULL;
            size_t i;
            json_t *v;
            json_array_foreach(sh, i, v) weights = weights && hfc_have(repo_dir, commit, json_string_value(v));
            json_decref(sh);
            vt_error_clear();
        } else {
            weights = hfc_have(repo_dir, commit, "model.safetensors");
        }
    }
    *usable = weights;
    *complete = weights && tok_ok && present_or_missing(repo_dir, commit, "generation_config.json");
    if (*usable) *out = snap;
    else free(snap);
}

/* ------------------------------------------------------------------ */
/* the hub                                                             */
/* ------------------------------------------------------------------ */

/* Percent-encodes s for a URL path; keep_slash leaves '/' as is (file paths). malloc'd. */
static char *url_escape(const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = 0;
    return out;
}


typedef struct ctx {
    const char *id, *rev, *endpoint, *cache, *repo_dir;
    hfh_conf conf;
    bool has_token;
} ctx;

/* An HTTP error status in the words a user can act on. */
static vllm_status http_error(const ctx *c, const char *what, const hfh_reply *r) {
    const char *code = r->error_code, *msg = r->error_message[0] ? r->error_message : NULL;
    if (r->status == 401 || (r->status == 403 && !strcmp(code, "GatedRepo")))
        return vt_error(VLLM_ERR_INVALID_ARG,
                        c->has_token
                            ? "%s: HTTP %ld: the hub refused HF_TOKEN for this repository: it is private or gated "
                              "(accept its conditions at %s/%s with the token's account)%s%s"
                            : "%s: HTTP %ld: the repository is private or gated: accept its conditions at %s/%s "
                              "and set HF_TOKEN (or log in with `hf auth login`)%s%s",
                        c->id, r->status, c->endpoint, c->id, msg ? ": " : "", msg ? msg : "");
    if (r->status == 404) {
        if (!strcmp(code, "RevisionNotFound"))
            return vt_error(VLLM_ERR_NOT_FOUND, "%s: revision '%s' not found on %s", c->id, c->rev, c->endpoint);
        if (!strcmp(code, "EntryNotFound"))
            return vt_error(VLLM_ERR_NOT_FOUND, "%s: %s not found at revision %s", c->id, what, c->rev);
        return vt_error(VLLM_ERR_NOT_FOUND,
                        "%s is neither a local path nor a repository on %s (404%s%s%s)", c->id, c->endpoint,
                        c->has_token ? "" : "; a private repository needs HF_TOKEN", msg ? ": " : "", msg ? msg : "");
    }
    char excerpt[160] = "";
    if (!msg && r->body) {
        snprintf(excerpt, sizeof excerpt, "%s", r->body);
        for (char *p = excerpt; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return vt_error(VLLM_ERR_IO, "%s: HTTP %ld from %s for %s%s%s", c->id, r->status, c->endpoint, what,
                    msg || excerpt[0] ? ": " : "", msg ? msg : excerpt);
}

static vllm_status fetch_info(const ctx *c, repo_info *ri) {
    char *eid = url_escape(c->id, 1), *erev = url_escape(c->rev, 0), *url = NULL;
    if (!eid || !erev || asprintf(&url, "%s/api/models/%s/revision/%s?blobs=true", c->endpoint, eid, erev) < 0)
        url = NULL;
    free(eid);
    free(erev);
    if (!url) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    hfh_reply r;
    vllm_status st = hfh_get(&c->conf, url, &r);
    if (st) {
        vt_error_prefix("%s: cannot reach the hub (set HF_HUB_OFFLINE=1 to use the cache alone)", c->id);
        free(url);
        return st;
    }
    if (r.status != 200) {
        st = http_error(c, "the repository's file list", &r);
        hfh_reply_free(&r);
        free(url);
        return st;
    }
    json_error_t jerr;
    json_t *j = json_loadb(r.body, r.len, 0, &jerr);
    hfh_reply_free(&r);
    const char *sha = json_string_value(json_object_get(j, "sha"));
    json_t *sib = json_object_get(j, "siblings");
    if (!sha || !hfc_is_commit(sha) || !json_is_array(sib)) {
        json_decref(j);
        st = vt_error(VLLM_ERR_FORMAT, "%s: the hub's reply has no commit sha or siblings list", url);
        free(url);
        return st;
    }
    free(url);
    memcpy(ri->commit, sha, 41);
    ri->files = calloc(json_array_size(sib) + 1, sizeof *ri->files);
    if (!ri->files) {
        json_decref(j);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    size_t i;
    json_t *s;
    json_array_foreach(sib, i, s) {
        const char *name = json_string_value(json_object_get(s, "rfilename"));
        if (!name) continue;
        if (!hfc_safe_path(name)) { /* a file name that would leave the snapshot folder: never fetched */
            LOG_W("%s: the hub lists an unsafe file name '%.200s': ignored", c->id, name);
            continue;
        }
        json_t *lfs = json_object_get(s, "lfs");
        const char *etag = json_string_value(json_object_get(lfs, "sha256"));
        bool is_lfs = etag != NULL;
        if (!etag) etag = json_string_value(json_object_get(s, "blobId"));
        json_t *size = json_object_get(is_lfs ? lfs : s, "size");
        if (!size) size = json_object_get(s, "size");
        hub_file *f = &ri->files[ri->n];
        f->path = strdup(name);
        f->etag = etag ? strdup(etag) : NULL;
        f->lfs = is_lfs;
        f->size = json_is_integer(size) ? (int64_t)json_integer_value(size) : -1;
        if (!f->path || (etag && !f->etag)) {
            json_decref(j);
            return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        }
        ri->n++;
    }
    json_decref(j);
    return VLLM_OK;
}

/* ---- parallel downloads with one progress line ---- */
typedef struct dl_state {
    const ctx *c;
    repo_info *ri;
    size_t *todo;               /* indexes into ri->files */
    size_t ntodo;
    atomic_size_t next;
    atomic_int failed;
    pthread_mutex_t mu;         /* the error message, the progress line */
    char error[1024];
    vllm_status error_status;
    int64_t total, done;
    double start, last_print;
    bool tty, show;
} dl_state;

static void print_progress(dl_state *s, bool final) {
    double now = progress_now();
    if (!final && now - s->last_print < (s->tty ? 0.25 : 5.0)) return;
    s->last_print = now;
    double el = now - s->start;
    double mb = (double)s->done / 1e6, tot = (double)s->total / 1e6;
    double rate = el > 0 ? mb / el : 0;
    fprintf(stderr, "%sdownloading %s: %.1f / %.1f MB (%.0f%%), %.1f MB/s%s", s->tty ? "\r" : "", s->c->id, mb, tot,
            tot > 0 ? 100.0 * mb / tot : 100.0, rate, s->tty && !final ? "   " : "\n");
    fflush(stderr);
}

static void on_progress(void *ud, int64_t delta) {
    dl_state *s = ud;
    pthread_mutex_lock(&s->mu);
    s->done += delta;
    if (s->show) print_progress(s, false);
    pthread_mutex_unlock(&s->mu);
}

static vllm_status fetch_one(dl_state *s, hub_file *f) {
    const ctx *c = s->c;
    const char *commit = s->ri->commit;
    if (hfc_have(c->repo_dir, commit, f->path)) return VLLM_OK;
    if (!f->etag) return vt_error(VLLM_ERR_FORMAT, "%s: the hub lists no blob id for %s", c->id, f->path);
    for (const char *p = f->etag; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return vt_error(VLLM_ERR_FORMAT, "%s: bad blob id '%s' for %s", c->id, f->etag, f->path);
    char *blob = hfc_blob_path(c->repo_dir, f->etag, NULL), *part = hfc_blob_path(c->repo_dir, f->etag, ".incomplete");
    char *epath = url_escape(f->path, 1), *eid = url_escape(c->id, 1), *url = NULL;
    vllm_status st = VLLM_OK;
    if (!blob || !part || !epath || !eid ||
        asprintf(&url, "%s/%s/resolve/%s/%s", c->endpoint, eid, commit, epath) < 0) {
        url = NULL;
        st = vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    int lock = -1;
    struct stat sb;
    if (!st) st = hfc_mkdirs(blob, false);
    if (!st && (lock = hfc_lock(c->cache, c->id, f->etag)) < 0) st = VLLM_ERR_IO;
    if (!st && !(stat(blob, &sb) == 0 && (f->size < 0 || sb.st_size == f->size))) {
        hfh_download d = {.url = url, .path = part, .size = f->size, .sha256 = f->lfs ? f->etag : NULL,
                          .progress = on_progress, .ctx = s};
        hfh_reply r;
        st = hfh_fetch_file(&c->conf, &d, &r);
        if (st && r.status >= 400) st = http_error(c, f->path, &r);
        hfh_reply_free(&r);
        if (!st && rename(part, blob) != 0)
            st = vt_error(VLLM_ERR_IO, "cannot rename %s: %s", part, strerror(errno));
    } else if (!st) {
        on_progress(s, f->size > 0 ? f->size : 0);
    }
    hfc_unlock(lock);
    if (!st) st = hfc_link(c->repo_dir, commit, f->path, f->etag);
    free(blob);
    free(part);
    free(epath);
    free(eid);
    free(url);
    return st;
}

static void *dl_worker(void *ud) {
    dl_state *s = ud;
    for (;;) {
        if (atomic_load(&s->failed)) break;
        size_t k = atomic_fetch_add(&s->next, 1);
        if (k >= s->ntodo) break;
        hub_file *f = &s->ri->files[s->todo[k]];
        vllm_status st = fetch_one(s, f);
        if (st) {
            pthread_mutex_lock(&s->mu);
            if (!atomic_exchange(&s->failed, 1)) {
                snprintf(s->error, sizeof s->error, "%s", vllm_last_error());
                s->error_status = st;
            }
            pthread_mutex_unlock(&s->mu);
            break;
        }
        LOG_D("hub: %s: %s ready", s->c->id, f->path);
    }
    return NULL;
}

/* Fetches every file marked need, MAX_WORKERS at a time, with a progress line unless quiet. */
static vllm_status fetch_needed(const ctx *c, repo_info *ri, bool quiet) {
    dl_state s = {.c = c, .ri = ri};
    s.todo = calloc(ri->n + 1, sizeof *s.todo);
    if (!s.todo) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < ri->n; i++) {
        if (!ri->files[i].need || hfc_have(c->repo_dir, ri->commit, ri->files[i].path)) continue;
        s.todo[s.ntodo++] = i;
        if (ri->files[i].size > 0) s.total += ri->files[i].size;
    }
    if (!s.ntodo) {
        free(s.todo);
        return VLLM_OK;
    }
    pthread_mutex_init(&s.mu, NULL);
    s.start = s.last_print = progress_now();
    s.tty = isatty(2);
    s.show = !quiet && log_enabled(LOG_INFO);
    if (s.show)
        fprintf(stderr, "vllmc: downloading %zu file(s) of %s (%.1f MB) at %.12s into %s\n", s.ntodo, c->id,
                (double)s.total / 1e6, ri->commit, c->repo_dir);
    size_t nw = s.ntodo < MAX_WORKERS ? s.ntodo : MAX_WORKERS;
    pthread_t th[MAX_WORKERS];
    size_t started = 0;
    for (; started < nw; started++)
        if (pthread_create(&th[started], NULL, dl_worker, &s) != 0) break;
    if (started == 0) dl_worker(&s);
    for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    vllm_status st = VLLM_OK;
    if (atomic_load(&s.failed)) {
        if (s.show && s.tty) fputc('\n', stderr);
        st = vt_error(s.error_status, "%s", s.error);
    } else if (s.show) {
        print_progress(&s, true);
    }
    pthread_mutex_destroy(&s.mu);
    free(s.todo);
    return st;
}

/* Marks the files wanted, fetching the safetensors index first to learn its shards. */
static vllm_status choose_files(const ctx *c, repo_info *ri, const hub_options *o, const char *quant,
                                char **out_path) {
    *out_path = NULL;
    bool has_config = info_find(ri, "config.json") != NULL;
    if (quant || (!o->tokenizer_only && !has_config)) {
        /* a GGUF repository: one file, by tag (llama.cpp's default tag is Q4_K_M, else the first file) */
        hub_file *pick = NULL;
        const char *tags[] = {quant, "Q4_K_M", NULL};
        for (int t = 0; t < 3 && !pick; t++) {
            if (t > 0 && quant) break;
            for (size_t i = 0; i < ri->n && !pick; i++)
                if (gguf_matches(ri->files[i].path, t == 2 ? NULL : tags[t]) && gguf_entry(ri->files[i].path))
                    pick = &ri->files[i];
        }
        if (!pick) {
            char list[512] = "";
            for (size_t i = 0; i < ri->n; i++)
                if (gguf_matches(ri->files[i].path, NULL) && strlen(list) + strlen(ri->files[i].path) + 3 < sizeof list)
                    strcat(strcat(list, list[0] ? ", " : ""), ri->files[i].path);
            if (quant)
                return vt_error(VLLM_ERR_NOT_FOUND, "%s: no GGUF file for '%s'%s%s",
                                c->id, quant, list[0] ? "; the repository has: " : "", list);
            return vt_error(VLLM_ERR_NOT_FOUND,
                            "%s: no config.json and no GGUF file: not a model repository vllm.c can load", c->id);
        }
        pick->need = true;
        int count;
        if (split_part(pick->path, &count) == 1) { /* every part of a split file, next to the first */
            size_t n = strlen(pick->path);
            int found = 1;
            for (size_t i = 0; i < ri->n; i++) {
                int cnt, part = split_part(ri->files[i].path, &cnt);
                if (part > 1 && cnt == count && strlen(ri->files[i].path) == n &&
                    !strncmp(ri->files[i].path, pick->path, n - 20)) {
                    ri->files[i].need = true;
                    found++;
                }
            }
            if (found != count)
                return vt_error(VLLM_ERR_FORMAT, "%s: %s is part 1 of %d, the repository has %d of them", c->id,
                                pick->path, count, found);
        }
        LOG_I("%s: GGUF file %s%s", c->id, pick->path, count ? " (and its other parts)" : "");
        *out_path = hfc_snapshot_path(c->repo_dir, ri->commit, pick->path);
        return *out_path ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < NELEM(TOKENIZER_FILES); i++) {
        hub_file *f = info_find(ri, TOKENIZER_FILES[i]);
        if (f) f->need = true;
    }
    if (o->tokenizer_only) {
        if (!info_find(ri, "tokenizer.json"))
            return vt_error(VLLM_ERR_NOT_FOUND, "%s: no tokenizer.json at revision %s (vllm.c reads tokenizer.json)",
                            c->id, c->rev);
    } else {
        info_find(ri, "config.json")->need = true;
        for (size_t i = 0; i < NELEM(MODEL_EXTRA_FILES); i++) {
            hub_file *f = info_find(ri, MODEL_EXTRA_FILES[i]);
            if (f) f->need = true;
        }
        /* sentence-transformers module configs (1_Pooling/config.json, 2_Normalize/...) */
        for (size_t i = 0; i < ri->n; i++) {
            const char *p = ri->files[i].path, *sl = strchr(p, '/');
            if (sl && p[0] >= '0' && p[0] <= '9' && !strchr(sl + 1, '/') && ends_with(sl, ".json"))
                ri->files[i].need = true;
        }
        if (!o->no_weights) {
            hub_file *idx = info_find(ri, "model.safetensors.index.json");
            if (idx) {
                idx->need = true;
                repo_info only = {.files = idx, .n = 1};
                memcpy(only.commit, ri->commit, 41);
                vllm_status st = fetch_needed(c, &only, true);
                if (st) return st;
                char *ip = hfc_snapshot_path(c->repo_dir, ri->commit, idx->path);
                json_t *sh = ip ? index_shards(ip) : NULL;
                free(ip);
                if (!sh) return VLLM_ERR_FORMAT;
                size_t i;
                json_t *v;
                json_array_foreach(sh, i, v) {
                    hub_file *f = info_find(ri, json_string_value(v));
                    if (!f) {
                        st = vt_error(VLLM_ERR_FORMAT, "%s: the index names %s, which the repository does not have",
                                      c->id, json_string_value(v));
                        json_decref(sh);
                        return st;
                    }
                    f->need = true;
                }
                json_decref(sh);
            } else if (info_find(ri, "model.safetensors")) {
                info_find(ri, "model.safetensors")->need = true;
            } else {
                bool bin = false, gguf = false;
                for (size_t i = 0; i < ri->n; i++) {
                    bin = bin || ends_with(ri->files[i].path, ".bin") || ends_with(ri->files[i].path, ".pt");
                    gguf = gguf || gguf_matches(ri->files[i].path, NULL);
                }
                return vt_error(VLLM_ERR_UNSUPPORTED, "%s: no model.safetensors or model.safetensors.index.json%s", c->id,
                                gguf ? "; for one of its GGUF files name it as ID:QUANT (e.g. :Q4_K_M)"
                                     : bin ? ": PyTorch .bin weights are not read (vllm.c reads safetensors)" : "");
            }
        }
    }
    *out_path = hfc_snapshot_path(c->repo_dir, ri->commit, NULL);
    return *out_path ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
}

/* Records the optional files the repository does not have, so a later run needs no network to know. */
static void mark_missing(const ctx *c, repo_info *ri, const hub_options *o) {
    for (size_t i = 0; i < NELEM(TOKENIZER_FILES); i++)
        if (!info_find(ri, TOKENIZER_FILES[i])) hfc_mark_missing(c->repo_dir, ri->commit, TOKENIZER_FILES[i]);
    if (!o->tokenizer_only && !info_find(ri, "generation_config.json"))
        hfc_mark_missing(c->repo_dir, ri->commit, "generation_config.json");
    vt_error_clear(); /* a marker that cannot be written only costs a network call next time */
}

vllm_status hub_resolve(const char *spec, const hub_options *opt, char **out_path) {
    *out_path = NULL;
    hub_options o = opt ? *opt : (hub_options){0};
    char id[256];
    const char *quant = NULL;
    if (!spec || !split_spec(spec, id, sizeof id, &quant))
        return vt_error(VLLM_ERR_INVALID_ARG, "'%s' is neither a local path nor a Hugging Face model id (ORG/NAME)",
                        spec ? spec : "(null)");
    const char *rev = o.revision && *o.revision ? o.revision : "main";
    char *cache = hfc_cache_dir(), *repo_dir = cache ? hfc_repo_dir(cache, id) : NULL;
    if (!repo_dir) {
        free(cache);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    vllm_status st = VLLM_OK;
    bool offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE"); /* huggingface_hub: either */
    char commit[41];
    bool complete = false, usable = false;
    char *path = NULL;
    if (hfc_read_ref(repo_dir, rev, commit)) {
        cache_check(repo_dir, commit, &o, quant, &complete, &usable, &path);
        if (complete || (offline && usable)) {
            LOG_I("%s: from the Hugging Face cache (%s at %.12s)", spec, rev, commit);
            *out_path = path;
            free(cache);
            free(repo_dir);
            return VLLM_OK;
        }
        free(path);
        path = NULL;
    }
    if (offline) {
        st = vt_error(VLLM_ERR_NOT_FOUND,
                      "%s (revision %s) is not in the Hugging Face cache %s%s, and HF_HUB_OFFLINE=1 forbids "
                      "downloading it",
                      spec, rev, cache, hfc_read_ref(repo_dir, rev, commit) ? " completely" : "");
        free(cache);
        free(repo_dir);
        return st;
    }

    char *endpoint = strdup(getenv("HF_ENDPOINT") && *getenv("HF_ENDPOINT") ? getenv("HF_ENDPOINT")
                                                                            : "https://huggingface.co");
    char *token = read_token();
    if (!endpoint) {
        free(cache);
        free(repo_dir);
        free(token);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t n = strlen(endpoint); n && endpoint[n - 1] == '/';) endpoint[--n] = 0;
    ctx c = {.id = id, .rev = rev, .endpoint = endpoint, .cache = cache, .repo_dir = repo_dir,
             .has_token = token != NULL};
    c.conf = (hfh_conf){.token = token,
                        .connect_timeout = env_long("HF_HUB_ETAG_TIMEOUT", 10),
                        .stall_timeout = env_long("HF_HUB_DOWNLOAD_TIMEOUT", 30),
                        .retries = (int)env_long("VLLM_HUB_RETRIES", 5),
                        .retry_delay_ms = (int)env_long("VLLM_HUB_RETRY_DELAY_MS", 500)};
    repo_info ri = {0};
    st = fetch_info(&c, &ri);
    if (st == VLLM_ERR_IO && usable) { /* the hub is unreachable: what the cache has will do (huggingface_hub too) */
        LOG_W("%s; using the cached snapshot %.12s", vllm_last_error(), commit);
        vt_error_clear();
        cache_check(repo_dir, commit, &o, quant, &complete, &usable, &path);
        *out_path = path;
        free(endpoint);
        free(token);
        free(cache);
        free(repo_dir);
        return VLLM_OK;
    }
    if (!st && (st = hfc_write_ref(repo_dir, rev, ri.commit)) == VLLM_OK) {
        LOG_I("%s: revision %s is commit %s", id, rev, ri.commit);
        st = choose_files(&c, &ri, &o, quant, &path);
    }
    if (!st) st = fetch_needed(&c, &ri, false);
    if (!st) mark_missing(&c, &ri, &o);
    if (st) {
        free(path);
        path = NULL;
    }
    *out_path = path;
    info_free(&ri);
    free(endpoint);
    free(token);
    free(cache);
    free(repo_dir);
    return st;
}
