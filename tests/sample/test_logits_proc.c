/* test_logits_proc.c: every logits processor, the penalties, their order,
 * top logprobs and parameter validation, each against a plain reference
 * written here on fixed logits (V = 50); plus the full sampling pipeline
 * (processors + temperature + min_p + top_k + top_p) against a reference
 * distribution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/logits_proc.h"
#include "sample/sampler.h"
#include "test.h"

#define V 50

static float base[V];

/* fixed logits in [-4, 4], a few exact zeros, positives and negatives */
static void init_base(void) {
    uint32_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 1103515245u + 12345u;
        base[i] = (float)((int)((x >> 16) % 801) - 400) / 100.0f;
    }
    base[7] = 0.0f;
    base[13] = 0.0f;
}

static bool rows_equal(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (!(a[i] == b[i]) && !(isinf(a[i]) && isinf(b[i]) && (a[i] > 0) == (b[i] > 0))) {
            fprintf(stderr, "  row differs at %d: %.9g vs %.9g\n", i, (double)a[i], (double)b[i]);
            return false;
        }
    return true;
}

static bool scratch_clean(const sampler_proc_scratch *s) {
    for (int i = 0; i < s->vocab; i++)
        if (s->count[i] || s->mark[i]) return false;
    return true;
}

/* ---- plain references (straight from the vLLM Python) ---- */

static bool contains(const int32_t *a, size_t n, int32_t v) {
    for (size_t i = 0; i < n; i++)
        if (a[i] == v) return true;
    return false;
}

static int count_of(const int32_t *a, size_t n, int32_t v) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += a[i] == v;
    return c;
}

static void ref_penalties(float *l, const vllm_sampling_params *p, const int32_t *prompt, size_t np,
                          const int32_t *out, size_t no) {
    for (int v = 0; v < V; v++) {
        int cnt = count_of(out, no, v);
        float pen = (contains(prompt, np, v) || cnt > 0) ? p->repetition_penalty : 1.0f;
        float scaling = l[v] > 0 ? 1.0f / pen : pen;
        l[v] *= scaling;
        l[v] -= p->frequency_penalty * (float)cnt;
        l[v] -= p->presence_penalty * (float)(cnt > 0);
    }
}

static void ref_allowed(float *l, const int32_t *allowed, size_t n) {
    for (int v = 0; v < V; v++)
        if (!contains(allowed, n, v)) l[v] = -INFINITY;
}

static void ref_bad_words(float *l, const sampler_token_seqs *w, const int32_t *out, size_t no) {
    for (size_t i = 0; i < w->num; i++) {
        size_t len = w->offsets[i + 1] - w->offsets[i];
        const int32_t *word = w->ids + w->offsets[i];
        if (len > no + 1) continue;
        bool match = true;
        for (size_t j = 0; j + 1 < len; j++)
            if (word[j] != out[no - (len - 1) + j]) match = false;
        if (match) l[word[len - 1]] = -INFINITY;
    }
}

static void ref_bias(float *l, const int32_t *ids, const float *b, size_t n) {
    /* dict semantics: the last value of an id wins */
    for (int v = 0; v < V; v++) {
        bool found = false;
        float val = 0;
        for (size_t i = 0; i < n; i++)
            if (ids[i] == v) {
                found = true;
                val = b[i];
            }
        if (found) l[v] += fminf(100.0f, fmaxf(-100.0f, val));
    }
}

/* ---- reference sampling distribution: temperature, min_p, top_k, top_p
 * exactly as vLLM writes them, with a full sort ---- */
static const float *g_sort_key;
static int cmp_asc(const void *a, const void *b) {
    int ia = *(const int *)a, ib = *(const int *)b;
    float x = g_sort_key[ia], y = g_sort_key[ib];
    if (x < y) return -1;
    if (x > y) return 1;
    return ib - ia; /* ties: higher id first in ascending order, so lower id counts as larger */
}

