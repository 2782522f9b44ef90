/* test_kv_manager.c: KV block manager: refcounts, LRU free queue and
 * eviction order, the prefix cache's hash chain, sharing a prefix between
 * two sequences, collision safety, and no leaks. */
#include <stdlib.h>
#include <string.h>

#include "engine/kv_manager.h"
#include "test.h"

/* Allocates n blocks into out; false when the pool runs dry. */
static bool alloc_n(kv_manager *m, int32_t *out, int n) {
    for (int i = 0; i < n; i++)
        if ((out[i] = kv_alloc(m)) < 0) return false;
    return true;
}

/* Walks the free queue both ways; checks its length and links. */
static void check_queue(const kv_manager *m) {
    int n = 0, last = -1;
    for (int b = m->free_head; b >= 0; b = m->next[b]) {
        CHECK(m->ref[b] == 0);
        CHECK(m->prev[b] == last);
        last = b;
        if (++n > m->num_blocks) break;
    }
    CHECK(n == m->num_free);
    CHECK(last == m->free_tail);
}

static void test_alloc_free(void) {
    kv_manager m;
    CHECK_OK(kv_init(&m, 4, 2, false));
    CHECK(kv_num_free(&m) == 4);
    int32_t b[4];
    CHECK(alloc_n(&m, b, 4));
    CHECK(b[0] == 0 && b[1] == 1 && b[2] == 2 && b[3] == 3); /* lowest ids first */
    CHECK(kv_alloc(&m) == -1);
    CHECK(kv_num_free(&m) == 0);
    kv_touch(&m, b + 1, 1); /* shared: refcount 2 */
    kv_free_blocks(&m, b, 4);
    CHECK(kv_num_free(&m) == 3);
    CHECK(m.ref[1] == 1);
    check_queue(&m);
    /* freed in reverse order: 3, 2, 0 */
    CHECK(m.free_head == 3 && m.next[3] == 2 && m.next[2] == 0);
    kv_free_blocks(&m, b + 1, 1);
    CHECK(kv_num_free(&m) == 4 && m.free_tail == 1);
    kv_free_blocks(&m, b + 1, 1); /* over-release is ignored */
    CHECK(kv_num_free(&m) == 4);
    CHECK(kv_alloc(&m) == 3);
    check_queue(&m);
    kv_destroy(&m);
    CHECK(kv_init(&m, 0, 16, true) == VLLM_ERR_INVALID_ARG);
    kv_destroy(&m);
}

static void test_hash(void) {
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    uint64_t h = kv_block_hash(KV_ROOT_HASH, a, 4);
    CHECK(h == kv_block_hash(KV_ROOT_HASH, a, 4));
    CHECK(h != kv_block_hash(KV_ROOT_HASH, b, 4));
    CHECK(h != kv_block_hash(h, a, 4));          /* the parent is part of the hash */
    CHECK(kv_block_hash(h, a, 4) != kv_block_hash(kv_block_hash(KV_ROOT_HASH, b, 4), a, 4));
}

/* Two sequences with a common 64-token prefix (block_size 16): the second
 * finds the first's 4 blocks; the whole of an identical prompt is never a
 * hit (the last token is recomputed). */
