/* test_deepseek_model.c: tiny random DeepSeek-V2 checkpoints (MLA over the latent cache, MoE) load and generate alike in every engine layout.
 *
 * Two BF16 checkpoints written here with transformers' names: q_lora_rank set (q_a_proj, q_a_layernorm,
 * q_b_proj) and null (q_proj, V2-Lite), first_k_dense_replace 1 (a dense layer, then MoE layers with a shared
 * expert and routed_scaling_factor 1.5, topk_method greedy). Each generates greedily in several engine
 * layouts (block sizes, chunked prefill, prefix caching with a second prompt sharing a prefix): the tokens
 * must agree and the logprobs within 1e-4. The KV cache holds (kv_lora_rank + qk_rope_head_dim) values per
 * token and layer (576 x layers for a V2-shaped config), no V. Config errors name their field.
 * A quantized kv_b_proj (block FP8; AWQ 4-bit, I4_B128 blocks on the CPU) generates as its values in F32.
 * DeepSeek's plain shared experts as extra experts of the MoE op (n_shared_experts 1 and 2: sliced from the
 * shared MLP, block_moe.c) generate as the same checkpoint with its shared MLP in F32, which the BF16 experts
 * cannot take in, so the decoder runs it apart (the dense path); --load-format dummy loads them too.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "loader/hf_config.h"
#include "model/kv_cache_groups.h"
#include "model/model.h"
#include "tensor/fp8.h"
#include "tensor/tensor.h"
#include "test.h"
#define SYNTH_SEED 0x5eed14ull
#include "synth_ckpt.h"
#include "vllm.h"

enum { D = 32, NL = 3, NH = 2, QL = 16, KL = 16, NOPE = 8, ROPE = 4, VD = 8, E = 4, TOPK = 2, MI = 16, I = 48,
       VOC = 64, PROMPT = 11, NEW = 8, MAXPOS = 64 };

static void add_rand(ckpt *c, const char *name, int ndim, const int64_t *shape, float scale, float offset) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *p = malloc((size_t)n * sizeof *p);
    fill(p, (int)n, scale, offset);
    add_bf16(c, name, p, ndim, shape);
    free(p);
}

/* adds name = an F32 tensor of uniform values, as add_rand draws them (the same values as its BF16 ones) */
static void add_rand_f32(ckpt *c, const char *name, int ndim, const int64_t *shape, float scale, float offset) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *p = malloc((size_t)n * sizeof *p);
    fill(p, (int)n, scale, offset);
    c->owned[c->n] = p;
    c->names[c->n] = strdup(name);
    c->ts[c->n++] = tensor_make(DTYPE_F32, p, ndim, shape);
}

/* kv_lora_rank of the next checkpoint, and how its kv_b_proj is stored: BF16; block FP8 (F8_E4M3 values with a
 * weight_scale_inv per 128 x 128 block, DeepSeek-V3's format; the config then has a quantization_config); or F32
 * copies of that FP8 tensor's values; AWQ 4-bit (GEMM packing, one zero point and F16 scale per row and 128
 * inputs, as AutoAWQ quantizes a V2-Lite's kv_b_proj) or F32 copies of its values */
enum { KVB_BF16, KVB_FP8, KVB_FP8_AS_F32, KVB_AWQ, KVB_AWQ_AS_F32 };
static int g_kl = KL, g_kvb = KVB_BF16;

/* W (N, K) as AWQ's GEMM tensors (qweight (K, N / 8) in AWQ's nibble order, qzeros (K / 128, N / 8), F16 scales
 * (K / 128, N)) under base, or (as_f32) the values they hold, (q - z) s, as base.weight in F32 */
