/*
 * test_cuda_pooling.c: the pooling runner (embeddings) on the CUDA backend (BF16 activations and KV cache)
 * against the CPU backend (the reference path, F32), on stories260K and the qwen3_qknorm fixture, LAST and
 * MEAN pooling: every L2-normalised embedding within cosine 0.999 and MAX_ABS per value of the CPU's, a
 * chunked prefill (5-token steps) within cosine 0.9999 of the unchunked one on the GPU; and, when
 * tools/make_embed_fixture.py has made tests/fixtures/embed/qwen3_embed, against transformers' float32
 * embeddings. Prints one POOLING line per model, pooling and check.
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "test.h"
#include "vllm.h"

#define MAX_ABS 1.5e-2  /* per value of a unit vector: BF16 activations through a few layers */
#define MIN_COS 0.999

static vllm_engine *make(const char *dir, const char *device, vllm_pooling_type type, int max_batched) {
    vllm_engine_options o = vllm_engine_default_options();
    o.device = device;
    o.num_threads = 4;
    o.max_model_len = 128;
    o.max_num_seqs = 16;
    o.runner = VLLM_RUNNER_POOLING;
    o.pooling_type = type;
    if (max_batched) o.max_num_batched_tokens = max_batched;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    return e;
}

#define NP 5
static int32_t g_ids[NP][100];
static vllm_prompt g_prompts[NP];

static void compare(const char *what, const vllm_embedding *a, const float *b, size_t dim, double min_cos,
                    double max_abs) {
    double dot = 0, na = 0, nb = 0, md = 0;
    for (size_t d = 0; d < dim; d++) {
        dot += (double)a->data[d] * b[d], na += (double)a->data[d] * a->data[d], nb += (double)b[d] * b[d];
        md = fmax(md, fabs((double)a->data[d] - b[d]));
    }
    double cos = dot / sqrt(na * nb + 1e-300);
    bool ok = a->dim == dim && cos >= min_cos && md <= max_abs;
    CHECK_MSG(ok, "%s: cos %.6f, max |d| %.4g", what, cos, md);
    printf("POOLING %s %s cos %.6f max|d| %.4g\n", what, ok ? "pass" : "FAIL", cos, md);
}

static void run_model(const char *name, const char *dir) {
    static const char *const tn[] = {"", "LAST", "MEAN"};
    for (int t = VLLM_POOLING_LAST; t <= VLLM_POOLING_MEAN; t++) {
        vllm_engine *cpu = make(dir, "cpu", (vllm_pooling_type)t, 0);
        vllm_engine *gpu = make(dir, "cuda", (vllm_pooling_type)t, 0);
        vllm_engine *gch = make(dir, "cuda", (vllm_pooling_type)t, 5);
        vllm_embedding *c = NULL, *g = NULL, *gc = NULL;
        if (cpu && gpu && gch) {
            CHECK_OK(vllm_embed(cpu, g_prompts, NP, NULL, &c));
            CHECK_OK(vllm_embed(gpu, g_prompts, NP, NULL, &g));
            CHECK_OK(vllm_embed(gch, g_prompts, NP, NULL, &gc));
        }
        for (int i = 0; c && g && gc && i < NP; i++) {
            char what[160];
            snprintf(what, sizeof what, "%s %s prompt %d (%zu tokens) cuda vs cpu", name, tn[t], i,
                     g_prompts[i].num_token_ids);
            compare(what, &g[i], c[i].data, c[i].dim, MIN_COS, MAX_ABS);
            snprintf(what, sizeof what, "%s %s prompt %d chunked vs one step (cuda)", name, tn[t], i);
            compare(what, &gc[i], g[i].data, g[i].dim, MIN_COS, MAX_ABS);
        }
        vllm_embeddings_free(c, NP);
        vllm_embeddings_free(g, NP);
        vllm_embeddings_free(gc, NP);
        vllm_engine_free(cpu);
        vllm_engine_free(gpu);
        vllm_engine_free(gch);
    }
}

/* the transformers reference (f32) of tools/make_embed_fixture.py, normalised embeddings */
static void run_fixture(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/expected_embed.json", dir);
    json_error_t err;
    json_t *fx = json_load_file(path, 0, &err);
    if (!fx) {
        printf("POOLING transformers fixture skip (no %s)\n", path);
        return;
    }
    for (int t = VLLM_POOLING_LAST; t <= VLLM_POOLING_MEAN; t++) {
        vllm_engine *gpu = make(dir, "cuda", t == VLLM_POOLING_LAST ? VLLM_POOLING_AUTO : VLLM_POOLING_MEAN, 0);
        size_t i;
        const json_t *p;
        json_array_foreach(gpu ? json_object_get(fx, "prompts") : NULL, i, p) {
            const json_t *ids = json_object_get(p, "prompt_token_ids");
            const json_t *want = json_object_get(p, t == VLLM_POOLING_LAST ? "last_normalized" : "mean_normalized");
            int32_t tok[256];
            size_t n = json_array_size(ids) < 256 ? json_array_size(ids) : 256;
            for (size_t k = 0; k < n; k++) tok[k] = (int32_t)json_integer_value(json_array_get(ids, k));
            float w[1024];
            size_t dim = json_array_size(want) < 1024 ? json_array_size(want) : 1024;
            for (size_t d = 0; d < dim; d++) w[d] = (float)json_number_value(json_array_get(want, d));
            vllm_prompt pr = {.token_ids = tok, .num_token_ids = n};
            vllm_embedding *g = NULL;
            CHECK_OK(vllm_embed(gpu, &pr, 1, NULL, &g));
            char what[128];
            snprintf(what, sizeof what, "qwen3_embed %s prompt %zu (%zu tokens) cuda vs transformers",
                     t == VLLM_POOLING_LAST ? "LAST" : "MEAN", i, n);
            if (g) compare(what, g, w, dim, MIN_COS, MAX_ABS);
            vllm_embeddings_free(g, 1);
        }
        vllm_engine_free(gpu);
    }
    json_decref(fx);
}

int main(void) {
    backend *probe = NULL;
    if (backend_create("cuda", NULL, &probe) != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    backend_free(probe);
    static const size_t lens[NP] = {1, 7, 16, 33, 100};
    uint64_t x = 99;
    for (int i = 0; i < NP; i++) {
        for (size_t k = 0; k < lens[i]; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g_ids[i][k] = (int32_t)(3 + (x >> 33) % 509);
        }
        g_prompts[i] = (vllm_prompt){.token_ids = g_ids[i], .num_token_ids = lens[i]};
    }
    run_model("stories260K", VLLM_SOURCE_DIR "/models/stories260K");
    run_model("qwen3_qknorm", VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_qknorm");
    run_fixture(VLLM_SOURCE_DIR "/tests/fixtures/embed/qwen3_embed");
    TEST_END();
}
