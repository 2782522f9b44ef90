/* test_graph_capture.c: model_capture_graphs' dummy decode batches (VLLM_GRAPH_CAPTURE=start) are valid steps of
 * every kind of model and touch no KV block but block 0.
 *
 * The CPU backend has no graphs, so it runs here with recording functions of the test's own: graph_begin /
 * graph_end count the recordings (the ops in between run eagerly, as the CPU runs them), graph_launch refuses.
 * For a dense, a MoE, an MLA, a hybrid (recurrent state) and a two-group (sliding + global) fixture: with graphs
 * for batches of up to 16 sequences, the capture records the sizes 16, 8, 4, 2 and 1 once each (a second
 * capture records none), every forward of it succeeds, the dummies' K lands at slot 0 and the K / V caches
 * outside block 0 (filled with a pattern first) are unchanged; with graphs off it records nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "model/kv_cache_groups.h"
#include "model/model.h"
#include "tensor/backend.h"
#include "test.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models/"

static int begun, ended, launched;

static vllm_status fake_begin(backend *be) {
    (void)be;
    begun++;
    return VLLM_OK;
}
static vllm_status fake_end(backend *be, be_graph **out) {
    (void)be;
    ended++;
    *out = malloc(1); /* a handle model.c keeps and frees */
    return *out ? VLLM_OK : VLLM_ERR_NO_MEMORY;
}
static vllm_status fake_launch(backend *be, be_graph *g) {
    (void)be, (void)g;
    launched++;
    return VLLM_ERR_INTERNAL;
}
static void fake_free(backend *be, be_graph *g) {
    (void)be;
    free(g);
}

/* bytes of layer l's K (kv 0) or V (kv 1) plane beyond block 0, or 0 where it has none */
static size_t tail_bytes(const model_cache *c, int l, int kv, unsigned char **p) {
    const tensor *t = kv ? &c->v[l] : &c->k[l];
    if (!t->data) return 0;
    const size_t all = (size_t)tensor_numel(t) * dtype_size(t->dtype), block = all / (size_t)c->num_blocks;
    *p = (unsigned char *)t->data + block;
    return all - block;
}

static void run(const char *fixture) {
    char dir[512];
    snprintf(dir, sizeof dir, FIXTURES "%s", fixture);
    backend *be = NULL;
    model *m = NULL;
    model_cache *cache = NULL;
    const backend_options bo = {.num_threads = 1};
    const model_load_options mo = {.max_model_len = 64};
    begun = ended = launched = 0;
    CHECK_OK(backend_create("cpu", &bo, &be));
    if (!be) return;
    const backend_ops *cpu_ops = be->ops;
    backend_ops ops = *cpu_ops; /* the CPU's ops with the test's recording */
    ops.graph_begin = fake_begin;
    ops.graph_end = fake_end;
    ops.graph_launch = fake_launch;
    ops.graph_free = fake_free;
    be->ops = &ops;
    const int num_blocks = 6, block_size = 16, max_blocks = 4;
    vllm_status st = model_load(dir, be, &mo, &m);
    if (!st) st = model_cache_create(m, num_blocks, block_size, model_has_recurrent_state(m) ? 17 : 0, 0, &cache);
    CHECK_MSG(st == VLLM_OK, "%s: %s", fixture, vllm_last_error());
    if (!st) {
        /* graphs off (enforce_eager): nothing recorded */
        int n = -1;
        CHECK_OK(model_capture_graphs(m, cache, max_blocks, &n));
        CHECK(n == 0 && ended == 0);
        /* a pattern in every block, then the capture */
        size_t planes = 0;
        for (int l = 0; l < cache->num_layers; l++)
            for (int kv = 0; kv < 2; kv++) {
                const tensor *t = kv ? &cache->v[l] : &cache->k[l];
                if (t->data) memset(t->data, 0x3c, (size_t)tensor_numel(t) * dtype_size(t->dtype)), planes++;
            }
        CHECK(planes > 0);
        CHECK_OK(model_enable_graphs(m, 16, 64));
        begun = ended = launched = 0;
        st = model_capture_graphs(m, cache, max_blocks, &n);
        CHECK_MSG(st == VLLM_OK, "%s: capture: %s", fixture, vllm_last_error());
        CHECK_MSG(n == 5 && begun == 5 && ended == 5 && launched == 0, "%s: %d recorded (%d begun, %d ended)",
                  fixture, n, begun, ended);
        bool kept = true;
        for (int l = 0; l < cache->num_layers; l++)
            for (int kv = 0; kv < 2; kv++) {
                unsigned char *p = NULL;
                const size_t nb = tail_bytes(cache, l, kv, &p);
                for (size_t i = 0; i < nb && kept; i++) kept = p[i] == 0x3c;
            }
        CHECK_MSG(kept, "%s: the capture wrote outside block 0", fixture);
        bool wrote = false; /* ... and into it: the dummies' K at slot 0 */
        for (int l = 0; l < cache->num_layers && !wrote; l++)
            if (cache->k[l].data)
                for (size_t i = 0; i < dtype_size(cache->k[l].dtype) && !wrote; i++)
                    wrote = ((const unsigned char *)cache->k[l].data)[i] != 0x3c;
        CHECK_MSG(wrote, "%s: the dummy steps wrote no K at slot 0", fixture);
        CHECK_OK(model_capture_graphs(m, cache, max_blocks, &n)); /* every size recorded already */
        CHECK(n == 0 && ended == 5);
        printf("%-16s capture: 5 decode sizes recorded, blocks 1..%d untouched\n", fixture, num_blocks - 1);
    }
    if (cache) model_cache_free(m, cache);
    model_free(m);
    be->ops = cpu_ops;
    backend_free(be);
}

int main(void) {
    run("qwen3_qknorm");     /* dense */
    run("qwen3_moe");        /* MoE */
    run("deepseek_v2_lite"); /* MLA: one latent plane, no V */
    run("qwen3_next");       /* recurrent state slots (the dummies write none) */
    run("gemma3_local");     /* two KV cache groups: sliding and global */
    TEST_END();
}
