/*
 * hf_cache.c: paths, refs, snapshot links, missing-file markers and locks of the Hugging Face hub cache
 * (huggingface_hub's file_download.py layout; see hf_cache.h).
 */
#include "hub/hf_cache.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static char *fmt_path(const char *fmt, ...) VT_PRINTF(1, 2);
static char *fmt_path(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *hfc_expand_user(const char *path) {
    const char *home = env_nonempty("HOME");
    if (home && path[0] == '~' && (path[1] == '/' || path[1] == 0)) return fmt_path("%s%s", home, path + 1);
    return strdup(path);
}

char *hfc_cache_dir(void) {
    const char *v;
    /* huggingface_hub's constants.py expands ~ in these (os.path.expanduser) */
    if ((v = env_nonempty("HF_HUB_CACHE"))) return hfc_expand_user(v);
    if ((v = env_nonempty("HUGGINGFACE_HUB_CACHE"))) return hfc_expand_user(v); /* huggingface_hub's older name */
    if ((v = env_nonempty("HF_HOME"))) {
        char *h = hfc_expand_user(v), *d = h ? fmt_path("%s/hub", h) : NULL;
        free(h);
        return d;
    }
    if ((v = env_nonempty("XDG_CACHE_HOME"))) return fmt_path("%s/huggingface/hub", v);
    if ((v = env_nonempty("HOME"))) return fmt_path("%s/.cache/huggingface/hub", v);
    return strdup(".cache/huggingface/hub");
}

static bool valid_part(const char *s, size_t n) {
    if (n == 0 || n > 96) return false;
    if (s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                  c == '_' || c == '.';
        if (!ok) return false;
        if (i + 1 < n && ((c == '-' && s[i + 1] == '-') || (c == '.' && s[i + 1] == '.'))) return false;
    }
    return true;
}

bool hfc_valid_repo_id(const char *id) {
    if (!id) return false;
    const char *slash = strchr(id, '/');
    if (!slash) return valid_part(id, strlen(id));
    if (strchr(slash + 1, '/')) return false;
    return valid_part(id, (size_t)(slash - id)) && valid_part(slash + 1, strlen(slash + 1));
}

char *hfc_repo_dir(const char *cache, const char *repo_id) {
    /* models--ORG--NAME: every '/' becomes "--" (huggingface_hub's repo_folder_name) */
    size_t n = strlen(repo_id);
    char *name = malloc(n * 2 + 1);
    if (!name) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (repo_id[i] == '/') {
            name[k++] = '-';
            name[k++] = '-';
        } else {
            name[k++] = repo_id[i];
        }
    }
    name[k] = 0;
    char *dir = fmt_path("%s/models--%s", cache, name);
    free(name);
    return dir;
}

bool hfc_is_commit(const char *rev) {
    if (!rev || strlen(rev) != 40) return false;
    for (int i = 0; i < 40; i++)
        if (!((rev[i] >= '0' && rev[i] <= '9') || (rev[i] >= 'a' && rev[i] <= 'f'))) return false;
    return true;
}

bool hfc_safe_path(const char *p) {
    if (!p || !*p || p[0] == '/') return false;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return false;
        s += n;
        if (*s) s++;
    }
    return true;
}

bool hfc_read_ref(const char *repo_dir, const char *revision, char commit[41]) {
    if (hfc_is_commit(revision)) {
        memcpy(commit, revision, 41);
        return true;
    }
    if (!hfc_safe_path(revision)) return false;
    char *p = fmt_path("%s/refs/%s", repo_dir, revision);
    if (!p) return false;
    FILE *f = fopen(p, "rb");
    free(p);
    if (!f) return false;
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (!hfc_is_commit(buf)) return false;
    memcpy(commit, buf, 41);
    return true;
}

vllm_status hfc_mkdirs(const char *path, bool whole) {
    char *p = strdup(path);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    size_t n = strlen(p);
    if (!whole) {
        char *slash = strrchr(p, '/');
        if (!slash) {
            free(p);
            return VLLM_OK;
        }
        *slash = 0;
        n = strlen(p);
    }
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            vllm_status st = vt_error(VLLM_ERR_IO, "cannot create the folder %s: %s", p, strerror(errno));
            free(p);
            return st;
        }
        p[i] = c;
    }
    free(p);
    return VLLM_OK;
}

