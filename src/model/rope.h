/*
 * rope.h: rotary embedding tables. Computes inverse frequencies for the
 * scaling types of config.h (default, linear, llama3, longrope, yarn) and the cos/sin
 * table (max_pos, rot_dim) that the backend's rope op reads.
 */
#ifndef VLLM_MODEL_ROPE_H
#define VLLM_MODEL_ROPE_H

#include "model/config.h"

/* inv_freq (rot_dim / 2) for the configured scaling, in f32 like transformers, for a table of
 * max_pos positions (longrope: its long factors when max_pos > original_max_position). */
void rope_inv_freq(const rope_config *rc, int rot_dim, int max_pos, float *inv_freq);
/* Fills table (max_pos, rot_dim) = [cos(p * f) | sin(p * f)]. */
void rope_cos_sin_table(const rope_config *rc, int rot_dim, int max_pos, float *table);

#endif
