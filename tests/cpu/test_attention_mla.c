/* test_attention_mla.c: the CPU's absorbed MLA (head_linear + attention_mla) against transformers' decompressed form.
 *
 * Random W_UK (H, N, L), W_UV (H, V, L), latents [c ; k_rope] and queries; three sequences over a paged cache
 * with scrambled block tables: a whole prompt, a prompt chunk starting mid-sequence (its prefix already in the
 * cache), a decode step. Reference per head, in double: k_j = [W_UK_h c_j ; k_rope_j], v_j = W_UV_h c_j,
 * softmax((q_nope ; q_rope) . k_j * scale) over keys 0 .. pos, sum p_j v_j (DeepseekV2Attention's eager path).
 * The op's cache write (concat_and_cache_mla) and its errors are checked too, and mla_prep (the latent's RMSNorm,
 * the rope of the query heads and the shared key, the write) against a double reference. 1, 4 forced-parallel and
 * 4 threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_test_util.h"

enum { H = 3, N = 10, R = 6, V = 12, L = 20, W = L + R, BS = 4, NB = 24, S = 3, MAXB = 6 };

static const int CTX[S] = {9, 14, 5}, QLEN[S] = {9, 3, 1}; /* prompt, chunk at 11 .. 13, decode at 4 */

/* mla_prep (the latent's RMSNorm, the rope of the query heads and the shared key, the cache write) against a
 * double reference, both pair layouts; a padding slot writes nothing; a slot past the cache is refused. */
static void test_mla_prep(backend *be, int bi) {
    enum { T = 5, MAXP = 40 };
    static float kv[T][W], q[T][H * R], w[L], cs[MAXP][R], cache[NB * BS * W];
    int32_t pos[T] = {0, 3, 17, 39, 8};
    int64_t slots[T] = {2, 9, -1, 40, 77};
    for (int neox = 0; neox < 2; neox++) {
        ct_fill(&kv[0][0], T * W, 1.0f);
        ct_fill(&q[0][0], T * H * R, 1.0f);
        ct_fill(w, L, 1.0f);
        for (int p = 0; p < MAXP; p++)
            for (int i = 0; i < R / 2; i++) {
                cs[p][i] = cosf(p * powf(100.0f, -2.0f * i / R));
                cs[p][R / 2 + i] = sinf(p * powf(100.0f, -2.0f * i / R));
            }
        for (int i = 0; i < NB * BS * W; i++) cache[i] = NAN;
        double rkv[T][W], rq[T][H * R];
        for (int t = 0; t < T; t++) {
            double ss = 0;
            for (int l = 0; l < L; l++) ss += (double)kv[t][l] * kv[t][l];
            const double inv = 1.0 / sqrt(ss / L + 1e-6);
            for (int l = 0; l < L; l++) rkv[t][l] = kv[t][l] * inv * w[l];
            for (int hh = 0; hh <= H; hh++) { /* H query heads, then the key */
                const float *x = hh < H ? &q[t][hh * R] : &kv[t][L];
                double *y = hh < H ? &rq[t][hh * R] : &rkv[t][L];
                for (int i = 0; i < R / 2; i++) {
                    const int i1 = neox ? i : 2 * i, i2 = neox ? i + R / 2 : 2 * i + 1;
                    const double c = cs[pos[t]][i], sn = cs[pos[t]][R / 2 + i];
                    y[i1] = x[i1] * c - x[i2] * sn;
                    y[i2] = x[i2] * c + x[i1] * sn;
                }
            }
        }
        int64_t sc[4] = {NB, BS, 1, W};
        tensor tc = tensor_make(DTYPE_F32, cache, 4, sc), tkv = tensor_2d(DTYPE_F32, kv, T, W);
        tensor tq = tensor_2d(DTYPE_F32, q, T, H * R), tw = tensor_1d(DTYPE_F32, w, L);
        tensor tp = tensor_1d(DTYPE_I32, pos, T), tcs = tensor_2d(DTYPE_F32, cs, MAXP, R);
        attn_meta m = {.num_tokens = T, .block_size = BS, .slot_mapping = tensor_1d(DTYPE_I64, slots, T)};
        be->ops->mla_prep(be, &tq, &tkv, &tw, 1e-6f, &tp, &tcs, R, neox, &tc, &m);
        CHECK_OK(be->ops->synchronize(be));
        double maxerr = 0;
        int64_t written = 0;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < W; i++) maxerr = fmax(maxerr, fabs(kv[t][i] - rkv[t][i]));
            for (int i = 0; i < H * R; i++) maxerr = fmax(maxerr, fabs(q[t][i] - rq[t][i]));
            if (slots[t] >= 0) CHECK(!memcmp(cache + slots[t] * W, kv[t], sizeof kv[t]));
        }
        for (int i = 0; i < NB * BS * W; i++) written += !isnan(cache[i]);
        CHECK_MSG(maxerr < 1e-5, "backend %d: mla_prep (neox %d) max error %g", bi, neox, maxerr);
        CHECK_MSG(written == (T - 1) * W, "backend %d: mla_prep wrote %lld cache values, not %d", bi,
                  (long long)written, (T - 1) * W);
        /* a slot past the cache is refused */
        int64_t bad[T] = {2, 9, -1, 40, NB * BS};
        m.slot_mapping = tensor_1d(DTYPE_I64, bad, T);
        be->ops->mla_prep(be, &tq, &tkv, &tw, 1e-6f, &tp, &tcs, R, neox, &tc, &m);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
        /* an odd rope_dim is refused */
        m.slot_mapping = tensor_1d(DTYPE_I64, slots, T);
        be->ops->mla_prep(be, &tq, &tkv, &tw, 1e-6f, &tp, &tcs, R - 1, neox, &tc, &m);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
    }
    printf("backend %d: mla_prep (norm, rope both layouts, cache write) ok\n", bi);
}

