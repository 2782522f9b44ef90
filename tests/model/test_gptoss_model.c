/*
 * test_gptoss_model.c: GptOssForCausalLM end to end on the CPU against a plain double-precision forward
 * written here from transformers' modeling_gpt_oss.py: RMSNorm, q/k/v/o with biases, YaRN RoPE on
 * halves, attention with a sink per head (joins the softmax's max and denominator) and a sliding window
 * on layer 0, the router (linear with bias, top k of the logits, softmax over the k), experts with
 * biases and the clamped SwiGLU, the final norm and lm_head. A random 2-layer checkpoint (hidden 64,
 * 4 experts, top 2) is written twice: as transformers 5 saves it (gate_up_proj (E, D, 2I) gate / up
 * interleaved, down_proj (E, I, D), BF16) and as the original MXFP4 release (blocks and scales of
 * (E, 2I, D) / (E, D, I)); expert weights are chosen MXFP4-exact, so both must give the same tokens and
 * logprobs, and both the reference's (greedy, 1e-3). The prompt is longer than the window; runs with
 * one batch and with chunked prefill over 7-token blocks. Also: MXFP4 dequantization by hand.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/hf_config.h"
#include "loader/safetensors.h"
#include "model/mxfp4.h"
#include "model/rope.h"
#include "tensor/tensor.h"
#include "test.h"

#define SYNTH_SEED 0x9e3779b97f4a7c15ull
#include "synth_ckpt.h"
#include "vllm.h"

enum { V = 97, D = 64, I = 32, L = 2, NH = 4, NKV = 2, HD = 16, E = 4, K = 2, WINDOW = 8, PROMPT = 20, NEW = 6 };
#define MAXT 64
#define MAXPOS 64
#define NEAR_TIE 0.02
#define TOL 1e-3

/* ---- MXFP4 by hand ---- */

static void test_mxfp4(void) {
    /* the e2m1 table */
    const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++) CHECK(mxfp4_e2m1(c) == want[c] && signbit(mxfp4_e2m1(c)) == signbit(want[c]));
    /* two blocks of one row: the low nibble first; scale 128 doubles, 124 divides by 8, 0 is 2^-127 */
    uint8_t blk[32] = {0};
    uint8_t scl[2] = {128, 124};
    blk[0] = 0x21;  /* values 0, 1: codes 1 (0.5), 2 (1.0), x2 */
    blk[1] = 0xF8;  /* values 2, 3: codes 8 (-0), 15 (-6) */
    blk[15] = 0x7E; /* values 30, 31: codes 14 (-4), 7 (6) */
    blk[16] = 0x9C; /* block 1, values 32, 33: codes 12 (-2), 9 (-0.5), / 8 */
    uint16_t out[64];
    mxfp4_dequant_row(blk, scl, 2, out);
    CHECK(bf16_to_f32(out[0]) == 1.0f && bf16_to_f32(out[1]) == 2.0f);
    CHECK(out[2] == 0x8000 && bf16_to_f32(out[3]) == -12.0f);
    CHECK(bf16_to_f32(out[30]) == -8.0f && bf16_to_f32(out[31]) == 12.0f);
    CHECK(bf16_to_f32(out[4]) == 0.0f && out[4] == 0x0000); /* byte 0x00: +0 twice */
    CHECK(bf16_to_f32(out[32]) == -0.25f && bf16_to_f32(out[33]) == -0.0625f);
    uint8_t tiny[16] = {0x71}, s0 = 0, s254 = 254;
    mxfp4_dequant_row(tiny, &s0, 1, out);
    CHECK(bf16_to_f32(out[0]) == ldexpf(1.0f, -128) && bf16_to_f32(out[1]) == ldexpf(6.0f, -127)); /* subnormal */
    mxfp4_dequant_row(tiny, &s254, 1, out);
    CHECK(bf16_to_f32(out[0]) == ldexpf(1.0f, 126) && bf16_to_f32(out[1]) == ldexpf(6.0f, 127));
}

/* ---- the checkpoint ---- */

typedef struct layer_w {
    float in_norm[D], post_norm[D];
    float q[NH * HD * D], qb[NH * HD], k[NKV * HD * D], kb[NKV * HD], v[NKV * HD * D], vb[NKV * HD];
    float o[D * NH * HD], ob[D], sinks[NH];
    float router[E * D], router_b[E];
    float gu[E][2 * I][D], gub[E][2 * I]; /* (out, in) with rows 2i gate i, 2i + 1 up i */
    float dn[E][D][I], dnb[E][D];
    uint8_t gu_codes[E][2 * I][D], dn_codes[E][D][I]; /* the MXFP4 codes and scales of gu, dn */
    uint8_t gu_scales[E][2 * I][D / 32], dn_scales[E][D][I / 32];
} layer_w;