static void add_awq(ckpt *c, const char *name, const int64_t *shape, bool as_f32) {
    static const int ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    const int64_t N = shape[0], K = shape[1], G = 128, GR = K / G;
    float *w = malloc((size_t)(N * K) * sizeof *w);
    int32_t *qw = calloc((size_t)(K * N / 8), sizeof *qw), *qz = calloc((size_t)(GR * N / 8), sizeof *qz);
    uint16_t *sc = malloc((size_t)(GR * N) * sizeof *sc);
    fill(w, (int)(N * K), 0.4f, 0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < GR; g++) {
            float mx = -INFINITY, mn = INFINITY;
            for (int64_t k = g * G; k < (g + 1) * G; k++) mx = fmaxf(mx, w[n * K + k]), mn = fminf(mn, w[n * K + k]);
            const uint16_t sh = f32_to_f16(fmaxf(mx - mn, 1e-5f) / 15.0f);
            const float sf = f16_to_f32(sh);
            const int z = (int)fminf(fmaxf(-nearbyintf(mn / sf), 0.0f), 15.0f);
            sc[g * N + n] = sh;
            for (int64_t k = g * G; k < (g + 1) * G; k++) {
                const int q = (int)fminf(fmaxf(nearbyintf(w[n * K + k] / sf) + (float)z, 0.0f), 15.0f);
                int p = 0;
                while (ORDER[p] != n % 8) p++;
                qw[k * (N / 8) + n / 8] |= (int32_t)((uint32_t)q << (4 * p));
                if (k == g * G) qz[g * (N / 8) + n / 8] |= (int32_t)((uint32_t)z << (4 * p));
                w[n * K + k] = (float)(q - z) * sf;
            }
        }
    char base[200], nm[220];
    snprintf(base, sizeof base, "%.*s", (int)strlen(name) - 7, name); /* name less ".weight" */
    if (as_f32) {
        free(qw), free(qz), free(sc);
        c->owned[c->n] = w;
        c->names[c->n] = strdup(name);
        c->ts[c->n++] = tensor_make(DTYPE_F32, w, 2, shape);
        return;
    }
    free(w);
    const int64_t s_qw[2] = {K, N / 8}, s_qz[2] = {GR, N / 8}, s_sc[2] = {GR, N};
    const struct { const char *suffix; void *p; dtype dt; const int64_t *shape; } parts[3] = {
        {"qweight", qw, DTYPE_I32, s_qw}, {"qzeros", qz, DTYPE_I32, s_qz}, {"scales", sc, DTYPE_F16, s_sc}};
    for (int i = 0; i < 3; i++) {
        snprintf(nm, sizeof nm, "%s.%s", base, parts[i].suffix);
        c->owned[c->n] = parts[i].p;
        c->names[c->n] = strdup(nm);
        c->ts[c->n++] = tensor_make(parts[i].dt, parts[i].p, 2, parts[i].shape);
    }
}

static void add_kv_b(ckpt *c, const char *name, const int64_t *shape) {
    const int64_t rows = shape[0], K = shape[1], rb = (rows + 127) / 128, kb = (K + 127) / 128;
    if (g_kvb == KVB_BF16) {
        add_rand(c, name, 2, shape, 0.4f, 0);
        return;
    }
    if (g_kvb == KVB_AWQ || g_kvb == KVB_AWQ_AS_F32) {
        add_awq(c, name, shape, g_kvb == KVB_AWQ_AS_F32);
        return;
    }
    float *w = malloc((size_t)(rows * K) * sizeof *w), *sc = calloc((size_t)(rb * kb), sizeof *sc);
    uint8_t *q = malloc((size_t)(rows * K));
    fill(w, (int)(rows * K), 0.4f, 0);
    for (int64_t i = 0; i < rows * K; i++) { /* each block's max |w| / 448 */
        float *m = &sc[(i / K / 128) * kb + (i % K) / 128];
        *m = fabsf(w[i]) / FP8_E4M3_MAX > *m ? fabsf(w[i]) / FP8_E4M3_MAX : *m;
    }
    for (int64_t i = 0; i < rows * K; i++) {
        const float s = sc[(i / K / 128) * kb + (i % K) / 128];
        q[i] = fp8_e4m3_from_f32(w[i] / s);
        w[i] = fp8_e4m3_to_f32(q[i]) * s;
    }
    if (g_kvb == KVB_FP8_AS_F32) {
        c->owned[c->n] = w;
        c->names[c->n] = strdup(name);
        c->ts[c->n++] = tensor_make(DTYPE_F32, w, 2, shape);
        free(q);
        free(sc);
        return;
    }
    free(w);
    c->owned[c->n] = q;
    c->names[c->n] = strdup(name);
    c->ts[c->n++] = tensor_make(DTYPE_F8_E4M3, q, 2, shape);
    char sn[200];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    const int64_t s_sc[2] = {rb, kb};
    c->owned[c->n] = sc;
    c->names[c->n] = strdup(sn);
    c->ts[c->n++] = tensor_make(DTYPE_F32, sc, 2, s_sc);
}

