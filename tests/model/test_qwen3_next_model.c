/*
 * test_qwen3_next_model.c: Qwen3NextForCausalLM end to end on the CPU against a plain double-precision
 * forward written here from transformers' modeling_qwen3_next.py (no project op is called by it):
 * (1 + w) RMSNorms; gated delta-net layers (in_proj_qkvz / in_proj_ba split per k-head group as
 * fix_query_key_value_ordering does, the depthwise causal conv1d over q|k|v from zeros with SiLU,
 * beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), l2-normalised q and k, q / sqrt(d_k), the
 * recurrent delta rule with q/k heads repeated over H_v / H_k v-heads, the gated RMSNorm w * norm(o) *
 * silu(z) per v-head, out_proj); full attention with q_proj's per-head [query | gate], q/k norms, neox
 * RoPE on the first 0.25 of head_dim, softmax attention and output * sigmoid(gate); MoE (softmax router,
 * top 2 renormalised) plus a shared expert behind sigmoid(shared_expert_gate). A random 3-layer
 * checkpoint (linear, full, linear; H_v = 2 H_k) runs through the engine: one prompt in one batch, the
 * same prompt over 7-token chunks, three prompts at once, and three prompts in a KV cache too small
 * for them (preemptions: recomputed sequences restart their recurrent state, or restore a checkpoint);
 * each sequence's greedy tokens and logprobs must match the reference (1e-3, up to the first near-tie).
 * Each layout runs with prefix caching off, then on (the recurrent states checkpointed at block-aligned
 * boundaries, vLLM's mamba_cache_mode "align") over three rounds: the prompts (the second shares the
 * first's first 12 tokens), the same prompts again, and the first prompt with n = 3 (children admitted
 * together); the later rounds must hit the prefix cache (checkpoints restored), every round must match
 * the reference and the run with prefix caching off (1e-4). One layout leaves room for two checkpoints
 * only (LRU evictions), another none (prefix caching stays off). A forward with a sequence on the null
 * state slot 0 (as a recorded graph's padding rows) reads and writes no state: slot 0 of every pool stays
 * zero; model_state_save / model_state_restore copy a slot's states to a checkpoint and back.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "engine/engine_internal.h"
#include "loader/safetensors.h"
#include "model/model.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "test.h"

#define SYNTH_SEED 0x2545f4914f6cdd1dull
#include "synth_ckpt.h"
#include "vllm.h"

enum {
    V = 97, D = 64, L = 3,                       /* vocab, hidden, layers: linear, full, linear */
    NH = 4, NKV = 2, HD = 32, ROT = 8,           /* attention heads; rotary dims = 0.25 * HD */
    HK = 2, HV = 4, DK = 8, DV = 8, R = HV / HK, /* gated delta-net heads */
    KD = HK * DK, VD = HV * DV, CD = 2 * KD + VD, CK = 4, /* conv channels q|k|v, conv width */
    E = 4, TOPK = 2, IM = 32, IS = 48,           /* experts, top k, expert and shared intermediate sizes */
    NEW = 8, MAXPOS = 64, NSEQ = 3,
};
#define EPS 1e-6
#define NEAR_TIE 0.02
#define TOL 1e-3
#define ON_OFF_TOL 1e-4
/* bytes of one linear-attention layer's states of one sequence (conv + recurrent, F32); two such layers */
#define LAYER_STATE_BYTES ((CD * (CK - 1) + HV * DK * DV) * 4)
#define CKPT_BYTES (2 * LAYER_STATE_BYTES)

static const bool linear_layer[L] = {true, false, true};

/* ---- the checkpoint ---- */

typedef struct layer_w {
    float in_norm[D], post_norm[D];
    /* full attention */
    float q[2 * NH * HD * D], k[NKV * HD * D], v[NKV * HD * D], o[D * NH * HD], q_norm[HD], k_norm[HD];
    /* gated delta-net, as the checkpoint stores them */
    float qkvz[(2 * KD + 2 * VD) * D], ba[2 * HV * D], conv[CD * CK], dt_bias[HV], A_log[HV], gnorm[DV];
    float out[D * VD];
    /* MoE with a shared expert */
    float router[E * D], gate[E][IM * D], up[E][IM * D], down[E][D * IM];
    float sh_gate[IS * D], sh_up[IS * D], sh_down[D * IS], sh_g[D];
} layer_w;

typedef struct weights {
    float embed[V * D], head[V * D], fnorm[D];
    layer_w l[L];
} weights;

