/*
 * test_hub.c: Hugging Face model ids: SHA-256 against FIPS 180-4's vectors, repository ids and cache paths,
 * a cache pre-populated in huggingface_hub's layout used without the network, and downloads from
 * tests/hub/mock_hub.py (the hub's API on 127.0.0.1): plain and sharded repositories into that layout, a
 * gated one, unknown repositories and revisions, an interrupted download resumed (within one run, and by a
 * second run from the .incomplete file with a Range request), a corrupted file rejected, a full disk, GGUF
 * files chosen by tag. Generated text is compared with the same model loaded from its folder.
 */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_test_util.h"
#include "server/test_server_util.h"
#include "core/sha256.h"
#include "hub/hf_cache.h"
#include "hub/hf_http.h"
#include "hub/hub.h"
#include "vllm.h"

#define STORIES VLLM_SOURCE_DIR "/models/stories260K"
#define GGUF_FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/gguf/ollama-llama-2-tiny-random.gguf"
#define GEN_ARGS "--prompt 'Once upon a time' --max-tokens 24 --temperature 0"

static char g_port[16];
static char g_env[1024]; /* the environment prefix of every vllmc run: the cache and the mock hub */

static void sha_hex(const char *data, size_t n, char out[65]) {
    sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final(&c, d);
    sha256_hex(d, out);
}

static void test_sha256(void) {
    char hex[65];
    sha_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    sha_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex(m, strlen(m), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    /* one million 'a' in uneven pieces: the buffering across update calls */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1000 + 1)
        sha256_update(&c, a + off, off + step > 1000000 ? 1000000 - off : step);
    sha256_final(&c, d);
    sha256_hex(d, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(a);
}

static void test_ids(void) {
    const char *good[] = {"Qwen/Qwen3-8B", "gpt2", "meta-llama/Llama-3.1-8B-Instruct", "a_b/c.d", "x/y"};
    const char *bad[] = {"", "/abs", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/b-", "a/.b", "a b/c", "a/"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK_MSG(hfc_valid_repo_id(good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(!hfc_valid_repo_id(bad[i]), "%s", bad[i]);
    char *d = hfc_repo_dir("/c", "Qwen/Qwen3-8B");
    CHECK(d && !strcmp(d, "/c/models--Qwen--Qwen3-8B"));
    free(d);
    CHECK(hfc_is_commit("0123456789abcdef0123456789abcdef01234567"));
    CHECK(!hfc_is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    CHECK(!hfc_is_commit("main"));
    /* local paths are never ids; ids are, and "org/name:QUANT" too */
    CHECK(!hub_is_model_id(STORIES));
    CHECK(!hub_is_model_id("models/stories260K"));
    CHECK(!hub_is_model_id("./nothing/here"));
    CHECK(hub_is_model_id("nobody/nothing"));
    CHECK(hub_is_model_id("nobody/nothing:Q4_K_M"));
    CHECK(!hub_is_model_id("nobody/nothing:"));
    CHECK(!hub_is_model_id("a/b/c"));
    /* HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub */
    const char *saved = getenv("HF_HUB_CACHE");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("HF_HUB_CACHE", "/x/cache", 1);
    char *c = hfc_cache_dir();
    CHECK(c && !strcmp(c, "/x/cache"));
    free(c);
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", "/x/home", 1);
    c = hfc_cache_dir();
    CHECK(c && !strcmp(c, "/x/home/hub"));
    free(c);
    setenv("HF_HOME", "~/x/home", 1); /* expanded as os.path.expanduser does */
    c = hfc_cache_dir();
    char want[600];
    snprintf(want, sizeof want, "%s/x/home/hub", getenv("HOME") ? getenv("HOME") : "");
    CHECK_MSG(!getenv("HOME") || (c && !strcmp(c, want)), "%s", c ? c : "");
    free(c);
    unsetenv("HF_HOME");
    if (keep) setenv("HF_HUB_CACHE", keep, 1);
    free(keep);
}

/* A file's blob name as huggingface_hub's cache has it: sha256 for LFS files, the git blob sha1 otherwise
 * (the test calls every file LFS: the layout is the same, only the name's kind differs). */
static void put_cached(const char *repo_dir, const char *commit, const char *src, const char *name) {
    char *data = t_slurp(src);
    if (!data) return;
    struct stat sb;
    stat(src, &sb);
    char hex[65], path[1024], link[1024], cmd[4096];
    sha_hex(data, (size_t)sb.st_size, hex);
    free(data);
    snprintf(path, sizeof path, "%s/blobs/%s", repo_dir, hex);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/blobs %s/snapshots/%s && cp %s %s", repo_dir, repo_dir, commit, src, path);
    CHECK(system(cmd) == 0);
    snprintf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, name);
    snprintf(path, sizeof path, "../../blobs/%s", hex);
    CHECK(symlink(path, link) == 0);
}

static char *gen(const char *model_and_args, int *rc, char **err) {
    static char cmd[8192];
    char o[300], e[300];
    snprintf(o, sizeof o, "%s/stdout", g_tmp);
    snprintf(e, sizeof e, "%s/stderr", g_tmp);
    snprintf(cmd, sizeof cmd, "env VLLM_LOG_LEVEL=warn %s %s generate --model %s " GEN_ARGS " >%s 2>%s", g_env,
             VLLMC_BIN, model_and_args, o, e);
    int st = system(cmd);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    char *out = t_slurp(o);
    *err = t_slurp(e);
    if (!*err) *err = strdup("");
    return out ? out : strdup("");
}

static char *g_expected; /* the greedy text from the folder itself */

static void expect_gen(const char *model, const char *extra_env, const char *what) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", g_env);
    if (extra_env) snprintf(g_env + strlen(g_env), sizeof g_env - strlen(g_env), " %s", extra_env);
    int rc;
    char *err, *out = gen(model, &rc, &err);
    CHECK_MSG(rc == 0 && !strcmp(out, g_expected), "%s: rc %d, '%s' vs '%s'; stderr: %s", what, rc, out, g_expected,
              err);
    free(out);
    free(err);
    snprintf(g_env, sizeof g_env, "%s", saved);
}

static void expect_gen_error(const char *model, const char *extra_env, const char *needle, const char *what) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", g_env);
    if (extra_env) snprintf(g_env + strlen(g_env), sizeof g_env - strlen(g_env), " %s", extra_env);
    int rc;
    char *err, *out = gen(model, &rc, &err);
    CHECK_MSG(rc == 1 && out[0] == 0 && strstr(err, needle), "%s: rc %d, stdout '%s', stderr lacks '%s': %s", what,
              rc, out, needle, err);
    free(out);
    free(err);
    snprintf(g_env, sizeof g_env, "%s", saved);
}