static void ref_distribution(const float *logits, const vllm_sampling_params *p, double *probs) {
    float l[V];
    float t = p->temperature < 0.01f ? 0.01f : p->temperature;
    for (int v = 0; v < V; v++) l[v] = logits[v] / t;
    /* softmax */
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    for (int v = 0; v < V; v++) z += exp(l[v] - mx);
    /* min_p: probability < min_p * max probability -> -inf */
    if (p->min_p > 0) {
        double pmax = 1.0 / z;
        for (int v = 0; v < V; v++)
            if (exp(l[v] - mx) / z < p->min_p * pmax) l[v] = -INFINITY;
    }
    /* top_k: logits < the k-th largest -> -inf (ties kept) */
    int order[V];
    for (int v = 0; v < V; v++) order[v] = v;
    g_sort_key = l;
    qsort(order, V, sizeof *order, cmp_asc);
    if (p->top_k > 0 && p->top_k < V) {
        float kth = l[order[V - p->top_k]];
        for (int v = 0; v < V; v++)
            if (l[v] < kth) l[v] = -INFINITY;
    }
    /* top_p: ascending cumulative softmax <= 1 - p -> -inf, keep the last */
    if (p->top_p < 1.0f) {
        double s = 0, zz = 0;
        for (int v = 0; v < V; v++) zz += exp(l[v] - mx);
        bool drop[V] = {false};
        for (int i = 0; i < V; i++) {
            s += exp(l[order[i]] - mx) / zz;
            if (s <= 1.0 - p->top_p && i < V - 1) drop[order[i]] = true;
        }
        for (int v = 0; v < V; v++)
            if (drop[v]) l[v] = -INFINITY;
    }
    z = 0;
    for (int v = 0; v < V; v++) z += exp(l[v] - mx);
    for (int v = 0; v < V; v++) probs[v] = exp(l[v] - mx) / z;
}

static void check_sampling(const float *row, const vllm_sampling_params *p, int draws, const char *what) {
    double want[V];
    ref_distribution(row, p, want);
    int hist[V] = {0};
    sampler_rng rng;
    sampler_rng_seed(&rng, 7);
    sampler_scratch sc = {0};
    for (int i = 0; i < draws; i++) {
        int32_t t = sampler_sample(row, V, p, &rng, &sc);
        CHECK(t >= 0 && t < V);
        if (t >= 0 && t < V) hist[t]++;
    }
    for (int v = 0; v < V; v++) {
        if (want[v] == 0) CHECK_MSG(hist[v] == 0, "%s: token %d drawn %d times, excluded by the reference", what, v, hist[v]);
        else CHECK_MSG(fabs(hist[v] / (double)draws - want[v]) < 0.015, "%s: token %d freq %.4f want %.4f", what, v,
                       hist[v] / (double)draws, want[v]);
    }
    sampler_scratch_free(&sc);
}