typedef struct weights {
    float embed[V * D], head[V * D], fnorm[D];
    layer_w l[L];
} weights;

static void make_weights(weights *w) {
    fill(w->embed, V * D, 1.0f, 0);
    fill(w->head, V * D, 0.3f, 0);
    fill(w->fnorm, D, 0.3f, 1.0f);
    for (int l = 0; l < L; l++) {
        layer_w *y = &w->l[l];
        fill(y->in_norm, D, 0.3f, 1.0f);
        fill(y->post_norm, D, 0.3f, 1.0f);
        fill(y->q, NH * HD * D, 0.25f, 0);
        fill(y->qb, NH * HD, 0.5f, 0);
        fill(y->k, NKV * HD * D, 0.25f, 0);
        fill(y->kb, NKV * HD, 0.5f, 0);
        fill(y->v, NKV * HD * D, 0.25f, 0);
        fill(y->vb, NKV * HD, 0.5f, 0);
        fill(y->o, D * NH * HD, 0.15f, 0);
        fill(y->ob, D, 0.2f, 0);
        fill(y->sinks, NH, 2.0f, 0);
        y->sinks[0] = bf(4.0f); /* one head mostly on its sink */
        fill(y->router, E * D, 0.5f, 0);
        fill(y->router_b, E, 0.5f, 0);
        fill(y->gub[0], E * 2 * I, 3.0f, 0);
        fill(y->dnb[0], E * D, 0.2f, 0);
        for (int e = 0; e < E; e++) {
            /* MXFP4-exact expert weights: codes at random, a scale per block of 32 inputs of 2^-6 .. 2^-3 */
            for (int r = 0; r < 2 * I; r++)
                for (int g = 0; g < D / 32; g++) {
                    y->gu_scales[e][r][g] = (uint8_t)(121 + rnd(4));
                    for (int j = 0; j < 32; j++) {
                        uint8_t c = (uint8_t)rnd(16);
                        y->gu_codes[e][r][g * 32 + j] = c;
                        y->gu[e][r][g * 32 + j] = ldexpf(mxfp4_e2m1(c), y->gu_scales[e][r][g] - 127);
                    }
                }
            for (int r = 0; r < D; r++)
                for (int g = 0; g < I / 32; g++) {
                    y->dn_scales[e][r][g] = (uint8_t)(120 + rnd(3));
                    for (int j = 0; j < 32; j++) {
                        uint8_t c = (uint8_t)rnd(16);
                        y->dn_codes[e][r][g * 32 + j] = c;
                        y->dn[e][r][g * 32 + j] = ldexpf(mxfp4_e2m1(c), y->dn_scales[e][r][g] - 127);
                    }
                }
        }
    }
}