static int count_in_log(const char *needle) {
    char p[300];
    snprintf(p, sizeof p, "%s/hub.log", g_tmp);
    char *log = t_slurp(p);
    int n = 0;
    for (const char *s = log; s && (s = strstr(s, needle)); s++) n++;
    free(log);
    return n;
}

static void clear_log(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/hub.log", g_tmp);
    write_file(p, "");
}

/* The cache a Python user has after `hf download` / snapshot_download: blobs, links, refs/main; no markers. */
static void test_prepopulated_cache(void) {
    char repo[512];
    const char *commit = "1111111111111111111111111111111111111111";
    snprintf(repo, sizeof repo, "%s/cache/models--someone--cached", g_tmp);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"};
    for (size_t i = 0; i < 5; i++) {
        char src[512];
        snprintf(src, sizeof src, "%s/%s", STORIES, files[i]);
        put_cached(repo, commit, src, files[i]);
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/refs && printf %s > %s/refs/main", repo, commit, repo);
    CHECK(system(cmd) == 0);
    /* no network at all: an unreachable endpoint and HF_HUB_OFFLINE=1 */
    expect_gen("someone/cached", "HF_ENDPOINT=http://127.0.0.1:1 HF_HUB_OFFLINE=1", "offline cache");
    /* online, the hub unreachable: the cached snapshot is used with a warning (huggingface_hub's fallback) */
    expect_gen("someone/cached", "HF_ENDPOINT=http://127.0.0.1:1", "unreachable hub, cached");
    /* the revision by commit hash needs no ref */
    char m[256];
    snprintf(m, sizeof m, "someone/cached --revision %s", commit);
    expect_gen(m, "HF_ENDPOINT=http://127.0.0.1:1 HF_HUB_OFFLINE=1", "commit revision");
    expect_gen_error("someone/cached --revision v9", "HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE=1", "unknown ref offline");
    expect_gen_error("someone/absent", "HF_HUB_OFFLINE=1", "not in the Hugging Face cache", "absent offline");

    /* the C API resolves ids too */
    char cache[512];
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    setenv("HF_HUB_CACHE", cache, 1);
    setenv("HF_HUB_OFFLINE", "1", 1);
    vllm_engine_options eo = vllm_engine_default_options();
    eo.num_threads = 1;
    eo.kv_cache_memory = 16 << 20;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create("someone/cached", &eo, &e));
    if (e) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(vllm_tokenize(e, "Once upon a time", true, &ids, &n));
        CHECK(n > 3);
        free(ids);
        vllm_engine_free(e);
    }
    EXPECT_ERR(vllm_engine_create("someone/absent", &eo, &e), VLLM_ERR_NOT_FOUND, "someone/absent",
               "HF_HUB_OFFLINE=1");

    /* `vllmc serve ORG/NAME` from the cache alone: served under the id, which /v1/models reports as root */
    snprintf(g_srv_tmp, sizeof g_srv_tmp, "%s", g_tmp);
    srv_proc sp;
    if (srv_start_model(&sp, "hubserve", "someone/cached", "someone/cached", SRV_TEMPLATE, NULL, 60)) {
        char url[200];
        snprintf(url, sizeof url, "%s/v1/models", sp.url);
        hfh_conf hc = {.connect_timeout = 5, .stall_timeout = 10};
        hfh_reply r;
        CHECK_OK(hfh_get(&hc, url, &r));
        CHECK_MSG(r.status == 200 && r.body && strstr(r.body, "\"id\":\"someone/cached\"") &&
                      strstr(r.body, "\"root\":\"someone/cached\""),
                  "%s", r.body ? r.body : "");
        hfh_reply_free(&r);
        char *out = t_slurp(sp.out);
        CHECK_MSG(out && strstr(out, "serving someone/cached as someone/cached"), "%s", out ? out : "");
        free(out);
        srv_stop_check(&sp, false);
    } else {
        CHECK_MSG(false, "vllmc serve someone/cached did not start");
    }
    unsetenv("HF_HUB_OFFLINE");
    unsetenv("HF_HUB_CACHE");
}

