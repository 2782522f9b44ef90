/* test_state_cache.c: the recurrent-state checkpoint table: lookups see committed entries only, LRU
 * eviction, pins of the current step (reserved or restored entries are never evicted), rollback freeing
 * a step's reservations, reset, the counters, and an empty table. */
#include "engine/state_cache.h"
#include "test.h"

/* One committed save of id per step; returns its slot. */
static int save(state_cache *c, uint64_t id) {
    int k = sc_reserve(c, id);
    sc_commit(c);
    return k;
}

static void test_visibility(void) {
    state_cache c;
    CHECK_OK(sc_init(&c, 3));
    int k = sc_reserve(&c, 10);
    CHECK(k >= 0 && k < 3);
    /* pending: known (no second save of it) but not restorable before the step commits */
    CHECK(sc_lookup(&c, 10) == -1 && sc_contains(&c, 10));
    CHECK(sc_reserve(&c, 10) == -1);
    sc_commit(&c);
    CHECK(sc_lookup(&c, 10) == k && c.stats.saves == 1);
    /* a rolled-back step's reservation is gone; committed entries stay */
    int k2 = sc_reserve(&c, 11);
    CHECK(k2 >= 0 && k2 != k);
    sc_rollback(&c);
    CHECK(!sc_contains(&c, 11) && sc_lookup(&c, 10) == k && c.num_used == 1 && c.stats.saves == 1);
    /* ids 0 never match (no prefix has id 0) */
    CHECK(sc_reserve(&c, 0) == -1 && sc_lookup(&c, 0) == -1);
    sc_destroy(&c);
}

static void test_lru_and_pins(void) {
    state_cache c;
    CHECK_OK(sc_init(&c, 3));
    int a = save(&c, 100), b = save(&c, 200), d = save(&c, 300);
    CHECK(a >= 0 && b >= 0 && d >= 0 && a != b && b != d && a != d && c.num_used == 3);
    /* a restore of 100 makes 200 the least recently used */
    sc_pin(&c, sc_lookup(&c, 100));
    sc_commit(&c);
    CHECK(c.stats.restores == 1);
    CHECK(save(&c, 400) == b);
    CHECK(sc_lookup(&c, 200) == -1 && c.stats.evictions == 1);
    /* pinned by this step: 300 is restored, 100 is next in LRU order; a save takes 100's slot */
    sc_pin(&c, sc_lookup(&c, 300));
    int k = sc_reserve(&c, 500);
    CHECK(k == a && sc_lookup(&c, 100) == -1);
    /* now every slot is pinned (300 restored, 500 reserved)... except 400 */
    int k2 = sc_reserve(&c, 600);
    CHECK(k2 == b && sc_lookup(&c, 400) == -1);
    /* ...and then none is left: no slot for a third save in this step */
    CHECK(sc_reserve(&c, 700) == -1);
    CHECK(sc_lookup(&c, 300) == d); /* the restored checkpoint was never taken */
    sc_commit(&c);
    CHECK(sc_lookup(&c, 500) == a && sc_lookup(&c, 600) == b && c.stats.saves == 6 && c.stats.restores == 2 &&
          c.stats.evictions == 3);
    /* pins end with the step: after restores of 500 and 600, the next save evicts 300 */
    sc_pin(&c, sc_lookup(&c, 500));
    sc_pin(&c, sc_lookup(&c, 600));
    sc_commit(&c);
    CHECK(save(&c, 800) == d && c.stats.restores == 4);
    /* a restore of a rolled-back step is not counted */
    sc_pin(&c, sc_lookup(&c, 500));
    sc_rollback(&c);
    CHECK(c.stats.restores == 4);
    /* reset forgets every entry, keeps the counters */
    sc_reset(&c);
    CHECK(c.num_used == 0 && sc_lookup(&c, 500) == -1 && !sc_contains(&c, 800) && c.stats.saves == 7);
    CHECK(save(&c, 900) >= 0 && sc_lookup(&c, 900) >= 0);
    sc_destroy(&c);
}

/* Many ids through a small table: lookups stay exact (bucket chains across evictions). */
static void test_churn(void) {
    enum { N = 5 };
    state_cache c;
    CHECK_OK(sc_init(&c, N));
    for (uint64_t id = 2; id < 200; id++) {
        int k = save(&c, id);
        CHECK(k >= 0 && sc_lookup(&c, id) == k);
        /* the N most recent ids are held, older ones are not */
        for (uint64_t j = id >= N + 2 ? id - N - 1 : 2; j <= id; j++)
            CHECK((sc_lookup(&c, j) >= 0) == (j + N > id));
    }
    CHECK(c.num_used == N && c.stats.evictions == 198 - N);
    sc_destroy(&c);
}

static void test_empty(void) {
    state_cache c;
    CHECK_OK(sc_init(&c, 0));
    CHECK(sc_reserve(&c, 5) == -1 && sc_lookup(&c, 5) == -1 && !sc_contains(&c, 5));
    sc_pin(&c, 0);
    sc_commit(&c);
    sc_rollback(&c);
    sc_reset(&c);
    sc_destroy(&c);
    CHECK(sc_init(&c, -1) != VLLM_OK);
}

int main(void) {
    test_visibility();
    test_lru_and_pins();
    test_churn();
    test_empty();
    TEST_END();
}
