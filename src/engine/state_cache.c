/* state_cache.c: the recurrent-state checkpoint table (prefix id -> checkpoint slot, LRU, step pins); see state_cache.h. */
#include "engine/state_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

vllm_status sc_init(state_cache *c, int num_slots) {
    memset(c, 0, sizeof *c);
    if (num_slots < 0) return vt_error(VLLM_ERR_INVALID_ARG, "state checkpoints: %d slots", num_slots);
    if (num_slots == 0) return VLLM_OK;
    size_t N = (size_t)num_slots;
    uint64_t nb = 1;
    while (nb < N) nb <<= 1;
    c->num_slots = num_slots;
    c->bucket_mask = nb - 1;
    c->key = calloc(N, sizeof *c->key);
    c->last_use = calloc(N, sizeof *c->last_use);
    c->pending = calloc(N, sizeof *c->pending);
    c->pinned = calloc(N, sizeof *c->pinned);
    c->bucket_next = malloc(N * sizeof *c->bucket_next);
    c->buckets = malloc((size_t)nb * sizeof *c->buckets);
    c->step_slots = malloc(N * sizeof *c->step_slots);
    if (!c->key || !c->last_use || !c->pending || !c->pinned || !c->bucket_next || !c->buckets || !c->step_slots) {
        sc_destroy(c);
        return vt_error(VLLM_ERR_NO_MEMORY, "state checkpoints: out of memory for %d slots", num_slots);
    }
    for (uint64_t i = 0; i < nb; i++) c->buckets[i] = -1;
    return VLLM_OK;
}

void sc_destroy(state_cache *c) {
    free(c->key);
    free(c->last_use);
    free(c->pending);
    free(c->pinned);
    free(c->bucket_next);
    free(c->buckets);
    free(c->step_slots);
    memset(c, 0, sizeof *c);
}

/* The slot holding id (pending or committed), or -1. */
static int find(const state_cache *c, uint64_t id) {
    if (!c->num_slots || id == 0) return -1;
    for (int32_t k = c->buckets[id & c->bucket_mask]; k >= 0; k = c->bucket_next[k])
        if (c->key[k] == id) return k;
    return -1;
}

int sc_lookup(const state_cache *c, uint64_t id) {
    int k = find(c, id);
    return k >= 0 && !c->pending[k] ? k : -1;
}

bool sc_contains(const state_cache *c, uint64_t id) { return find(c, id) >= 0; }

/* Takes slot k's key out of its bucket; the slot becomes free. */
static void drop(state_cache *c, int k) {
    int32_t *p = &c->buckets[c->key[k] & c->bucket_mask];
    while (*p != k) p = &c->bucket_next[*p];
    *p = c->bucket_next[k];
    c->key[k] = 0;
    c->pending[k] = 0;
    c->num_used--;
}

/* Adds k to the current step's pinned slots (once). */
static void pin(state_cache *c, int k) {
    if (c->pinned[k]) return;
    c->pinned[k] = 1;
    c->step_slots[c->num_step++] = k;
}

int sc_reserve(state_cache *c, uint64_t id) {
    if (!c->num_slots || id == 0 || find(c, id) >= 0) return -1;
    /* a free slot, else the least recently used committed one no restore of this step reads */
    int k = -1;
    for (int i = 0; i < c->num_slots; i++) {
        if (!c->key[i]) {
            k = i;
            break;
        }
        if (!c->pinned[i] && (k < 0 || c->last_use[i] < c->last_use[k])) k = i;
    }
    if (k < 0) return -1;
    if (c->key[k]) {
        drop(c, k);
        c->stats.evictions++;
    }
    c->key[k] = id;
    c->pending[k] = 1;
    c->last_use[k] = c->clock;
    int32_t *head = &c->buckets[id & c->bucket_mask];
    c->bucket_next[k] = *head;
    *head = k;
    c->num_used++;
    pin(c, k);
    return k;
}

void sc_pin(state_cache *c, int slot) {
    if (slot < 0 || slot >= c->num_slots || !c->key[slot] || c->pending[slot]) return;
    c->last_use[slot] = c->clock;
    c->step_restores++;
    pin(c, slot);
}

void sc_commit(state_cache *c) {
    for (int i = 0; i < c->num_step; i++) {
        int k = c->step_slots[i];
        c->pinned[k] = 0;
        if (c->pending[k]) {
            c->pending[k] = 0;
            c->stats.saves++;
        }
    }
    c->num_step = 0;
    c->stats.restores += c->step_restores;
    c->step_restores = 0;
    c->clock++;
}

void sc_rollback(state_cache *c) {
    for (int i = 0; i < c->num_step; i++) {
        int k = c->step_slots[i];
        c->pinned[k] = 0;
        if (c->pending[k]) drop(c, k);
    }
    c->num_step = 0;
    c->step_restores = 0;
}

void sc_reset(state_cache *c) {
    if (!c->num_slots) return;
    for (int i = 0; i < c->num_slots; i++) {
        c->key[i] = 0;
        c->pending[i] = c->pinned[i] = 0;
    }
    for (uint64_t i = 0; i <= c->bucket_mask; i++) c->buckets[i] = -1;
    c->num_used = c->num_step = 0;
    c->step_restores = 0;
}