static bool start_mock(void) {
    char cfg[512], cmd[2048];
    snprintf(cfg, sizeof cfg, "%s/hub.json", g_tmp);
    FILE *f = fopen(cfg, "w");
    if (!f) return false;
    char idx[400];
    snprintf(idx, sizeof idx, "%s/evil_index.json", g_tmp);
    write_file(idx, "{\"weight_map\": {\"w\": \"../../evil.safetensors\"}}");
    fprintf(f,
            "{\"repos\": {"
            "\"test/stories\": {\"dir\": \"%s\"},"
            "\"test/sharded\": {\"dir\": \"%s\", \"shards\": 2},"
            "\"test/gated\": {\"dir\": \"%s\", \"token\": \"sekrit\"},"
            "\"test/flaky\": {\"dir\": \"%s\", \"interrupt\": {\"model.safetensors\": [300000, 2]}},"
            "\"test/cut\": {\"dir\": \"%s\", \"interrupt\": {\"model.safetensors\": [400000, 1]}},"
            "\"test/corrupt\": {\"dir\": \"%s\", \"corrupt\": [\"model.safetensors\"]},"
            "\"test/full\": {\"dir\": \"%s\"},"
            "\"test/gguf\": {\"files\": {\"tiny-F16.gguf\": \"%s\", \"tiny-Q8_0.gguf\": \"%s\", "
            "\"README.md\": \"%s/README.md\"}},"
            "\"test/binonly\": {\"files\": {\"config.json\": \"%s/config.json\", \"pytorch_model.bin\": "
            "\"%s/config.json\"}},"
            "\"test/norange\": {\"dir\": \"%s\", \"norange\": true, \"interrupt\": {\"model.safetensors\": [300000, 1]}},"
            "\"test/gguf2\": {\"files\": {\"Q4_K_M/tiny-Q4_K_M.gguf\": \"%s\", \"tiny-Q8_0.gguf\": \"%s\"}},"
            "\"test/gguf3\": {\"files\": {\"big-Q4_K_M-00001-of-00002.gguf\": \"%s\", "
            "\"big-Q4_K_M-00002-of-00002.gguf\": \"%s/config.json\", \"big-Q8_0.gguf\": \"%s\"}},"
            "\"test/evil\": {\"files\": {\"config.json\": \"%s/config.json\", "
            "\"model.safetensors.index.json\": \"%s/evil_index.json\", \"../../evil.safetensors\": "
            "\"%s/model.safetensors\"}}"
            "}}",
            STORIES, STORIES, STORIES, STORIES, STORIES, STORIES, STORIES, GGUF_FIXTURE, GGUF_FIXTURE, STORIES,
            STORIES, STORIES, STORIES, GGUF_FIXTURE, GGUF_FIXTURE, GGUF_FIXTURE, STORIES, GGUF_FIXTURE, STORIES, g_tmp,
            STORIES);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "python3 %s/tests/hub/mock_hub.py --config %s --port-file %s/port --log %s/hub.log "
             "</dev/null >%s/mock.out 2>&1 & echo $! > %s/mock.pid",
             VLLM_SOURCE_DIR, cfg, g_tmp, g_tmp, g_tmp, g_tmp);
    if (system(cmd) != 0) return false;
    char p[300];
    snprintf(p, sizeof p, "%s/port", g_tmp);
    for (int i = 0; i < 200; i++) {
        char *s = t_slurp(p);
        if (s && *s) {
            snprintf(g_port, sizeof g_port, "%s", s);
            free(s);
            return true;
        }
        free(s);
        usleep(50000);
    }
    return false;
}