static void test_sharing(void) {
    enum { BS = 16, NB = 32 };
    kv_manager m;
    CHECK_OK(kv_init(&m, NB, BS, true));
    int32_t ta[80], tb[100];
    for (int i = 0; i < 80; i++) ta[i] = 1000 + i;
    memcpy(tb, ta, 64 * sizeof *tb);
    for (int i = 64; i < 100; i++) tb[i] = 5000 + i;

    int32_t ba[8], bb[8], hits[8];
    kv_chain ca = {0}, cb = {0};
    CHECK(kv_find_prefix(&m, ta, 80, hits, 8, &ca) == 0);    /* empty cache */
    CHECK(alloc_n(&m, ba, 5));
    kv_cache_full_blocks(&m, ta, 40, ba, &ca, NULL, NULL);  /* a first chunk: 2 full blocks */
    CHECK(ca.num_blocks == 2 && m.num_cached == 2);
    kv_cache_full_blocks(&m, ta, 80, ba, &ca, NULL, NULL);  /* the rest */
    CHECK(ca.num_blocks == 5 && m.num_cached == 5);

    int h = kv_find_prefix(&m, tb, 100, hits, 8, &cb);
    CHECK(h == 4);
    for (int i = 0; i < h; i++) CHECK(hits[i] == ba[i]);
    CHECK(cb.num_blocks == 4);
    CHECK(kv_num_evictable(&m, hits, h) == 0);
    kv_touch(&m, hits, h);
    memcpy(bb, hits, 4 * sizeof *bb);
    CHECK(alloc_n(&m, bb + 4, 3));
    kv_cache_full_blocks(&m, tb, 100, bb, &cb, NULL, NULL);
    CHECK(cb.num_blocks == 6 && m.num_cached == 7);
    CHECK(m.ref[ba[0]] == 2 && m.ref[ba[4]] == 1);

    /* an identical 80-token prompt hits 4 blocks, not 5 (79 tokens at most);
     * an 81-token one hits all 5 */
    kv_chain cc;
    CHECK(kv_find_prefix(&m, ta, 80, hits, 8, &cc) == 4);
    int32_t tc[81];
    memcpy(tc, ta, sizeof ta);
    tc[80] = 7;
    CHECK(kv_find_prefix(&m, tc, 81, hits, 8, &cc) == 5);
    CHECK(kv_find_prefix(&m, tc, 81, hits, 3, &cc) == 3); /* max_blocks */
    /* a different first token: no hit although later blocks are equal */
    tc[0] = 1;
    CHECK(kv_find_prefix(&m, tc, 81, hits, 8, &cc) == 0);

    /* a block equal to a cached one stays uncached; the chain goes on */
    int32_t bd[5];
    kv_chain cd = {0};
    CHECK(alloc_n(&m, bd, 5));
    kv_cache_full_blocks(&m, ta, 80, bd, &cd, NULL, NULL);
    CHECK(cd.num_blocks == 5 && cd.id == m.cache_id[ba[4]] && m.num_cached == 7);
    CHECK(m.cache_id[bd[0]] == 0);
    kv_free_blocks(&m, bd, 5);

    /* no leak: both finish, every block is back, the cache is kept */
    kv_free_blocks(&m, ba, 5);
    kv_free_blocks(&m, bb, 7);
    CHECK(kv_num_free(&m) == NB);
    check_queue(&m);
    CHECK(m.num_cached == 7);
    CHECK(kv_find_prefix(&m, tb, 100, hits, 8, &cb) == 6);
    CHECK(kv_num_evictable(&m, hits, 6) == 6);
    kv_reset_cache(&m);
    CHECK(kv_find_prefix(&m, tb, 100, hits, 8, &cb) == 0);
    kv_destroy(&m);
}

/* LRU: cached blocks are evicted in free-queue order, a sequence's tail
 * first; a touched block leaves the queue and is not evicted. */