static void make_weights(weights *w) {
    fill(w->embed, V * D, 1.0f, 0);
    fill(w->head, V * D, 0.3f, 0);
    fill(w->fnorm, D, 0.3f, 0); /* (1 + w) norms: w near 0 */
    for (int l = 0; l < L; l++) {
        layer_w *y = &w->l[l];
        fill(y->in_norm, D, 0.3f, 0);
        fill(y->post_norm, D, 0.3f, 0);
        fill(y->q, 2 * NH * HD * D, 0.25f, 0);
        fill(y->k, NKV * HD * D, 0.25f, 0);
        fill(y->v, NKV * HD * D, 0.25f, 0);
        fill(y->o, D * NH * HD, 0.15f, 0);
        fill(y->q_norm, HD, 0.3f, 0);
        fill(y->k_norm, HD, 0.3f, 0);
        fill(y->qkvz, (2 * KD + 2 * VD) * D, 0.3f, 0);
        fill(y->ba, 2 * HV * D, 0.3f, 0);
        fill(y->conv, CD * CK, 0.6f, 0);
        fill(y->dt_bias, HV, 0.5f, 0);
        fill(y->A_log, HV, 0.5f, -1.5f); /* slow decay: the state carries far */
        fill(y->gnorm, DV, 0.3f, 1.0f);  /* the gated norm's weight is w itself, around 1 */
        fill(y->out, D * VD, 0.3f, 0);
        fill(y->router, E * D, 0.5f, 0);
        for (int e = 0; e < E; e++) {
            fill(y->gate[e], IM * D, 0.3f, 0);
            fill(y->up[e], IM * D, 0.3f, 0);
            fill(y->down[e], D * IM, 0.2f, 0);
        }
        fill(y->sh_gate, IS * D, 0.3f, 0);
        fill(y->sh_up, IS * D, 0.3f, 0);
        fill(y->sh_down, D * IS, 0.2f, 0);
        fill(y->sh_g, D, 0.3f, 0);
    }
}

static bool write_ckpt(const weights *w, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": \"qwen3_next\", \"hidden_size\": %d,"
               " \"intermediate_size\": 96, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
               " \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"num_experts\": %d,"
               " \"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d, \"shared_expert_intermediate_size\": %d,"
               " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [],"
               " \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\"],"
               " \"linear_num_key_heads\": %d, \"linear_num_value_heads\": %d, \"linear_key_head_dim\": %d,"
               " \"linear_value_head_dim\": %d, \"linear_conv_kernel_dim\": %d, \"rms_norm_eps\": 1e-06,"
               " \"max_position_embeddings\": %d, \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.25,"
               " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"attention_bias\": false,"
               " \"eos_token_id\": 96, \"dtype\": \"bfloat16\"}\n",
            D, L, NH, NKV, HD, V, E, TOPK, IM, IS, HK, HV, DK, DV, CK, MAXPOS);
    fclose(f);
    ckpt *c = calloc(1, sizeof *c);
    const int64_t s_vd[2] = {V, D}, s_d[1] = {D}, s_q[2] = {2 * NH * HD, D}, s_k[2] = {NKV * HD, D},
                  s_o[2] = {D, NH * HD}, s_hd[1] = {HD}, s_qkvz[2] = {2 * KD + 2 * VD, D}, s_ba[2] = {2 * HV, D},
                  s_conv[3] = {CD, 1, CK}, s_hv[1] = {HV}, s_dv[1] = {DV}, s_out[2] = {D, VD}, s_r[2] = {E, D},
                  s_gu[2] = {IM, D}, s_dn[2] = {D, IM}, s_sgu[2] = {IS, D}, s_sdn[2] = {D, IS}, s_sg[2] = {1, D};
    add_bf16(c, "model.embed_tokens.weight", w->embed, 2, s_vd);
    add_bf16(c, "lm_head.weight", w->head, 2, s_vd);
    add_bf16(c, "model.norm.weight", w->fnorm, 1, s_d);
    for (int l = 0; l < L; l++) {
        const layer_w *y = &w->l[l];
        char nm[160];
#define ADD(p, nd, sh, ...)                                                          \
    do {                                                                             \
        int n_ = snprintf(nm, sizeof nm, "model.layers.%d.", l);                     \
        snprintf(nm + n_, sizeof nm - (size_t)n_, __VA_ARGS__);                      \
        add_bf16(c, nm, p, nd, sh);                                                  \
    } while (0)
        ADD(y->in_norm, 1, s_d, "input_layernorm.weight");
        ADD(y->post_norm, 1, s_d, "post_attention_layernorm.weight");
        if (linear_layer[l]) {
            ADD(y->qkvz, 2, s_qkvz, "linear_attn.in_proj_qkvz.weight");
            ADD(y->ba, 2, s_ba, "linear_attn.in_proj_ba.weight");
            ADD(y->conv, 3, s_conv, "linear_attn.conv1d.weight");
            ADD(y->dt_bias, 1, s_hv, "linear_attn.dt_bias");
            ADD(y->A_log, 1, s_hv, "linear_attn.A_log");
            ADD(y->gnorm, 1, s_dv, "linear_attn.norm.weight");
            ADD(y->out, 2, s_out, "linear_attn.out_proj.weight");
        } else {
            ADD(y->q, 2, s_q, "self_attn.q_proj.weight");
            ADD(y->k, 2, s_k, "self_attn.k_proj.weight");
            ADD(y->v, 2, s_k, "self_attn.v_proj.weight");
            ADD(y->o, 2, s_o, "self_attn.o_proj.weight");
            ADD(y->q_norm, 1, s_hd, "self_attn.q_norm.weight");
            ADD(y->k_norm, 1, s_hd, "self_attn.k_norm.weight");
        }
        ADD(y->router, 2, s_r, "mlp.gate.weight");
        for (int e = 0; e < E; e++) {
            ADD(y->gate[e], 2, s_gu, "mlp.experts.%d.gate_proj.weight", e);
            ADD(y->up[e], 2, s_gu, "mlp.experts.%d.up_proj.weight", e);
            ADD(y->down[e], 2, s_dn, "mlp.experts.%d.down_proj.weight", e);
        }
        ADD(y->sh_gate, 2, s_sgu, "mlp.shared_expert.gate_proj.weight");
        ADD(y->sh_up, 2, s_sgu, "mlp.shared_expert.up_proj.weight");
        ADD(y->sh_down, 2, s_sdn, "mlp.shared_expert.down_proj.weight");
        ADD(y->sh_g, 2, s_sg, "mlp.shared_expert_gate.weight");
#undef ADD
    }
    return ckpt_write(c, dir);
}