static bool write_ckpt(const weights *w, const char *dir, bool mxfp4) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\", \"hidden_size\": %d,"
               " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
               " \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"num_local_experts\": %d,"
               " \"num_experts_per_tok\": %d, \"sliding_window\": %d, \"layer_types\": [\"sliding_attention\","
               " \"full_attention\"], \"rms_norm_eps\": 1e-05, \"max_position_embeddings\": %d,"
               " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"beta_fast\": 32.0, \"beta_slow\": 1.0,"
               " \"truncate\": false, \"original_max_position_embeddings\": 16}, \"rope_theta\": 150000,"
               " \"swiglu_limit\": 7.0, \"tie_word_embeddings\": false, \"attention_bias\": true,"
               " \"eos_token_id\": 96, \"dtype\": \"bfloat16\"%s}\n",
            D, I, L, NH, NKV, HD, V, E, K, WINDOW, MAXPOS,
            mxfp4 ? ", \"quantization_config\": {\"quant_method\": \"mxfp4\"}" : "");
    fclose(f);
    ckpt *c = calloc(1, sizeof *c);
    const int64_t s_vd[2] = {V, D}, s_d[1] = {D}, s_q[2] = {NH * HD, D}, s_qb[1] = {NH * HD}, s_k[2] = {NKV * HD, D},
                  s_kb[1] = {NKV * HD}, s_o[2] = {D, NH * HD}, s_nh[1] = {NH}, s_r[2] = {E, D}, s_rb[1] = {E},
                  s_gub[2] = {E, 2 * I}, s_dnb[2] = {E, D};
    add_bf16(c, "model.embed_tokens.weight", w->embed, 2, s_vd);
    add_bf16(c, "lm_head.weight", w->head, 2, s_vd);
    add_bf16(c, "model.norm.weight", w->fnorm, 1, s_d);
    for (int l = 0; l < L; l++) {
        const layer_w *y = &w->l[l];
        char nm[160];
#define ADD(suffix, p, nd, sh)                                          \
    do {                                                                \
        snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);       \
        add_bf16(c, nm, p, nd, sh);                                     \
    } while (0)
        ADD("input_layernorm.weight", y->in_norm, 1, s_d);
        ADD("post_attention_layernorm.weight", y->post_norm, 1, s_d);
        ADD("self_attn.q_proj.weight", y->q, 2, s_q);
        ADD("self_attn.q_proj.bias", y->qb, 1, s_qb);
        ADD("self_attn.k_proj.weight", y->k, 2, s_k);
        ADD("self_attn.k_proj.bias", y->kb, 1, s_kb);
        ADD("self_attn.v_proj.weight", y->v, 2, s_k);
        ADD("self_attn.v_proj.bias", y->vb, 1, s_kb);
        ADD("self_attn.o_proj.weight", y->o, 2, s_o);
        ADD("self_attn.o_proj.bias", y->ob, 1, s_d);
        ADD("self_attn.sinks", y->sinks, 1, s_nh);
        ADD("mlp.router.weight", y->router, 2, s_r);
        ADD("mlp.router.bias", y->router_b, 1, s_rb);
        ADD("mlp.experts.gate_up_proj_bias", y->gub[0], 2, s_gub);
        ADD("mlp.experts.down_proj_bias", y->dnb[0], 2, s_dnb);
        if (mxfp4) {
            /* blocks (E, R, C / 32, 16): value 2j the low nibble of byte j; scales (E, R, C / 32) */
            const int64_t sgb[4] = {E, 2 * I, D / 32, 16}, sgs[3] = {E, 2 * I, D / 32};
            const int64_t sdb[4] = {E, D, I / 32, 16}, sds[3] = {E, D, I / 32};
            uint8_t *gb = calloc(E * 2 * I * D / 2, 1), *gs = malloc(sizeof y->gu_scales);
            uint8_t *db = calloc(E * D * I / 2, 1), *ds = malloc(sizeof y->dn_scales);
            const uint8_t *gc = &y->gu_codes[0][0][0], *dc = &y->dn_codes[0][0][0];
            for (int i = 0; i < E * 2 * I * D; i++) gb[i / 2] |= (uint8_t)(gc[i] << (i % 2 ? 4 : 0));
            for (int i = 0; i < E * D * I; i++) db[i / 2] |= (uint8_t)(dc[i] << (i % 2 ? 4 : 0));
            memcpy(gs, y->gu_scales, sizeof y->gu_scales);
            memcpy(ds, y->dn_scales, sizeof y->dn_scales);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
            add_u8(c, nm, gb, 4, sgb);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.gate_up_proj_scales", l);
            add_u8(c, nm, gs, 3, sgs);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.down_proj_blocks", l);
            add_u8(c, nm, db, 4, sdb);
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.down_proj_scales", l);
            add_u8(c, nm, ds, 3, sds);
        } else {
            /* transformers 5: gate_up_proj (E, D, 2I) = the (2I, D) matrices transposed; down_proj (E, I, D) */
            float *gu = malloc(sizeof(float) * E * D * 2 * I), *dn = malloc(sizeof(float) * E * I * D);
            for (int e = 0; e < E; e++)
                for (int d = 0; d < D; d++) {
                    for (int r = 0; r < 2 * I; r++) gu[(e * D + d) * 2 * I + r] = y->gu[e][r][d];
                    for (int i = 0; i < I; i++) dn[(e * I + i) * D + d] = y->dn[e][d][i];
                }
            const int64_t sgu[3] = {E, D, 2 * I}, sdn[3] = {E, I, D};
            ADD("mlp.experts.gate_up_proj", gu, 3, sgu);
            ADD("mlp.experts.down_proj", dn, 3, sdn);
            free(gu);
            free(dn);
        }
#undef ADD
    }
    return ckpt_write(c, dir);
}

/* ---- the reference forward, in double ---- */

