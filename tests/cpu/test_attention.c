/*
 * test_attention.c: the CPU kv_write and paged attention against a
 * contiguous per-sequence reference in double precision.
 *
 * One mixed batch of 3 sequences: a 37-token prefill from empty, a chunked
 * prefill of 5 tokens on top of 20 cached ones, and a 1-token decode on top
 * of 50 cached ones. Cached K/V are written straight into randomly placed
 * blocks, new ones through kv_write from strided views of a fused qkv
 * buffer. Unused blocks and keys outside every query's window hold NaN, so
 * a read of anything the kernel should not see shows up in the output.
 * Block sizes 16, 1 and 7; GQA (8 q / 2 kv heads) and MQA; sliding window
 * off and on; score softcap (Gemma 2) off and on; attention sinks (gpt-oss:
 * a logit per head in the softmax denominator, F32 or BF16, one far above
 * the scores, one far below) off and on; head_dim 16 to 256; 1, 4
 * and 64 threads (bit-identical; with 64 threads every head is its own work
 * item, with 1 a kv group's heads share one). The FP8 KV cache (F8_E4M3
 * caches with a k and a v scale, --kv-cache-dtype fp8): kv_write stores
 * e4m3(x / s) (bytes checked), and attention equals the reference on the
 * decoded values e4m3 * s; scales that saturate some values included.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "tensor/fp8.h"

#define NSEQ 3
static const int Q_LEN[NSEQ] = {37, 5, 1};
static const int CTX[NSEQ] = {37, 25, 51};

typedef struct attn_case {
    int nh, nkv, hd, block_size, window;
    float softcap;
    int sinks;      /* 0: none; 1: F32 sinks; 2: BF16 */
    float kv_scale; /* > 0: F8_E4M3 caches, k scaled by this, v by 1.5 times it; 0: F32 caches */
} attn_case;