/* ---- the reference forward, in double, from modeling_qwen3_next.py ---- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigm(x); }
/* Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w) */
static void rms1p(const double *x, const float *w, int n, double *out) {
    double ss = 0;
    for (int d = 0; d < n; d++) ss += x[d] * x[d];
    double r = 1.0 / sqrt(ss / n + EPS);
    for (int d = 0; d < n; d++) out[d] = x[d] * r * (1.0 + w[d]);
}
static void lin(const float *W, const double *x, int out, int in, double *y) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)W[o * in + i] * x[i];
        y[o] = s;
    }
}
/* apply_rotary_pos_emb: rotate_half over the first ROT dims, inv_freq = theta^(-2i / ROT) */
static void rope(double *x, int pos) {
    for (int i = 0; i < ROT / 2; i++) {
        double f = pos * pow(10000.0, -2.0 * i / ROT), c = cos(f), s = sin(f), a = x[i], b = x[i + ROT / 2];
        x[i] = a * c - b * s;
        x[i + ROT / 2] = b * c + a * s;
    }
}
static void l2norm(double *x, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss + 1e-6);
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* Qwen3NextGatedDeltaNet over tokens 0 .. n of one sequence: a (n, D) normed input -> out (n, D) */
static void ref_gdn(const layer_w *y, double (*a)[D], int n, double (*out)[D]) {
    static double mixed[MAXPOS][CD], z[MAXPOS][VD], b[MAXPOS][HV], al[MAXPOS][HV];
    for (int t = 0; t < n; t++) {
        double qkvz[2 * KD + 2 * VD], ba[2 * HV];
        lin(y->qkvz, a[t], 2 * KD + 2 * VD, D, qkvz);
        lin(y->ba, a[t], 2 * HV, D, ba);
        /* fix_query_key_value_ordering: per k-head group g, [q (DK) | k (DK) | v (R DV) | z (R DV)], [b (R) | a (R)] */
        for (int g = 0; g < HK; g++) {
            const double *p = qkvz + g * (2 * DK + 2 * R * DV);
            for (int i = 0; i < DK; i++) {
                mixed[t][g * DK + i] = p[i];
                mixed[t][KD + g * DK + i] = p[DK + i];
            }
            for (int j = 0; j < R * DV; j++) {
                mixed[t][2 * KD + g * R * DV + j] = p[2 * DK + j];
                z[t][g * R * DV + j] = p[2 * DK + R * DV + j];
            }
            for (int j = 0; j < R; j++) {
                b[t][g * R + j] = ba[g * 2 * R + j];
                al[t][g * R + j] = ba[g * 2 * R + R + j];
            }
        }
    }
    /* F.silu(conv1d(x, padding=K - 1)[..., :n]): out[t] = sum_j w[j] x[t - (K - 1) + j], zeros before 0 */
    static double conv[MAXPOS][CD], core[MAXPOS][VD];
    for (int t = 0; t < n; t++)
        for (int ch = 0; ch < CD; ch++) {
            double s = 0;
            for (int j = 0; j < CK; j++) {
                int src = t - (CK - 1) + j;
                if (src >= 0) s += (double)y->conv[ch * CK + j] * mixed[src][ch];
            }
            conv[t][ch] = silu(s);
        }
    /* torch_recurrent_gated_delta_rule per v-head h (q/k head h / R), then the gated norm per v-head */
    for (int h = 0; h < HV; h++) {
        const int kh = h / R;
        double S[DK][DV] = {{0}};
        for (int t = 0; t < n; t++) {
            double q[DK], k[DK], v[DV], o[DV];
            for (int i = 0; i < DK; i++) {
                q[i] = conv[t][kh * DK + i];
                k[i] = conv[t][KD + kh * DK + i];
            }
            for (int j = 0; j < DV; j++) v[j] = conv[t][2 * KD + h * DV + j];
            l2norm(q, DK);
            l2norm(k, DK);
            for (int i = 0; i < DK; i++) q[i] /= sqrt((double)DK);
            const double sp = al[t][h] + y->dt_bias[h];
            const double g = -exp((double)y->A_log[h]) * (sp > 20 ? sp : log1p(exp(sp)));
            const double beta = sigm(b[t][h]);
            for (int i = 0; i < DK; i++)
                for (int j = 0; j < DV; j++) S[i][j] *= exp(g);
            for (int j = 0; j < DV; j++) {
                double mem = 0;
                for (int i = 0; i < DK; i++) mem += S[i][j] * k[i];
                const double delta = (v[j] - mem) * beta;
                for (int i = 0; i < DK; i++) S[i][j] += k[i] * delta;
            }
            double ss = 0;
            for (int j = 0; j < DV; j++) {
                o[j] = 0;
                for (int i = 0; i < DK; i++) o[j] += S[i][j] * q[i];
                ss += o[j] * o[j];
            }
            /* Qwen3NextRMSNormGated: w * (o * rsqrt(mean(o^2) + eps)) * silu(z) */
            const double r = 1.0 / sqrt(ss / DV + EPS);
            for (int j = 0; j < DV; j++) core[t][h * DV + j] = y->gnorm[j] * o[j] * r * silu(z[t][h * DV + j]);
        }
    }
    for (int t = 0; t < n; t++) lin(y->out, core[t], D, VD, out[t]);
}

