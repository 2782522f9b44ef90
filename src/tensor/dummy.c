/* dummy.c: dummy-weight arenas (dummy.h): reservation, bump allocation and the lookup backends use. */
#include "tensor/dummy.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/error.h"

#define DUMMY_MAX_ARENAS 16

struct dummy_arena {
    char *base;
    size_t size, used;
    uint64_t seed;
};

/* the live arenas, for dummy_lookup (a handful at most: one per model being loaded) */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dummy_arena *g_arenas[DUMMY_MAX_ARENAS];

dummy_arena *dummy_arena_create(uint64_t seed) {
    dummy_arena *a = calloc(1, sizeof *a);
    if (!a) {
        vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    /* 1 TiB of address space (a 235B-parameter model in BF16 is 470 GB), else less */
    for (size_t size = (size_t)1 << 40; size >= (size_t)1 << 34; size >>= 1) {
        void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            a->base = p;
            a->size = size;
            break;
        }
    }
    if (!a->base) {
        free(a);
        vt_error(VLLM_ERR_NO_MEMORY, "dummy weights: the system refused to reserve address space for them");
        return NULL;
    }
    a->seed = seed;
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    for (int i = 0; i < DUMMY_MAX_ARENAS && slot < 0; i++)
        if (!g_arenas[i]) slot = i;
    if (slot >= 0) g_arenas[slot] = a;
    pthread_mutex_unlock(&g_lock);
    if (slot < 0) {
        munmap(a->base, a->size);
        free(a);
        vt_error(VLLM_ERR_NO_MEMORY, "dummy weights: more than %d models loading at once", DUMMY_MAX_ARENAS);
        return NULL;
    }
    return a;
}

void dummy_arena_destroy(dummy_arena *a) {
    if (!a) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < DUMMY_MAX_ARENAS; i++)
        if (g_arenas[i] == a) g_arenas[i] = NULL;
    pthread_mutex_unlock(&g_lock);
    munmap(a->base, a->size);
    free(a);
}

void *dummy_arena_take(dummy_arena *a, size_t bytes) {
    if (bytes > a->size) return NULL;
    size_t need = (bytes + DUMMY_ALIGN - 1) / DUMMY_ALIGN * DUMMY_ALIGN;
    if (!need) need = DUMMY_ALIGN; /* a zero-size tensor still gets its own address */
    if (need > a->size - a->used) return NULL;
    void *p = a->base + a->used;
    a->used += need;
    return p;
}

bool dummy_lookup(const void *p, uint64_t *seed, uint64_t *offset) {
    const char *c = p;
    bool found = false;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < DUMMY_MAX_ARENAS && !found; i++) {
        const dummy_arena *a = g_arenas[i];
        if (a && c >= a->base && c < a->base + a->size) {
            *seed = a->seed;
            *offset = (uint64_t)(c - a->base);
            found = true;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}
