/* dummy.h: dummy-weight arenas: reserved address ranges that stand for random weights a device fills itself.
 *
 * `--load-format dummy` (vLLM's initialize_dummy_weights) gives every weight uniform(-1e-3, 1e-3)
 * values. On a GPU the host must not generate and copy tens of gigabytes, so the weight source
 * (src/model/weights.c) hands out tensors whose data points into a dummy arena: address space
 * reserved with no memory behind it (PROT_NONE, so a stray host read faults at once instead of
 * reading garbage). Model code may take views of them (offsets, strides) like any host tensor; a
 * backend whose uploads understand arenas (backend.dummy_fill) recognises the pointer with
 * dummy_lookup and writes the values on the device instead of copying.
 *
 * The value of an element is a pure function of the arena's seed and the element's index (its byte
 * offset in the arena over its size), dummy_value below, shared by host and device code: a CPU
 * run that generates the same offsets on the host (weights.c) gets bit-identical weights.
 */
#ifndef VLLM_TENSOR_DUMMY_H
#define VLLM_TENSOR_DUMMY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DUMMY_FN __host__ __device__ static inline
#else
#define DUMMY_FN static inline
#endif

#define DUMMY_ALIGN 256 /* every tensor of an arena starts at a multiple of this */
#define DUMMY_RANGE 1e-3f

/* Element idx of the stream of seed: splitmix64's finaliser of seed + (idx + 1) * golden ratio,
 * its top 24 bits scaled to [-1e-3, 1e-3). Exact in float up to the final product (one rounding). */
DUMMY_FN float dummy_value(uint64_t seed, uint64_t idx) {
    uint64_t z = seed + (idx + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(uint32_t)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1), exact */
    return (u * 2.0f - 1.0f) * DUMMY_RANGE;                          /* u * 2 - 1 exact */
}

/* The seed of an arena made for a user's --seed (any value, 0 included, gives a distinct stream). */
DUMMY_FN uint64_t dummy_seed(uint64_t user_seed) { return user_seed * 0x9E3779B97F4A7C15ull + 0x1234567ull; }

#ifndef __CUDACC__
#include <stdbool.h>

typedef struct dummy_arena dummy_arena;

/* Reserves an arena (no memory: address space only) of the given seed; NULL when the
 * system refuses the reservation (vt_error says why). */
dummy_arena *dummy_arena_create(uint64_t seed);
/* Releases the reservation; pointers into it must no longer be used. NULL is a no-op. */
void dummy_arena_destroy(dummy_arena *a);
/* The next `bytes` of the arena (DUMMY_ALIGN-aligned); NULL when the reservation is exhausted. */
void *dummy_arena_take(dummy_arena *a, size_t bytes);
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* Whether p lies in a live arena: then *seed is its seed and *offset p's byte offset in it. */
bool dummy_lookup(const void *p, uint64_t *seed, uint64_t *offset);
#ifdef __cplusplus
}
#endif

#endif