/* Qwen3NextAttention over tokens 0 .. n: q_proj's per-head [query | gate], q/k norms, partial RoPE, causal
 * softmax attention, output * sigmoid(gate), o_proj */
static void ref_attn(const layer_w *y, double (*a)[D], int n, double (*out)[D]) {
    static double q[MAXPOS][NH * HD], gate[MAXPOS][NH * HD], k[MAXPOS][NKV * HD], v[MAXPOS][NKV * HD];
    for (int t = 0; t < n; t++) {
        double qg[2 * NH * HD];
        lin(y->q, a[t], 2 * NH * HD, D, qg);
        for (int h = 0; h < NH; h++) /* view(..., NH, 2 HD).chunk(2): [query | gate] per head */
            for (int i = 0; i < HD; i++) {
                q[t][h * HD + i] = qg[h * 2 * HD + i];
                gate[t][h * HD + i] = qg[h * 2 * HD + HD + i];
            }
        lin(y->k, a[t], NKV * HD, D, k[t]);
        lin(y->v, a[t], NKV * HD, D, v[t]);
        for (int h = 0; h < NH; h++) {
            double tmp[HD];
            rms1p(q[t] + h * HD, y->q_norm, HD, tmp);
            memcpy(q[t] + h * HD, tmp, sizeof tmp);
            rope(q[t] + h * HD, t);
        }
        for (int h = 0; h < NKV; h++) {
            double tmp[HD];
            rms1p(k[t] + h * HD, y->k_norm, HD, tmp);
            memcpy(k[t] + h * HD, tmp, sizeof tmp);
            rope(k[t] + h * HD, t);
        }
    }
    for (int t = 0; t < n; t++) {
        double att[NH * HD];
        for (int h = 0; h < NH; h++) {
            const int kv = h / (NH / NKV);
            double s[MAXPOS], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double dot = 0;
                for (int i = 0; i < HD; i++) dot += q[t][h * HD + i] * k[j][kv * HD + i];
                s[j] = dot / sqrt((double)HD);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= t; j++) sum += s[j] = exp(s[j] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int j = 0; j <= t; j++) o += s[j] * v[j][kv * HD + i];
                att[h * HD + i] = o / sum * sigm(gate[t][h * HD + i]);
            }
        }
        lin(y->o, att, D, NH * HD, out[t]);
    }
}

