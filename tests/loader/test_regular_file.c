/*
 * test_regular_file.c: every file the loaders open from a model folder
 * (config.json, generation_config.json, model.safetensors, the shard index
 * and its shards, tokenizer.json, tokenizer_config.json, chat_template.jinja)
 * is refused, with its name, when it is a FIFO, a directory or a device,
 * instead of blocking in open() for a writer that never comes.
 *
 * An alarm guards the whole test: a loader that blocks kills the process
 * (SIGALRM), which ctest reports as a failure rather than a hang.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "loader/regular_file.h"
#include "loader/safetensors.h"
#include "template/chat_template.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

#define MODEL VLLM_SOURCE_DIR "/models/stories260K"

static char g_dir[64];

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static void put_fifo(const char *name) {
    char p[512];
    path_of(p, sizeof p, name);
    unlink(p);
    CHECK_MSG(mkfifo(p, 0600) == 0, "mkfifo %s", p);
}

static void put_copy(const char *name) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", MODEL, name);
    path_of(dst, sizeof dst, name);
    unlink(dst);
    char *data;
    size_t len;
    CHECK_OK(rf_read(src, (size_t)1 << 30, &data, &len));
    if (!data) return;
    FILE *f = fopen(dst, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(data, 1, len, f) == len);
        fclose(f);
    }
    free(data);
}

static void put_text(const char *name, const char *text) {
    char p[512];
    path_of(p, sizeof p, name);
    unlink(p);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void drop(const char *name) {
    char p[512];
    path_of(p, sizeof p, name);
    unlink(p);
}

/* The error names the file and says what it is. */
#define EXPECT_FIFO(expr, name)                                                                 \
    do {                                                                                        \
        vllm_status s_ = (expr);                                                                \
        CHECK_MSG(s_ == VLLM_ERR_IO, "%s: status %d: %s", name, s_, vllm_last_error());          \
        CHECK_MSG(strstr(vllm_last_error(), name) != NULL, "'%s' not in: %s", name, vllm_last_error()); \
        CHECK_MSG(strstr(vllm_last_error(), "not a regular file (a FIFO)") != NULL, "%s", vllm_last_error()); \
    } while (0)

static void test_rf(void) {
    int fd;
    char p[512];
    put_fifo("f");
    path_of(p, sizeof p, "f");
    EXPECT_ERR(rf_open(p, &fd, NULL), VLLM_ERR_IO, "/f: not a regular file (a FIFO)", "");
    CHECK(fd == -1);
    EXPECT_ERR(rf_open(g_dir, &fd, NULL), VLLM_ERR_IO, "not a regular file (a directory)", "");
    EXPECT_ERR(rf_open("/dev/null", &fd, NULL), VLLM_ERR_IO, "/dev/null: not a regular file (a character device)",
               "");
    path_of(p, sizeof p, "missing");
    EXPECT_ERR(rf_open(p, &fd, NULL), VLLM_ERR_NOT_FOUND, "/missing: No such file or directory", "");
    char *data;
    size_t len;
    EXPECT_ERR(rf_read(p, 10, &data, &len), VLLM_ERR_NOT_FOUND, "missing", "");
    CHECK(data == NULL);
    put_text("t", "hello");
    path_of(p, sizeof p, "t");
    CHECK_OK(rf_read(p, 5, &data, &len));
    CHECK(data && len == 5 && !strcmp(data, "hello"));
    free(data);
    EXPECT_ERR(rf_read(p, 4, &data, &len), VLLM_ERR_FORMAT, "/t: 5 bytes is too large (at most 4)", "");
    struct stat sb;
    CHECK_OK(rf_open(p, &fd, &sb));
    CHECK(fd >= 0 && sb.st_size == 5);
    if (fd >= 0) close(fd);
    drop("t");
    drop("f");
}

static void test_config(void) {
    model_config c;
    put_fifo("config.json");
    EXPECT_FIFO(hf_config_load(g_dir, &c), "config.json");
    put_copy("config.json");
    put_fifo("generation_config.json");
    EXPECT_FIFO(hf_config_load(g_dir, &c), "generation_config.json");
    drop("generation_config.json");
    CHECK_OK(hf_config_load(g_dir, &c));
}

static void test_weights(void) {
    st_set *set = NULL;
    char p[512];
    put_fifo("model.safetensors");
    EXPECT_FIFO(st_open_dir(g_dir, &set), "model.safetensors");
    CHECK(set == NULL);
    path_of(p, sizeof p, "model.safetensors");
    EXPECT_FIFO(st_open_file(p, &set), "model.safetensors");
    drop("model.safetensors");

    put_fifo("model.safetensors.index.json");
    EXPECT_FIFO(st_open_dir(g_dir, &set), "model.safetensors.index.json");
    put_text("model.safetensors.index.json", "{\"weight_map\": {\"a\": \"shard-1.safetensors\"}}");
    put_fifo("shard-1.safetensors");
    EXPECT_FIFO(st_open_dir(g_dir, &set), "shard-1.safetensors");
    drop("shard-1.safetensors");
    drop("model.safetensors.index.json");
}

static void test_tokenizer_and_template(void) {
    tokenizer *tok = NULL;
    put_fifo("tokenizer.json");
    EXPECT_FIFO(tok_load_dir(g_dir, &tok), "tokenizer.json");
    put_copy("tokenizer.json");
    put_fifo("tokenizer_config.json");
    EXPECT_FIFO(tok_load_dir(g_dir, &tok), "tokenizer_config.json");
    CHECK(tok == NULL);

    char *tpl = NULL, *bos = NULL, *eos = NULL;
    EXPECT_FIFO(ct_load_dir(g_dir, &tpl, &bos, &eos), "tokenizer_config.json");
    put_copy("tokenizer_config.json");
    put_fifo("chat_template.jinja");
    EXPECT_FIFO(ct_load_dir(g_dir, &tpl, &bos, &eos), "chat_template.jinja");
    CHECK(tpl == NULL);
    put_text("chat_template.jinja", "{{ messages[0]['content'] }}");
    CHECK_OK(ct_load_dir(g_dir, &tpl, &bos, &eos));
    CHECK(tpl && !strcmp(tpl, "{{ messages[0]['content'] }}"));
    free(tpl), free(bos), free(eos);
    drop("chat_template.jinja");

    CHECK_OK(tok_load_dir(g_dir, &tok));
    tok_free(tok);
}

/* The engine on a folder whose weights are a FIFO: an error naming the file, not a hang. */
static void test_engine(void) {
    put_copy("config.json");
    put_copy("tokenizer.json");
    put_copy("tokenizer_config.json");
    put_fifo("model.safetensors");
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    vllm_engine *e = NULL;
    EXPECT_FIFO(vllm_engine_create(g_dir, &o, &e), "model.safetensors");
    CHECK(e == NULL);
    vllm_engine_free(e);
    drop("model.safetensors");
}

int main(void) {
    alarm(60); /* a blocking open() ends the test here (SIGALRM) instead of hanging ctest */
    snprintf(g_dir, sizeof g_dir, "/tmp/vllm_test_rf_XXXXXX");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_rf();
    test_config();
    test_weights();
    test_tokenizer_and_template();
    test_engine();
    const char *names[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "model.safetensors", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) drop(names[i]);
    rmdir(g_dir);
    TEST_END();
}