static void run_case(backend *be[CT_NBE], const attn_case *ac) {
    const int nh = ac->nh, nkv = ac->nkv, hd = ac->hd, bs = ac->block_size;
    const int64_t kvd = (int64_t)nkv * hd, qd = (int64_t)nh * hd;
    const int64_t W = qd + 2 * kvd + 3;  /* fused qkv rows, with 3 spare columns so views are strided */

    /* token layout and the contiguous K/V of every sequence */
    int32_t qsl[NSEQ + 1] = {0}, seq_lens[NSEQ];
    int max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
    for (int s = 0; s < NSEQ; s++) {
        qsl[s + 1] = qsl[s] + Q_LEN[s];
        seq_lens[s] = CTX[s];
        if (Q_LEN[s] > max_q) max_q = Q_LEN[s];
        if (CTX[s] > max_ctx) max_ctx = CTX[s];
        int nb = (CTX[s] + bs - 1) / bs;
        if (nb > max_blocks) max_blocks = nb;
        total_blocks += nb;
    }
    const int T = qsl[NSEQ];
    float *kref[NSEQ], *vref[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        kref[s] = malloc((size_t)(CTX[s] * kvd) * sizeof(float));
        vref[s] = malloc((size_t)(CTX[s] * kvd) * sizeof(float));
        ct_fill(kref[s], CTX[s] * kvd, 1.0f);
        ct_fill(vref[s], CTX[s] * kvd, 1.0f);
    }
    /* the FP8 cache: what it holds, decoded (the reference reads these) */
    const bool fp8 = ac->kv_scale > 0;
    const float ks = ac->kv_scale, vs = 1.5f * ac->kv_scale;
    float *kuse[NSEQ], *vuse[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        kuse[s] = kref[s], vuse[s] = vref[s];
        if (!fp8) continue;
        kuse[s] = malloc((size_t)(CTX[s] * kvd) * sizeof(float));
        vuse[s] = malloc((size_t)(CTX[s] * kvd) * sizeof(float));
        for (int64_t i = 0; i < CTX[s] * kvd; i++) {
            kuse[s][i] = fp8_e4m3_to_f32(fp8_e4m3_from_f32(kref[s][i] / ks)) * ks;
            vuse[s][i] = fp8_e4m3_to_f32(fp8_e4m3_from_f32(vref[s][i] / vs)) * vs;
        }
    }

    /* random, non-contiguous block tables over a cache with spare blocks */
    const int num_blocks = total_blocks + 5;
    int *perm = malloc((size_t)num_blocks * sizeof(int));
    for (int i = 0; i < num_blocks; i++) perm[i] = i;
    for (int i = num_blocks - 1; i > 0; i--) {
        int j = (int)(ct_u32() % (uint32_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    int32_t *bt = malloc((size_t)(NSEQ * (max_blocks + 2)) * sizeof(int32_t));  /* 2 spare columns */
    for (int i = 0; i < NSEQ * (max_blocks + 2); i++) bt[i] = -7;                /* never read */
    int next = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < (CTX[s] + bs - 1) / bs; b++) bt[s * (max_blocks + 2) + b] = perm[next++];

    /* qkv buffer: q and the new tokens' k, v */
    float *qkv = malloc((size_t)(T * W) * sizeof(float));
    ct_fill(qkv, T * W, 1.5f);
    int64_t *slots = malloc((size_t)T * sizeof(int64_t));
    for (int s = 0; s < NSEQ; s++) {
        for (int j = 0; j < Q_LEN[s]; j++) {
            int t = qsl[s] + j, p = CTX[s] - Q_LEN[s] + j;
            memcpy(qkv + t * W + qd, kref[s] + p * kvd, (size_t)kvd * sizeof(float));
            memcpy(qkv + t * W + qd + kvd, vref[s] + p * kvd, (size_t)kvd * sizeof(float));
            slots[t] = (int64_t)bt[s * (max_blocks + 2) + p / bs] * bs + p % bs;
        }
    }
    tensor qkvt = tensor_2d(DTYPE_F32, qkv, T, W);
    tensor q = tensor_cols(&qkvt, 0, qd), k = tensor_cols(&qkvt, qd, kvd), v = tensor_cols(&qkvt, qd + kvd, kvd);

    attn_meta m = {
        .num_seqs = NSEQ, .num_tokens = T, .max_query_len = max_q, .max_seq_len = max_ctx,
        .block_size = bs, .max_blocks_per_seq = max_blocks + 2,
        .query_start_loc = tensor_1d(DTYPE_I32, qsl, NSEQ + 1),
        .seq_lens = tensor_1d(DTYPE_I32, seq_lens, NSEQ),
        .block_tables = tensor_2d(DTYPE_I32, bt, NSEQ, max_blocks + 2),
        .slot_mapping = tensor_1d(DTYPE_I64, slots, T),
    };
    attn_params ap = {.scale = 1.0f / sqrtf((float)hd), .sliding_window = ac->window, .num_heads = nh,
                      .num_kv_heads = nkv, .head_dim = hd, .softcap = ac->softcap};
    /* sinks: head 0 far above every score (it takes most of the mass), head 1 far below, the rest
     * among the scores */
    float sinkf[64];
    uint16_t sinkb[64];
    tensor sinks_t;
    for (int h = 0; h < nh; h++) {
        sinkf[h] = h == 0 ? 6.0f : h == 1 ? -30.0f : ct_uniform() * 2.0f;
        sinkb[h] = f32_to_bf16(sinkf[h]);
        if (ac->sinks == 2) sinkf[h] = bf16_to_f32(sinkb[h]);
    }
    if (ac->sinks) {
        sinks_t = ac->sinks == 2 ? tensor_1d(DTYPE_BF16, sinkb, nh) : tensor_1d(DTYPE_F32, sinkf, nh);
        ap.sinks = &sinks_t;
    }

    /* reference, per sequence, over contiguous K/V */
    double *ref = malloc((size_t)(T * qd) * sizeof(double));
    double *p = malloc((size_t)max_ctx * sizeof(double));
    for (int s = 0; s < NSEQ; s++) {
        for (int j = 0; j < Q_LEN[s]; j++) {
            int t = qsl[s] + j, pos = CTX[s] - Q_LEN[s] + j;
            int k0 = ac->window > 0 && pos - ac->window + 1 > 0 ? pos - ac->window + 1 : 0;
            for (int h = 0; h < nh; h++) {
                const float *qv = qkv + t * W + h * hd;
                int kvh = h / (nh / nkv);
                double mx = -INFINITY, sum = 0;
                for (int key = k0; key <= pos; key++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)qv[i] * kuse[s][key * kvd + kvh * hd + i];
                    p[key] = d * ap.scale;
                    if (ac->softcap > 0) p[key] = tanh(p[key] / ac->softcap) * ac->softcap;
                    if (p[key] > mx) mx = p[key];
                }
                /* transformers' eager_attention_forward: the sink joins the logits' max and the
                 * softmax's sum; its column is dropped after */
                if (ac->sinks && sinkf[h] > mx) mx = sinkf[h];
                if (ac->sinks) sum += exp((double)sinkf[h] - mx);
                for (int key = k0; key <= pos; key++) sum += p[key] = exp(p[key] - mx);
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int key = k0; key <= pos; key++) o += p[key] * vuse[s][key * kvd + kvh * hd + i];
                    ref[t * qd + h * hd + i] = o / sum;
                }
            }
        }
    }

    int64_t cshape[4] = {num_blocks, bs, nkv, hd};
    const int64_t cache_elems = (int64_t)num_blocks * bs * kvd;
    float *outs[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        const backend_ops *ops = be[b]->ops;
        tensor kc = tensor_make(fp8 ? DTYPE_F8_E4M3 : DTYPE_F32, NULL, 4, cshape), vc = kc;
        kc.qscale = fp8 ? ks : 0.0f, vc.qscale = fp8 ? vs : 0.0f;
        CHECK_OK(ops->alloc(be[b], &kc));
        CHECK_OK(ops->alloc(be[b], &vc));
        float *kcd = kc.data, *vcd = vc.data;
        uint8_t *kcq = kc.data, *vcq = vc.data;
        if (fp8) memset(kcq, 0x7f, (size_t)cache_elems), memset(vcq, 0x7f, (size_t)cache_elems); /* E4M3 NaN */
        else
            for (int64_t i = 0; i < cache_elems; i++) kcd[i] = vcd[i] = NAN;
        /* cached tokens (earlier steps); NaN for keys no query may see */
        for (int s = 0; s < NSEQ; s++) {
            int first_q = CTX[s] - Q_LEN[s];
            int visible = ac->window > 0 && first_q - ac->window + 1 > 0 ? first_q - ac->window + 1 : 0;
            for (int pos = 0; pos < first_q; pos++) {
                int64_t slot = (int64_t)bt[s * (max_blocks + 2) + pos / bs] * bs + pos % bs;
                for (int64_t i = 0; i < kvd; i++) {
                    if (fp8) {
                        kcq[slot * kvd + i] = pos < visible ? 0x7f : fp8_e4m3_from_f32(kref[s][pos * kvd + i] / ks);
                        vcq[slot * kvd + i] = pos < visible ? 0x7f : fp8_e4m3_from_f32(vref[s][pos * kvd + i] / vs);
                        continue;
                    }
                    kcd[slot * kvd + i] = pos < visible ? NAN : kref[s][pos * kvd + i];
                    vcd[slot * kvd + i] = pos < visible ? NAN : vref[s][pos * kvd + i];
                }
            }
        }
        ops->kv_write(be[b], &k, &v, &kc, &vc, &m);
        CHECK_OK(ops->synchronize(be[b]));
        /* the new tokens landed in their slots */
        int ok = 1;
        for (int t = 0; t < T; t++) {
            if (fp8) {
                for (int64_t i = 0; i < kvd; i++)
                    ok &= kcq[slots[t] * kvd + i] == fp8_e4m3_from_f32(qkv[t * W + qd + i] / ks) &&
                          vcq[slots[t] * kvd + i] == fp8_e4m3_from_f32(qkv[t * W + qd + kvd + i] / vs);
                continue;
            }
            ok &= !memcmp(kcd + slots[t] * kvd, qkv + t * W + qd, (size_t)kvd * sizeof(float)) &&
                  !memcmp(vcd + slots[t] * kvd, qkv + t * W + qd + kvd, (size_t)kvd * sizeof(float));
        }
        CHECK_MSG(ok, "kv_write backend %d", b);

        outs[b] = malloc((size_t)(T * qd) * sizeof(float));
        tensor out = tensor_2d(DTYPE_F32, outs[b], T, qd);
        ops->attention(be[b], &q, &kc, &vc, &m, &ap, &out);
        CHECK_OK(ops->synchronize(be[b]));
        int bad = 0;
        for (int64_t i = 0; i < T * qd; i++) {
            if (!(fabs(outs[b][i] - ref[i]) <= 1e-5)) {
                if (bad < 3)
                    fprintf(stderr, "  token %lld col %lld: got %.9g want %.9g\n", (long long)(i / qd),
                            (long long)(i % qd), outs[b][i], ref[i]);
                bad++;
            }
        }
        CHECK_MSG(bad == 0, "attention nh=%d nkv=%d hd=%d bs=%d window=%d softcap=%g sinks=%d kv_scale=%g backend %d: "
                  "%d bad", nh, nkv, hd, bs, ac->window, (double)ac->softcap, ac->sinks, (double)ac->kv_scale, b, bad);
        ops->release(be[b], &kc);
        ops->release(be[b], &vc);
    }
    for (int b = 1; b < CT_NBE; b++)
        CHECK_MSG(!memcmp(outs[0], outs[b], (size_t)(T * qd) * sizeof(float)), "attention backend %d differs", b);

    for (int b = 0; b < CT_NBE; b++) free(outs[b]);
    for (int s = 0; s < NSEQ; s++) {
        if (fp8) free(kuse[s]), free(vuse[s]);
        free(kref[s]);
        free(vref[s]);
    }
    free(perm);
    free(bt);
    free(qkv);
    free(slots);
    free(ref);
    free(p);
}