/* Qwen3NextSparseMoeBlock: softmax router, top k renormalised, experts, + sigmoid(g . a) shared(a) */
static void ref_moe(const layer_w *y, const double *a, double *out) {
    double r[E], mx = -INFINITY, sum = 0;
    lin(y->router, a, E, D, r);
    for (int e = 0; e < E; e++) mx = r[e] > mx ? r[e] : mx;
    for (int e = 0; e < E; e++) sum += r[e] = exp(r[e] - mx);
    for (int e = 0; e < E; e++) r[e] /= sum;
    int ids[TOPK];
    double top[TOPK], tsum = 0;
    bool taken[E] = {false};
    for (int j = 0; j < TOPK; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || r[e] > r[best])) best = e;
        taken[best] = true;
        ids[j] = best;
        tsum += top[j] = r[best];
    }
    for (int d = 0; d < D; d++) out[d] = 0;
    for (int j = 0; j < TOPK; j++) {
        const int e = ids[j];
        double g[IM], u[IM], m[IM], o[D];
        lin(y->gate[e], a, IM, D, g);
        lin(y->up[e], a, IM, D, u);
        for (int i = 0; i < IM; i++) m[i] = silu(g[i]) * u[i];
        lin(y->down[e], m, D, IM, o);
        for (int d = 0; d < D; d++) out[d] += top[j] / tsum * o[d];
    }
    double g[IS], u[IS], m[IS], o[D], sg;
    lin(y->sh_gate, a, IS, D, g);
    lin(y->sh_up, a, IS, D, u);
    for (int i = 0; i < IS; i++) m[i] = silu(g[i]) * u[i];
    lin(y->sh_down, m, D, IS, o);
    lin(y->sh_g, a, 1, D, &sg);
    for (int d = 0; d < D; d++) out[d] += sigm(sg) * o[d];
}

/* logprobs (V) of the token after seq[0 .. n) */
static void ref_forward(const weights *w, const int *seq, int n, double *lp) {
    static double h[MAXPOS][D], a[MAXPOS][D], o[MAXPOS][D];
    for (int t = 0; t < n; t++)
        for (int d = 0; d < D; d++) h[t][d] = w->embed[seq[t] * D + d];
    for (int l = 0; l < L; l++) {
        const layer_w *y = &w->l[l];
        for (int t = 0; t < n; t++) rms1p(h[t], y->in_norm, D, a[t]);
        if (linear_layer[l]) ref_gdn(y, a, n, o);
        else ref_attn(y, a, n, o);
        for (int t = 0; t < n; t++) {
            double m[D];
            for (int d = 0; d < D; d++) h[t][d] += o[t][d];
            rms1p(h[t], y->post_norm, D, a[t]);
            ref_moe(y, a[t], m);
            for (int d = 0; d < D; d++) h[t][d] += m[d];
        }
    }
    double x[D], lg[V], mx = -INFINITY, sum = 0;
    rms1p(h[n - 1], w->fnorm, D, x);
    lin(w->head, x, V, D, lg);
    for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < V; i++) sum += exp(lg[i] - mx);
    for (int i = 0; i < V; i++) lp[i] = lg[i] - mx - log(sum);
}

/* ---- the engine against the reference ---- */

typedef struct layout {
    const char *name;
    int block_size, chunk, max_num_seqs, num_kv_blocks, max_model_len;
    int nseq;            /* prompts 0 .. nseq - 1, generated together */
    bool want_preemption;
    int num_ckpt;        /* > 0: a cache budget that leaves room for this many checkpoints (num_kv_blocks
                            explicit); 0: the default budget */
} layout;

/* Checks the engine's greedy tokens and logprobs of each prompt against the reference, token by token
 * on the engine's path, up to the first near-tie; returns the tokens checked (the near-tie's included). */
static int check_against_ref(const weights *w, const char *what, const int32_t *prompt, int plen,
                             const vllm_completion *c, int s) {
    CHECK_MSG((int)c->num_tokens == NEW, "%s seq %d: %zu tokens", what, s, c->num_tokens);
    int seq[MAXPOS];
    for (int i = 0; i < plen; i++) seq[i] = prompt[i];
    for (int j = 0; j < (int)c->num_tokens && j < NEW; j++) {
        double lp[V];
        ref_forward(w, seq, plen + j, lp);
        int best = 0, second = -1;
        for (int i = 1; i < V; i++)
            if (lp[i] > lp[best]) best = i;
        for (int i = 0; i < V; i++)
            if (i != best && (second < 0 || lp[i] > lp[second])) second = i;
        CHECK_MSG(c->token_ids[j] == best, "%s seq %d token %d: got %d want %d", what, s, j, c->token_ids[j], best);
        if (c->token_ids[j] != best) return j;
        CHECK_MSG(fabs(c->logprobs[j] - lp[best]) <= TOL, "%s seq %d token %d: logprob %.6f want %.6f", what, s, j,
                  (double)c->logprobs[j], lp[best]);
        if (lp[best] - lp[second] < NEAR_TIE) return j + 1;
        seq[plen + j] = best;
    }
    return NEW;
}

