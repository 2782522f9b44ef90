/*
 * test_dummy_weights.c: --load-format dummy's weights (src/model/weights.c, src/tensor/dummy.c):
 * the host-made values and the dummy arena a GPU backend fills on the device name the same
 * numbers (one offset sequence, one value function), arena pointers are found by dummy_lookup
 * (views inside them too) and only there, the values are uniform in [-1e-3, 1e-3) and differ by seed.
 */
#include <math.h>
#include <string.h>

#include "model/weights.h"
#include "tensor/dummy.h"
#include "test.h"

static void test_value(void) {
    const uint64_t s = dummy_seed(0);
    double sum = 0, sq = 0;
    float lo = 1, hi = -1;
    const int n = 200000;
    int impure = 0;
    for (int i = 0; i < n; i++) {
        float v = dummy_value(s, (uint64_t)i);
        impure += v != dummy_value(s, (uint64_t)i); /* a pure function */
        sum += v;
        sq += (double)v * v;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    CHECK(impure == 0);
    CHECK(lo >= -1e-3f && hi < 1e-3f && lo < -0.99e-3f && hi > 0.99e-3f);
    CHECK_NEAR(sum / n, 0.0, 1e-5);
    CHECK_NEAR(sqrt(sq / n), 1e-3 / sqrt(3.0), 1e-5); /* uniform's standard deviation */
    int same = 0;
    for (int i = 0; i < 1000; i++) same += dummy_value(dummy_seed(1), (uint64_t)i) == dummy_value(s, (uint64_t)i);
    CHECK(same < 5);
}

static void test_arena(void) {
    dummy_arena *a = dummy_arena_create(42);
    CHECK(a != NULL);
    if (!a) return;
    char *p = dummy_arena_take(a, 10), *q = dummy_arena_take(a, 1000), *r = dummy_arena_take(a, 0);
    CHECK(p && q && r && q - p == DUMMY_ALIGN && r - q == 4 * DUMMY_ALIGN);
    uint64_t seed = 0, off = 1;
    CHECK(dummy_lookup(p, &seed, &off) && seed == 42 && off == 0);
    CHECK(dummy_lookup(q + 17, &seed, &off) && off == DUMMY_ALIGN + 17); /* a view inside */
    int on_stack = 0;
    CHECK(!dummy_lookup(&on_stack, &seed, &off));
    CHECK(dummy_arena_take(a, (size_t)1 << 62) == NULL); /* beyond the reservation */
    dummy_arena_destroy(a);
    CHECK(!dummy_lookup(p, &seed, &off));
}

/* The same tensors asked of a host source and of an arena source: the arena's 2-D tensors sit at
 * the offsets the host source generated from, so the device would write the host's values. */
static void test_host_matches_arena(void) {
    model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.torch_dtype = DTYPE_BF16;
    weight_source *host = NULL, *dev = NULL;
    CHECK_OK(ws_open("unused", &cfg, true, false, 7, &host));
    CHECK_OK(ws_open("unused", &cfg, true, true, 7, &dev));
    if (!host || !dev) return;
    const int64_t shapes[][2] = {{64, 0}, {96, 64}, {3, 5}, {7, 0}, {128, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int ndim = shapes[i][1] ? 2 : 1;
        tensor th, td;
        CHECK_OK(ws_get(host, "w", ndim, shapes[i], &th));
        CHECK_OK(ws_get(dev, "w", ndim, shapes[i], &td));
        const int64_t n = tensor_numel(&th);
        uint64_t seed, off;
        const bool in_arena = dummy_lookup(td.data, &seed, &off);
        CHECK(in_arena == (ndim == 2)); /* the small 1-D tensors (norms, biases) are made on the host */
        CHECK(!dummy_lookup(th.data, &seed, &off));
        if (in_arena) {
            CHECK(seed == dummy_seed(7) && off % DUMMY_ALIGN == 0);
            int bad = 0;
            for (int64_t j = 0; j < n; j++)
                bad += ((const uint16_t *)th.data)[j] != f32_to_bf16(dummy_value(seed, off / 2 + (uint64_t)j));
            CHECK(bad == 0);
        } else {
            CHECK(memcmp(th.data, td.data, (size_t)n * 2) == 0);
        }
    }
    ws_close(host);
    ws_close(dev);
}

int main(void) {
    test_value();
    test_arena();
    test_host_matches_arena();
    TEST_END();
}