static void stop_mock(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/mock.pid", g_tmp);
    char *s = t_slurp(p);
    if (s && atoi(s) > 0) kill(atoi(s), SIGTERM);
    free(s);
}

static bool exists(const char *fmt, const char *a) {
    char p[1024];
    snprintf(p, sizeof p, fmt, g_tmp, a);
    return access(p, F_OK) == 0;
}

static void test_downloads(void) {
    /* a plain repository: downloaded into huggingface_hub's layout, then used again without requests */
    clear_log();
    expect_gen("test/stories", NULL, "download");
    CHECK(count_in_log("GET /api/models/test/stories/revision/main?blobs=true") == 1);
    CHECK(count_in_log("/resolve/") == 5); /* config, generation config, weights, two tokenizer files */
    char p[1024], *ref;
    snprintf(p, sizeof p, "%s/cache/models--test--stories/refs/main", g_tmp);
    ref = t_slurp(p);
    CHECK(ref && hfc_is_commit(ref));
    if (ref && hfc_is_commit(ref)) {
        char link[1024], target[256] = {0};
        snprintf(link, sizeof link, "%s/cache/models--test--stories/snapshots/%s/model.safetensors", g_tmp, ref);
        ssize_t n = readlink(link, target, sizeof target - 1);
        CHECK(n > 0 && !strncmp(target, "../../blobs/", 12) && strlen(target) == 12 + 64);
        CHECK(exists("%s/cache/models--test--stories/.no_exist/%s/chat_template.jinja", ref));
    }
    free(ref);
    clear_log();
    expect_gen("test/stories", NULL, "cached after download");
    CHECK(count_in_log("GET") == 0);

    /* sharded: the index, then its shards */
    clear_log();
    expect_gen("test/sharded", NULL, "sharded");
    CHECK(count_in_log("model-00001-of-00002.safetensors") == 1);
    CHECK(count_in_log("model-00002-of-00002.safetensors") == 1);

    /* --load-format dummy needs no weights */
    clear_log();
    {
        static char args[4096];
        snprintf(args, sizeof args, "env %s HF_HUB_CACHE=%s/cache3 %s generate --model test/stories --revision main "
                 "--load-format dummy --prompt hi --max-tokens 2 >/dev/null 2>&1", g_env, g_tmp, VLLMC_BIN);
        CHECK(system(args) == 0);
        CHECK(count_in_log("/resolve/") == 4 && count_in_log("model.safetensors") == 0); /* no weights */
    }

    /* gated: a 401 naming HF_TOKEN; with the token, downloaded */
    expect_gen_error("test/gated", NULL, "HF_TOKEN", "gated without a token");
    expect_gen_error("test/gated", "HF_TOKEN=wrong", "refused HF_TOKEN", "gated, a wrong token");
    expect_gen("test/gated", "HF_TOKEN=sekrit", "gated with the token");
    /* the token from the file `hf auth login` writes */
    {
        char tp[512];
        snprintf(tp, sizeof tp, "%s/token", g_tmp);
        write_file(tp, "sekrit\n");
        snprintf(tp, sizeof tp, "HF_TOKEN_PATH=%s/token", g_tmp);
        /* a fresh cache so the download happens again */
        char env[1200];
        snprintf(env, sizeof env, "%s HF_HUB_CACHE=%s/cache2", tp, g_tmp);
        expect_gen("test/gated", env, "gated, the token file");
    }

    expect_gen_error("test/nothing", NULL, "neither a local path nor a repository", "unknown repository");
    expect_gen_error("test/stories --revision v2", NULL, "revision 'v2' not found", "unknown revision");
    expect_gen_error("test/binonly", NULL, "PyTorch .bin weights are not read", "no safetensors");
    /* a file name leaving the snapshot folder is never fetched, nor written */
    expect_gen_error("test/evil", NULL, "which the repository does not have", "unsafe file name");
    CHECK(!exists("%s/cache/%s", "evil.safetensors") && !exists("%s/%s", "evil.safetensors"));

    /* interrupted twice mid-file: resumed within the run with Range requests */
    clear_log();
    expect_gen("test/flaky", "VLLM_HUB_RETRY_DELAY_MS=10", "interrupted, retried");
    CHECK_MSG(count_in_log("bytes=300000-") == 2 && count_in_log("bytes=600000-") == 2, /* resolve + CDN */
              "the retries resumed at 300000 and 600000");

    /* a server that ignores Range (200 with the whole file) after an interruption: the file starts over */
    expect_gen("test/norange", "VLLM_HUB_RETRY_DELAY_MS=10", "Range ignored");

    /* interrupted with no retries: the run fails keeping the partial file; the next run resumes it */
    expect_gen_error("test/cut", "VLLM_HUB_RETRIES=0", "run again to resume", "interrupted, no retries");
    {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "test $(stat -c %%s %s/cache/models--test--cut/blobs/*.incomplete) -eq 400000",
                 g_tmp);
        CHECK_MSG(system(cmd) == 0, "the partial file holds the 400000 bytes received");
    }
    clear_log();
    expect_gen("test/cut", NULL, "resumed by a second run");
    CHECK(count_in_log("bytes=400000-") == 2); /* the resolve request and the CDN's */
    CHECK(!exists("%s/cache/models--test--cut/blobs/%s", "*.incomplete"));

    /* corrupted content: refused, nothing published */
    expect_gen_error("test/corrupt", NULL, "corrupt (sha256", "corrupted file");
    {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "! ls %s/cache/models--test--corrupt/blobs | grep -q . || "
                 "! ls %s/cache/models--test--corrupt/blobs/ | xargs -I{} stat -c %%s "
                 "%s/cache/models--test--corrupt/blobs/{} | grep -q 1044984",
                 g_tmp, g_tmp, g_tmp);
        CHECK_MSG(system(cmd) == 0, "no weights blob kept");
        snprintf(cmd, sizeof cmd, "! ls %s/cache/models--test--corrupt/snapshots/*/model.safetensors 2>/dev/null",
                 g_tmp);
        CHECK_MSG(system(cmd) == 0, "no snapshot link to corrupt weights");
    }

    /* a full disk (a 200 KiB file size limit): a clear error, no crash */
    {
        static char cmd[4096];
        char e[300];
        snprintf(e, sizeof e, "%s/stderr", g_tmp);
        snprintf(cmd, sizeof cmd,
                 "sh -c \"trap '' XFSZ; ulimit -f 400; env %s VLLM_HUB_RETRIES=0 %s generate --model test/full "
                 "--prompt hi --max-tokens 2\" >/dev/null 2>%s",
                 g_env, VLLMC_BIN, e);
        int st = system(cmd);
        char *err = t_slurp(e);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1 && err && strstr(err, "cannot write") &&
                      strstr(err, "file size limit"),
                  "full disk: %s", err ? err : "");
        free(err);
    }

    /* GGUF repositories: one file by tag, as llama-cli -hf ORG/NAME:QUANT */
    char cache[512], endpoint[128];
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%s", g_port);
    setenv("HF_HUB_CACHE", cache, 1);
    setenv("HF_ENDPOINT", endpoint, 1);
    setenv("VLLM_LOG_LEVEL", "error", 1);
    char *path = NULL;
    CHECK_OK(hub_resolve("test/gguf:F16", NULL, &path));
    CHECK_MSG(path && strstr(path, "/snapshots/") && strstr(path, "/tiny-F16.gguf"), "%s", path ? path : "");
    if (path) CHECK(access(path, R_OK) == 0);
    free(path);
    path = NULL;
    CHECK_OK(hub_resolve("test/gguf:q8_0", NULL, &path));
    CHECK_MSG(path && strstr(path, "/tiny-Q8_0.gguf"), "%s", path ? path : "");
    free(path);
    path = NULL;
    EXPECT_ERR(hub_resolve("test/gguf:Q2_K", NULL, &path), VLLM_ERR_NOT_FOUND, "no GGUF file for 'Q2_K'",
               "tiny-F16.gguf");
    CHECK(path == NULL);
    /* the F16 file is now cached: resolved again with no request */
    clear_log();
    CHECK_OK(hub_resolve("test/gguf:F16", NULL, &path));
    free(path);
    path = NULL;
    CHECK(count_in_log("GET") == 0);
    /* a repository with its quantizations in folders; the bare id means Q4_K_M, cached or not */
    CHECK_OK(hub_resolve("test/gguf2:Q8_0", NULL, &path));
    CHECK_MSG(path && strstr(path, "/tiny-Q8_0.gguf"), "%s", path ? path : "");
    free(path);
    path = NULL;
    CHECK_OK(hub_resolve("test/gguf2", NULL, &path));
    CHECK_MSG(path && strstr(path, "/Q4_K_M/tiny-Q4_K_M.gguf"), "%s", path ? path : "");
    free(path);
    path = NULL;
    /* a split GGUF file (llama.cpp's gguf-split): every part fetched, the first one's path returned */
    CHECK_OK(hub_resolve("test/gguf3:Q4_K_M", NULL, &path));
    CHECK_MSG(path && strstr(path, "/big-Q4_K_M-00001-of-00002.gguf"), "%s", path ? path : "");
    if (path) {
        char second[1024];
        snprintf(second, sizeof second, "%.*s-00002-of-00002.gguf", (int)(strlen(path) - 20), path);
        CHECK_MSG(access(second, R_OK) == 0, "%s", second);
    }
    free(path);
    path = NULL;
    setenv("TRANSFORMERS_OFFLINE", "1", 1); /* huggingface_hub reads it as HF_HUB_OFFLINE */
    CHECK_OK(hub_resolve("test/gguf3:Q4_K_M", NULL, &path)); /* complete in the cache */
    CHECK_MSG(path && strstr(path, "-00001-of-00002.gguf"), "%s", path ? path : "");
    free(path);
    path = NULL;
    clear_log();
    CHECK_OK(hub_resolve("test/gguf2", NULL, &path));
    CHECK_MSG(path && strstr(path, "/Q4_K_M/tiny-Q4_K_M.gguf"), "%s", path ? path : "");
    free(path);
    path = NULL;
    CHECK(count_in_log("GET") == 0);
    EXPECT_ERR(hub_resolve("test/notcached", NULL, &path), VLLM_ERR_NOT_FOUND, "test/notcached", "HF_HUB_OFFLINE");
    unsetenv("TRANSFORMERS_OFFLINE");
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_ENDPOINT");
}

