/*
 * pooling.h: the pooling runner's host arithmetic (vLLM's pooler for the
 * embed task, vllm/model_executor/layers/pooler/seqwise/): rows of the
 * forward's final-normed hidden states accumulated per request, then the
 * embedding head: MEAN divides by the prompt length, the first `dimensions`
 * values are kept (Matryoshka), then the vector is L2-normalised when asked
 * (EmbeddingPoolerHead: dimensions first, then PoolerNormalize =
 * F.normalize(x, p=2, eps=1e-12) = x / max(||x||, 1e-12)).
 */
#ifndef VLLM_ENGINE_POOLING_H
#define VLLM_ENGINE_POOLING_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor/tensor.h"
#include "vllm.h"

/* acc (D) += row (D values of dt: F32, BF16 or F16), in double. */
void pool_add_row(double *acc, const void *row, dtype dt, int D);
/* acc (D) = row. */
void pool_set_row(double *acc, const void *row, dtype dt, int D);
/* The embedding of a pooled vector: v = pooled / count (rounded to float32), its first dim values
 * (dim = dimensions when 0 < dimensions < D, else D), divided by max(||v[:dim]||, 1e-12) when
 * normalize; written to out (dim floats). Returns dim. */
size_t pool_finish(const double *pooled, int D, double count, int dimensions, bool normalize, float *out);
/* The size of the embedding `dimensions` asks of a D-wide model (vLLM slices: more than D keeps D). */
size_t pool_embedding_dim(int D, int dimensions);

/* vLLM's PoolingParams._set_default_parameters check of dimensions (given: the request set it) on an
 * engine (info): a model without Matryoshka support refuses it ('Model "NAME" does not support matryoshka
 * representation, changing output dimensions will lead to poor results.'), one with
 * matryoshka_dimensions accepts only those ('Model "NAME" only supports [a, b] matryoshka dimensions, use
 * other output dimensions will lead to poor results.'), others need it positive ("Dimensions must be
 * greater than 0"). VLLM_ERR_INVALID_ARG with that message. */
vllm_status pool_check_dimensions(const vllm_engine_info *info, long long dimensions, const char *model_name);

#endif