/* The first n tokens of a and b (prefix caching on and off) agree: ids equal, logprobs within 1e-4. */
static void check_on_off(const char *what, int s, const vllm_completion *a, const vllm_completion *b, int n) {
    for (int j = 0; j < n && j < (int)a->num_tokens && j < (int)b->num_tokens; j++) {
        CHECK_MSG(a->token_ids[j] == b->token_ids[j], "%s seq %d token %d: %d with prefix caching, %d without",
                  what, s, j, a->token_ids[j], b->token_ids[j]);
        if (a->token_ids[j] != b->token_ids[j]) return;
        CHECK_MSG(fabs(a->logprobs[j] - b->logprobs[j]) <= ON_OFF_TOL,
                  "%s seq %d token %d: logprob %.7f with prefix caching, %.7f without", what, s, j,
                  (double)a->logprobs[j], (double)b->logprobs[j]);
    }
}

static vllm_engine *make_engine(const char *dir, const layout *lay, bool caching) {
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = lay->block_size;
    o.max_num_batched_tokens = lay->chunk;
    o.max_num_seqs = lay->max_num_seqs;
    o.num_kv_blocks = lay->num_kv_blocks;
    o.max_model_len = lay->max_model_len;
    o.enable_prefix_caching = caching;
    o.num_threads = 2;
    if (lay->num_ckpt > 0) /* the state pools, the explicit KV blocks, then 4 x the checkpoints wanted (+ slack) */
        o.kv_cache_memory = (size_t)(lay->max_num_seqs + 1) * CKPT_BYTES +
                            (size_t)lay->num_kv_blocks * lay->block_size * 2 * NKV * HD * 4 +
                            (size_t)(4 * lay->num_ckpt) * CKPT_BYTES + 64;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s: %s", lay->name, vllm_last_error());
    return e;
}

/* Greedy generation of the prompts (n samples each) on e. */
static vllm_completion *generate(vllm_engine *e, const char *what, int32_t prompts[NSEQ][MAXPOS], const int *plens,
                                 int nseq, int n) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = NEW;
    sp.n = n;
    if (n > 1) { /* greedy takes n = 1: top_k 1 samples the argmax (logprobs stay the raw ones) */
        sp.temperature = 1.0f;
        sp.top_k = 1;
    }
    vllm_prompt p[NSEQ];
    for (int s = 0; s < nseq; s++) p[s] = (vllm_prompt){.token_ids = prompts[s], .num_token_ids = (size_t)plens[s]};
    vllm_completion *c = NULL;
    vllm_status st = vllm_generate(e, p, (size_t)nseq, &sp, false, &c, NULL);
    CHECK_MSG(st == VLLM_OK, "%s: generate: %s", what, vllm_last_error());
    return st == VLLM_OK ? c : NULL;
}

static void run_layout(const weights *w, const char *dir, const layout *lay, int32_t prompts[NSEQ][MAXPOS],
                       const int *plens) {
    char what[160];
    /* prefix caching off: the baseline */
    vllm_engine *e = make_engine(dir, lay, false);
    if (!e) return;
    vllm_completion *off = generate(e, lay->name, prompts, plens, lay->nseq, 1);
    int checked[NSEQ] = {0};
    for (int s = 0; off && s < lay->nseq; s++) {
        snprintf(what, sizeof what, "%s, prefix caching off", lay->name);
        checked[s] = check_against_ref(w, what, prompts[s], plens[s], &off[s], s);
    }
    vllm_engine_stats stats;
    vllm_engine_get_stats(e, &stats);
    CHECK_MSG(stats.prefix_cache_queries == 0, "%s: prefix caching was asked off", lay->name);
    if (lay->want_preemption)
        CHECK_MSG(stats.num_preemptions > 0, "%s: no preemption happened (the layout must force some)", lay->name);
    vllm_engine_free(e);

    /* prefix caching on: the prompts, the same prompts again, then prompt 0 with n = 3 */
    e = make_engine(dir, lay, true);
    if (!e) {
        if (off) vllm_completions_free(off, (size_t)lay->nseq);
        return;
    }
    const int interval = e->sched.cfg.ckpt_interval;
    CHECK_MSG(e->opt.enable_prefix_caching && interval == (lay->block_size >= 4 ? lay->block_size : 4) &&
                  e->sched.sc.num_slots == (lay->num_ckpt > 0 ? lay->num_ckpt : 4 * lay->max_num_seqs),
              "%s: prefix caching %d, checkpoints every %d tokens, %d checkpoints", lay->name,
              e->opt.enable_prefix_caching, interval, e->sched.sc.num_slots);
    for (int round = 0; round < 3; round++) {
        const int nseq = round < 2 ? lay->nseq : 1, n = round < 2 ? 1 : 3;
        snprintf(what, sizeof what, "%s, prefix caching on, round %d", lay->name, round + 1);
        vllm_completion *c = generate(e, what, prompts, plens, nseq, n);
        for (int s = 0; c && s < nseq; s++)
            for (int k = 0; k < n; k++) {
                const vllm_completion *ck = k == 0 ? &c[s] : &c[s].siblings[k - 1];
                check_against_ref(w, what, prompts[s], plens[s], ck, s);
                if (off) check_on_off(what, s, ck, &off[s], checked[s]);
            }
        if (c) vllm_completions_free(c, (size_t)nseq);
        if (round == 0) { /* the prompts leave checkpoints at their boundaries */
            const sc_stats cs = sched_ckpt_stats(&e->sched);
            CHECK_MSG(cs.saves > 0, "%s: no state checkpoint saved", lay->name);
        }
    }
    vllm_engine_get_stats(e, &stats);
    const sc_stats cs = sched_ckpt_stats(&e->sched);
    if (lay->num_ckpt > 0) {
        /* two checkpoints for every boundary of three prompts: the least recently used go */
        CHECK_MSG(cs.evictions > 0, "%s: no checkpoint evicted", lay->name);
    } else {
        /* rounds 2 and 3 resume prompt 0 (20 tokens) from its checkpoint at 16 */
        CHECK_MSG(stats.prefix_cache_hits > 0 && cs.restores > 0,
                  "%s: no prefix cache hit in the later rounds (%llu queries, %llu hits, %llu restores)", lay->name,
                  (unsigned long long)stats.prefix_cache_queries, (unsigned long long)stats.prefix_cache_hits,
                  (unsigned long long)cs.restores);
        /* every hit is a checkpoint restored: hits are multiples of the interval */
        CHECK(stats.prefix_cache_hits % (uint64_t)interval == 0);
    }
    vllm_engine_free(e);
    if (off) vllm_completions_free(off, (size_t)lay->nseq);
}