/* Padding slots (-1) are skipped; bad slots, block ids and metadata are
 * reported by synchronize and leave the output alone. */
static void test_errors(backend *be) {
    const backend_ops *ops = be->ops;
    enum { BS = 4, NB = 3, NKV = 1, HD = 8, NH = 2 };
    int64_t cshape[4] = {NB, BS, NKV, HD};
    tensor kc = tensor_make(DTYPE_F32, NULL, 4, cshape), vc = kc;
    CHECK_OK(ops->alloc(be, &kc));
    CHECK_OK(ops->alloc(be, &vc));
    CHECK_OK(ops->zero(be, &kc));
    CHECK_OK(ops->zero(be, &vc));
    float kv[3 * HD], q[3 * NH * HD], out[3 * NH * HD];
    for (int i = 0; i < 3 * HD; i++) kv[i] = 1.0f + (float)i;
    for (int i = 0; i < 3 * NH * HD; i++) q[i] = 0.1f * (float)i;
    int32_t qsl[2] = {0, 3}, seq_lens[1] = {3}, bt[NB] = {2, 0, 1};
    int64_t slots[3] = {8, -1, 10};
    attn_meta m = {
        .num_seqs = 1, .num_tokens = 3, .max_query_len = 3, .max_seq_len = 3, .block_size = BS,
        .max_blocks_per_seq = NB,
        .query_start_loc = tensor_1d(DTYPE_I32, qsl, 2), .seq_lens = tensor_1d(DTYPE_I32, seq_lens, 1),
        .block_tables = tensor_2d(DTYPE_I32, bt, 1, NB), .slot_mapping = tensor_1d(DTYPE_I64, slots, 3),
    };
    tensor kt = tensor_2d(DTYPE_F32, kv, 3, HD);
    ops->kv_write(be, &kt, &kt, &kc, &vc, &m);
    CHECK_OK(ops->synchronize(be));
    const float *kcd = kc.data;
    int written = 0;
    for (int i = 0; i < NB * BS * HD; i++) written += kcd[i] != 0.0f;
    CHECK(written == 2 * HD);  /* the padding token wrote nothing */
    CHECK(kcd[8 * HD] == kv[0] && kcd[10 * HD] == kv[2 * HD]);

    slots[1] = NB * BS;  /* one past the end */
    ops->kv_write(be, &kt, &kt, &kc, &vc, &m);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK(strstr(vllm_last_error(), "slot 12") != NULL);
    slots[1] = 9;

    attn_params ap = {.scale = 0.35f, .num_heads = NH, .num_kv_heads = NKV, .head_dim = HD};
    tensor qt = tensor_2d(DTYPE_F32, q, 3, NH * HD), ot = tensor_2d(DTYPE_F32, out, 3, NH * HD);
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK_OK(ops->synchronize(be));
    for (int i = 0; i < 3 * NH * HD; i++) out[i] = -3.0f;
    bt[0] = NB;  /* a block id outside the cache */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK(out[0] == -3.0f);
    bt[0] = 2;
    seq_lens[0] = 2;  /* fewer context tokens than queries */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    seq_lens[0] = 3;
    qsl[1] = 2;  /* does not end at num_tokens */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    qsl[1] = 3;
    ap.num_kv_heads = 3;  /* heads not a multiple */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    ap.num_kv_heads = NKV;
    ap.head_dim = 4;  /* cache shape mismatch */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    ap.head_dim = HD;
    ap.softcap = -1.0f;  /* a negative softcap */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK(strstr(vllm_last_error(), "softcap") != NULL);
    ap.softcap = 0.0f;
    seq_lens[0] = NB * BS + 1;  /* longer than the block table */
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK(ops->synchronize(be) == VLLM_ERR_BACKEND);
    seq_lens[0] = 3;
    ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot);
    CHECK_OK(ops->synchronize(be));
    CHECK(out[0] != -3.0f);
    ops->release(be, &kc);
    ops->release(be, &vc);
}

