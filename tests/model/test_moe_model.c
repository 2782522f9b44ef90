/*
 * test_moe_model.c: the mixture-of-experts decoder path end to end on the CPU,
 * against the dense fixtures. A checkpoint whose experts all equal a dense
 * model's MLP computes that MLP whatever the router picks (the weights of a
 * renormalised top k, or of all E experts, sum to 1), so it must reproduce the
 * dense model's transformers reference (expected.json): tokens and logprobs.
 * Built here from tests/fixtures/models: Qwen3-MoE with per-expert tensors and
 * one dense layer (mlp_only_layers), Qwen3-MoE with transformers 5's fused
 * expert tensors, Mixtral (block_sparse_moe w1 / w3 / w2) and Qwen2-MoE (all
 * experts, not renormalised, plus a shared expert whose down projection is 0). And Qwen2-MoE whose shared
 * expert is the dense MLP (its down doubled, its sigmoid gate's weight 0: sigmoid 1/2), twice the routed
 * experts' width (so it rides in the expert op as two experts of weight sigmoid(0), moe_params.shared_gate),
 * the routed experts' down projections 0.
 * The routing itself is tested op by op in tests/cpu/test_moe.c; the
 * transformers fixtures of the MoE families are made on the GPU machine.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "model/fixtures.h"
#include "tensor/tensor.h"
#include "test.h"

#define ROOT VLLM_SOURCE_DIR "/tests/fixtures/models"
#define NEAR_TIE 0.02
#define LOGPROB_TOL 1e-3
#define MAXT 4096

typedef enum variant { QWEN3_PER_EXPERT, QWEN3_FUSED, MIXTRAL, QWEN2_SHARED, QWEN2_RIDE } variant;

/* The tensors of the checkpoint being written; names and buffers owned here. */
typedef struct ckpt {
    const char *names[MAXT];
    tensor ts[MAXT];
    void *owned[MAXT];
    size_t n, nowned;
} ckpt;

static void add(ckpt *c, const char *name, tensor t) {
    if (c->n >= MAXT) return;
    c->names[c->n] = strdup(name);
    c->ts[c->n++] = t;
}

static void *own(ckpt *c, size_t bytes) {
    void *p = calloc(1, bytes);
    if (c->nowned < MAXT) c->owned[c->nowned++] = p;
    return p;
}

/* A (rows, cols) BF16 tensor of N(0, std)-ish values (a fixed LCG). */
static tensor random_bf16(ckpt *c, int64_t rows, int64_t cols, float std, uint64_t *seed) {
    uint16_t *d = own(c, (size_t)(rows * cols) * 2);
    for (int64_t i = 0; i < rows * cols; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++) {
            *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
            u += (float)((*seed >> 40) & 0xffffff) / 16777216.0f - 0.5f;
        }
        d[i] = f32_to_bf16(u * std * 1.7f);
    }
    return tensor_2d(DTYPE_BF16, d, rows, cols);
}

static void ckpt_free(ckpt *c) {
    for (size_t i = 0; i < c->n; i++) free((void *)c->names[i]);
    for (size_t i = 0; i < c->nowned; i++) free(c->owned[i]);
}

/* "model.layers.<l>.mlp.<part>_proj.weight" -> l and part (gate, up, down), else false. */
static bool dense_mlp_tensor(const char *name, int *l, char part[8]) {
    char rest[64];
    if (sscanf(name, "model.layers.%d.mlp.%63s", l, rest) != 2) return false;
    const char *parts[] = {"gate", "up", "down"};
    for (int i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "%s_proj.weight", parts[i]);
        if (!strcmp(rest, want)) {
            snprintf(part, 8, "%s", parts[i]);
            return true;
        }
    }
    return false;
}