/* Writes text to path through a temporary file and a rename (readers never see half a file). */
static vllm_status write_atomic(const char *path, const char *text) {
    vllm_status st = hfc_mkdirs(path, false);
    if (st) return st;
    char *tmp = fmt_path("%s.tmp.%ld", path, (long)getpid());
    if (!tmp) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = vt_error(VLLM_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        st = vt_error(VLLM_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

vllm_status hfc_write_ref(const char *repo_dir, const char *revision, const char *commit) {
    if (hfc_is_commit(revision)) return VLLM_OK; /* a hash names itself: no ref file */
    if (!hfc_safe_path(revision)) return vt_error(VLLM_ERR_INVALID_ARG, "bad revision '%s'", revision);
    char *p = fmt_path("%s/refs/%s", repo_dir, revision);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    vllm_status st = write_atomic(p, commit); /* huggingface_hub writes the hash without a newline */
    free(p);
    return st;
}

char *hfc_snapshot_path(const char *repo_dir, const char *commit, const char *path) {
    return path ? fmt_path("%s/snapshots/%s/%s", repo_dir, commit, path) : fmt_path("%s/snapshots/%s", repo_dir, commit);
}

bool hfc_have(const char *repo_dir, const char *commit, const char *path) {
    if (!hfc_safe_path(path)) return false;
    char *p = hfc_snapshot_path(repo_dir, commit, path);
    struct stat sb;
    bool ok = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
    free(p);
    return ok;
}

bool hfc_known_missing(const char *repo_dir, const char *commit, const char *path) {
    if (!hfc_safe_path(path)) return false;
    char *p = fmt_path("%s/.no_exist/%s/%s", repo_dir, commit, path);
    bool ok = p && access(p, F_OK) == 0;
    free(p);
    return ok;
}

vllm_status hfc_mark_missing(const char *repo_dir, const char *commit, const char *path) {
    if (!hfc_safe_path(path)) return vt_error(VLLM_ERR_INVALID_ARG, "bad file name '%s'", path);
    char *p = fmt_path("%s/.no_exist/%s/%s", repo_dir, commit, path);
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    vllm_status st = write_atomic(p, "");
    free(p);
    return st;
}

char *hfc_blob_path(const char *repo_dir, const char *etag, const char *suffix) {
    return fmt_path("%s/blobs/%s%s", repo_dir, etag, suffix ? suffix : "");
}

vllm_status hfc_link(const char *repo_dir, const char *commit, const char *path, const char *etag) {
    if (!hfc_safe_path(path)) return vt_error(VLLM_ERR_FORMAT, "the hub named an unsafe file path '%s'", path);
    char *link = hfc_snapshot_path(repo_dir, commit, path);
    /* from snapshots/COMMIT/a/b/file: up two levels plus one per folder of PATH */
    size_t depth = 2;
    for (const char *s = path; *s; s++) depth += *s == '/';
    size_t cap = depth * 3 + strlen(etag) + 8;
    char *target = malloc(cap);
    if (!link || !target) {
        free(link);
        free(target);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    target[0] = 0;
    for (size_t i = 0; i < depth; i++) strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, etag);
    vllm_status st = hfc_mkdirs(link, false);
    if (!st) {
        unlink(link);
        if (symlink(target, link) != 0 && errno != EEXIST)
            st = vt_error(VLLM_ERR_IO, "cannot link %s: %s", link, strerror(errno));
    }
    free(link);
    free(target);
    return st;
}

int hfc_lock(const char *cache, const char *repo_id, const char *etag) {
    char *repo_dir = hfc_repo_dir(cache, repo_id);
    const char *name = repo_dir ? strrchr(repo_dir, '/') + 1 : NULL;
    char *p = name ? fmt_path("%s/.locks/%s/%s.lock", cache, name, etag) : NULL;
    free(repo_dir);
    if (!p) {
        vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    int fd = -1;
    if (hfc_mkdirs(p, false) == VLLM_OK) {
        fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            vt_error(VLLM_ERR_IO, "cannot open the lock %s: %s", p, strerror(errno));
        } else {
            while (flock(fd, LOCK_EX) != 0) {
                if (errno == EINTR) continue;
                vt_error(VLLM_ERR_IO, "cannot lock %s: %s", p, strerror(errno));
                close(fd);
                fd = -1;
                break;
            }
        }
    }
    free(p);
    return fd;
}

void hfc_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}