static void rms(const double *x, const float *w, double *out) {
    double ss = 0;
    for (int d = 0; d < D; d++) ss += x[d] * x[d];
    double r = 1.0 / sqrt(ss / D + 1e-5);
    for (int d = 0; d < D; d++) out[d] = x[d] * r * w[d];
}
static void lin(const float *W, const float *b, const double *x, int out, int in, double *y) {
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; i++) s += (double)W[o * in + i] * x[i];
        y[o] = s;
    }
}
static void rope(double *x, const float *cs, int pos) { /* halves (i, i + HD/2), table row pos */
    for (int i = 0; i < HD / 2; i++) {
        double c = cs[pos * HD + i], s = cs[pos * HD + HD / 2 + i], a = x[i], b = x[i + HD / 2];
        x[i] = a * c - b * s;
        x[i + HD / 2] = b * c + a * s;
    }
}

/* logprobs (V) of the token after seq[0 .. n) */
static void ref_forward(const weights *w, const float *cs, const int *seq, int n, double *lp) {
    static double h[MAXPOS][D], a[MAXPOS][D], q[MAXPOS][NH * HD], k[MAXPOS][NKV * HD], v[MAXPOS][NKV * HD];
    static double att[MAXPOS][NH * HD];
    for (int t = 0; t < n; t++)
        for (int d = 0; d < D; d++) h[t][d] = w->embed[seq[t] * D + d];
    for (int l = 0; l < L; l++) {
        const layer_w *y = &w->l[l];
        const int window = l == 0 ? WINDOW : 0;
        for (int t = 0; t < n; t++) {
            rms(h[t], y->in_norm, a[t]);
            lin(y->q, y->qb, a[t], NH * HD, D, q[t]);
            lin(y->k, y->kb, a[t], NKV * HD, D, k[t]);
            lin(y->v, y->vb, a[t], NKV * HD, D, v[t]);
            for (int hh = 0; hh < NH; hh++) rope(q[t] + hh * HD, cs, t);
            for (int hh = 0; hh < NKV; hh++) rope(k[t] + hh * HD, cs, t);
        }
        for (int t = 0; t < n; t++)
            for (int hh = 0; hh < NH; hh++) {
                const int kv = hh / (NH / NKV), k0 = window && t - window + 1 > 0 ? t - window + 1 : 0;
                double s[MAXPOS], mx = y->sinks[hh], sum = 0;
                for (int j = k0; j <= t; j++) {
                    double dot = 0;
                    for (int i = 0; i < HD; i++) dot += q[t][hh * HD + i] * k[j][kv * HD + i];
                    s[j] = dot / sqrt((double)HD);
                    mx = s[j] > mx ? s[j] : mx;
                }
                sum = exp(y->sinks[hh] - mx); /* the sink: in the max and the sum, no value */
                for (int j = k0; j <= t; j++) sum += s[j] = exp(s[j] - mx);
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int j = k0; j <= t; j++) o += s[j] * v[j][kv * HD + i];
                    att[t][hh * HD + i] = o / sum;
                }
            }
        for (int t = 0; t < n; t++) {
            double o[D], r[E], moe[D] = {0};
            lin(y->o, y->ob, att[t], D, NH * HD, o);
            for (int d = 0; d < D; d++) h[t][d] += o[d];
            rms(h[t], y->post_norm, a[t]);
            lin(y->router, y->router_b, a[t], E, D, r);
            /* top k of the logits, softmax over them */
            int ids[K];
            double top[K], mx = -INFINITY, sum = 0;
            bool taken[E] = {false};
            for (int j = 0; j < K; j++) {
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (!taken[e] && (best < 0 || r[e] > r[best])) best = e;
                taken[best] = true;
                ids[j] = best;
                top[j] = r[best];
                mx = top[j] > mx ? top[j] : mx;
            }
            for (int j = 0; j < K; j++) sum += top[j] = exp(top[j] - mx);
            for (int j = 0; j < K; j++) {
                const int e = ids[j];
                double g[I];
                for (int i = 0; i < I; i++) {
                    double gg = y->gub[e][2 * i], uu = y->gub[e][2 * i + 1];
                    for (int d = 0; d < D; d++) {
                        gg += (double)y->gu[e][2 * i][d] * a[t][d];
                        uu += (double)y->gu[e][2 * i + 1][d] * a[t][d];
                    }
                    gg = gg > 7.0 ? 7.0 : gg;
                    uu = uu > 7.0 ? 7.0 : uu < -7.0 ? -7.0 : uu;
                    g[i] = (uu + 1.0) * gg / (1.0 + exp(-1.702 * gg));
                }
                for (int d = 0; d < D; d++) {
                    double s = y->dnb[e][d];
                    for (int i = 0; i < I; i++) s += (double)y->dn[e][d][i] * g[i];
                    moe[d] += top[j] / sum * s;
                }
            }
            for (int d = 0; d < D; d++) h[t][d] += moe[d];
        }
    }
    double x[D], lg[V], mx = -INFINITY, sum = 0;
    rms(h[n - 1], w->fnorm, x);
    lin(w->head, NULL, x, V, D, lg);
    for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < V; i++) sum += exp(lg[i] - mx);
    for (int i = 0; i < V; i++) lp[i] = lg[i] - mx - log(sum);
}