/* n_shared: n_shared_experts (the shared MLP n_shared x MI wide); shared_f32: its tensors in F32 */
static bool write_ckpt_shared(const char *dir, bool q_lora, int n_shared, bool shared_f32) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    char ql[32];
    snprintf(ql, sizeof ql, q_lora ? "%d" : "null", QL);
    fprintf(f, "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"model_type\": \"deepseek_v2\", \"hidden_size\": %d,"
               " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
               " \"num_key_value_heads\": %d, \"vocab_size\": %d, \"q_lora_rank\": %s, \"kv_lora_rank\": %d,"
               " \"qk_nope_head_dim\": %d, \"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"n_routed_experts\": %d,"
               " \"n_shared_experts\": %d, \"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d,"
               " \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, \"topk_method\": \"greedy\","
               " \"norm_topk_prob\": false, \"routed_scaling_factor\": 1.5, \"rms_norm_eps\": 1e-06,"
               " \"max_position_embeddings\": %d, \"rope_theta\": 10000, \"tie_word_embeddings\": false,"
               " \"eos_token_id\": 63, \"dtype\": \"bfloat16\"%s}\n",
            D, I, NL, NH, NH, VOC, ql, g_kl, NOPE, ROPE, VD, E, n_shared, TOPK, MI, MAXPOS,
            g_kvb == KVB_FP8   ? ", \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": "
                                 "\"dynamic\", \"weight_block_size\": [128, 128]}"
            : g_kvb == KVB_AWQ ? ", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": "
                                 "128, \"zero_point\": true, \"version\": \"gemm\"}"
                               : "");
    fclose(f);
    ckpt *c = calloc(1, sizeof *c);
    const int64_t s_vd[2] = {VOC, D}, s_d[1] = {D}, s_qa[2] = {QL, D}, s_ql[1] = {QL},
                  s_qb[2] = {NH * (NOPE + ROPE), QL}, s_q[2] = {NH * (NOPE + ROPE), D}, s_kva[2] = {g_kl + ROPE, D},
                  s_kl[1] = {g_kl}, s_kvb[2] = {NH * (NOPE + VD), g_kl}, s_o[2] = {D, NH * VD}, s_gu[2] = {I, D},
                  s_dn[2] = {D, I}, s_r[2] = {E, D}, s_egu[2] = {MI, D}, s_edn[2] = {D, MI},
                  s_sgu[2] = {(int64_t)n_shared * MI, D}, s_sdn[2] = {D, (int64_t)n_shared * MI};
    add_rand(c, "model.embed_tokens.weight", 2, s_vd, 1.0f, 0);
    add_rand(c, "lm_head.weight", 2, s_vd, 0.3f, 0);
    add_rand(c, "model.norm.weight", 1, s_d, 0.2f, 1.0f);
    char nm[160];
    for (int l = 0; l < NL; l++) {
#define ADD(suffix, nd, sh, sc, off)                                  \
    do {                                                              \
        snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);     \
        add_rand(c, nm, nd, sh, sc, off);                             \
    } while (0)
        ADD("input_layernorm.weight", 1, s_d, 0.2f, 1.0f);
        ADD("post_attention_layernorm.weight", 1, s_d, 0.2f, 1.0f);
        if (q_lora) {
            ADD("self_attn.q_a_proj.weight", 2, s_qa, 0.3f, 0);
            ADD("self_attn.q_a_layernorm.weight", 1, s_ql, 0.2f, 1.0f);
            ADD("self_attn.q_b_proj.weight", 2, s_qb, 0.4f, 0);
        } else {
            ADD("self_attn.q_proj.weight", 2, s_q, 0.3f, 0);
        }
        ADD("self_attn.kv_a_proj_with_mqa.weight", 2, s_kva, 0.3f, 0);
        ADD("self_attn.kv_a_layernorm.weight", 1, s_kl, 0.2f, 1.0f);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.kv_b_proj.weight", l);
        add_kv_b(c, nm, s_kvb);
        ADD("self_attn.o_proj.weight", 2, s_o, 0.3f, 0);
        if (l == 0) {
            ADD("mlp.gate_proj.weight", 2, s_gu, 0.3f, 0);
            ADD("mlp.up_proj.weight", 2, s_gu, 0.3f, 0);
            ADD("mlp.down_proj.weight", 2, s_dn, 0.3f, 0);
            continue;
        }
        ADD("mlp.gate.weight", 2, s_r, 0.5f, 0);
        for (int e = 0; e < E; e++) {
            char en[96];
            snprintf(en, sizeof en, "mlp.experts.%d.gate_proj.weight", e);
            ADD(en, 2, s_egu, 0.3f, 0);
            snprintf(en, sizeof en, "mlp.experts.%d.up_proj.weight", e);
            ADD(en, 2, s_egu, 0.3f, 0);
            snprintf(en, sizeof en, "mlp.experts.%d.down_proj.weight", e);
            ADD(en, 2, s_edn, 0.3f, 0);
        }
        const char *sh[3] = {"mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight",
                             "mlp.shared_experts.down_proj.weight"};
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, sh[i]);
            (shared_f32 ? add_rand_f32 : add_rand)(c, nm, 2, i < 2 ? s_sgu : s_sdn, 0.3f, 0);
        }