/* Writes DIR/{config.json, model.safetensors, generation_config.json}: the dense fixture src as variant v. */
static bool make_moe(const char *src, const char *dir, variant v, int E, int k) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    if (!cfg) return false;
    const int D = (int)json_integer_value(json_object_get(cfg, "hidden_size"));
    const int I = (int)json_integer_value(json_object_get(cfg, "intermediate_size"));
    const int L = (int)json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    const bool q2 = v == QWEN2_SHARED || v == QWEN2_RIDE;
    const char *arch = v == MIXTRAL ? "MixtralForCausalLM" : q2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM";
    json_object_set_new(cfg, "architectures", json_pack("[s]", arch));
    json_object_del(cfg, "layer_types");
    if (v == MIXTRAL) {
        json_object_set_new(cfg, "model_type", json_string("mixtral"));
        json_object_set_new(cfg, "num_local_experts", json_integer(E));
        json_object_set_new(cfg, "sliding_window", json_null());
    } else {
        json_object_set_new(cfg, "model_type", json_string(q2 ? "qwen2_moe" : "qwen3_moe"));
        json_object_set_new(cfg, "num_experts", json_integer(E));
        json_object_set_new(cfg, "moe_intermediate_size", json_integer(v == QWEN2_RIDE ? I / 2 : I));
        json_object_set_new(cfg, "norm_topk_prob", json_boolean(!q2));
        json_object_set_new(cfg, "decoder_sparse_step", json_integer(1));
        json_object_set_new(cfg, "mlp_only_layers", q2 ? json_array() : json_pack("[i]", 1));
        if (q2) json_object_set_new(cfg, "shared_expert_intermediate_size", json_integer(v == QWEN2_RIDE ? I : 32));
    }
    json_object_set_new(cfg, "num_experts_per_tok", json_integer(k));
    snprintf(path, sizeof path, "%s/config.json", dir);
    bool ok = json_dump_file(cfg, path, JSON_INDENT(1)) == 0;
    json_decref(cfg);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp %s/generation_config.json %s/", src, dir);
    ok = ok && system(cmd) == 0;

    st_set *set = NULL;
    if (!ok || st_open_dir(src, &set) != VLLM_OK) return false;
    ckpt *c = calloc(1, sizeof *c);
    uint64_t seed = 12345;
    const bool *moe_layer = NULL;
    bool moe[64] = {false};
    for (int l = 0; l < L && l < 64; l++) moe[l] = !(v == QWEN3_PER_EXPERT || v == QWEN3_FUSED) || l != 1;
    moe_layer = moe;
    const char *pre = v == MIXTRAL ? "block_sparse_moe" : "mlp";
    for (size_t i = 0; i < st_count(set); i++) {
        const char *name = st_name(set, i);
        const tensor *t = st_find(set, name);
        int l;
        char part[8];
        if (!dense_mlp_tensor(name, &l, part) || l >= 64 || !moe_layer[l]) {
            add(c, name, *t);
            continue;
        }
        char nm[256];
        if (!strcmp(part, "gate")) { /* once per layer: the router, the experts, the shared expert */
            snprintf(nm, sizeof nm, "model.layers.%d.%s.gate.weight", l, pre);
            add(c, nm, random_bf16(c, E, D, 0.3f, &seed));
            const tensor *g = st_find(set, name);
            char un[128], dn[128];
            snprintf(un, sizeof un, "model.layers.%d.mlp.up_proj.weight", l);
            snprintf(dn, sizeof dn, "model.layers.%d.mlp.down_proj.weight", l);
            const tensor *u = st_find(set, un), *d = st_find(set, dn);
            if (!g || !u || !d) continue;
            if (v == QWEN2_RIDE) {
                /* routed experts of I / 2 that add nothing (down 0); the shared expert: the dense MLP, down x 2
                 * (exact in BF16), gate weight 0 */
                for (int e = 0; e < E; e++) {
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
                    add(c, nm, random_bf16(c, I / 2, D, 0.3f, &seed));
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
                    add(c, nm, random_bf16(c, I / 2, D, 0.3f, &seed));
                    snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
                    add(c, nm, tensor_2d(DTYPE_BF16, own(c, (size_t)D * (I / 2) * 2), D, I / 2));
                }
                uint16_t *d2 = own(c, (size_t)D * I * 2);
                for (int64_t i = 0; i < (int64_t)D * I; i++) d2[i] = f32_to_bf16(2.0f * bf16_to_f32(((const uint16_t *)d->data)[i]));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l);
                add(c, nm, *g);
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.up_proj.weight", l);
                add(c, nm, *u);
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.down_proj.weight", l);
                add(c, nm, tensor_2d(DTYPE_BF16, d2, D, I));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert_gate.weight", l);
                add(c, nm, tensor_2d(DTYPE_BF16, own(c, (size_t)D * 2), 1, D));
            } else if (v == QWEN3_FUSED) {
                /* gate_up (E, 2I, D): gate rows then up rows per expert; down (E, D, I) */
                size_t gb = (size_t)I * D * 2, db = (size_t)D * I * 2;
                char *gu = own(c, (size_t)E * 2 * gb), *dd = own(c, (size_t)E * db);
                for (int e = 0; e < E; e++) {
                    memcpy(gu + (size_t)e * 2 * gb, g->data, gb);
                    memcpy(gu + (size_t)e * 2 * gb + gb, u->data, gb);
                    memcpy(dd + (size_t)e * db, d->data, db);
                }
                int64_t sgu[3] = {E, 2 * I, D}, sdn[3] = {E, D, I};
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj", l);
                add(c, nm, tensor_make(DTYPE_BF16, gu, 3, sgu));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.down_proj", l);
                add(c, nm, tensor_make(DTYPE_BF16, dd, 3, sdn));
            } else {
                const char *names[3][2] = {{"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
                const tensor *parts[3] = {g, u, d};
                for (int e = 0; e < E; e++)
                    for (int p = 0; p < 3; p++) {
                        snprintf(nm, sizeof nm, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e,
                                 names[p][v == MIXTRAL]);
                        add(c, nm, *parts[p]);
                    }
            }
            if (v == QWEN2_SHARED) {
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l);
                add(c, nm, random_bf16(c, 32, D, 0.3f, &seed));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.up_proj.weight", l);
                add(c, nm, random_bf16(c, 32, D, 0.3f, &seed));
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert.down_proj.weight", l);
                add(c, nm, tensor_2d(DTYPE_BF16, own(c, (size_t)D * 32 * 2), D, 32)); /* zeros */
                snprintf(nm, sizeof nm, "model.layers.%d.mlp.shared_expert_gate.weight", l);
                add(c, nm, random_bf16(c, 1, D, 0.3f, &seed));
            }
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ok = st_write_file(path, c->names, c->ts, c->n) == VLLM_OK;
    ckpt_free(c);
    free(c);
    st_close(set);
    return ok;
}

/* Greedy generation of the fixture's prompts on dir, against the dense reference. */
static void compare(const char *dir, json_t *expected, const char *what, int block_size, int chunk) {
    json_t *prompts = json_object_get(expected, "prompts");
    fixture_prompts fp;
    fixture_prompts_load(prompts, &fp);
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = block_size;
    o.max_num_batched_tokens = chunk;
    o.max_model_len = 128;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s: %s", what, vllm_last_error());
    if (st == VLLM_OK) {
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = fp.max_new;
        vllm_completion *c = NULL;
        st = vllm_generate(e, fp.ps, fp.n, &sp, false, &c, NULL);
        CHECK_MSG(st == VLLM_OK, "%s: %s", what, vllm_last_error());
        for (size_t i = 0; st == VLLM_OK && i < fp.n; i++) {
            json_t *p = json_array_get(prompts, i);
            json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
                   *gaps = json_object_get(p, "top2_gap");
            for (size_t j = 0; j < json_array_size(toks) && j < c[i].num_tokens; j++) {
                int want = (int)json_integer_value(json_array_get(toks, j));
                CHECK_MSG(c[i].token_ids[j] == want, "%s prompt %zu token %zu: got %d want %d", what, i, j,
                          c[i].token_ids[j], want);
                if (c[i].token_ids[j] != want) break;
                CHECK_MSG(fabs(c[i].logprobs[j] - json_number_value(json_array_get(lps, j))) <= LOGPROB_TOL,
                          "%s prompt %zu token %zu: logprob %.6f want %.6f", what, i, j, (double)c[i].logprobs[j],
                          json_number_value(json_array_get(lps, j)));
                if (json_number_value(json_array_get(gaps, j)) < NEAR_TIE) break;
            }
        }
        if (st == VLLM_OK) vllm_completions_free(c, fp.n);
        vllm_engine_free(e);
    }
    fixture_prompts_free(&fp);
}

static void run_variant(const char *fixture, variant v, int E, int k, const char *what) {
    char src[512], dir[] = "/tmp/vllmc_moe_XXXXXX";
    snprintf(src, sizeof src, "%s/%s", ROOT, fixture);
    if (!mkdtemp(dir)) {
        CHECK_MSG(false, "mkdtemp failed");
        return;
    }
    CHECK_MSG(make_moe(src, dir, v, E, k), "%s: could not write the checkpoint", what);
    char path[600];
    snprintf(path, sizeof path, "%s/expected.json", src);
    json_error_t err;
    json_t *exp = json_load_file(path, 0, &err);
    CHECK_MSG(exp != NULL, "%s: %s", path, err.text);
    if (exp) {
        char w[128];
        snprintf(w, sizeof w, "%s, one batch", what);
        compare(dir, exp, w, 16, 8192);
        snprintf(w, sizeof w, "%s, chunked prefill, block 7", what);
        compare(dir, exp, w, 7, 9);
        json_decref(exp);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    run_variant("qwen3_qknorm", QWEN3_PER_EXPERT, 4, 2, "Qwen3-MoE, per-expert tensors, top 2 of 4");
    run_variant("qwen3_qknorm", QWEN3_FUSED, 8, 3, "Qwen3-MoE, fused expert tensors, top 3 of 8");
    run_variant("llama_gqa", MIXTRAL, 4, 2, "Mixtral, top 2 of 4");
    run_variant("qwen2_bias_tied", QWEN2_SHARED, 4, 4, "Qwen2-MoE, all 4 experts, shared expert");
    run_variant("qwen2_bias_tied", QWEN2_RIDE, 4, 2, "Qwen2-MoE, shared expert riding as 2 experts");
    TEST_END();
}