/* A cache budget without room for one checkpoint (a quarter of what the state pools and the explicit KV
 * blocks leave is less than one): prefix caching stays off, no hit is looked up, the outputs still match. */
static void test_no_room(const weights *w, const char *dir, int32_t prompts[NSEQ][MAXPOS], const int *plens) {
    const layout lay = {"no room for a checkpoint", 4, 8192, 8, 64, MAXPOS, 3, false, 0};
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = lay.block_size;
    o.max_num_seqs = lay.max_num_seqs;
    o.num_kv_blocks = lay.num_kv_blocks;
    o.max_model_len = lay.max_model_len;
    o.num_threads = 2;
    o.kv_cache_memory = (size_t)(lay.max_num_seqs + 1) * CKPT_BYTES +
                        (size_t)lay.num_kv_blocks * lay.block_size * 2 * NKV * HD * 4 + 3 * CKPT_BYTES;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s: %s", lay.name, vllm_last_error());
    if (!e) return;
    CHECK(!e->opt.enable_prefix_caching && !e->sched.kv.pool.caching && e->cache->num_ckpt_slots == 0);
    for (int round = 0; round < 2; round++) {
        vllm_completion *c = generate(e, lay.name, prompts, plens, lay.nseq, 1);
        for (int s = 0; c && s < lay.nseq; s++) check_against_ref(w, lay.name, prompts[s], plens[s], &c[s], s);
        if (c) vllm_completions_free(c, (size_t)lay.nseq);
    }
    vllm_engine_stats stats;
    vllm_engine_get_stats(e, &stats);
    CHECK(stats.prefix_cache_queries == 0 && stats.prefix_cache_hits == 0);
    vllm_engine_free(e);
}

/* model_forward with the null slot 0: the linear-attention ops see it as padding (-1), so no pool is
 * written there; a real slot's state changes. */
