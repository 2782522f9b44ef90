/*
 * rope.c: inverse frequencies and cos/sin tables for rotary embeddings.
 * Follows transformers' modeling_rope_utils (_compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
 * _compute_longrope_parameters).
 */
#include "model/rope.h"

#include <math.h>

void rope_inv_freq(const rope_config *rc, int rot_dim, int max_pos, float *inv_freq) {
    int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32 */
        float expo = (float)(2 * i) / (float)rot_dim;
        inv_freq[i] = (float)(1.0 / pow(rc->theta, (double)expo));
    }
    if (rc->type == ROPE_LONGROPE) {
        /* long factors when the table covers positions past the original context, as vLLM's
         * Phi3LongRoPEScaledRotaryEmbedding (max_model_len > original_max_position_embeddings:
         * a sequence never switches tables mid-way); inv_freq computed in f32 by transformers: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)) */
        const float *f = max_pos > rc->original_max_position ? rc->long_factor : rc->short_factor;
        for (int i = 0; i < half && i < rc->num_factors; i++) {
            float base = (float)pow(rc->theta, (double)((float)(2 * i) / (float)rot_dim));
            inv_freq[i] = 1.0f / (f[i] * base);
        }
    } else if (rc->type == ROPE_YARN) {
        /* transformers' _compute_yarn_parameters, in f32: the dimensions whose wavelength fits
         * beta_fast rotations in the original context keep their frequency (extrapolation), those
         * under beta_slow rotations are divided by factor (interpolation), a linear ramp between */
        const double dim = rot_dim, base = rc->theta, orig = rc->original_max_position;
        double low = dim * log(orig / (rc->beta_fast * 2 * M_PI)) / (2 * log(base));
        double high = dim * log(orig / (rc->beta_slow * 2 * M_PI)) / (2 * log(base));
        if (rc->truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001; /* transformers: prevent the singularity */
        for (int i = 0; i < half; i++) {
            float pos_freq = (float)pow(base, (double)((float)(2 * i) / (float)rot_dim));
            float extra = 1.0f / pos_freq, inter = 1.0f / ((float)rc->factor * pos_freq);
            float ramp = (float)(((float)i - (float)low) / ((float)high - (float)low));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp; /* inv_freq_extrapolation_factor */
            inv_freq[i] = inter * (1.0f - ef) + extra * ef;
        }
    } else if (rc->type == ROPE_LINEAR) {
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
    rope_inv_freq(rc, rot_dim, max_pos, inv_freq);
    /* longrope and yarn scale cos and sin (transformers' attention_scaling) */
    const float mscale = rc->type == ROPE_LONGROPE || rc->type == ROPE_YARN ? (float)rc->attention_factor : 1.0f;
    for (int p = 0; p < max_pos; p++) {
        float *row = table + (size_t)p * rot_dim;
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];  /* f32 product, as transformers */
            row[i] = (float)cos((double)angle) * mscale;
            row[half + i] = (float)sin((double)angle) * mscale;
        }
    }
}