int main(void) {
    test_sha256();
    test_ids();
    if (!cli_tmp_begin("vllm_hub")) {
        fprintf(stderr, "cannot make a scratch folder\n");
        return 1;
    }
    snprintf(g_env, sizeof g_env, "HF_HUB_CACHE=%s/cache HF_TOKEN= HF_HOME=%s/home", g_tmp, g_tmp);
    unsetenv("HF_TOKEN");
    unsetenv("HF_HUB_OFFLINE");
    {
        int rc;
        char *err;
        char m[600];
        snprintf(m, sizeof m, "%s", STORIES);
        g_expected = gen(m, &rc, &err);
        CHECK_MSG(rc == 0 && strlen(g_expected) > 10, "the folder itself: %s", err);
        free(err);
    }
    test_prepopulated_cache();
    const char *skipped = NULL;
    if (system("python3 -c 'import http.server' >/dev/null 2>&1") != 0) {
        skipped = "python3 is missing: the mock hub cannot run";
    } else if (!start_mock()) {
        CHECK_MSG(false, "the mock hub did not start");
    } else {
        snprintf(g_env + strlen(g_env), sizeof g_env - strlen(g_env), " HF_ENDPOINT=http://127.0.0.1:%s", g_port);
        test_downloads();
        stop_mock();
    }
    free(g_expected);
    if (getenv("VLLM_TEST_KEEP")) fprintf(stderr, "kept %s\n", g_tmp);
    else cli_tmp_end();
    return t_end(__FILE__, skipped);
}
