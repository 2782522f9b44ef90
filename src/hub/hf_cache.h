/*
 * hf_cache.h: the Hugging Face hub cache on disk, in huggingface_hub's layout, so files downloaded by
 * Python tools are used as they are and files vllm.c downloads are seen by them:
 *
 *   $HF_HUB_CACHE (else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub)
 *     models--ORG--NAME/
 *       refs/REVISION                  the commit hash a branch or tag last resolved to
 *       blobs/ETAG                     file contents, named by sha256 (LFS files) or git blob sha1
 *       blobs/ETAG.incomplete          a download in progress (resumed from its length)
 *       snapshots/COMMIT/PATH          relative symlinks to ../../blobs/ETAG
 *       .no_exist/COMMIT/PATH          empty files: PATH is known not to exist at COMMIT
 *     .locks/models--ORG--NAME/ETAG.lock   flock(2) while a blob is downloaded
 */
#ifndef VLLM_HUB_HF_CACHE_H
#define VLLM_HUB_HF_CACHE_H

#include <stdbool.h>

#include "vllm.h"

/* path with a leading ~ replaced by $HOME (os.path.expanduser), malloc'd. */
char *hfc_expand_user(const char *path);

/* The hub cache folder (malloc'd) from the environment, as huggingface_hub's constants.py. */
char *hfc_cache_dir(void);

/* True for a valid repository id "NAME" or "ORG/NAME" (huggingface_hub's validate_repo_id: letters,
 * digits, '-', '_', '.', at most 96 each, no "--" or "..", not starting or ending with '-' or '.'). */
bool hfc_valid_repo_id(const char *id);

/* cache/models--ORG--NAME (malloc'd). */
char *hfc_repo_dir(const char *cache, const char *repo_id);

/* True for a relative path that stays inside its folder: no empty, "." or ".." components, not absolute.
 * Revisions (under refs/) and the hub's file names (under snapshots/) must be. */
bool hfc_safe_path(const char *p);

/* True for 40 lowercase hex digits (a commit hash). */
bool hfc_is_commit(const char *rev);

/* The commit a revision names: the revision itself when it is a hash, else refs/REVISION's content.
 * False when unknown. */
bool hfc_read_ref(const char *repo_dir, const char *revision, char commit[41]);
vllm_status hfc_write_ref(const char *repo_dir, const char *revision, const char *commit);

/* repo_dir/snapshots/COMMIT[/PATH] (malloc'd; path may be NULL). */
char *hfc_snapshot_path(const char *repo_dir, const char *commit, const char *path);
/* True when snapshots/COMMIT/PATH exists (a link to a present blob, or a plain file). */
bool hfc_have(const char *repo_dir, const char *commit, const char *path);
/* .no_exist markers. */
bool hfc_known_missing(const char *repo_dir, const char *commit, const char *path);
vllm_status hfc_mark_missing(const char *repo_dir, const char *commit, const char *path);

/* repo_dir/blobs/ETAG[SUFFIX] (malloc'd). */
char *hfc_blob_path(const char *repo_dir, const char *etag, const char *suffix);
/* Points snapshots/COMMIT/PATH at blobs/ETAG with a relative symlink (replacing what was there). */
vllm_status hfc_link(const char *repo_dir, const char *commit, const char *path, const char *etag);

/* Takes the blob's download lock (blocks while another process holds it); returns the fd to pass to
 * hfc_unlock, or -1 with the error set. */
int hfc_lock(const char *cache, const char *repo_id, const char *etag);
void hfc_unlock(int fd);

/* mkdir -p of path's parent folders (of path itself when whole is true). */
vllm_status hfc_mkdirs(const char *path, bool whole);

#endif