int main(void) {
    init_base();
    sampler_proc_scratch s = {0};
    CHECK_OK(sampler_proc_scratch_init(&s, V));
    float got[V], want[V];
    const int32_t prompt[] = {3, 5, 5, 7, 40, 3};
    const int32_t output[] = {5, 9, 9, 9, 13, 22, 40};
    size_t np = sizeof prompt / sizeof *prompt, no = sizeof output / sizeof *output;

    /* ---- penalties, each alone and all together ---- */
    {
        float rps[] = {1.0f, 1.3f, 0.7f}, fps[] = {0.0f, 0.5f, -1.5f}, pps[] = {0.0f, 1.0f, -2.0f};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 3; c++) {
                    vllm_sampling_params p = vllm_sampling_default_params();
                    p.repetition_penalty = rps[a];
                    p.frequency_penalty = fps[b];
                    p.presence_penalty = pps[c];
                    memcpy(got, base, sizeof got);
                    memcpy(want, base, sizeof want);
                    sampler_apply_penalties(got, V, &p, prompt, np, output, no, &s);
                    ref_penalties(want, &p, prompt, np, output, no);
                    CHECK_MSG(rows_equal(got, want, V), "penalties rp=%g fp=%g pp=%g", (double)rps[a], (double)fps[b],
                              (double)pps[c]);
                    CHECK(scratch_clean(&s));
                }
        /* hand-computed: token 9 (3x in output) with rp 2, fp 0.5, pp 1 */
        vllm_sampling_params p = vllm_sampling_default_params();
        p.repetition_penalty = 2.0f;
        p.frequency_penalty = 0.5f;
        p.presence_penalty = 1.0f;
        float row[V] = {0};
        row[9] = 3.0f;  /* 3 / 2 - 1.5 - 1 = -1 */
        row[3] = -1.0f; /* prompt only: -1 * 2 = -2 */
        row[10] = 5.0f; /* untouched */
        sampler_apply_penalties(row, V, &p, prompt, np, output, no, &s);
        CHECK_NEAR(row[9], -1.0, 1e-6);
        CHECK_NEAR(row[3], -2.0, 1e-6);
        CHECK_NEAR(row[10], 5.0, 0);
        /* empty prompt and output: nothing changes */
        memcpy(got, base, sizeof got);
        sampler_apply_penalties(got, V, &p, NULL, 0, NULL, 0, &s);
        CHECK(rows_equal(got, base, V));
    }

    /* ---- allowed_token_ids ---- */
    {
        const int32_t allowed[] = {4, 4, 17, 49, 0};
        memcpy(got, base, sizeof got);
        memcpy(want, base, sizeof want);
        sampler_apply_allowed(got, V, allowed, 5, &s);
        ref_allowed(want, allowed, 5);
        CHECK(rows_equal(got, want, V));
        CHECK(scratch_clean(&s));
        CHECK(got[4] == base[4] && isinf(got[5]));
    }

    /* ---- bad words ---- */
    {
        /* [12], [9, 13, 30], [13, 31], [22, 40, 33], [1, 2, 3, 4, 5, 6, 7, 8, 9] (too long), [40, 34] */
        const int32_t ids[] = {12, 9, 13, 30, 13, 31, 22, 40, 33, 1, 2, 3, 4, 5, 6, 7, 8, 9, 40, 34};
        const size_t off[] = {0, 1, 4, 6, 9, 18, 20};
        sampler_token_seqs w = {ids, off, 6};
        memcpy(got, base, sizeof got);
        memcpy(want, base, sizeof want);
        sampler_apply_bad_words(got, V, &w, output, no);
        ref_bad_words(want, &w, output, no);
        CHECK(rows_equal(got, want, V));
        /* output ends ..., 13, 22, 40: [12] always, [22, 40, 33] and [40, 34] match; [13, 31] does not */
        CHECK(isinf(got[12]) && isinf(got[33]) && isinf(got[34]));
        CHECK(!isinf(got[31]) && !isinf(got[30]));
        /* empty output: only single-token words (and a 2-token word never) */
        memcpy(got, base, sizeof got);
        memcpy(want, base, sizeof want);
        sampler_apply_bad_words(got, V, &w, NULL, 0);
        ref_bad_words(want, &w, NULL, 0);
        CHECK(rows_equal(got, want, V));
        CHECK(isinf(got[12]) && !isinf(got[33]));
        /* one token of output, two-token word matches */
        const int32_t one[] = {13};
        memcpy(got, base, sizeof got);
        sampler_apply_bad_words(got, V, &w, one, 1);
        CHECK(isinf(got[31]));
    }

    /* ---- min_tokens: EOS and stop_token_ids ---- */
    {
        const int32_t eos[] = {2, 48}, stop[] = {11};
        memcpy(got, base, sizeof got);
        sampler_apply_min_tokens(got, V, 3, 2, eos, 2, stop, 1);
        for (int v = 0; v < V; v++) CHECK(v == 2 || v == 48 || v == 11 ? isinf(got[v]) : got[v] == base[v]);
        memcpy(got, base, sizeof got);
        sampler_apply_min_tokens(got, V, 3, 3, eos, 2, stop, 1); /* reached: no-op */
        CHECK(rows_equal(got, base, V));
        sampler_apply_min_tokens(got, V, 0, 0, eos, 2, stop, 1);
        CHECK(rows_equal(got, base, V));
    }

    /* ---- logit_bias: clamp to [-100, 100], last value of a repeated id wins ---- */
    {
        const int32_t ids[] = {1, 20, 1, 30, 45};
        const float b[] = {5.0f, -250.0f, 2.5f, 1000.0f, -0.25f};
        memcpy(got, base, sizeof got);
        memcpy(want, base, sizeof want);
        sampler_apply_logit_bias(got, V, ids, b, 5, &s);
        ref_bias(want, ids, b, 5);
        CHECK(rows_equal(got, want, V));
        CHECK(scratch_clean(&s));
        CHECK_NEAR(got[1], base[1] + 2.5f, 1e-6);
        CHECK_NEAR(got[20], base[20] - 100.0f, 1e-4);
        CHECK_NEAR(got[30], base[30] + 100.0f, 1e-4);
    }

    /* ---- the whole chain, vLLM's order, against the references composed ---- */
    {
        const int32_t allowed[] = {3, 5, 9, 13, 22, 30, 33, 40, 41, 2};
        const int32_t bias_ids[] = {9, 41, 2};
        const float bias[] = {-3.0f, 2.0f, 50.0f};
        const int32_t stop[] = {41};
        const int32_t eos[] = {2};
        const int32_t bw_ids[] = {22, 40, 33, 30};
        const size_t bw_off[] = {0, 3, 4};
        sampler_token_seqs bw = {bw_ids, bw_off, 2};
        vllm_sampling_params p = vllm_sampling_default_params();
        p.allowed_token_ids = allowed;
        p.num_allowed_token_ids = 10;
        p.logit_bias_ids = bias_ids;
        p.logit_bias_values = bias;
        p.num_logit_bias = 3;
        p.stop_token_ids = stop;
        p.num_stop_token_ids = 1;
        p.min_tokens = 10;
        p.repetition_penalty = 1.5f;
        p.frequency_penalty = 0.25f;
        p.presence_penalty = 0.5f;
        sampler_context ctx = {prompt, np, output, no, eos, 1, &bw, NULL};
        memcpy(got, base, sizeof got);
        CHECK_OK(sampler_process_logits(got, V, &p, &ctx, &s));
        CHECK(scratch_clean(&s));
        memcpy(want, base, sizeof want);
        ref_allowed(want, allowed, 10);
        ref_bad_words(want, &bw, output, no);
        want[2] = want[41] = -INFINITY; /* min_tokens: 7 < 10 */
        ref_bias(want, bias_ids, bias, 3);
        ref_penalties(want, &p, prompt, np, output, no);
        CHECK(rows_equal(got, want, V));
        CHECK(isinf(got[2]) && isinf(got[33]) && isinf(got[30]) && isinf(got[0]));
        /* order matters: bias before repetition penalty. logit 1 + bias -3 = -2, then * 1.5 = -3 */
        float row[V] = {0};
        row[9] = 1.0f;
        vllm_sampling_params q = vllm_sampling_default_params();
        q.logit_bias_ids = bias_ids;
        q.logit_bias_values = bias;
        q.num_logit_bias = 1;
        q.repetition_penalty = 1.5f;
        sampler_context c2 = {prompt, np, output, no, NULL, 0, NULL, NULL};
        CHECK_OK(sampler_process_logits(row, V, &q, &c2, &s));
        CHECK_NEAR(row[9], -3.0, 1e-6);
        /* greedy after processing picks the processed argmax */
        vllm_sampling_params g = p;
        g.temperature = 0;
        memcpy(got, base, sizeof got);
        CHECK_OK(sampler_process_logits(got, V, &g, &ctx, &s));
        int best = -1;
        for (int v = 0; v < V; v++)
            if (best < 0 || want[v] > want[best]) best = v;
        sampler_rng rng;
        sampler_rng_seed(&rng, 1);
        sampler_scratch sc = {0};
        CHECK(sampler_sample(got, V, &g, &rng, &sc) == best);
        /* min_tokens reached (10 outputs): EOS back */
        int32_t long_out[10] = {5, 9, 9, 9, 13, 22, 40, 1, 1, 1};
        sampler_context c3 = {prompt, np, long_out, 10, eos, 1, NULL, NULL};
        memcpy(got, base, sizeof got);
        CHECK_OK(sampler_process_logits(got, V, &p, &c3, &s));
        CHECK(!isinf(got[2]) && !isinf(got[41]));
        sampler_scratch_free(&sc);
    }

    /* ---- top logprobs and rank ---- */
    {
        float row[V];
        memcpy(row, base, sizeof row);
        row[10] = row[11] = row[12] = 9.0f; /* a three-way tie at the top */
        row[0] = -INFINITY;
        int32_t ids[V];
        float lps[V];
        double lse = 0, mx = 9.0;
        for (int v = 0; v < V; v++) lse += exp((double)row[v] - mx);
        lse = mx + log(lse);
        for (int k = 0; k <= 20; k += 5) {
            int n = sampler_top_logprobs(row, V, k, ids, lps);
            CHECK(n == k);
            /* reference: full order by (logit desc, id asc) */
            int order[V];
            for (int v = 0; v < V; v++) order[v] = v;
            for (int i = 0; i < V; i++)
                for (int j = i + 1; j < V; j++)
                    if (row[order[j]] > row[order[i]] || (row[order[j]] == row[order[i]] && order[j] < order[i])) {
                        int t = order[i];
                        order[i] = order[j];
                        order[j] = t;
                    }
            for (int i = 0; i < n; i++) {
                CHECK_MSG(ids[i] == order[i], "k=%d rank %d: id %d want %d", k, i, ids[i], order[i]);
                CHECK_NEAR(lps[i], row[order[i]] - lse, 1e-5);
                CHECK_NEAR(lps[i], sampler_logprob(row, V, order[i]), 1e-5);
            }
        }
        CHECK(sampler_top_logprobs(row, V, 3, ids, lps) == 3 && ids[0] == 10 && ids[1] == 11 && ids[2] == 12);
        CHECK(sampler_top_logprobs(row, V, 100, ids, lps) == V && ids[V - 1] == 0 && isinf(lps[V - 1]));
        CHECK(sampler_top_logprobs(row, V, 0, ids, lps) == 0);
        CHECK(sampler_token_rank(row, V, 11) == 3); /* ties count (x >= value) */
        CHECK(sampler_token_rank(row, V, 0) == V);
    }

    /* ---- sampling pipeline against the reference distribution ---- */
    {
        vllm_sampling_params p = vllm_sampling_default_params();
        float row[V];
        for (int v = 0; v < V; v++) row[v] = base[v] / 2.0f;
        check_sampling(row, &p, 30000, "plain");
        p.temperature = 0.7f;
        p.top_k = 10;
        check_sampling(row, &p, 30000, "top_k");
        p.top_k = 0;
        p.top_p = 0.8f;
        check_sampling(row, &p, 30000, "top_p");
        p.top_p = 1.0f;
        p.min_p = 0.1f;
        check_sampling(row, &p, 30000, "min_p");
        p.temperature = 1.3f;
        p.min_p = 0.05f;
        p.top_k = 12;
        p.top_p = 0.9f;
        check_sampling(row, &p, 30000, "min_p+top_k+top_p");
        /* after processors and penalties */
        const int32_t allowed[] = {1, 3, 5, 9, 13, 22, 30, 33, 40, 41, 2, 17, 18};
        p = vllm_sampling_default_params();
        p.allowed_token_ids = allowed;
        p.num_allowed_token_ids = 13;
        p.repetition_penalty = 1.2f;
        p.presence_penalty = 0.3f;
        p.top_p = 0.95f;
        sampler_context ctx = {prompt, np, output, no, NULL, 0, NULL, NULL};
        memcpy(row, base, sizeof row);
        CHECK_OK(sampler_process_logits(row, V, &p, &ctx, &s));
        check_sampling(row, &p, 30000, "processed");
        /* temperature below 0.01 counts as 0.01 (vLLM's _MAX_TEMP): logits 0 and 0.01*ln 3 -> 1:3 */
        float two[V];
        for (int v = 0; v < V; v++) two[v] = -1000.0f;
        two[4] = 0.0f;
        two[5] = 0.01f * logf(3.0f);
        p = vllm_sampling_default_params();
        p.temperature = 1e-6f;
        sampler_rng rng;
        sampler_rng_seed(&rng, 3);
        sampler_scratch sc = {0};
        int c5 = 0;
        for (int i = 0; i < 4000; i++) c5 += sampler_sample(two, V, &p, &rng, &sc) == 5;
        CHECK_NEAR(c5 / 4000.0, 0.75, 0.03);
        sampler_scratch_free(&sc);
    }

    /* ---- top_p on a large vocabulary (the partial sort grows past 256 and
     * stops on ties only where the full sort would) ---- */
    {
        enum { BIG = 5000 };
        static float big[BIG];
        vllm_sampling_params p = vllm_sampling_default_params();
        sampler_rng rng;
        sampler_rng_seed(&rng, 11);
        sampler_scratch sc = {0};
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: distinct decreasing logits; pass 1: a plateau of 300 equal logits across the 256 mark */
            for (int v = 0; v < BIG; v++) big[v] = -0.002f * (float)v;
            p.top_p = 0.7f;
            if (pass == 1) {
                for (int v = 200; v < 500; v++) big[v] = big[200];
                /* a top_p that cuts the plateau at id 230, inside the first 256 */
                double zz = 0, c229 = 0, c230 = 0;
                for (int v = 0; v < BIG; v++) zz += exp((double)big[v]);
                for (int v = 0; v <= 230; v++) {
                    c229 = c230;
                    c230 += exp((double)big[v]) / zz;
                }
                p.top_p = (float)((c229 + c230) / 2);
            }
            /* reference: full sort by (prob desc, id asc) is id order here; smallest prefix reaching top_p */
            double z = 0, cum = 0;
            for (int v = 0; v < BIG; v++) z += exp((double)big[v]);
            int K = BIG;
            for (int v = 0; v < BIG; v++) {
                cum += exp((double)big[v]) / z;
                if (cum >= p.top_p) {
                    K = v + 1;
                    break;
                }
            }
            CHECK(pass == 0 ? K > 300 : K == 231); /* past the first 256 / inside a tie group across it */
            int maxdrawn = -1, outside = 0;
            for (int i = 0; i < 5000; i++) {
                int32_t t = sampler_sample(big, BIG, &p, &rng, &sc);
                if (t >= K) outside++;
                if (t > maxdrawn) maxdrawn = t;
            }
            CHECK_MSG(outside == 0, "pass %d: %d draws beyond the top_p cut %d", pass, outside, K);
            CHECK_MSG(maxdrawn >= K - 10, "pass %d: max drawn %d, cut %d", pass, maxdrawn, K);
        }
        sampler_scratch_free(&sc);
    }

    /* ---- validation ---- */
    {
        vllm_sampling_params ok = vllm_sampling_default_params();
        CHECK_OK(sampler_validate(&ok, V));
        const int32_t ids_ok[] = {0, 49};
        const int32_t ids_bad[] = {0, 50};
        const int32_t ids_neg[] = {-1};
        const float bias2[] = {1.0f, 200.0f};
        const float bias_nan[] = {NAN, 0};
        const char *words_ok[] = {"foo", "bar"};
        const char *words_empty[] = {"foo", ""};
        vllm_sampling_params p;
#define BAD_CASE(stmt, w1, w2)                                          \
    do {                                                                \
        p = vllm_sampling_default_params();                             \
        stmt;                                                           \
        EXPECT_ERR(sampler_validate(&p, V), VLLM_ERR_INVALID_ARG, w1, w2); \
    } while (0)
        BAD_CASE(p.n = 0, "n must be at least 1", "got 0");
        BAD_CASE(p.presence_penalty = 2.5f, "presence_penalty", "[-2, 2]");
        BAD_CASE(p.presence_penalty = NAN, "presence_penalty", "[-2, 2]");
        BAD_CASE(p.frequency_penalty = -2.01f, "frequency_penalty", "[-2, 2]");
        BAD_CASE(p.repetition_penalty = 0.0f, "repetition_penalty", "greater than zero");
        BAD_CASE(p.repetition_penalty = INFINITY, "repetition_penalty", "finite");
        BAD_CASE(p.temperature = -0.1f, "temperature", "non-negative");
        BAD_CASE(p.temperature = NAN, "temperature", "finite");
        BAD_CASE(p.top_p = 0.0f, "top_p", "(0, 1]");
        BAD_CASE(p.top_p = 1.5f, "top_p", "(0, 1]");
        BAD_CASE(p.top_k = -2, "top_k", "got -2");
        BAD_CASE(p.min_p = 1.1f, "min_p", "[0, 1]");
        BAD_CASE(p.max_tokens = 0, "max_tokens", "at least 1");
        BAD_CASE(p.min_tokens = -1, "min_tokens", "greater than or equal to 0");
        BAD_CASE(p.min_tokens = 20, "min_tokens", "max_tokens=16");
        BAD_CASE(p.logprobs = -2, "logprobs", "got -2");
        BAD_CASE(p.logprobs = 21, "logprobs", "max allowed: 20");
        BAD_CASE(p.prompt_logprobs = 21, "prompt_logprobs", "max allowed: 20");
        BAD_CASE((p.stop_token_ids = ids_bad, p.num_stop_token_ids = 2), "stop_token_ids[1]", "50");
        BAD_CASE((p.stop = words_empty, p.num_stop = 2), "stop", "empty string");
        BAD_CASE((p.bad_words = words_empty, p.num_bad_words = 2), "bad_words", "empty string");
        BAD_CASE((p.logit_bias_ids = ids_bad, p.logit_bias_values = bias2, p.num_logit_bias = 2), "logit_bias",
                 "out-of-vocab");
        BAD_CASE((p.logit_bias_ids = ids_ok, p.logit_bias_values = bias_nan, p.num_logit_bias = 2), "logit_bias",
                 "NaN");
        BAD_CASE((p.allowed_token_ids = ids_ok, p.num_allowed_token_ids = 0), "allowed_token_ids", "empty");
        BAD_CASE((p.allowed_token_ids = ids_neg, p.num_allowed_token_ids = 1), "allowed_token_ids", "out-of-vocab");
        BAD_CASE((p.temperature = 0, p.n = 4), "n must be 1", "greedy");
        BAD_CASE(p.num_stop_token_ids = 1, "stop_token_ids", "NULL");
        /* valid: everything set in range; bias beyond 100 is clamped, not refused */
        p = vllm_sampling_default_params();
        p.n = 4;
        p.presence_penalty = -2.0f;
        p.frequency_penalty = 2.0f;
        p.repetition_penalty = 3.0f;
        p.top_k = -1;
        p.min_p = 1.0f;
        p.logprobs = 20;
        p.prompt_logprobs = 0;
        p.min_tokens = 16;
        p.stop_token_ids = ids_ok;
        p.num_stop_token_ids = 2;
        p.logit_bias_ids = ids_ok;
        p.logit_bias_values = bias2;
        p.num_logit_bias = 2;
        p.allowed_token_ids = ids_ok;
        p.num_allowed_token_ids = 2;
        p.stop = words_ok;
        p.num_stop = 2;
        p.bad_words = words_ok;
        p.num_bad_words = 2;
        CHECK_OK(sampler_validate(&p, V));
        /* vocab 0: ids are not range-checked */
        p.stop_token_ids = ids_bad;
        CHECK_OK(sampler_validate(&p, 0));
        /* a tiny positive temperature is not greedy for n > 1 (raised to 0.01 as vLLM) */
        p = vllm_sampling_default_params();
        p.temperature = 1e-7f;
        p.n = 2;
        CHECK_OK(sampler_validate(&p, V));
    }

    /* an uninitialised or too small scratch is an error, not a crash */
    {
        sampler_proc_scratch small = {0};
        vllm_sampling_params p = vllm_sampling_default_params();
        sampler_context ctx = {0};
        memcpy(got, base, sizeof got);
        EXPECT_ERR(sampler_process_logits(got, V, &p, &ctx, &small), VLLM_ERR_INTERNAL, "scratch", "sampler");
        CHECK_OK(sampler_proc_scratch_init(&small, 10));
        EXPECT_ERR(sampler_process_logits(got, V, &p, &ctx, &small), VLLM_ERR_INTERNAL, "scratch", "50");
        EXPECT_ERR(sampler_proc_scratch_init(&small, 0), VLLM_ERR_INVALID_ARG, "vocab", "0");
        sampler_proc_scratch_free(&small);
    }
    sampler_proc_scratch_free(&s);
    sampler_proc_scratch_free(&s); /* idempotent */
    TEST_END();
}
