/* test_tp_engine.c: vllm_engine with tensor_parallel_size 2 and 4 on the CPU (issue 18) generates the tokens of the
 * unsplit engine, in the engine's layouts (one batch; chunked prefill; prefix caching with a shared prefix; a KV
 * cache small enough to preempt), on fixtures of the split paths (MoE included); a model that cannot be split and a
 * bad size are refused naming why; the CLI takes --tensor-parallel-size / -tp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tp_layouts.h"
#include "test.h"
#include "vllm.h"

#define FX VLLM_SOURCE_DIR "/tests/fixtures/models/"

/* NP greedy completions of NEW tokens in layout ly; false when the engine failed. */
static bool run(const char *dir, int tp, const layout *ly, int32_t tok[NP][NEW], float lp[NP][NEW]) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    o.tensor_parallel_size = tp;
    layout_apply(ly, &o);
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s TP %d (%s): %s", dir, tp, ly->name, vllm_last_error());
    if (st) return false;
    const bool ok = layout_generate(e, tok, lp);
    CHECK_MSG(ok, "%s TP %d (%s): generate: %s", dir, tp, ly->name, vllm_last_error());
    for (int i = 0; ok && i < NP; i++) CHECK(tok[i][NEW - 1] >= 0);
    vllm_engine_free(e);
    return ok;
}

static void check(const char *name, int tp) {
    char dir[512];
    snprintf(dir, sizeof dir, FX "%s", name);
    for (size_t k = 0; k < sizeof LAYOUTS / sizeof *LAYOUTS; k++) {
        int32_t t1[NP][NEW], tn[NP][NEW];
        float l1[NP][NEW], ln[NP][NEW];
        if (!run(dir, 1, &LAYOUTS[k], t1, l1) || !run(dir, tp, &LAYOUTS[k], tn, ln)) continue;
        float worst = 0;
        int diff = 0;
        for (int i = 0; i < NP; i++)
            for (int j = 0; j < NEW; j++) {
                diff += t1[i][j] != tn[i][j];
                if (t1[i][j] == tn[i][j]) worst = fmaxf(worst, fabsf(l1[i][j] - ln[i][j]));
            }
        CHECK_MSG(diff == 0, "%s TP %d (%s): %d tokens differ from TP 1's", name, tp, LAYOUTS[k].name, diff);
        CHECK_MSG(worst <= 1e-3f, "%s TP %d (%s): logprobs differ by %g", name, tp, LAYOUTS[k].name, (double)worst);
        printf("%-16s TP %d, %-34s same tokens as TP 1, logprobs within %.2g\n", name, tp, LAYOUTS[k].name,
               (double)worst);
    }
}

int main(void) {
    check("llama_mha_f16", 2);
    check("llama_mha_f16", 4);
    check("qwen3_qknorm", 2);
    check("gemma2_softcap", 2);
    check("qwen2_moe_shared", 2);
    /* refused, naming why: a MoE model, a size past the limit */
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 1;
    o.tensor_parallel_size = 2;
    vllm_engine *e = NULL;
    CHECK(vllm_engine_create(FX "deepseek_v2_lite", &o, &e) == VLLM_ERR_UNSUPPORTED && e == NULL);
    CHECK_MSG(strstr(vllm_last_error(), "tensor parallelism") != NULL, "not named: %s", vllm_last_error());
    /* a NULL device is the CPU's, TP included */
    o.device = NULL;
    o.tensor_parallel_size = 2;
    CHECK_OK(vllm_engine_create(FX "llama_gqa", &o, &e));
    if (e) {
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.max_tokens = 3;
        const int32_t ids[3] = {1, 2, 3};
        const vllm_prompt pr = {.token_ids = ids, .num_token_ids = 3};
        vllm_completion *c = NULL;
        CHECK_OK(vllm_generate(e, &pr, 1, &sp, false, &c, NULL));
        if (c) vllm_completions_free(c, 1);
        vllm_engine_free(e);
        e = NULL;
    }
    o.tensor_parallel_size = 1000;
    CHECK(vllm_engine_create(FX "llama_gqa", &o, &e) == VLLM_ERR_INVALID_ARG && e == NULL);
    /* the CLI's flag: the same tokens as without it */
    char cmd[1024], out1[4096] = {0}, out2[4096] = {0};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-token-ids 1,2,3,4,5 --max-tokens 6 --temperature 0 "
                 "--ignore-eos --json --threads 1 %s 2>/dev/null", VLLMC_BIN, FX "llama_gqa", k ? "-tp 2" : "");
        CHECK(t_capture(cmd, k ? out2 : out1, sizeof out1));
    }
    char *a = strstr(out1, "\"token_ids\""), *b = strstr(out2, "\"token_ids\"");
    CHECK_MSG(a && b && !strncmp(a, b, 60), "vllmc generate -tp 2 differs: %.80s vs %.80s", a ? a : "(none)",
              b ? b : "(none)");
    TEST_END();
}