/* ---- the engine against the reference ---- */

typedef struct result {
    int32_t tokens[NEW];
    float logprobs[NEW];
    int n;
} result;

static bool run_engine(const char *dir, const int32_t *prompt, int block_size, int chunk, result *r) {
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = block_size;
    o.max_num_batched_tokens = chunk;
    o.max_model_len = MAXPOS;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s: %s", dir, vllm_last_error());
    if (st != VLLM_OK) return false;
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = NEW;
    vllm_prompt p = {.token_ids = prompt, .num_token_ids = PROMPT};
    vllm_completion *c = NULL;
    st = vllm_generate(e, &p, 1, &sp, false, &c, NULL);
    CHECK_MSG(st == VLLM_OK, "generate: %s", vllm_last_error());
    if (st == VLLM_OK) {
        r->n = (int)c[0].num_tokens < NEW ? (int)c[0].num_tokens : NEW;
        for (int j = 0; j < r->n; j++) {
            r->tokens[j] = c[0].token_ids[j];
            r->logprobs[j] = c[0].logprobs[j];
        }
        vllm_completions_free(c, 1);
    }
    vllm_engine_free(e);
    return st == VLLM_OK;
}

static void test_model(void) {
    weights *w = calloc(1, sizeof *w);
    make_weights(w);
    char dirs[2][32] = {"/tmp/vllmc_gptoss_XXXXXX", "/tmp/vllmc_gptoss_XXXXXX"};
    for (int m = 0; m < 2; m++) {
        CHECK(mkdtemp(dirs[m]) != NULL);
        CHECK_MSG(write_ckpt(w, dirs[m], m == 1), "could not write %s", dirs[m]);
    }
    /* the RoPE table of the config (rope.c's YaRN, tested against its formula in tests/model/test_rope.c) */
    model_config cfg;
    CHECK_OK(hf_config_load(dirs[0], &cfg));
    static float cs[MAXPOS * HD];
    rope_cos_sin_table(&cfg.rope, HD, MAXPOS, cs);

    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)rnd(V - 2);
    result res[2][2];
    const int layouts[2][2] = {{16, 8192}, {7, 9}};
    for (int m = 0; m < 2; m++)
        for (int lay = 0; lay < 2; lay++) {
            result *r = &res[m][lay];
            memset(r, 0, sizeof *r);
            if (!run_engine(dirs[m], prompt, layouts[lay][0], layouts[lay][1], r)) continue;
            CHECK(r->n == NEW);
            /* the reference, greedy, one token at a time */
            int seq[MAXPOS];
            for (int i = 0; i < PROMPT; i++) seq[i] = prompt[i];
            for (int j = 0; j < r->n; j++) {
                double lp[V];
                ref_forward(w, cs, seq, PROMPT + j, lp);
                int best = 0, second = -1;
                for (int i = 1; i < V; i++)
                    if (lp[i] > lp[best]) best = i;
                for (int i = 0; i < V; i++)
                    if (i != best && (second < 0 || lp[i] > lp[second])) second = i;
                CHECK_MSG(r->tokens[j] == best, "%s layout %d token %d: got %d want %d", m ? "MXFP4" : "BF16", lay, j,
                          r->tokens[j], best);
                if (r->tokens[j] != best) break;
                CHECK_MSG(fabs(r->logprobs[j] - lp[best]) <= TOL, "%s layout %d token %d: logprob %.6f want %.6f",
                          m ? "MXFP4" : "BF16", lay, j, (double)r->logprobs[j], lp[best]);
                if (lp[best] - lp[second] < NEAR_TIE) break;
                seq[PROMPT + j] = best;
            }
        }
    /* the MXFP4 checkpoint dequantizes to the BF16 one's weights: the same results, bit for bit */
    for (int lay = 0; lay < 2; lay++)
        CHECK_MSG(!memcmp(&res[0][lay], &res[1][lay], sizeof res[0][lay]), "BF16 and MXFP4 differ (layout %d)", lay);
    for (int m = 0; m < 2; m++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dirs[m]);
        CHECK(system(cmd) == 0);
    }
    free(w);
}

int main(void) {
    test_mxfp4();
    test_model();
    TEST_END();
}
