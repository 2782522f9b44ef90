/*
 * sampler.c: host sampling of one logits row, after the logits processors
 * and penalties of logits_proc.c (vllm/v1/sample/sampler.py Sampler.sample).
 * Order as vLLM v1: temperature -> min-p -> top-k -> top-p, then a
 * draw from the renormalised distribution. Greedy (temperature 0) is an
 * argmax that picks the lowest id on ties, as torch.argmax.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void sampler_rng_seed(sampler_rng *rng, uint64_t seed) {
    uint64_t z = seed;
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        z += 0x9E3779B97F4A7C15ull;
        uint64_t t = z;
        t = (t ^ (t >> 30)) * 0xBF58476D1CE4E5B9ull;
        t = (t ^ (t >> 27)) * 0x94D049BB133111EBull;
        rng->s[i] = t ^ (t >> 31);
    }
}

double sampler_rng_uniform(sampler_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * (1.0 / 9007199254740992.0);
}

void sampler_scratch_free(sampler_scratch *s) {
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
    s->cap = 0;
}

double sampler_logprob(const float *logits, int vocab, int32_t token) {
    double mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    return (double)logits[token] - mx - log(sum);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* idx sorted by probs descending (qsort_r comparator; ctx = probs) */
static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *probs = ctx;
    float pa = probs[*(const int32_t *)a], pb = probs[*(const int32_t *)b];
    if (pa > pb) return -1;
    if (pa < pb) return 1;
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

/* Moves the k largest-probability ids to idx[0..k) (unordered), quickselect. */
static void select_top_k(const float *probs, int32_t *idx, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = probs[idx[(lo + hi) / 2]];
        int i = lo, j = hi;
        while (i <= j) {
            while (probs[idx[i]] > pivot) i++;
            while (probs[idx[j]] < pivot) j--;
            if (i <= j) {
                int32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

int32_t sampler_sample(const float *logits, int vocab, const vllm_sampling_params *p, sampler_rng *rng,
                       sampler_scratch *sc) {
    double u = p->temperature > 0.0f ? sampler_rng_uniform(rng) : 0.0;
    return sampler_sample_u(logits, vocab, p, u, sc);
}

int32_t sampler_sample_u(const float *logits, int vocab, const vllm_sampling_params *p, double u,
                         sampler_scratch *sc) {
    /* vLLM: SamplingParams.__post_init__ raises 0 < T < 0.01 to 0.01
     * (_MAX_TEMP), so only T == 0 is greedy (T < _SAMPLING_EPS) */
    float temperature = p->temperature;
    if (!(temperature > 0.0f)) return argmax(logits, vocab);
    if (temperature < 0.01f) temperature = 0.01f;
    if (sc->cap < vocab) {
        sampler_scratch_free(sc);
        sc->probs = malloc((size_t)vocab * sizeof *sc->probs);
        sc->idx = malloc((size_t)vocab * sizeof *sc->idx);
        if (!sc->probs || !sc->idx) {
            sampler_scratch_free(sc);
            vt_error(VLLM_ERR_NO_MEMORY, "sampler: out of memory");
            return -1;
        }
        sc->cap = vocab;
    }
    /* softmax(logits / T) */
    float *probs = sc->probs;
    int32_t *idx = sc->idx;
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    if (mx == -INFINITY) {
        vt_error(VLLM_ERR_INVALID_ARG, "sampler: every token is banned");
        return -1;
    }
    double inv_t = 1.0 / temperature, sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        double e = exp(((double)logits[i] - mx) * inv_t);
        probs[i] = (float)e;
        sum += e;
    }
    for (int i = 0; i < vocab; i++) {
        probs[i] = (float)(probs[i] / sum);
        idx[i] = i;
    }
    /* min-p first (vLLM v1 applies it as a logits processor, before top-k/top-p):
     * drop tokens below min_p * the largest probability */
    int n = vocab;
    if (p->min_p > 0.0f) {
        float pmax = 0.0f;
        for (int i = 0; i < vocab; i++) pmax = probs[i] > pmax ? probs[i] : pmax;
        float thresh = p->min_p * pmax;
        n = 0;
        for (int i = 0; i < vocab; i++)
            if (probs[i] >= thresh) idx[n++] = i;
    }
    /* top-k: the k largest, and every token tied with the k-th (vLLM masks logits < the k-th value) */
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(probs, idx, n, p->top_k);
        float kth = probs[idx[0]];
        for (int i = 1; i < p->top_k; i++) kth = probs[idx[i]] < kth ? probs[idx[i]] : kth;
        int keep = p->top_k;
        for (int i = p->top_k; i < n; i++)
            if (probs[idx[i]] >= kth) {
                int32_t t = idx[keep];
                idx[keep++] = idx[i];
                idx[i] = t;
            }
        n = keep;
        /* draw in (probability desc, id asc) order, as the GPU sampler does, so
         * both backends pick the same token for the same uniform */
        if (!(p->top_p < 1.0f)) qsort_r(idx, (size_t)n, sizeof *idx, cmp_desc, probs);
    }
    /* top-p over the renormalised survivors: the smallest prefix (by probability) whose mass reaches top_p.
     * Sorting only the m most probable (m = 256, x4 while not enough) keeps this O(V) in practice
     * instead of sorting the whole vocabulary; a cut that lands on a tie with the m-th token grows m,
     * so the result is the full sort's. */
    if (p->top_p < 1.0f) {
        double mass = 0.0;
        for (int i = 0; i < n; i++) mass += probs[idx[i]];
        int m = n < 256 ? n : 256;
        for (;;) {
            if (m < n) select_top_k(probs, idx, n, m);
            qsort_r(idx, (size_t)m, sizeof *idx, cmp_desc, probs);
            double cum = 0.0;
            int keep = 0;
            for (int i = 0; i < m; i++) {
                cum += probs[idx[i]] / mass;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            if (m == n) {
                n = keep ? keep : n;
                break;
            }
            if (keep && probs[idx[keep - 1]] > probs[idx[m - 1]]) {
                n = keep;
                break;
            }
            m = m > n / 4 ? n : m * 4;
        }
    }
    double mass = 0.0;
    for (int i = 0; i < n; i++) mass += probs[idx[i]];
    double cum = 0.0;
    u *= mass;
    for (int i = 0; i < n; i++) {
        cum += probs[idx[i]];
        if (u < cum) return idx[i];
    }
    return idx[n - 1];
}