#undef ADD
    }
    return ckpt_write(c, dir);
}

static bool write_ckpt(const char *dir, bool q_lora) { return write_ckpt_shared(dir, q_lora, 1, false); }

typedef struct result {
    int32_t tokens[2][NEW];
    float logprobs[2][NEW];
} result;

/* Two prompts (the second shares the first's first 8 tokens) greedily, in one engine layout. */
static bool run_engine(const char *dir, const int32_t prompts[2][PROMPT], int block_size, int chunk, bool prefix,
                       result *r) {
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = block_size;
    o.max_num_batched_tokens = chunk;
    o.max_model_len = MAXPOS;
    o.enable_prefix_caching = prefix;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s: %s", dir, vllm_last_error());
    if (st != VLLM_OK) return false;
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = NEW;
    for (int i = 0; i < 2 && st == VLLM_OK; i++) { /* one after the other: the second may hit the first's blocks */
        vllm_prompt p = {.token_ids = prompts[i], .num_token_ids = PROMPT};
        vllm_completion *c = NULL;
        st = vllm_generate(e, &p, 1, &sp, false, &c, NULL);
        CHECK_MSG(st == VLLM_OK && c[0].num_tokens == NEW, "generate: %s", vllm_last_error());
        if (st == VLLM_OK)
            for (int j = 0; j < NEW && j < (int)c[0].num_tokens; j++) {
                r->tokens[i][j] = c[0].token_ids[j];
                r->logprobs[i][j] = c[0].logprobs[j];
            }
        vllm_completions_free(c, 1);
    }
    vllm_engine_free(e);
    return st == VLLM_OK;
}