static void test_eviction(void) {
    enum { BS = 4, NB = 6 };
    kv_manager m;
    CHECK_OK(kv_init(&m, NB, BS, true));
    int32_t t[12], u[12], b[3], c[3], d[6], hits[3];
    for (int i = 0; i < 12; i++) t[i] = i, u[i] = 100 + i;
    kv_chain ct = {0}, cu = {0}, ch;
    int32_t rec[6];
    int nrec = 0;
    CHECK(alloc_n(&m, b, 3));
    kv_cache_full_blocks(&m, t, 12, b, &ct, rec, &nrec);
    CHECK(nrec == 3 && rec[0] == b[0] && rec[2] == b[2]);
    kv_free_blocks(&m, b, 3); /* queue: 3 4 5 | b2 b1 b0 */
    CHECK(alloc_n(&m, c, 3));  /* takes the never-used blocks 3 4 5 */
    CHECK(c[0] == 3 && c[1] == 4 && c[2] == 5);
    CHECK(m.num_cached == 3);
    kv_cache_full_blocks(&m, u, 12, c, &cu, NULL, NULL);
    kv_free_blocks(&m, c, 3); /* queue: b2 b1 b0 c2 c1 c0 */
    CHECK(m.num_cached == 6);
    /* t hits its first 2 blocks (11 tokens at most): touch them */
    CHECK(kv_find_prefix(&m, t, 12, hits, 3, &ch) == 2);
    CHECK(kv_num_evictable(&m, hits, 2) == 2);
    kv_touch(&m, hits, 2);
    CHECK(kv_num_free(&m) == 4);
    /* allocating 2 evicts b2, then u's tail c2 */
    CHECK(alloc_n(&m, d, 2));
    CHECK(d[0] == b[2] && d[1] == c[2]);
    CHECK(m.num_cached == 4 && m.cache_id[b[2]] == 0 && m.cache_id[c[2]] == 0);
    CHECK(kv_find_prefix(&m, u, 12, hits, 3, &ch) == 2);
    /* t's third block is gone: a 13th token would still hit only 2 */
    int32_t t13[13];
    memcpy(t13, t, sizeof t);
    t13[12] = 0;
    CHECK(kv_find_prefix(&m, t13, 13, hits, 3, &ch) == 2);
    CHECK(alloc_n(&m, d + 2, 2));
    CHECK(d[2] == c[1] && d[3] == c[0]);
    CHECK(kv_alloc(&m) == -1);
    CHECK(kv_find_prefix(&m, u, 12, hits, 3, &ch) == 0);
    kv_free_blocks(&m, d, 4);
    kv_free_blocks(&m, b, 2);
    CHECK(kv_num_free(&m) == NB);
    check_queue(&m);
    kv_destroy(&m);
}

/* A forged hash collision: a block whose hash matches but whose tokens or
 * parent differ is never returned. */
static void test_collision(void) {
    enum { BS = 4 };
    kv_manager m;
    CHECK_OK(kv_init(&m, 8, BS, true));
    int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, b[2], hits[2];
    kv_chain c = {0}, ch;
    CHECK(alloc_n(&m, b, 2));
    kv_cache_full_blocks(&m, t, 8, b, &c, NULL, NULL);
    CHECK(kv_find_prefix(&m, t, 9, hits, 2, &ch) == 2);
    /* corrupt the stored tokens of the first block: same hash, other tokens */
    m.tokens[(size_t)b[0] * BS] = 42;
    CHECK(kv_find_prefix(&m, t, 9, hits, 2, &ch) == 0);
    m.tokens[(size_t)b[0] * BS] = 1;
    /* the second block claims another parent */
    m.parent_id[b[1]] += 1000;
    CHECK(kv_find_prefix(&m, t, 9, hits, 2, &ch) == 1);
    m.parent_id[b[1]] -= 1000;
    /* uncaching the first block orphans the second: it is never found
     * through a re-cached first block (a new cache id) */
    kv_uncache(&m, b[0]);
    CHECK(kv_find_prefix(&m, t, 9, hits, 2, &ch) == 0);
    int32_t b2[2];
    kv_chain c2 = {0};
    CHECK(alloc_n(&m, b2, 1));
    kv_cache_full_blocks(&m, t, 4, b2, &c2, NULL, NULL);
    CHECK(kv_find_prefix(&m, t, 9, hits, 2, &ch) == 1 && hits[0] == b2[0]);
    kv_free_blocks(&m, b2, 1);
    kv_free_blocks(&m, b, 2);
    CHECK(kv_num_free(&m) == 8);
    kv_destroy(&m);
}

int main(void) {
    test_alloc_free();
    test_hash();
    test_sharing();
    test_eviction();
    test_collision();
    TEST_END();
}
