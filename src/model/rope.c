/*
 * rope.c: inverse frequencies and cos/sin tables for rotary embeddings.
 * Follows transformers' modeling_rope_utils (_compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters).
 */
#include "model/rope.h"

#include <math.h>

void rope_inv_freq(const rope_config *rc, int rot_dim, float *inv_freq) {
    int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32 */
        float expo = (float)(2 * i) / (float)rot_dim;
        inv_freq[i] = (float)(1.0 / pow(rc->theta, (double)expo));
    }
    if (rc->type == ROPE_LINEAR) {
        /* positions / factor  ==  inv_freq / factor */
        for (int i = 0; i < half; i++) inv_freq[i] = (float)(inv_freq[i] / rc->factor);
    } else if (rc->type == ROPE_LLAMA3) {
        double old_ctx = rc->original_max_position;
        double low_wavelen = old_ctx / rc->low_freq_factor;
        double high_wavelen = old_ctx / rc->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double f = inv_freq[i];
            double wavelen = 2.0 * M_PI / f;
            double out;
            if (wavelen > low_wavelen) {
                out = f / rc->factor;                       /* low frequency: scaled */
            } else if (wavelen < high_wavelen) {
                out = f;                                    /* high frequency: kept */
            } else {                                        /* medium: smooth blend */
                double smooth = (old_ctx / wavelen - rc->low_freq_factor) /
                                (rc->high_freq_factor - rc->low_freq_factor);
                out = (1.0 - smooth) * f / rc->factor + smooth * f;
            }
            inv_freq[i] = (float)out;
        }
    }
}

void rope_cos_sin_table(const rope_config *rc, int rot_dim, int max_pos, float *table) {
    int half = rot_dim / 2;
    float inv_freq[1024];
    rope_inv_freq(rc, rot_dim, inv_freq);
    for (int p = 0; p < max_pos; p++) {
        float *row = table + (size_t)p * rot_dim;
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];  /* f32 product, as transformers */
            row[i] = (float)cos((double)angle);
            row[half + i] = (float)sin((double)angle);
        }
    }
}