int main(void) {
    backend *bes[CT_NBE];
    ct_backends(bes);
    ct_seed(14);
    static float wuk[H][N][L], wuv[H][V][L], wukt[H][L][N];
    static float lat[S][16][W];            /* every position's [c ; k_rope] */
    ct_fill(&wuk[0][0][0], H * N * L, 0.5f);
    ct_fill(&wuv[0][0][0], H * V * L, 0.5f);
    ct_fill(&lat[0][0][0], S * 16 * W, 1.0f);
    for (int h = 0; h < H; h++)
        for (int n = 0; n < N; n++)
            for (int l = 0; l < L; l++) wukt[h][l][n] = wuk[h][n][l];
    /* block tables: distinct scrambled block ids */
    int32_t bt[S][MAXB];
    for (int s = 0, next = 0; s < S; s++)
        for (int b = 0; b < MAXB; b++) bt[s][b] = (int32_t)((next++ * 7 + 3) % NB);
    int T = 0;
    int32_t qsl[S + 1] = {0}, seq_lens[S];
    for (int s = 0; s < S; s++) {
        T += QLEN[s];
        qsl[s + 1] = T;
        seq_lens[s] = CTX[s];
    }
    int64_t slots[16];
    static float kv[16][W], qn[16][H * N], qr[16][H * R];
    ct_fill(&qn[0][0], 16 * H * N, 1.0f);
    ct_fill(&qr[0][0], 16 * H * R, 1.0f);
    for (int s = 0, t = 0; s < S; s++)
        for (int j = 0; j < QLEN[s]; j++, t++) {
            const int pos = CTX[s] - QLEN[s] + j;
            slots[t] = (int64_t)bt[s][pos / BS] * BS + pos % BS;
            memcpy(kv[t], lat[s][pos], sizeof kv[t]);
        }
    const float scale = 1.0f / sqrtf((float)(N + R));

    for (int bi = 0; bi < CT_NBE; bi++) {
        backend *be = bes[bi];
        static float cache[NB * BS * W];
        for (int i = 0; i < NB * BS * W; i++) cache[i] = NAN; /* unwritten slots must never be read */
        for (int s = 0; s < S; s++) /* the prefixes already cached */
            for (int pos = 0; pos < CTX[s] - QLEN[s]; pos++)
                memcpy(cache + ((int64_t)bt[s][pos / BS] * BS + pos % BS) * W, lat[s][pos], sizeof lat[s][pos]);
        static float qlat[16 * H * L], olat[16 * H * L], out[16 * H * V];
        int64_t sc[4] = {NB, BS, 1, W};
        tensor tc = tensor_make(DTYPE_F32, cache, 4, sc);
        int64_t s_uk[3] = {H, L, N}, s_uv[3] = {H, V, L};
        tensor tuk = tensor_make(DTYPE_F32, wukt, 3, s_uk), tuv = tensor_make(DTYPE_F32, wuv, 3, s_uv);
        tensor tqn = tensor_2d(DTYPE_F32, qn, T, H * N), tqr = tensor_2d(DTYPE_F32, qr, T, H * R);
        tensor tkv = tensor_2d(DTYPE_F32, kv, T, W), tql = tensor_2d(DTYPE_F32, qlat, T, H * L);
        tensor tol = tensor_2d(DTYPE_F32, olat, T, H * L), tout = tensor_2d(DTYPE_F32, out, T, H * V);
        attn_meta m = {.num_seqs = S, .num_tokens = T, .max_query_len = 9, .max_seq_len = 14, .block_size = BS,
                       .max_blocks_per_seq = MAXB, .query_start_loc = tensor_1d(DTYPE_I32, qsl, S + 1),
                       .seq_lens = tensor_1d(DTYPE_I32, seq_lens, S),
                       .block_tables = tensor_2d(DTYPE_I32, bt, S, MAXB),
                       .slot_mapping = tensor_1d(DTYPE_I64, slots, T)};
        mla_params p = {.num_heads = H, .kv_lora_rank = L, .rope_dim = R, .scale = scale};
        be->ops->head_linear(be, &tqn, &tuk, &tql);
        be->ops->attention_mla(be, &tql, &tqr, &tkv, &tc, &m, &p, &tol);
        be->ops->head_linear(be, &tol, &tuv, &tout);
        CHECK_OK(be->ops->synchronize(be));
        /* the new tokens' latents are in their slots */
        for (int t = 0; t < T; t++) CHECK(!memcmp(cache + slots[t] * W, kv[t], sizeof kv[t]));
        double maxerr = 0;
        for (int s = 0, t = 0; s < S; s++)
            for (int j = 0; j < QLEN[s]; j++, t++) {
                const int pos = CTX[s] - QLEN[s] + j;
                for (int h = 0; h < H; h++) {
                    double sco[16], mx = -INFINITY, den = 0, ref[V] = {0};
                    for (int k = 0; k <= pos; k++) {
                        double d = 0;
                        for (int n = 0; n < N; n++) { /* q_nope . (W_UK_h c_k) */
                            double kn = 0;
                            for (int l = 0; l < L; l++) kn += (double)wuk[h][n][l] * lat[s][k][l];
                            d += qn[t][h * N + n] * kn;
                        }
                        for (int r = 0; r < R; r++) d += (double)qr[t][h * R + r] * lat[s][k][L + r];
                        sco[k] = d * scale;
                        mx = sco[k] > mx ? sco[k] : mx;
                    }
                    for (int k = 0; k <= pos; k++) den += exp(sco[k] - mx);
                    for (int k = 0; k <= pos; k++) {
                        const double pk = exp(sco[k] - mx) / den;
                        for (int v = 0; v < V; v++) { /* v_k = W_UV_h c_k */
                            double vv = 0;
                            for (int l = 0; l < L; l++) vv += (double)wuv[h][v][l] * lat[s][k][l];
                            ref[v] += pk * vv;
                        }
                    }
                    for (int v = 0; v < V; v++) {
                        const double e = fabs(out[t * H * V + h * V + v] - ref[v]) / (1.0 + fabs(ref[v]));
                        maxerr = e > maxerr ? e : maxerr;
                    }
                }
            }
        CHECK_MSG(maxerr < 1e-4, "backend %d: max relative error %g", bi, maxerr);
        printf("backend %d: absorbed vs decompressed max rel err %.3g\n", bi, maxerr);

        /* a block id outside the cache is refused, not read */
        int32_t bad[S][MAXB];
        memcpy(bad, bt, sizeof bad);
        bad[1][2] = NB + 5;
        attn_meta mb = m;
        mb.block_tables = tensor_2d(DTYPE_I32, bad, S, MAXB);
        be->ops->attention_mla(be, &tql, &tqr, NULL, &tc, &mb, &p, &tol);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
        /* a cache of the wrong width is refused */
        int64_t sc2[4] = {NB, BS, 1, W - 2};
        tensor tc2 = tensor_make(DTYPE_F32, cache, 4, sc2);
        be->ops->attention_mla(be, &tql, &tqr, NULL, &tc2, &m, &p, &tol);
        CHECK(be->ops->synchronize(be) != VLLM_OK);
        test_mla_prep(be, bi);
        /* supports(BE_OP_MLA): this shape yes, L + R past the stack rows no (refused at load, named) */
        CHECK_OK(backend_require(be, BE_OP_MLA, &p, "test MLA"));
        mla_params big = p;
        big.kv_lora_rank = 4000;
        CHECK(backend_require(be, BE_OP_MLA, &big, "test MLA") == VLLM_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(vllm_last_error(), "kv_lora_rank 4000") != NULL, "not named: %s", vllm_last_error());
    }
    ct_backends_free(bes);
    TEST_END();
}