static void test_null_slot(const char *dir) {
    backend *be = NULL;
    model *m = NULL;
    model_cache *cache = NULL;
    const backend_options bo = {.num_threads = 2};
    const model_load_options mo = {.max_model_len = MAXPOS};
    CHECK_OK(backend_create("cpu", &bo, &be));
    CHECK_OK(model_load(dir, be, &mo, &m));
    CHECK_OK(model_cache_create(m, 4, 16, 3, 2, &cache));
    if (!cache) goto out;
    CHECK(cache->num_state_slots == 3 && !cache->conv_state[1].data && cache->conv_state[0].data &&
          cache->ssm_state[2].data && cache->state_bytes == model_state_bytes(m, 3));
    CHECK(cache->num_ckpt_slots == 2 && cache->ckpt_conv[0].data && !cache->ckpt_ssm[1].data &&
          cache->ckpt_bytes == model_state_bytes(m, 2) && model_layer_state_bytes(m) == LAYER_STATE_BYTES);
    for (int slot = 0; slot < 2; slot++) {
        const int32_t ids[4] = {5, 9, 17, 33}, pos[4] = {0, 1, 2, 3}, qsl[2] = {0, 4}, seq_lens[1] = {4},
                      bt[1] = {0}, lidx[1] = {3}, slots[1] = {slot};
        const int64_t sm[4] = {0, 1, 2, 3};
        const fwd_batch b = {.num_tokens = 4, .num_seqs = 1, .token_ids = ids, .positions = pos,
                             .query_start_loc = qsl, .seq_lens = seq_lens, .block_tables = bt,
                             .max_blocks_per_seq = 1, .slot_mapping = sm, .state_slots = slots, .num_logits = 1,
                             .logits_indices = lidx};
        const tensor *lg = NULL;
        CHECK_OK(model_forward(m, cache, &b, &lg));
        for (int l = 0; l < L; l++) {
            if (!linear_layer[l]) continue;
            const tensor *pools[2] = {&cache->conv_state[l], &cache->ssm_state[l]};
            for (int p = 0; p < 2; p++) {
                const float *d = pools[p]->data;
                const int64_t per_slot = tensor_numel(pools[p]) / 3;
                int nz0 = 0, nz1 = 0;
                for (int64_t i = 0; i < per_slot; i++) {
                    nz0 += d[i] != 0.0f;
                    nz1 += d[per_slot + i] != 0.0f;
                }
                CHECK_MSG(nz0 == 0, "layer %d pool %d: the null slot was written (%d values)", l, p, nz0);
                CHECK_MSG(slot == 0 || nz1 > 0, "layer %d pool %d: slot 1 holds no state", l, p);
            }
        }
    }
    /* slot 1's states to checkpoint 1, slot 1 zeroed, then the checkpoint into slot 2: equal rows */
    CHECK_OK(model_state_save(m, cache, 1, 1));
    for (int l = 0; l < L; l++)
        if (linear_layer[l]) {
            tensor r1 = tensor_rows(&cache->conv_state[l], 1, 1), s1 = tensor_rows(&cache->ssm_state[l], 1, 1);
            CHECK_OK(be->ops->zero(be, &r1));
            CHECK_OK(be->ops->zero(be, &s1));
        }
    CHECK_OK(model_state_restore(m, cache, 1, 2));
    CHECK_OK(be->ops->synchronize(be));
    for (int l = 0; l < L; l++) {
        if (!linear_layer[l]) continue;
        const tensor *pools[2] = {&cache->conv_state[l], &cache->ssm_state[l]},
                     *ckpts[2] = {&cache->ckpt_conv[l], &cache->ckpt_ssm[l]};
        for (int p = 0; p < 2; p++) {
            const int64_t n = tensor_numel(pools[p]) / 3;
            const float *slot2 = (const float *)pools[p]->data + 2 * n, *ck = (const float *)ckpts[p]->data + n;
            int nz = 0;
            for (int64_t i = 0; i < n; i++) nz += ck[i] != 0.0f;
            CHECK_MSG(nz > 0 && !memcmp(slot2, ck, (size_t)n * sizeof *ck),
                      "layer %d pool %d: the checkpoint (%d non-zero values) did not round-trip into slot 2", l, p, nz);
        }
    }
    /* slots outside the pools are refused (slot 0, the null slot, is never saved nor restored) */
    CHECK(model_state_save(m, cache, 0, 0) != VLLM_OK);
    CHECK(model_state_restore(m, cache, 2, 1) != VLLM_OK);
    vt_error_clear();
out:
    model_cache_free(m, cache);
    model_free(m);
    backend_free(be);
}

static void test_model(void) {
    weights *w = calloc(1, sizeof *w);
    make_weights(w);
    char dir[] = "/tmp/vllmc_qwen3next_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_MSG(write_ckpt(w, dir), "could not write %s", dir);

    /* three prompts; the second shares the first's first 12 tokens (a prefix-cache hit with small blocks) */
    static int32_t prompts[NSEQ][MAXPOS];
    const int plens[NSEQ] = {20, 14, 9};
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < plens[s]; i++) prompts[s][i] = (int32_t)rnd(V - 2);
    memcpy(prompts[1], prompts[0], 12 * sizeof **prompts);

    const layout layouts[] = {
        {"one batch", 16, 8192, 8, 0, MAXPOS, 1, false, 0},
        {"chunked prefill (7-token chunks)", 4, 7, 8, 0, MAXPOS, 1, false, 0},
        {"three sequences", 16, 8192, 8, 0, MAXPOS, 3, false, 0},
        {"three sequences, chunked", 4, 11, 8, 0, MAXPOS, 3, false, 0},
        /* 28 + 22 + 17 tokens need 7 + 6 + 5 blocks of 4; 10 blocks force preemptions */
        {"preemption", 4, 64, 3, 10, 32, 3, true, 0},
        {"two checkpoints (LRU evictions)", 4, 8192, 8, 64, MAXPOS, 3, false, 2},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) run_layout(w, dir, &layouts[i], prompts, plens);
    test_no_room(w, dir, prompts, plens);
    test_null_slot(dir);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(w);
}

int main(void) {
    test_model();
    TEST_END();
}