/* sinks of the wrong length or dtype are refused, the output untouched */
static void test_sink_errors(backend *be) {
    enum { BS = 4, NKV = 1, HD = 8, NH = 2 };
    int64_t cshape[4] = {1, BS, NKV, HD};
    tensor kc = tensor_make(DTYPE_F32, NULL, 4, cshape), vc = kc;
    CHECK_OK(be->ops->alloc(be, &kc));
    CHECK_OK(be->ops->alloc(be, &vc));
    CHECK_OK(be->ops->zero(be, &kc));
    CHECK_OK(be->ops->zero(be, &vc));
    int32_t qsl[2] = {0, 1}, sl[1] = {1}, btab[1] = {0};
    int64_t slot[1] = {0};
    attn_meta m = {.num_seqs = 1, .num_tokens = 1, .max_query_len = 1, .max_seq_len = 1, .block_size = BS,
                   .max_blocks_per_seq = 1, .query_start_loc = tensor_1d(DTYPE_I32, qsl, 2),
                   .seq_lens = tensor_1d(DTYPE_I32, sl, 1), .block_tables = tensor_2d(DTYPE_I32, btab, 1, 1),
                   .slot_mapping = tensor_1d(DTYPE_I64, slot, 1)};
    float qv[NH * HD] = {0}, out[NH * HD], sk[NH + 1] = {1.0f, 2.0f, 3.0f};
    int32_t ski[NH] = {0};
    for (int i = 0; i < NH * HD; i++) out[i] = 5.0f;
    tensor q = tensor_2d(DTYPE_F32, qv, 1, NH * HD), o = tensor_2d(DTYPE_F32, out, 1, NH * HD);
    tensor bad_len = tensor_1d(DTYPE_F32, sk, NH + 1), bad_dt = tensor_1d(DTYPE_I32, ski, NH);
    attn_params ap = {.scale = 1.0f, .num_heads = NH, .num_kv_heads = NKV, .head_dim = HD, .sinks = &bad_len};
    be->ops->attention(be, &q, &kc, &vc, &m, &ap, &o);
    CHECK(be->ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK_MSG(strstr(vllm_last_error(), "sinks") != NULL, "%s", vllm_last_error());
    ap.sinks = &bad_dt;
    be->ops->attention(be, &q, &kc, &vc, &m, &ap, &o);
    CHECK(be->ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK(out[0] == 5.0f && out[NH * HD - 1] == 5.0f);
    /* a good one: zero q and v, so out = 0 whatever the sink */
    tensor good = tensor_1d(DTYPE_F32, sk, NH);
    ap.sinks = &good;
    be->ops->attention(be, &q, &kc, &vc, &m, &ap, &o);
    CHECK_OK(be->ops->synchronize(be));
    CHECK(out[0] == 0.0f);
    CHECK(backend_supports(be, BE_OP_ATTENTION, &ap) == BE_NATIVE);
    vt_error_clear();
    be->ops->release(be, &kc);
    be->ops->release(be, &vc);
}

int main(void) {
    ct_seed(3);
    backend *be[CT_NBE];
    ct_backends(be);
    /* the third backend: many threads, so that heads are not grouped per item */
    backend_free(be[2]);
    be[2] = ct_backend(64, 1);
    const int block_sizes[3] = {16, 1, 7};
    const int heads[2][2] = {{8, 2}, {8, 1}};  /* GQA, MQA */
    const int windows[3] = {0, 8, 30};
    for (int b = 0; b < 3; b++)
        for (int h = 0; h < 2; h++)
            for (int w = 0; w < 3; w++) {
                attn_case ac = {heads[h][0], heads[h][1], 16, block_sizes[b], windows[w], 0.0f, 0, 0.0f};
                run_case(be, &ac);
            }
    attn_case odd = {4, 2, 40, 7, 0, 0.0f, 0, 0.0f};  /* head_dim not a multiple of the vector width */
    run_case(be, &odd);
    attn_case mha = {3, 3, 64, 16, 20, 0.0f, 0, 0.0f};
    run_case(be, &mha);
    /* Gemma 2's score softcap: a cap that bends the scores (|q.k| * scale reaches ~2), and 50 (Gemma 2's) */
    attn_case capped = {8, 2, 16, 7, 0, 1.5f, 0, 0.0f};
    run_case(be, &capped);
    attn_case capped_window = {8, 1, 16, 16, 8, 1.5f, 0, 0.0f};
    run_case(be, &capped_window);
    attn_case gemma = {4, 2, 256, 16, 30, 50.0f, 0, 0.0f};
    run_case(be, &gemma);
    /* gpt-oss's attention sinks: F32 and BF16, with and without a window, GQA and MQA */
    for (int w = 0; w < 2; w++)
        for (int h = 0; h < 2; h++) {
            attn_case sk = {heads[h][0], heads[h][1], 16, block_sizes[w], windows[w], 0.0f, 1 + (w ^ h), 0.0f};
            run_case(be, &sk);
        }
    attn_case sk_wide = {4, 2, 64, 16, 8, 0.0f, 1, 0.0f};
    run_case(be, &sk_wide);
    /* the FP8 KV cache: scale 1, scales that spread the values over E4M3's range, a scale that saturates the
     * largest (|x| ~ 1.5 / 0.0025 = 600 > 448), with a window, GQA / MQA, odd head_dim, softcap and sinks */
    const float kvs[3] = {1.0f, 1.0f / 128, 0.0025f};
    for (int i = 0; i < 3; i++) {
        attn_case f8 = {8, 2, 16, block_sizes[i], windows[i], 0.0f, 0, kvs[i]};
        run_case(be, &f8);
    }
    attn_case f8_odd = {4, 2, 40, 7, 0, 1.5f, 1, 1.0f / 64}, f8_mqa = {8, 1, 128, 16, 30, 0.0f, 0, 1.0f / 300};
    run_case(be, &f8_odd);
    run_case(be, &f8_mqa);
    test_errors(be[0]);
    test_sink_errors(be[0]);
    ct_backends_free(be);
    TEST_END();
}