static void test_layouts(void) {
    int32_t prompts[2][PROMPT];
    for (int i = 0; i < PROMPT; i++) prompts[0][i] = prompts[1][i] = (int32_t)rnd(VOC - 1);
    for (int i = 8; i < PROMPT; i++) prompts[1][i] = (int32_t)rnd(VOC - 1);
    for (int q_lora = 0; q_lora < 2; q_lora++) {
        char dir[] = "/tmp/vllmc_deepseek_XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        CHECK_MSG(write_ckpt(dir, q_lora), "could not write %s", dir);
        /* the latent cache: (KL + ROPE) values per token and layer, one plane */
        backend *be = NULL;
        model *m = NULL;
        backend_options bo = {.num_threads = 1};
        CHECK_OK(cpu_backend_create(&bo, &be));
        model_load_options mo = {.max_model_len = MAXPOS};
        CHECK_OK(model_load(dir, be, &mo, &m));
        if (m) {
            const kv_cache_groups *g = model_get_cache_groups(m);
            CHECK(g->num_groups == 1 && g->spec[0].kind == CACHE_MLA && g->spec[0].head_dim == KL + ROPE);
            CHECK(model_cache_bytes_per_token(m) == (size_t)(KL + ROPE) * NL * dtype_size(be->kv_dtype));
            model_cache *mc = NULL;
            CHECK_OK(model_cache_create(m, 4, 16, 0, 0, &mc));
            CHECK(mc && mc->k[0].data && !mc->v[0].data && mc->bytes == (size_t)4 * 16 * (KL + ROPE) * NL * 4);
            model_cache_free(m, mc);
        }
        model_free(m);
        backend_free(be);

        const struct { int bs, chunk; bool prefix; } lay[] = {{16, 8192, false}, {4, 5, false}, {8, 3, true},
                                                              {16, 8192, true}};
        result res[4];
        memset(res, 0, sizeof res);
        for (int k = 0; k < 4; k++) {
            if (!run_engine(dir, prompts, lay[k].bs, lay[k].chunk, lay[k].prefix, &res[k])) continue;
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < NEW; j++) {
                    CHECK_MSG(res[k].tokens[i][j] == res[0].tokens[i][j], "q_lora %d layout %d prompt %d token %d: %d, "
                              "layout 0 %d", q_lora, k, i, j, res[k].tokens[i][j], res[0].tokens[i][j]);
                    CHECK_MSG(fabsf(res[k].logprobs[i][j] - res[0].logprobs[i][j]) <= 1e-4f,
                              "q_lora %d layout %d prompt %d token %d: logprob %.6f, layout 0 %.6f", q_lora, k, i, j,
                              (double)res[k].logprobs[i][j], (double)res[0].logprobs[i][j]);
                }
        }
        printf("q_lora %d: tokens", q_lora);
        for (int j = 0; j < NEW; j++) printf(" %d", res[0].tokens[0][j]);
        printf(" (logprob of the first %.4f)\n", (double)res[0].logprobs[0][0]);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
}

/* The shared experts inside the MoE op against the same weights run apart (shared MLP in F32), for 1 and 2
 * shared experts, in two layouts: the same tokens, logprobs within 1e-4; then the folder's config with
 * --load-format dummy (random weights, the experts' slices views of them) generates finite logprobs. */
static void test_shared_in_op(void) {
    int32_t prompts[2][PROMPT];
    for (int i = 0; i < PROMPT; i++) prompts[0][i] = prompts[1][i] = (int32_t)rnd(VOC - 1);
    for (int i = 5; i < PROMPT; i++) prompts[1][i] = (int32_t)rnd(VOC - 1);
    for (int ns = 1; ns <= 2; ns++) {
        char dir[2][32] = {"/tmp/vllmc_dsshared_XXXXXX", "/tmp/vllmc_dsshared_XXXXXX"};
        const uint64_t seed = rng;
        for (int f = 0; f < 2; f++) {
            CHECK(mkdtemp(dir[f]) != NULL);
            rng = seed; /* the same values, in BF16 or (the shared MLP) in F32 */
            CHECK_MSG(write_ckpt_shared(dir[f], true, ns, f == 1), "could not write %s", dir[f]);
        }
        const struct { int bs, chunk; } lay[] = {{16, 8192}, {4, 5}};
        for (int k = 0; k < 2; k++) {
            result r[2];
            memset(r, 0, sizeof r);
            if (!run_engine(dir[0], prompts, lay[k].bs, lay[k].chunk, false, &r[0]) ||
                !run_engine(dir[1], prompts, lay[k].bs, lay[k].chunk, false, &r[1]))
                continue;
            float worst = 0.0f;
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < NEW; j++) {
                    CHECK_MSG(r[0].tokens[i][j] == r[1].tokens[i][j], "%d shared, layout %d, prompt %d token %d: %d "
                              "in the op, %d apart", ns, k, i, j, r[0].tokens[i][j], r[1].tokens[i][j]);
                    const float d = fabsf(r[0].logprobs[i][j] - r[1].logprobs[i][j]);
                    worst = d > worst ? d : worst;
                }
            CHECK_MSG(worst <= 1e-4f, "%d shared, layout %d: logprobs differ by %g", ns, k, (double)worst);
            printf("%d shared expert(s), layout %d: in the op vs apart: logprobs within %.2g\n", ns, k, (double)worst);
        }
        /* --load-format dummy on the same config */
        vllm_engine_options o = vllm_engine_default_options();
        o.max_model_len = MAXPOS;
        o.num_threads = 2;
        o.load_format = VLLM_LOAD_DUMMY;
        vllm_engine *e = NULL;
        CHECK_OK(vllm_engine_create(dir[0], &o, &e));
        if (e) {
            vllm_sampling_params sp = vllm_sampling_default_params();
            sp.temperature = 0;
            sp.ignore_eos = true;
            sp.max_tokens = 4;
            vllm_prompt p = {.token_ids = prompts[0], .num_token_ids = PROMPT};
            vllm_completion *c = NULL;
            CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
            for (int j = 0; c && j < 4; j++) CHECK(isfinite(c[0].logprobs[j]) && c[0].logprobs[j] <= 0.0f);
            vllm_completions_free(c, 1);
            vllm_engine_free(e);
        }
        for (int f = 0; f < 2; f++) {
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir[f]);
            CHECK(system(cmd) == 0);
        }
    }
}

/* A V2-shaped config (DeepSeek-V2-Lite's sizes): 576 values per token and layer, no V plane. */
static void test_v2_bytes(void) {
    const char *js = "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"hidden_size\": 2048, \"intermediate_size\":"
                     " 10944, \"num_hidden_layers\": 27, \"num_attention_heads\": 16, \"num_key_value_heads\": 16,"
                     " \"vocab_size\": 102400, \"q_lora_rank\": null, \"kv_lora_rank\": 512, \"qk_nope_head_dim\":"
                     " 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"n_routed_experts\": 64,"
                     " \"n_shared_experts\": 2, \"num_experts_per_tok\": 6, \"moe_intermediate_size\": 1408,"
                     " \"first_k_dense_replace\": 1, \"topk_method\": \"greedy\", \"rope_theta\": 10000}";
    model_config *c = calloc(1, sizeof *c);
    kv_cache_groups *g = calloc(1, sizeof *g);
    CHECK_OK(hf_config_parse(js, NULL, "config.json", c));
    CHECK_OK(kv_cache_groups_plan(c, g));
    CHECK(g->num_groups == 1 && g->group_size == 27);
    const cache_spec *s = &g->spec[0];
    /* bytes per token, as model_cache_bytes_per_token: planes x heads x dim x dtype x slots */
    const size_t bf16 = (size_t)cache_spec_planes(s) * s->num_kv_heads * s->head_dim * 2 * g->group_size;
    CHECK_MSG(bf16 == (size_t)576 * 2 * 27, "bytes per token %zu, want %d", bf16, 576 * 2 * 27);
    printf("DeepSeek-V2-Lite shape: %zu bytes per token in BF16 (an MHA cache of its 16 heads x 192 / 128 would "
           "hold %d)\n", bf16, (16 * 192 + 16 * 128) * 2 * 27);
    CHECK(c->layers[0].mlp == MLP_DENSE && c->layers[1].mlp == MLP_MOE && c->layers[26].mlp == MLP_MOE);
    CHECK(c->mla.q_lora_rank == 0 && c->shared_experts_size == 2 * 1408);
    CHECK(fabs(c->attn_scale - 1.0 / sqrt(192.0)) < 1e-12);
    /* yarn with mscale_all_dim: the softmax scale gets mscale^2 (DeepSeek-V2's real rope_scaling) */
    const char *yarn = "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 64,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 64, \"q_lora_rank\": 32,"
                       " \"kv_lora_rank\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
                       " \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"rope_scaling\": {\"type\": \"yarn\","
                       " \"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707, \"beta_fast\": 32, \"beta_slow\": 1,"
                       " \"original_max_position_embeddings\": 4096}, \"max_position_embeddings\": 163840}";
    CHECK_OK(hf_config_parse(yarn, NULL, "config.json", c));
    const double ms = 0.1 * 0.707 * log(40.0) + 1.0;
    CHECK_NEAR(c->attn_scale, ms * ms / sqrt(24.0), 1e-9);
    CHECK_NEAR(c->rope.attention_factor, 1.0, 1e-12);
    /* refused, naming the field */
    const char *bad[][2] = {
        {"\"topk_method\": \"noaux_tc\", \"scoring_func\": \"softmax\", \"n_group\": 2, \"topk_group\": 1",
         "scoring_func"},
        {"\"topk_method\": \"group_limited_greedy\", \"n_group\": 3, \"topk_group\": 1", "n_group 3"},
        {"\"topk_method\": \"noaux_tc\", \"n_group\": 2, \"topk_group\": 3", "topk_group 3"},
        {"\"topk_method\": \"seq_aux\"", "topk_method"},
        {"\"topk_method\": \"group_limited_greedy\"", "needs n_group"}, /* not a silent ungrouped top-k */
        {"\"moe_intermediate_size\": 1073741824, \"n_shared_experts\": 4", "too large"},
        {"\"topk_method\": \"greedy\", \"scoring_func\": \"sigmoid\"", "scoring_func"},
        {"\"attention_bias\": true", "attention_bias"},
        {"\"num_experts_per_tok\": 9", "num_experts_per_tok"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"hidden_size\": 64,"
                 " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 64,"
                 " \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"first_k_dense_replace\": 1, %s}", bad[i][0]);
        vllm_status st = hf_config_parse(buf, NULL, "config.json", c);
        CHECK_MSG(st != VLLM_OK && strstr(vllm_last_error(), bad[i][1]), "%s: %s", bad[i][0],
                  st ? vllm_last_error() : "accepted");
    }
    /* the routing schemes the MoE op runs (backend.h be_moe_scoring) */
    const struct {
        const char *cfg;
        int scoring, groups, kept;
        bool bias;
    } ok[] = {
        {"\"topk_method\": \"greedy\"", BE_MOE_SOFTMAX, 0, 0, false},
        {"\"topk_method\": \"group_limited_greedy\", \"n_group\": 2, \"topk_group\": 1", BE_MOE_SOFTMAX_GROUPED, 2, 1,
         false},
        {"\"topk_method\": \"noaux_tc\", \"n_group\": 2, \"topk_group\": 1, \"routed_scaling_factor\": 2.5",
         BE_MOE_SIGMOID_NOAUX_TC, 2, 1, true},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"hidden_size\": 64,"
                 " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 64,"
                 " \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"first_k_dense_replace\": 1, %s}", ok[i].cfg);
        vllm_status st = hf_config_parse(buf, NULL, "config.json", c);
        CHECK_MSG(st == VLLM_OK, "%s: %s", ok[i].cfg, vllm_last_error());
        if (st) continue;
        CHECK(c->moe.scoring == ok[i].scoring && c->moe.num_groups == ok[i].groups &&
              c->moe.topk_groups == ok[i].kept && c->moe.score_bias == ok[i].bias);
    }
    CHECK_NEAR(c->moe.routed_scaling, 2.5, 0);
    /* n_shared_experts null: no shared experts (transformers builds them only when it is not None) */
    {
        const char *nul = "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 64,"
                          " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 64, \"n_routed_experts\": 4,"
                          " \"num_experts_per_tok\": 2, \"first_k_dense_replace\": 1, \"moe_intermediate_size\": 32,"
                          " \"n_shared_experts\": null}";
        CHECK_OK(hf_config_parse(nul, NULL, "config.json", c));
        CHECK(c->shared_experts_size == 0);
    }
    free(g);
    free(c);
}

/* The FP8 (E4M3) latent cache (kv_cache_dtype fp8, no checkpoint scales: 1) on the deepseek_v2_lite fixture:
 * it runs, its greedy logprobs finite and near the F32 cache's (E4M3 rounds the latents to 3 mantissa bits). */
static void test_fp8_cache(void) {
    const char *dir = VLLM_SOURCE_DIR "/tests/fixtures/models/deepseek_v2_lite";
    const int32_t ids[] = {5, 17, 29, 3, 41, 8, 12, 60, 33, 7, 21, 2};
    float lp[2][8];
    int32_t tok[2][8];
    for (int f = 0; f < 2; f++) {
        vllm_engine_options o = vllm_engine_default_options();
        o.max_model_len = 128;
        o.num_threads = 2;
        o.kv_cache_dtype = f ? "fp8" : NULL;
        vllm_engine *e = NULL;
        CHECK_OK(vllm_engine_create(dir, &o, &e));
        if (!e) return;
        vllm_prompt p = {.token_ids = ids, .num_token_ids = sizeof ids / sizeof *ids};
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = 8;
        vllm_completion *c = NULL;
        CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
        for (int j = 0; c && j < 8; j++) lp[f][j] = c[0].logprobs[j], tok[f][j] = c[0].token_ids[j];
        vllm_completions_free(c, 1);
        vllm_engine_free(e);
    }
    CHECK_MSG(tok[0][0] == tok[1][0] && isfinite(lp[1][0]) && fabsf(lp[0][0] - lp[1][0]) < 0.25f,
              "first token %d (%.4f) with the F32 cache, %d (%.4f) with FP8", tok[0][0], (double)lp[0][0], tok[1][0],
              (double)lp[1][0]);
    for (int j = 0; j < 8; j++) CHECK(isfinite(lp[1][j]) && lp[1][j] <= 0.0f);
}

/* A quantized kv_b_proj loads, dequantized before W_UK / W_UV are split off, and generates what the same values
 * stored in F32 do: block FP8 (DeepSeek-V3's checkpoints) and AWQ 4-bit (on the CPU the loader hands it out in
 * I4_B128 blocks, which dequant_kv_b must read as such); kv_lora_rank 128: whole blocks of either. */
static void test_quantized_kv_b(int kind, int as_f32, const char *what) {
    int32_t prompts[2][PROMPT];
    for (int i = 0; i < PROMPT; i++) prompts[0][i] = prompts[1][i] = (int32_t)rnd(VOC - 1);
    for (int i = 5; i < PROMPT; i++) prompts[1][i] = (int32_t)rnd(VOC - 1);
    char dir[2][32] = {"/tmp/vllmc_dsqkvb_XXXXXX", "/tmp/vllmc_dsqkvb_XXXXXX"};
    const uint64_t seed = rng;
    g_kl = 128;
    for (int f = 0; f < 2; f++) {
        CHECK(mkdtemp(dir[f]) != NULL);
        rng = seed; /* the same values: quantized, or their F32 copies */
        g_kvb = f == 0 ? kind : as_f32;
        CHECK_MSG(write_ckpt_shared(dir[f], true, 1, false), "could not write %s", dir[f]);
    }
    g_kl = KL;
    g_kvb = KVB_BF16;
    result r[2];
    memset(r, 0, sizeof r);
    if (run_engine(dir[0], prompts, 16, 8192, false, &r[0]) && run_engine(dir[1], prompts, 16, 8192, false, &r[1])) {
        float worst = 0.0f;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < NEW; j++) {
                CHECK_MSG(r[0].tokens[i][j] == r[1].tokens[i][j], "%s kv_b_proj: prompt %d token %d: %d, F32 %d",
                          what, i, j, r[0].tokens[i][j], r[1].tokens[i][j]);
                const float d = fabsf(r[0].logprobs[i][j] - r[1].logprobs[i][j]);
                worst = d > worst ? d : worst;
            }
        CHECK_MSG(worst <= 1e-5f, "%s kv_b_proj: logprobs differ from the F32 copy's by %g", what, (double)worst);
        printf("%s kv_b_proj vs its F32 values: same tokens, logprobs within %.2g\n", what, (double)worst);
    } else {
        CHECK_MSG(false, "%s kv_b_proj: the engine did not run: %s", what, vllm_last_error());
    }
    for (int f = 0; f < 2; f++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir[f]);
        CHECK(system(cmd) == 0);
    }
}

int main(void) {
    test_quantized_kv_b(KVB_FP8, KVB_FP8_AS_F32, "block-FP8");
    test_quantized_kv_b(KVB_AWQ, KVB_AWQ_AS_F32, "AWQ 4-bit");
    test_v2_bytes();
    test_layouts();
    test_fp8_cache();
    test_shared_in_op();
    TEST_END();
}
