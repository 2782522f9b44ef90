/*
 * ops_moe.cu: the CUDA mixture-of-experts ops: expert weights, the experts' MLPs (a token permutation by
 * expert, a bandwidth-bound expert GEMV for decode batches, per-expert cuBLAS GEMMs for prefill, the weighted
 * combine) and the shared expert's sigmoid gate; the routing is ops_moe_route.cu's.
 *
 * The semantics are the CPU reference's (src/cpu/ops_moe.c, backend.h):
 *  - DeepSeek's plain shared experts (moe_params.num_shared): experts E .. E + num_shared - 1 of the same
 *    be_experts, which moe_route appends to every token's top k with weight 1 (k_moe_route's last
 *    lanes), so moe_experts below runs them as any expert: k there is top_k + num_shared, E the routed
 *    and shared experts together. A decode batch keeps the expert GEMV while its routed pairs fit
 *    (T * top_k <= CU_MOE_GEMV_MAX_PAIRS and T <= 8: the shared experts take every token).
 *  - moe_experts: the T * k (token, slot) pairs grouped by expert (expert id, then token, then slot:
 *    a stable counting sort on the device), each expert's gated MLP on its group, each expert output
 *    rounded to BF16 (the activation dtype), then y[t] = (y[t] +) sum of w[t, j] * out in f32 over the
 *    token's slots in increasing expert id (transformers' index_add_ order), rounded once.
 *
 * Weights: experts_create uploads all experts of a layer into two contiguous BF16 allocations,
 * gate|up (E, 2I, D) (expert e's rows [0, I) are gate_e, [I, 2I) up_e) and down (E, D, I), so kernels
 * find an expert by pointer arithmetic (F32 / F16 checkpoints are converted on the device, as
 * linear_create does; ggml block types (GGUF experts: gate / up in one type, down possibly another, as
 * Q4_K_M files keep ffn_down_exps in Q6_K) are dequantized on the device, ops_linear_blocks.cu's
 * cu_qraw_rows: the experts then take BF16's memory, not the file's). be_experts stays opaque so
 * quantized expert formats can hide behind it later.
 *
 * moe_experts, on the device and in this order (pairs N = T * k, position p = the pair's place in the
 * expert-sorted order):
 *  1. k_moe_permute (one CTA of 512 threads; k_moe_permute_small, 64 threads, for N <= CU_MOE_GEMV_MAX_PAIRS):
 *     per-expert counts, their exclusive prefix sum offs[E + 2] (bucket E collects ids out of range, which
 *     are reported and skipped), the grouped GEMM's tile list (tiles: each expert with tokens in increasing id,
 *     ceil(n_e / BM) pair blocks of it, (-1) past them),
 *     perm[p] = t * k + j and its inverse inv[t * k + j] = p, pe[p] = the expert at position p, and a slot
 *     table (expert, first position, pairs) of the experts with tokens (-1 past them) for the GEMV CTAs.
 *     No host round trip: the decode path below records into a CUDA graph. One token on the expert GEMV takes
 *     no permutation: pair j is position j and slot j, the kernels read its expert from ids (session 30).
 *  2a. decode (N <= CU_MOE_GEMV_MAX_PAIRS, or forced): k_moe_gemv<2, TT> on grid (ceil(I / 8), min(E, N)):
 *     CTA (x, a) takes slot a (the a-th expert that has tokens; the others exit at once) and 8 of its
 *     gate|up row pairs, a warp per pair, and streams each row once for all the expert's tokens (TT at a
 *     time, TT the smallest power of two <= 8 covering the batch; more tokens re-read the rows from L2),
 *     writing h[p] (N, I) = act(gate . x + bg) * (up . x + bu) in BF16; then, N <= CU_MOE_GEMV_MAX_PAIRS,
 *     k_moe_down_comb: a warp per output column d of down (D, I) takes every pair in position order (4
 *     pairs' rows in flight; h copied into the CTA's shared memory first where N x I BF16 fit 48 KB), rounds
 *     o = down_e[d] . h[p] (+ bd) to BF16 and adds w * o into its token's sum:
 *     step 3's combine with no (N, D) buffer and no launch (VLLM_CUDA_MOE_COMBINE=split keeps them apart), for
 *     rows of up to 1024 inputs, 2048 where h is in shared memory (VLLM_CUDA_MOE_DCLONG); longer rows and
 *     calls forced past that size: k_moe_gemv<1, TT> on grid (ceil(D / 8), min(E, N)) streams down (D, I) the
 *     same way into o[p] (N, D) BF16 (+ bd), then step 3.
 *  2b. larger batches (D, I multiples of 8, x rows 16-byte aligned): k_moe_mma<2, BM>, then <1, BM>, the
 *     grouped GEMM on the tensor cores: CTA (x, y) computes a tile of BM pairs of one expert (BM 32, 64 or
 *     128, from the pairs per expert) by 128 weight rows (64 outputs' gate and up rows, or 128 down rows) with
 *     mma.sync (BF16 in, f32 accumulate) from a cp.async pipeline 3-4 K steps deep; the tile list (each
 *     expert with tokens, ceil(n_e / BM) pair blocks, in increasing id) found on the device from offs by a
 *     warp scan, so nothing is read on the host and the call records into a graph; same epilogues as 2a.
 *  2c. otherwise (unaligned shapes, or VLLM_CUDA_MOE=gemm): k_moe_gather copies the permuted x rows into
 *     xg (N, D); the counts are read back to the host (one synchronize: never recorded) and each expert
 *     with tokens runs two cuBLAS GEMMs (GemmEx) on its segment with act_mul between them.
 *  3. k_moe_combine (a CTA per token and 2048 columns): y[t] = (y[t] +) sum_j w[t, j] * o[inv[t, j]] in f32.
 *
 * Scratch (the permutation, h, o, xg, gu, a pinned host copy of the counts) is shared by all the layers
 * of a backend (moe_ws, reference-counted by its be_experts: the last experts_free releases it). Calls
 * of up to CU_MOE_GEMV_MAX_PAIRS pairs use buffers sized when the experts are created; larger ones use
 * buffers experts_reserve sizes for the engine's largest step (the decoder's reserve), so every decode
 * batch records into a graph. Without a reservation they grow as needed, eagerly: a recording that
 * would need them to grow is refused, and once a recording uses them they never move again.
 *
 * Performance (H200, Qwen3-30B-A3B shape, docs/benchmarks.md; VLLM_CUDA_MOE=gemv|grouped|gemm forces a path):
 *  - batch 1: 45 us per MoE layer against a floor of 17.9 (75 MB of 8 experts at 4.25 TB/s). ncu (base
 *    clocks): router GEMV 4.2 us, route 9.6, permutation 5.4, gate|up GEMV 24 (2.1 TB/s), down GEMV 16.5,
 *    combine ~12 before its rework. The GEMVs cannot load weights before pdl_wait() (the expert comes from
 *    the routing) and hold one batch of loads per lane in flight (no double buffering, unlike
 *    ops_linear.cu's k_gemv); the small kernels are latency chains of a single CTA.
 *    Session 29 (H100, Qwen3-30B-A3B shape, ms a decode step): the 64-thread permutation with the slot table
 *    (the GEMV CTAs' expert, first position and pairs in one load) and the fused down + combine 4.169 -> 4.011
 *    (Qwen3.5-35B-A3B 4.390 -> 4.204); the fused kernel alone 4.024 -> 4.011 (DeepSeek-V2-Lite, I 1408: 2.927
 *    -> 3.015, slower: hence its one-pass limit). ncu of that step, us a layer: gate|up GEMV 23.5 (2.1 TB/s),
 *    down + combine 17.5 (1.4 TB/s), route 8.4, permutation 2.9. Measured and dropped: a persistent one-token
 *    gate|up GEMV (k_gemv's flattened, double-buffered stream over the chosen experts' rows, 2 CTAs an SM):
 *    4.011 -> 4.036, 35B-A3B 4.204 -> 4.183, V2-Lite 3.015 -> 3.197 (its 1408-row experts: 5.3 row groups a
 *    CTA, and no loads before pdl_wait to hide the start). k_moe_gemv<2, 1> at 3 CTAs an SM (8 chunks a lane):
 *    slower on all three; at 4 CTAs with 4 chunks: the one-token default (35B-A3B 4.125 -> 4.022).
 *    Measured and dropped (session 30, H100, ms a step): decode's expert rows copied into shared memory by
 *    cp.async, all of a CTA's at once (k_moe_gemv_cp: 8 row pairs, 64 KB at D 2048, 3 CTAs an SM; the fused
 *    down + combine with 4 columns x N pairs, up to 96 KB): more bytes in flight than registers hold (ncu put the
 *    register forms at 0.4-0.5 eligible warps a scheduler), yet slower on all three: Qwen3-30B-A3B 3.83 -> 4.09,
 *    35B-A3B 3.79 -> 4.03, DeepSeek-V2-Lite 2.86 -> 3.31 (no compute overlaps the one round trip a CTA).
 *    Session 33 (H100, ms a step): the down + combine copies h into shared memory once a CTA (cp.async, while the
 *    first pairs' weight rows load) instead of each warp reading it through L2 after them: Qwen3-30B-A3B 3.677 ->
 *    3.391, 35B-A3B 3.476 -> 3.300 (ncu before: 18.2 us, 0.97 TB/s, 46% L2 hits). Measured and dropped the same
 *    session: one token's whole MoE in one kernel of one CTA an SM (gate|up rows by every warp of the grid in turn,
 *    the CTA's down rows copied into shared memory meanwhile, a grid barrier, then the down + combine from shared
 *    memory): 4.08 ms (8 warps a CTA), 3.69-3.72 (16), 3.72 (32) against 3.62 for the two kernels before the h change;
 *    ncu 45.7 / 35.7 / 42.8 us against 21.4 + 18.2: its DRAM throughput followed its warps a SM (1.2-1.6 TB/s at 8-16
 *    warps against the gate|up GEMV's 2.35 at 28), and it overlaps nothing before or after it (208 KB of shared memory
 *    an SM).
 *    Session 34 (H100, ms a step, one call): the fused down + combine with h in shared memory past one pass of 1024
 *    inputs: DeepSeek-V2-Lite (1408, two passes) 3.139 -> 2.72, now the default up to two passes; gpt-oss-20b (2880,
 *    three) 3.141 -> 3.236, not. Measured and dropped the same call (Qwen3-30B-A3B 3.393; gpt-oss-20b 3.141;
 *    DeepSeek-V2-Lite 3.132; Qwen3.5-35B-A3B 3.288): the down + combine with all its weight rows copied into shared
 *    memory before the PDL wait (k_moe_down_cp, 8 columns a CTA, two CTAs an SM) 3.510 on Qwen3-30B-A3B; the
 *    one-token gate|up GEMV on at most the resident CTAs looping over its blocks, its ids read once: 3.422, 3.171,
 *    3.244, 3.302; the split kernels' down GEMV prefetching its input into L1: 3.470 (gpt-oss), 3.723 (V2-Lite); the
 *    chosen experts' rows prefetched into L2 by bulk prefetches (cp.async.bulk.prefetch.L2) on a side stream forked
 *    after the routing: their down rows 3.600, with half the gate|up rows 4.093, every gate|up row 3.770 (the
 *    prefetches compete with the GEMV's own loads for the same DRAM time; the step has no idle bandwidth to fill
 *    while the experts stream). The same side-stream prefetch of o_proj's weights during the attention: 3.442
 *    (gpt-oss 3.184), and of the next layer's qkv during the MoE: 3.613.
 *    Measured and dropped (H200, test_cuda_perf's MoE rows, graphs): no permutation kernel, each GEMV CTA
 *    finding its expert and the expert's pairs from ids itself (a shared bitmask of the chosen experts, its
 *    a-th set bit, a ballot of the pairs; rows indexed by pair) was slower: batch 1 47.8 -> 49.6 us, batch 8
 *    226.7 -> 282.6 us per layer (a warp-0 version; a whole-CTA version 47.3 -> 48.4, 228.3 -> 261.1). The
 *    grouping prologue runs in every CTA before its first weight load, and the GEMVs run many waves of
 *    short-lived CTAs (a row per warp), so it costs more than the one-CTA permutation it replaces. A down
 *    GEMV with 4 rows per warp and the next row's loads in flight (a quarter of the CTAs, 3 per SM) was
 *    slower too at batch 1 (48.4 -> 50.1 us).
 *  - 256 tokens (2,048 pairs): 610 us per layer against 284 (all 128 experts read once) with the first
 *    grouped GEMM (wmma 64 x 64 tiles, loads through registers one K step ahead, no cp.async pipeline, 64-row
 *    tiles mostly empty at ~16 pairs per expert); k_moe_mma replaced it (session 30).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mma.h>
#include <mutex>

#include "cuda/cuda_blocks.h"
#include "cuda/cuda_internal.h"

extern "C" {
#include "tensor/int4.h"
}


#define MP_THREADS 512          /* k_moe_permute's CTA */
#define MP_WARPS (MP_THREADS / 32)
#define MGV_WARPS 8             /* k_moe_gemv: a warp per output row, 8 rows per CTA */
#define MGV_U 4                 /* 16-byte chunks per lane per row in flight */

/* ---- the per-backend scratch ---- */

typedef struct moe_ws moe_ws;
struct moe_ws {
    cu_state *cu;
    int refs;                   /* be_experts using it */
    moe_ws *next;
    /* calls of up to CU_MOE_GEMV_MAX_PAIRS pairs (graphs): sized at experts_create, never moved after */
    cu_buf dmeta, dh, dout;
    /* larger calls (never recorded): grown as needed */
    cu_buf meta;                /* int32: meta_layout's offs, tiles, perm, inv, slot, pe */
    cu_buf h;                   /* (N, I) BF16 */
    cu_buf o;                   /* (N, D) BF16 */
    cu_buf xg;                  /* (N, D) BF16, prefill */
    cu_buf gu;                  /* (N, 2I) BF16, prefill */
    cu_buf host;                /* pinned: offs (E + 2), prefill */
    bool recorded_large;        /* a recording uses meta / h / o: they must not move any more */
    bool mm_attr;               /* the grouped GEMM's (k_moe_mma) */
    int gv_occ[2][3];           /* CTAs an SM of the one-token expert GEMV, [NR - 1][split-K 1, 2, 4] (mm_attrs) */
};

static vllm_status mm_attrs(moe_ws *ws);

static std::mutex g_ws_mu;
static moe_ws *g_ws;            /* one per live backend that has experts */

static moe_ws *ws_acquire(cu_state *cu) {
    std::lock_guard<std::mutex> lock(g_ws_mu);
    for (moe_ws *w = g_ws; w; w = w->next)
        if (w->cu == cu) {
            w->refs++;
            return w;
        }
    moe_ws *w = (moe_ws *)calloc(1, sizeof *w);
    if (!w) return NULL;
    w->cu = cu;
    w->refs = 1;
    w->next = g_ws;
    g_ws = w;
    return w;
}

static void ws_release(moe_ws *ws) {
    if (!ws) return;
    std::lock_guard<std::mutex> lock(g_ws_mu);
    if (--ws->refs > 0) return;
    for (moe_ws **pp = &g_ws; *pp; pp = &(*pp)->next)
        if (*pp == ws) {
            *pp = ws->next;
            break;
        }
    cu_buf *bufs[] = {&ws->dmeta, &ws->dh, &ws->dout, &ws->meta, &ws->h, &ws->o, &ws->xg, &ws->gu};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        ws->cu->bytes_allocated -= bufs[i]->cap;
        cu_buf_free(bufs[i]); /* cudaFree waits for the work that may still use it */
    }
    cu_hbuf_free(&ws->host);
    free(ws);
}

/* The grouped GEMM's tiles of BM pairs: at most ceil(N / BM) + min(E, N) (the grid's y), and the table's entries
 * (BM >= 32) */
static unsigned gg_tiles_bound(int N, int E, int BM) { return (unsigned)((N + BM - 1) / BM + (N < E ? N : E)); }

/* The int32 scratch of a call: offs (E + 2) | tiles (gg_tiles_bound(N, E, 32) int4) | perm (N) | inv (N) | slot (min(E, N) int4) |
 * pe (N), 256-byte aligned. */
typedef struct moe_meta {
    size_t offs, tiles, perm, inv, slot, pe, bytes;
} moe_meta;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static moe_meta meta_layout(int E, int N) {
    moe_meta m;
    m.offs = 0;
    m.tiles = align256((size_t)(E + 2) * 4);
    m.perm = m.tiles + align256((size_t)gg_tiles_bound(N, E, 32) * 16);
    m.inv = m.perm + align256((size_t)N * 4);
    m.slot = m.inv + align256((size_t)N * 4);
    m.pe = m.slot + align256((size_t)(N < E ? N : E) * 16);
    m.bytes = m.pe + align256((size_t)N * 4);
    return m;
}

/* The small calls' buffers at this layer's size (at experts_create: never while recording). */
static vllm_status ws_reserve_small(cu_state *cu, moe_ws *ws, int E, int64_t D, int64_t I) {
    const size_t P = CU_MOE_GEMV_MAX_PAIRS;
    vllm_status st = cu_buf_reserve(cu, &ws->dmeta, meta_layout(E, (int)P).bytes, "moe_experts permutation");
    if (st == VLLM_OK) st = cu_buf_reserve(cu, &ws->dh, P * (size_t)I * 2, "moe_experts h");
    if (st == VLLM_OK) st = cu_buf_reserve(cu, &ws->dout, P * (size_t)D * 2, "moe_experts expert outputs");
    return st;
}

/* ---- experts ---- */

struct be_experts {
    int E;
    int64_t D, I;
    __nv_bfloat16 *gu;          /* (E, 2I, D): expert e's gate rows, then its up rows */
    __nv_bfloat16 *down;        /* (E, D, I) */
    __nv_bfloat16 *bias;        /* NULL, or (E, 2I + D) expert e's gate (I), up (I), down (D) biases (gpt-oss;
                                   a missing one zero) */
    moe_ws *ws;
    int path;                   /* VLLM_CUDA_MOE at creation: 0 by batch size, 1 the expert GEMV ("gemv"),
                                   2 cuBLAS per expert ("gemm"), 3 the grouped GEMM ("grouped") */
    int mm_bm;                  /* VLLM_CUDA_MOE_BM=32|64|128 at creation: the grouped GEMM's pair rows a tile (a
                                   measurement switch; 0: mm_bm's choice from the pairs an expert) */
    bool split_comb;            /* VLLM_CUDA_MOE_COMBINE=split at creation: decode batches keep the down GEMV and
                                   the combine as two kernels (a measurement switch; k_moe_down_comb otherwise) */
    bool late_off;              /* VLLM_CUDA_MOE_EARLY=0 at creation: the down + combine reads the pairs and loads
                                   its weights only after its PDL wait (a measurement switch) */
    bool dc_hs_off;             /* VLLM_CUDA_MOE_DCH=0 at creation: the down + combine reads h through L2, not from
                                   shared memory (a measurement switch) */
    int dc_passes;              /* the most passes of 1024 inputs a row of the fused down + combine takes where h fits its
                                   shared memory (one pass: always): 2 by default, 1 with VLLM_CUDA_MOE_DCLONG=0, any
                                   with =1 (measurement switches) */
    int gv_ks;                  /* VLLM_CUDA_MOE_KS=1|2|4 at creation: the one-token expert GEMV's split-K (a
                                   measurement switch; 0: gv_pick_ks's choice) */
    bool no_wg;                 /* VLLM_CUDA_MOE_WG=0 at creation: 128-pair tiles on k_moe_mma, not k_moe_wg (a
                                   measurement switch) */
};

// the larger calls' scratch (meta, h, o) for up to max_pairs pairs of ex's shape; graphs may then record them
vllm_status cu_experts_reserve(backend *be, const be_experts *ex, int64_t max_pairs) {
    cu_state *cu = cu_of(be);
    if (!ex || max_pairs < 0 || max_pairs > INT_MAX / 2)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_reserve: %lld pairs", (long long)max_pairs);
    if (cu->capturing) return vt_error(VLLM_ERR_BACKEND, "experts_reserve: not allowed while a graph is being recorded");
    moe_ws *ws = ex->ws;
    const size_t N = (size_t)max_pairs;
    if (ws->recorded_large && (ws->meta.cap < meta_layout(ex->E, (int)N).bytes || ws->h.cap < N * (size_t)ex->I * 2 ||
                               ws->o.cap < N * (size_t)ex->D * 2))
        return vt_error(VLLM_ERR_BACKEND, "experts_reserve: graphs already record the current scratch");
    vllm_status st;
    if ((st = cu_buf_reserve(cu, &ws->meta, meta_layout(ex->E, (int)N).bytes, "moe_experts permutation")) ||
        (st = cu_buf_reserve(cu, &ws->h, N * (size_t)ex->I * 2, "moe_experts h")) ||
        (st = cu_buf_reserve(cu, &ws->o, N * (size_t)ex->D * 2, "moe_experts expert outputs")))
        return st;
    if (max_pairs > be->graph_moe_pairs) be->graph_moe_pairs = (int)max_pairs;
    return VLLM_OK;
}

void cu_experts_free(backend *be, be_experts *ex) {
    (void)be;
    if (!ex) return;
    if (ex->gu) cudaFree(ex->gu);
    if (ex->down) cudaFree(ex->down);
    if (ex->bias) cudaFree(ex->bias);
    ws_release(ex->ws);
    free(ex);
}

/* the environment variable name is set to v (the measurement switches, read at experts_create) */
static bool env_is(const char *name, const char *v) {
    const char *e = getenv(name);
    return e && !strcmp(e, v);
}

static bool moe_weight_ok(const tensor *w, int64_t rows, int64_t cols, dtype dt) {
    if (!w || w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols || w->dtype != dt || !w->data) return false;
    if (dtype_is_block(dt) && (cols % dtype_block(dt) || (w->row_stride && w->row_stride % dtype_block(dt))))
        return false;
    return !w->row_stride || w->row_stride >= cols;
}

/* bytes of a (rows, cols) weight of dtype dt uploaded to the stage (block types: the file's blocks) */
static size_t moe_stage_bytes(dtype dt, int64_t rows, int64_t cols) {
    if (dt == DTYPE_I4_B128) return (size_t)rows * (size_t)cols * 4; /* dequantized on the host to F32 first */
    return dtype_is_block(dt) ? (size_t)rows * cu_qrow_bytes(dt, cols) : (size_t)rows * (size_t)cols * dtype_size(dt);
}

/* One (rows, cols) host weight into dst (rows, cols) BF16 on the device; stage: device memory for a
 * non-BF16 source (rows * cols of its dtype). */
static cudaError_t moe_upload(cu_state *cu, __nv_bfloat16 *dst, const tensor *w, void *stage) {
    const int64_t rows = w->shape[0], cols = w->shape[1], stride = w->row_stride ? w->row_stride : cols;
    const size_t es = dtype_size(w->dtype);
    if (w->dtype == DTYPE_I4_B128) { /* AWQ / GPTQ experts: F32 rows made on the host, then as F32 */
        float *f = (float *)malloc((size_t)rows * (size_t)cols * sizeof(float) + 4);
        if (!f) return cudaErrorMemoryAllocation;
        for (int64_t r = 0; r < rows; r++)
            i4_dequantize_row((const i4_block *)w->data + r * (stride / I4_B), cols, f + r * cols);
        cudaError_t e = cudaMemcpy(stage, f, (size_t)rows * (size_t)cols * 4, cudaMemcpyHostToDevice);
        free(f);
        if (e == cudaSuccess && !cu_convert_bf16(cu, dst, stage, DTYPE_F32, rows, cols, cols)) e = cudaErrorLaunchFailure;
        if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
        return e;
    }
    if (dtype_is_block(w->dtype)) { /* the blocks to the stage, dequantized from there */
        const size_t rb = cu_qrow_bytes(w->dtype, cols);
        cudaError_t e = cu_h2d_2d(cu, stage, rb, w->data, cu_qrow_bytes(w->dtype, stride), rb, (size_t)rows, w->dtype);
        if (e == cudaSuccess && !cu_qraw_rows(cu, "experts_create", w->dtype, stage, rb, rows, NULL, rows, cols, dst,
                                              DTYPE_BF16, cols, false))
            e = cudaErrorLaunchFailure;
        if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* the stage is reused */
        return e;
    }
    if (w->dtype == DTYPE_BF16)
        return cu_h2d_2d(cu, dst, (size_t)cols * 2, w->data, (size_t)stride * 2, (size_t)cols * 2, (size_t)rows,
                         w->dtype);
    cudaError_t e = cu_h2d_2d(cu, stage, (size_t)cols * es, w->data, (size_t)stride * es, (size_t)cols * es,
                              (size_t)rows, w->dtype);
    if (e == cudaSuccess && !cu_convert_bf16(cu, dst, stage, w->dtype, rows, cols, cols)) e = cudaErrorLaunchFailure;
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream); /* the stage is reused */
    return e;
}

/* An expert bias: NULL (zero), or n contiguous elements of a float dtype. */
static bool moe_bias_ok(const tensor *b, int64_t n) {
    return !b || (b->data && tensor_numel(b) == n && (b->ndim <= 1 || tensor_row_stride(b) == tensor_row_len(b)) &&
                  (b->dtype == DTYPE_F32 || b->dtype == DTYPE_F16 || b->dtype == DTYPE_BF16));
}

// gate[e], up[e] (I, D), down[e] (D, I), e < E, one float dtype -> gu (E, 2I, D), down (E, D, I) BF16;
// biases (any float dtype) -> bias (E, 2I + D) BF16 (the checkpoints' dtype: gpt-oss ships them in BF16)
vllm_status cu_experts_create(backend *be, const tensor *const *gate, const tensor *const *up,
                              const tensor *const *down, const be_expert_bias *bias, int E, be_experts **out) {
    cu_state *cu = cu_of(be);
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: no output");
    *out = NULL;
    if (cu->capturing) return vt_error(VLLM_ERR_BACKEND, "experts_create: not allowed while a graph is being recorded");
    if (E < 1 || !gate || !up || !down)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: %d experts, or no weight arrays", E);
    const tensor *g0 = gate[0];
    if (!g0 || g0->ndim != 2 || g0->shape[0] < 1 || g0->shape[1] < 1)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: gate 0 must be a 2-D (I, D) tensor");
    /* gate and up share a dtype, down may have its own (GGUF Q4_K_M keeps ffn_down_exps in Q6_K) */
    const dtype dt = g0->dtype, ddt = down[0] ? down[0]->dtype : dt;
    for (int q = 0; q < 2; q++) {
        const dtype d = q ? ddt : dt;
        if (d != DTYPE_F32 && d != DTYPE_F16 && d != DTYPE_BF16 && d != DTYPE_I4_B128 && !cu_qtype_ok(d))
            return vt_error(VLLM_ERR_UNSUPPORTED,
                            "experts_create: weight dtype %s (expected F32, F16, BF16 or a ggml block type)",
                            dtype_name(d));
    }
    const int64_t I = g0->shape[0], D = g0->shape[1];
    if (I > INT_MAX / 2 || D > INT_MAX || E > INT_MAX / 2 || I * D > INT64_MAX / 4 / E)
        return vt_error(VLLM_ERR_INVALID_ARG, "experts_create: %d experts of (%lld, %lld) are too large", E,
                        (long long)I, (long long)D);
    for (int e = 0; e < E; e++)
        if (!moe_weight_ok(gate[e], I, D, dt) || !moe_weight_ok(up[e], I, D, dt) || !moe_weight_ok(down[e], D, I, ddt))
            return vt_error(VLLM_ERR_INVALID_ARG,
                            "experts_create: expert %d must have gate, up (%lld, %lld) %s and down (%lld, %lld) %s "
                            "like expert 0 (block types: rows of whole blocks)",
                            e, (long long)I, (long long)D, dtype_name(dt), (long long)D, (long long)I, dtype_name(ddt));
    const bool has_bias = bias && (bias->gate || bias->up || bias->down);
    for (int e = 0; has_bias && e < E; e++)
        if (!moe_bias_ok(bias->gate ? bias->gate[e] : NULL, I) || !moe_bias_ok(bias->up ? bias->up[e] : NULL, I) ||
            !moe_bias_ok(bias->down ? bias->down[e] : NULL, D))
            return vt_error(VLLM_ERR_INVALID_ARG,
                            "experts_create: expert %d's biases must be contiguous F32 / F16 / BF16 of %lld (gate, "
                            "up) and %lld (down) elements",
                            e, (long long)I, (long long)D);

    be_experts *ex = (be_experts *)calloc(1, sizeof *ex);
    if (!ex) return vt_error(VLLM_ERR_NO_MEMORY, "experts_create: out of memory");
    ex->E = E;
    ex->D = D;
    ex->I = I;
    const char *env = getenv("VLLM_CUDA_MOE");
    ex->path = !env ? 0 : !strcmp(env, "gemv") ? 1 : !strcmp(env, "gemm") ? 2 : !strcmp(env, "grouped") ? 3 : 0;
    ex->split_comb = env_is("VLLM_CUDA_MOE_COMBINE", "split");
    ex->no_wg = env_is("VLLM_CUDA_MOE_WG", "0");
    ex->late_off = env_is("VLLM_CUDA_MOE_EARLY", "0");
    ex->dc_hs_off = env_is("VLLM_CUDA_MOE_DCH", "0");
    ex->dc_passes = env_is("VLLM_CUDA_MOE_DCLONG", "0") ? 1 : env_is("VLLM_CUDA_MOE_DCLONG", "1") ? INT_MAX : 2;
    const char *kenv = getenv("VLLM_CUDA_MOE_KS");
    ex->gv_ks = kenv && (!strcmp(kenv, "1") || !strcmp(kenv, "2") || !strcmp(kenv, "4")) ? atoi(kenv) : 0;
    const char *benv = getenv("VLLM_CUDA_MOE_BM");
    ex->mm_bm = !benv ? 0 : atoi(benv) == 32 || atoi(benv) == 64 || atoi(benv) == 128 ? atoi(benv) : 0;
    ex->ws = ws_acquire(cu);
    vllm_status st = VLLM_OK;
    void *stage = NULL;
    const size_t per = (size_t)I * (size_t)D; /* elements of one gate, up or down */
    cudaError_t e = cudaSuccess;
    if (!ex->ws) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "experts_create: out of memory");
        goto done;
    }
    e = cudaMalloc((void **)&ex->gu, (size_t)E * 2 * per * 2);
    if (e == cudaSuccess) e = cudaMalloc((void **)&ex->down, (size_t)E * per * 2);
    if (e == cudaSuccess && (dt != DTYPE_BF16 || ddt != DTYPE_BF16 || has_bias)) { /* a weight's, or a bias's */
        const size_t wg = dt != DTYPE_BF16 ? moe_stage_bytes(dt, I, D) : 0,
                     wd = ddt != DTYPE_BF16 ? moe_stage_bytes(ddt, D, I) : 0,
                     bb = has_bias ? (size_t)(I > D ? I : D) * 4 : 0;
        const size_t wb = wg > wd ? wg : wd;
        e = cudaMalloc(&stage, wb > bb ? wb : bb);
    }
    if (e == cudaSuccess && has_bias) e = cudaMalloc((void **)&ex->bias, (size_t)E * (size_t)(2 * I + D) * 2);
    if (e == cudaSuccess && has_bias) e = cudaMemsetAsync(ex->bias, 0, (size_t)E * (size_t)(2 * I + D) * 2, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = vt_error(VLLM_ERR_NO_MEMORY, "experts_create: out of device memory for %d experts of (%lld, %lld): %s", E,
                      (long long)I, (long long)D, cudaGetErrorString(e));
        goto done;
    }
    cu->bytes_allocated += (size_t)E * 3 * per * 2 + (has_bias ? (size_t)E * (size_t)(2 * I + D) * 2 : 0);
    for (int x = 0; x < E && e == cudaSuccess; x++) {
        __nv_bfloat16 *gx = ex->gu + (size_t)x * 2 * per;
        e = moe_upload(cu, gx, gate[x], stage);                                 /* rows [0, I) */
        if (e == cudaSuccess) e = moe_upload(cu, gx + per, up[x], stage);      /* rows [I, 2I) */
        if (e == cudaSuccess) e = moe_upload(cu, ex->down + (size_t)x * per, down[x], stage);
        /* the biases as (1, n) rows: gate at 0, up at I, down at 2I of the expert's 2I + D */
        const tensor *bx[3] = {has_bias && bias->gate ? bias->gate[x] : NULL, has_bias && bias->up ? bias->up[x] : NULL,
                               has_bias && bias->down ? bias->down[x] : NULL};
        for (int q = 0; q < 3 && e == cudaSuccess; q++) {
            if (!bx[q]) continue;
            const int64_t n = q < 2 ? I : D;
            const tensor row = tensor_2d(bx[q]->dtype, bx[q]->data, 1, n);
            e = moe_upload(cu, ex->bias + (size_t)x * (size_t)(2 * I + D) + (size_t)q * (size_t)I, &row, stage);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            st = vt_error(VLLM_ERR_BACKEND, "experts_create: upload of expert %d failed: %s", x, cudaGetErrorString(e));
        }
    }
    if (st == VLLM_OK) st = ws_reserve_small(cu, ex->ws, E, D, I);
    if (st == VLLM_OK) st = mm_attrs(ex->ws);
    if (st == VLLM_OK && (e = cudaStreamSynchronize(cu->stream)) != cudaSuccess) { /* the host tensors may go */
        cudaGetLastError();
        st = vt_error(VLLM_ERR_BACKEND, "experts_create: upload failed: %s", cudaGetErrorString(e));
    }
    if (st == VLLM_OK && cu->err != VLLM_OK) st = vt_error(cu->err, "experts_create: %s", cu->err_msg);
done:
    if (stage) cudaFree(stage);
    if (st != VLLM_OK) {
        cu_experts_free(be, ex);
        return st;
    }
    *out = ex;
    return VLLM_OK;
}

/* ---- argument checks ---- */

bool cu_moe_params_ok(cu_state *cu, const char *op, const moe_params *p) {
    if (!p) {
        cu_fail(cu, "%s: no moe_params", op);
        return false;
    }
    if (p->num_experts < 1 || p->top_k < 1 || p->top_k > p->num_experts) {
        cu_fail(cu, "%s: top_k %d of %d experts (need 1 <= top_k <= num_experts)", op, p->top_k, p->num_experts);
        return false;
    }
    if ((unsigned)p->scoring >= BE_MOE_SCORING_COUNT || (unsigned)p->act >= BE_ACT_COUNT) {
        cu_fail(cu, "%s: scoring %d or activation %d is out of range", op, (int)p->scoring, (int)p->act);
        return false;
    }
    if (!(p->swiglu_alpha >= 0.0f && p->swiglu_limit >= 0.0f && isfinite(p->swiglu_alpha) &&
          isfinite(p->swiglu_limit))) {
        cu_fail(cu, "%s: swiglu_alpha %g and swiglu_limit %g must be 0 (the defaults) or positive and finite", op,
                (double)p->swiglu_alpha, (double)p->swiglu_limit);
        return false;
    }
    const char *why = be_moe_routing_check(p);
    if (why) {
        cu_fail(cu, "%s: %s", op, why);
        return false;
    }
    if (p->num_experts + p->num_shared > CU_MOE_MAX_E) {
        cu_fail(cu, "%s: %d experts (%d shared; the CUDA kernels take up to %d)", op, p->num_experts + p->num_shared,
                p->num_shared, CU_MOE_MAX_E);
        return false;
    }
    if (be_moe_width(p) > CU_MOE_MAX_K) {
        cu_fail(cu, "%s: top_k %d + %d shared experts (the CUDA kernels take up to %d)", op, p->top_k, p->num_shared,
                CU_MOE_MAX_K);
        return false;
    }
    if (p->num_groups > 32) {
        cu_fail(cu, "%s: %d expert groups (k_moe_route takes up to 32: a lane each)", op, p->num_groups);
        return false;
    }
    return true;
}

static bool moe_overlap(const tensor *a, const tensor *b) {
    const int64_t na = tensor_extent_bytes(a), nb = tensor_extent_bytes(b);
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

/* ---- the permutation ---- */

struct perm_args {
    const int32_t *ids;         /* (T, k), row stride is */
    int64_t is;
    int N, k, E;
    int *offs;                  /* (E + 2): bucket b's pairs are [offs[b], offs[b + 1]); bucket E: bad ids */
    int4 *tiles;                /* (ntiles) or NULL: the grouped GEMM's pair blocks of bm, (expert, first position,
                                   pairs, 0) over the experts with pairs in increasing id, then (-1, 0, 0, 0) */
    int bm, ntiles;
    int *perm;                  /* (N): perm[p] = t * k + j */
    int *inv;                   /* (N): inv[t * k + j] = p */
    int4 *slot;                 /* (min(E, N)): slot a: (the a-th expert with pairs, its first position, its pairs, 0); the
                                   others (-1, 0, 0, 0): what an expert kernel's CTA needs, in one load */
    int *pe;                    /* (N): pe[p] = the expert of position p (E: an id out of range) */
    cu_dev_err *err;
};

/* Exclusive prefix sums of v's three fields over the CTA at once (MP_THREADS threads, every thread calls); *total:
 * their sums. */
__device__ __forceinline__ int3 mp_scan3(int3 v, int3 *wsum, int3 *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int3 inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, inc.x, o), y = __shfl_up_sync(0xffffffffu, inc.y, o),
                  z = __shfl_up_sync(0xffffffffu, inc.z, o);
        if (lane >= o) inc = make_int3(inc.x + x, inc.y + y, inc.z + z);
    }
    if (lane == 31) wsum[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        int3 s = lane < MP_WARPS ? wsum[lane] : make_int3(0, 0, 0);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, s.x, o), y = __shfl_up_sync(0xffffffffu, s.y, o),
                      z = __shfl_up_sync(0xffffffffu, s.z, o);
            if (lane >= o) s = make_int3(s.x + x, s.y + y, s.z + z);
        }
        if (lane < MP_WARPS) wsum[lane] = s;
    }
    __syncthreads();
    const int3 before = warp ? wsum[warp - 1] : make_int3(0, 0, 0);
    *total = wsum[MP_WARPS - 1];
    __syncthreads(); /* wsum is reused by the next call */
    return make_int3(before.x + inc.x - v.x, before.y + inc.y - v.y, before.z + inc.z - v.z);
}

/* Pair i's id as the ids tensor holds it. */
__device__ __forceinline__ int mp_id(const perm_args &a, int i) {
    const int t = i / a.k;
    return a.ids[(int64_t)t * a.is + (i - t * a.k)];
}
/* The bucket of pair i of id e: its expert, or E for an id out of range (reported when report). */
__device__ __forceinline__ int mp_check(const perm_args &a, int i, int e, bool report) {
    if (e >= 0 && e < a.E) return e;
    if (report) cu_report(a.err, CU_DEV_MOE_ID, i / a.k, e, a.E);
    return a.E;
}
__device__ __forceinline__ int mp_bucket(const perm_args &a, int i, bool report) {
    return mp_check(a, i, mp_id(a, i), report);
}

#define MP_KEEP 8               /* k_moe_permute: the first MP_KEEP tiles' buckets stay in registers between passes */

// ids (T, k) -> offs, tiles, perm, inv, slot, pe: a stable counting sort of the N pairs by expert, one CTA
__global__ void __launch_bounds__(MP_THREADS) k_moe_permute(perm_args a) {
    __shared__ int hist[MP_WARPS][CU_MOE_MAX_E + 1]; /* a tile's pairs per (warp, bucket) */
    __shared__ int cur[CU_MOE_MAX_E + 1];            /* counts, then each bucket's next position */
    __shared__ int3 wsum[MP_WARPS];
    pdl_launch();
    pdl_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nb = a.E + 1;
    /* the buckets of the first MP_KEEP tiles' pairs, loaded together (a decode batch of 256 tokens x 8 is 4 tiles)
     * and kept for the placement: no second round trip to the ids a tile */
    int kb[MP_KEEP];
#pragma unroll
    for (int r = 0; r < MP_KEEP; r++) { /* every load issued before any report (a store the loads could alias) */
        const int i = r * MP_THREADS + tid;
        kb[r] = i < a.N ? mp_id(a, i) : 0;
    }
#pragma unroll
    for (int r = 0; r < MP_KEEP; r++) {
        const int i = r * MP_THREADS + tid;
        kb[r] = i < a.N ? mp_check(a, i, kb[r], true) : -1;
    }
    for (int b = tid; b < nb; b += MP_THREADS) cur[b] = 0;
    for (int i = tid; i < MP_WARPS * nb; i += MP_THREADS) hist[i / nb][i % nb] = 0;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < MP_KEEP; r++)
        if (kb[r] >= 0) atomicAdd(&cur[kb[r]], 1);
    for (int i = MP_KEEP * MP_THREADS + tid; i < a.N; i += MP_THREADS) atomicAdd(&cur[mp_bucket(a, i, true)], 1);
    __syncthreads();
    /* offs = the exclusive prefix sum of the counts; the slots and tiles of the experts with pairs (one scan of
     * (pairs, has pairs, tiles)) */
    int run = 0, arun = 0, trun = 0;
    for (int b0 = 0; b0 < nb; b0 += MP_THREADS) {
        const int b = b0 + tid;
        const int c = b < nb ? cur[b] : 0;
        const int f = b < a.E && c > 0 ? 1 : 0;
        const int nt = f && a.tiles ? (c + a.bm - 1) / a.bm : 0;
        int3 tot;
        const int3 ex = mp_scan3(make_int3(c, f, nt), wsum, &tot);
        if (b < nb) {
            a.offs[b] = run + ex.x;
            cur[b] = run + ex.x; /* only this thread reads cur[b] in this loop */
        }
        if (f) a.slot[arun + ex.y] = make_int4(b, run + ex.x, c, 0);
        for (int q = 0; q < nt; q++)
            a.tiles[trun + ex.z + q] = make_int4(b, run + ex.x + q * a.bm, min(a.bm, c - q * a.bm), 0);
        run += tot.x;
        arun += tot.y;
        trun += tot.z;
    }
    if (tid == 0) a.offs[nb] = a.N;
    for (int s = arun + tid; s < (a.N < a.E ? a.N : a.E); s += MP_THREADS) a.slot[s] = make_int4(-1, 0, 0, 0);
    if (a.tiles)
        for (int s = trun + tid; s < a.ntiles; s += MP_THREADS) a.tiles[s] = make_int4(-1, 0, 0, 0);
    __syncthreads();
    /* placement, a tile of MP_THREADS pairs at a time in pair order: a pair's position is its bucket's
     * cursor + the same bucket's pairs of earlier warps of the tile + of earlier lanes of its warp */
    const unsigned lt = (1u << lane) - 1u;
    auto place = [&](int i, int e) { /* e: pair i's bucket, -1 past N; uniform call over the CTA */
        const bool valid = e >= 0;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        const bool leader = (int)(__ffs(peers) - 1) == lane, last_lane = 31 - __clz(peers) == lane;
        if (valid && leader) hist[warp][e] = __popc(peers);
        __syncthreads();
        int pos = 0;
        bool last = false;
        if (valid) {
            int before = 0;
            for (int w = 0; w < warp; w++) before += hist[w][e];
            pos = cur[e] + before + __popc(peers & lt);
            a.perm[pos] = i;
            a.inv[i] = pos;
            a.pe[pos] = e;
            last = last_lane;
            for (int w = warp + 1; w < MP_WARPS && last; w++) last = hist[w][e] == 0;
        }
        __syncthreads();
        if (last) cur[e] = pos + 1;
        if (valid && leader) hist[warp][e] = 0;
        __syncthreads();
    };
#pragma unroll
    for (int r = 0; r < MP_KEEP; r++)
        if (r * MP_THREADS < a.N) place(r * MP_THREADS + tid, kb[r]);
    for (int base = MP_KEEP * MP_THREADS; base < a.N; base += MP_THREADS) {
        const int i = base + tid;
        place(i, i < a.N ? mp_bucket(a, i, false) : -1);
    }
}

/* A decode call's permutation (N <= CU_MOE_GEMV_MAX_PAIRS), one CTA of CU_MOE_GEMV_MAX_PAIRS threads: thread i's
 * pair goes to position (pairs of lower buckets) + (earlier pairs of its bucket), counted over the N buckets in
 * shared memory; the first pair of each expert writes its slot (rank: the first pairs of lower experts). The same
 * perm, inv, pe, slot and tiles (when not NULL: the grouped GEMM forced on a decode batch) as k_moe_permute (a
 * stable sort by bucket), and offs only when with_offs (the expert GEMV and the fused down + combine read slot and
 * pe): no tile loops, two barriers. */
__global__ void __launch_bounds__(CU_MOE_GEMV_MAX_PAIRS) k_moe_permute_small(perm_args a, bool with_offs) {
    __shared__ int sb[CU_MOE_GEMV_MAX_PAIRS];
    __shared__ bool sf[CU_MOE_GEMV_MAX_PAIRS]; /* the first pair of an expert */
    __shared__ int sn[CU_MOE_GEMV_MAX_PAIRS];  /* the first pair's tiles (its expert's, a.tiles) */
    pdl_launch();
    pdl_wait();
    const int i = threadIdx.x;
    const int b = i < a.N ? mp_bucket(a, i, true) : INT_MAX;
    sb[i] = b;
    __syncthreads();
    int below = 0, same_before = 0, same = 0;
    for (int j = 0; j < a.N; j++) {
        const int bj = sb[j];
        below += bj < b;
        same_before += bj == b && j < i;
        same += bj == b;
    }
    sf[i] = i < a.N && same_before == 0 && b < a.E;
    const int nt = sf[i] && a.tiles ? (same + a.bm - 1) / a.bm : 0;
    sn[i] = nt;
    __syncthreads();
    int rank = 0, nact = 0, tb = 0, ntot = 0; /* experts with pairs below mine; all of them; their tiles */
    for (int j = 0; j < a.N; j++) {
        rank += sf[j] && sb[j] < b;
        nact += sf[j];
        tb += sb[j] < b ? sn[j] : 0;
        ntot += sn[j];
    }
    const int slots = a.N < a.E ? a.N : a.E;
    if (i < a.N) {
        const int pos = below + same_before;
        a.perm[pos] = i;
        a.inv[i] = pos;
        a.pe[pos] = b;
        if (same_before == 0 && b < a.E) a.slot[rank] = make_int4(b, below, same, 0);
        for (int q = 0; q < nt; q++) a.tiles[tb + q] = make_int4(b, below + q * a.bm, min(a.bm, same - q * a.bm), 0);
    }
    for (int s = nact + i; s < slots; s += blockDim.x) a.slot[s] = make_int4(-1, 0, 0, 0);
    if (a.tiles)
        for (int s = ntot + i; s < a.ntiles; s += blockDim.x) a.tiles[s] = make_int4(-1, 0, 0, 0);
    if (with_offs)
        for (int e = i; e <= a.E + 1; e += blockDim.x) {
            int n = 0;
            for (int j = 0; j < a.N; j++) n += sb[j] < e;
            a.offs[e] = e == a.E + 1 ? a.N : n;
        }
}

/* ---- decode: the expert GEMV ---- */

struct mgv_args {
    const __nv_bfloat16 *W;     /* (E, NR * R, K) */
    int64_t wes;                /* elements per expert */
    int R, K;                   /* outputs per expert, inputs */
    const __nv_bfloat16 *x;     /* input rows, row stride xs: of pair p, x[perm[p] / k] (by_token) or x[p] */
    int64_t xs;
    bool by_token;
    bool one_token;             /* by_token with one token: every pair's x row is row 0 (no perm load) */
    int k;
    __nv_bfloat16 *out;         /* (N, R): out[p * os + r] */
    int64_t os;
    const int *offs, *perm;
    const int4 *tiles;          /* the grouped GEMM's pair blocks (perm_args) */
    const int4 *slot;           /* the permutation's (expert, first position, pairs) of each slot */
    const int32_t *ids;         /* one token without a permutation (NULL otherwise): slot a is pair a, (ids[a], a, 1);
                                   an id out of range (not in [0, E)) is reported by CTA (0, a) and skipped */
    int E;
    cu_dev_err *err;
    int act_fn;                 /* be_act of the gated form */
    float alpha, limit;         /* act_fn BE_ACT_SWIGLU_OAI's */
    const __nv_bfloat16 *bias;  /* NULL, or output r of expert e (NR = 2: gate r, up R + r) += bias[e * bes + r] in
                                   f32 before the activation / the BF16 rounding (tested in the epilogues only) */
    int64_t bes;
    bool late_launch;           /* pdl_launch() after pdl_wait(), so that the next kernel (the down + combine) may read
                                   the routing and the permutation before its own wait (dc_args.early) */
};

/* The gated form's product of a gate g and an up u: act(g) * u, or gpt-oss's clamped SwiGLU. */
__device__ __forceinline__ float mgv_glu(const mgv_args &a, float g, float u) {
    return a.act_fn == BE_ACT_SWIGLU_OAI ? cu_swiglu_oai(g, u, a.alpha, a.limit) : cu_act(a.act_fn, g) * u;
}

template <bool STREAM>
__device__ __forceinline__ uint4 mgv_load(const uint4 *p) { return STREAM ? __ldcs(p) : __ldg(p); }

/* CTA (x, a): the a-th expert with tokens, its rows [8 x, 8 x + 8), a warp per row; NR = 2: the gated
 * form (gate row r and up row R + r -> act(gate . x) * (up . x)). Writes BF16. TT: tokens per pass over a
 * row (the host picks the smallest power of two covering the batch's tokens: registers, hence occupancy,
 * grow with it; an expert with more tokens takes several passes, the rows then from L2).
 * KS > 1 (split-K): KS warps a row, each a contiguous KS-th of its chunks, their partial dots summed in shared
 * memory (in warp order) before the epilogue; a CTA then covers 8 / KS rows. The host picks it so that the grid
 * fills its last wave of resident CTAs (a one-token step of Qwen3-30B-A3B: 768 CTAs of whole rows are 1.45 waves
 * at 4 an SM on 132 SMs, the second wave half idle; 1,536 of half rows are 2.9). */
template <int NR, int TT, int MINB = 1, int UO = 0, int KS = 1>
__global__ void __launch_bounds__(MGV_WARPS * 32, MINB) k_moe_gemv(mgv_args a) {
    static_assert(MGV_WARPS % KS == 0, "a CTA holds whole rows");
    /* 16-byte chunks per lane per row in flight: more when few tokens (UO: the launch's choice) */
    constexpr int U = UO ? UO : TT <= 2 ? 8 : MGV_U;
    /* the expert comes from the permutation: nothing to prefetch before the wait; and the next kernel (the down +
     * combine) is let in only after it (late_launch), so that it may read the routing and the permutation before
     * its own wait */
    if (a.late_launch) {
        pdl_wait();
        pdl_launch();
    } else {
        pdl_launch();
        pdl_wait();
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* this CTA's expert, its first position and its pairs in one load (slot has gridDim.y = min(E, N) entries;
     * expert -1: a slot past the experts with tokens); one token without a permutation: pair blockIdx.y */
    int e, p0, n;
    if (a.ids) {
        e = a.ids[blockIdx.y];
        p0 = (int)blockIdx.y;
        n = 1;
        if (e < 0 || e >= a.E) {
            if (blockIdx.x == 0 && threadIdx.x == 0) cu_report(a.err, CU_DEV_MOE_ID, 0, e, a.E);
            return;
        }
    } else {
        const int4 sl = a.slot[blockIdx.y];
        e = sl.x;
        p0 = sl.y;
        n = sl.z;
        if (e < 0) return;
    }
    const int r = blockIdx.x * (MGV_WARPS / KS) + warp / KS, kp = warp % KS;
    if (KS == 1 && r >= a.R) return; /* split-K: every warp stays for the barriers (a row past R: no chunks) */
    /* this warp's chunks [c0, c0 + KC) of each row (the weight and input pointers start at c0) */
    int c0 = 0, KC = a.K >> 3;
    if constexpr (KS > 1) {
        const int per = (KC + KS - 1) / KS;
        c0 = r < a.R ? min(kp * per, KC) : 0;
        KC = r < a.R ? min(KC - c0, per) : 0;
    }
    const uint4 *w[NR];
#pragma unroll
    for (int q = 0; q < NR; q++)
        w[q] = (const uint4 *)(a.W + (int64_t)e * a.wes + ((int64_t)min(r, a.R - 1) + (int64_t)q * a.R) * a.K) + c0;
    __shared__ float red[KS > 1 ? MGV_WARPS : 1][NR][TT]; /* split-K: each warp's partial dots */
    /* the row's biases with the expert id, not after the dot product (a round trip at the tail) */
    float bias[NR];
#pragma unroll
    for (int q = 0; q < NR; q++)
        bias[q] = a.bias && r < a.R ? __bfloat162float(a.bias[(int64_t)e * a.bes + q * a.R + r]) : 0.0f;
    /* one pass: evict-first; more: keep the rows for the next pass. A constant inside (a runtime flag made each
     * weight load a branch between two load kinds) */
    auto body = [&](auto st) {
        constexpr bool stream = decltype(st)::value;
        for (int g0 = 0; g0 < n; g0 += TT) {
            const int ng = n - g0 < TT ? n - g0 : TT;
            const uint4 *xr[TT];
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                const int pp = p0 + g0 + (tt < ng ? tt : ng - 1);
                const int64_t row = a.one_token ? 0 : a.by_token ? a.perm[pp] / a.k : pp;
                xr[tt] = (const uint4 *)(a.x + row * a.xs) + c0;
            }
            float acc[NR][TT];
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int tt = 0; tt < TT; tt++) acc[q][tt] = 0.0f;
            for (int base = 0; base < KC; base += 32 * U) {
                uint4 wv[U][NR];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = base + lane + 32 * u;
#pragma unroll
                    for (int q = 0; q < NR; q++)
                        wv[u][q] = c < KC ? mgv_load<stream>(w[q] + c) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = base + lane + 32 * u;
                    if (c >= KC) continue;
                    float wf[NR][8];
#pragma unroll
                    for (int q = 0; q < NR; q++) bf16x8_to_f32(wv[u][q], wf[q]);
#pragma unroll
                    for (int tt = 0; tt < TT; tt++) {
                        if (tt >= ng) continue;
                        float xf[8];
                        bf16x8_to_f32(__ldg(xr[tt] + c), xf);
#pragma unroll
                        for (int q = 0; q < NR; q++) {
                            float s = acc[q][tt];
#pragma unroll
                            for (int i = 0; i < 8; i++) s += wf[q][i] * xf[i];
                            acc[q][tt] = s;
                        }
                    }
                }
            }
            if constexpr (KS > 1) {
#pragma unroll
                for (int tt = 0; tt < TT; tt++)
#pragma unroll
                    for (int q = 0; q < NR; q++) {
                        const float v = cu_warp_sum(acc[q][tt]);
                        if (lane == 0) red[warp][q][tt] = v;
                    }
                __syncthreads();
                if (kp == 0 && r < a.R)
#pragma unroll
                    for (int tt = 0; tt < TT; tt++)
#pragma unroll
                        for (int q = 0; q < NR; q++) {
                            float v = red[warp][q][tt];
#pragma unroll
                            for (int j = 1; j < KS; j++) v += red[warp + j][q][tt];
                            acc[q][tt] = v; /* the row's dot, in every lane */
                        }
                __syncthreads(); /* red is the next pass's */
                if (kp != 0 || r >= a.R) continue;
            }
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                if (tt >= ng) break; /* uniform over the warp */
                float v[NR];
#pragma unroll
                for (int q = 0; q < NR; q++) v[q] = KS > 1 ? acc[q][tt] : cu_warp_sum(acc[q][tt]);
                if (lane == tt) {
#pragma unroll
                    for (int q = 0; q < NR; q++) v[q] += bias[q];
                    const float y = NR == 2 ? mgv_glu(a, v[0], v[NR - 1]) : v[0];
                    a.out[(int64_t)(p0 + g0 + tt) * a.os + r] = __float2bfloat16(y);
                }
            }
        }
    };
    if (n <= TT) body(std::true_type{});
    else body(std::false_type{});
}

/* ---- decode: the down projection and the combine in one kernel ---- */

#define DC_WARPS 4              /* k_moe_down_comb: a warp per output column d, 4 per CTA */
#define DC_PG 4                 /* pairs whose weight rows are in flight together */
#define DC_U 4                  /* 16-byte chunks per lane per pair in flight (inputs 32 x 4 x 8 = 1024 a pass) */
#define DC_PF 8                 /* pairs whose weight rows are prefetched into L2 before the PDL wait */
#define DC_HS_MAX (48 << 10)    /* h (N, K) BF16 copied into shared memory up to this (the default dynamic limit) */

struct dc_args {
    const __nv_bfloat16 *W;     /* down (E, D, K) */
    int64_t wes;                /* elements per expert */
    int D, K;
    const __nv_bfloat16 *h;     /* (N, K): the gate|up GEMV's output, by pair position */
    const int *perm, *pe;       /* the permutation's perm (position -> t * k + j) and pe (position -> expert) */
    const int32_t *ids;         /* one token without a permutation (NULL otherwise): position p is pair p, ids[p] its
                                   expert (E: out of range) */
    int E, k, N, T;             /* N = T * k <= CU_MOE_GEMV_MAX_PAIRS (so T <= 64: two tokens a lane) */
    const float *w;             /* (T, k), row stride ws */
    int64_t ws;
    const __nv_bfloat16 *bias;  /* NULL, or expert e's down bias at bias[e * bes] */
    int64_t bes;
    void *y;                    /* (T, D) of ydt, row stride ys */
    int ydt;
    int64_t ys;
    bool acc;                   /* y += */
    bool early;                 /* the pairs read and the first weight rows prefetched before the PDL wait (the
                                   gate|up GEMV before ran with late_launch) */
};

/* A decode batch's (N <= CU_MOE_GEMV_MAX_PAIRS) down projection and combine: warp d computes output column d of
 * every pair, o[p] = round_bf16(down_e[d] . h[p] (+ bias)), in position order (expert id, then token, then slot),
 * DC_PG pairs' weight rows loaded together, and adds w[t, j] * o[p] into its token's sum (lane t % 32 keeps token
 * t's) in that order, y[t, d] = (acc: y[t, d] +) sum: k_moe_gemv<1, TT>'s rows then k_moe_combine's sums, the same
 * values without the (N, D) round trip and a launch. Pairs of a bad id (expert E, last in the order) are skipped,
 * as the combine skips them. */
/* The pairs lane and lane + 32 of a decode call: expert (E past N), token and weight (needed only at the end). */
struct dc_pairs {
    int pe[2], pt[2];
    float pw[2];
};
__device__ __forceinline__ dc_pairs dc_load_pairs(const dc_args &a, int lane) {
    dc_pairs r;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int q = lane + 32 * i;
        /* read through L2 only (ld.global.cg): k_moe_down_comb loads them before its PDL wait, and this SM's L1
         * may still hold the previous layer's values at these addresses */
        const int pm = q >= a.N ? 0 : a.ids ? q : __ldcg(a.perm + q);
        int e = a.E;
        if (q < a.N) {
            e = a.ids ? __ldcg(a.ids + q) : __ldcg(a.pe + q);
            if (e < 0 || e >= a.E) e = a.E;
        }
        r.pe[i] = e;
        r.pt[i] = pm / a.k;
        r.pw[i] = q < a.N ? __ldcg(a.w + (int64_t)r.pt[i] * a.ws + (pm - r.pt[i] * a.k)) : 0.0f;
    }
    return r;
}
/* pair q's expert, in every lane (q uniform over the warp); E past N */
__device__ __forceinline__ int dc_expert(const dc_args &a, const dc_pairs &pp, int q) {
    const int v = __shfl_sync(0xffffffffu, q < 32 ? pp.pe[0] : pp.pe[1], q & 31);
    return q < a.N ? v : a.E;
}
/* token lane's (s0) and lane + 32's (s1) sums: y's old values when accumulating */
__device__ __forceinline__ void dc_init(const dc_args &a, int lane, int d, float &s0, float &s1) {
    s0 = s1 = 0.0f;
    if (a.acc) {
        if (lane < a.T) s0 = cu_ld(a.y, a.ydt, (int64_t)lane * a.ys + d);
        if (lane + 32 < a.T) s1 = cu_ld(a.y, a.ydt, (int64_t)(lane + 32) * a.ys + d);
    }
}
/* pair q (expert e < E) of column d: its lanes' partial dot -> o = BF16(sum (+ bias)), added as w * o into its
 * token's sum by the lane keeping it */
__device__ __forceinline__ void dc_add(const dc_args &a, const dc_pairs &pp, int q, int e, float part, int d, int lane,
                                       float &s0, float &s1) {
    float v = cu_warp_sum(part);
    if (a.bias) v += __bfloat162float(a.bias[(int64_t)e * a.bes + d]);
    const float o = __bfloat162float(__float2bfloat16(v)); /* the expert output, rounded as stored */
    const int t = __shfl_sync(0xffffffffu, q < 32 ? pp.pt[0] : pp.pt[1], q & 31);
    const float wq = __shfl_sync(0xffffffffu, q < 32 ? pp.pw[0] : pp.pw[1], q & 31);
    if (lane == (t & 31)) {
        if (t < 32) s0 = fmaf(wq, o, s0);
        else s1 = fmaf(wq, o, s1);
    }
}
__device__ __forceinline__ void dc_store(const dc_args &a, int lane, int d, float s0, float s1) {
    if (lane < a.T) cu_st(a.y, a.ydt, (int64_t)lane * a.ys + d, s0);
    if (lane + 32 < a.T) cu_st(a.y, a.ydt, (int64_t)(lane + 32) * a.ys + d, s1);
}

template <bool STREAM, bool HS = false>
__global__ void __launch_bounds__(DC_WARPS * 32) k_moe_down_comb(dc_args a) {
    extern __shared__ __align__(16) unsigned char dc_sm[];
    pdl_launch();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int d = blockIdx.x * DC_WARPS + warp;
    if (!HS && d >= a.D) return; /* (HS: the host has D % DC_WARPS == 0, so every warp reaches the barrier below) */
    if (!a.early) pdl_wait();
    /* early: the pairs (the routing's ids and weights, the permutation's perm and pe) are final here: the gate|up
     * GEMV before lets this kernel in only after its own wait (late_launch), so they come from finished kernels;
     * h (the gate|up GEMV's output) only after the wait. Before it, this warp's weight rows of the first DC_PF
     * pairs (a one-token step's all) are prefetched into L2 while the gate|up GEMV finishes. */
    const dc_pairs pp = dc_load_pairs(a, lane);
    if (a.early) {
        const int lines = (a.K * 2 + 127) / 128, npf = a.N < DC_PF ? a.N : DC_PF;
        for (int i0 = 0; i0 < npf * lines; i0 += 32) { /* uniform: every lane at each shuffle */
            const int i = i0 + lane, q = min(i / lines, npf - 1);
            const int e = __shfl_sync(0xffffffffu, pp.pe[0], q);
            if (i < npf * lines && e < a.E) {
                const char *line = (const char *)(a.W + (int64_t)e * a.wes + (int64_t)d * a.K) + (i - q * lines) * 128;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
            }
        }
        pdl_wait();
    }
    /* HS: h (N, K) copied into shared memory by the CTA's threads at once (cp.async), landing while the first
     * pairs' weight rows load, not read through L2 after them by every warp (a dependent round trip a pass) */
    const int KC = a.K >> 3;
    const uint4 *hs = (const uint4 *)dc_sm;
    if constexpr (HS) {
        for (int i = threadIdx.x; i < a.N * KC; i += DC_WARPS * 32)
            cp_async16(dc_sm + i * 16, (const uint4 *)a.h + i, true);
        cp_async_commit();
    }
    float s0, s1;
    dc_init(a, lane, d, s0, s1);
    for (int g0 = 0; g0 < a.N; g0 += DC_PG) {
        int eg[DC_PG];
#pragma unroll
        for (int i = 0; i < DC_PG; i++) eg[i] = dc_expert(a, pp, g0 + i);
        float part[DC_PG];
#pragma unroll
        for (int i = 0; i < DC_PG; i++) part[i] = 0.0f;
        for (int base = 0; base < KC; base += 32 * DC_U) {
            uint4 wv[DC_PG][DC_U];
#pragma unroll
            for (int i = 0; i < DC_PG; i++) {
                const uint4 *wr = (const uint4 *)(a.W + (int64_t)eg[i] * a.wes + (int64_t)d * a.K);
#pragma unroll
                for (int u = 0; u < DC_U; u++) {
                    const int c = base + lane + 32 * u;
                    wv[i][u] = c < KC && eg[i] < a.E ? mgv_load<STREAM>(wr + c) : make_uint4(0, 0, 0, 0);
                }
            }
            if (HS && g0 == 0 && base == 0) { /* h landed: uniform over the CTA (every warp, the same N and K) */
                cp_async_wait<0>();
                __syncthreads();
            }
            /* pair i's chunk u into its partial dot, each h read behind its guard (reading them all first at clamped
             * indices, VLLM_CUDA_MOE_DCSEL=1 of session 36, took 146 registers and lost 5%: session 37) */
#pragma unroll
            for (int i = 0; i < DC_PG; i++) {
                const uint4 *hr = (const uint4 *)(a.h + (int64_t)(g0 + i) * a.K);
#pragma unroll
                for (int u = 0; u < DC_U; u++) {
                    const int c = base + lane + 32 * u;
                    if (c >= KC || eg[i] >= a.E) continue;
                    float wf[8], xf[8];
                    bf16x8_to_f32(wv[i][u], wf);
                    bf16x8_to_f32(HS ? hs[(int64_t)(g0 + i) * KC + c] : __ldg(hr + c), xf);
                    float sp = part[i];
#pragma unroll
                    for (int j = 0; j < 8; j++) sp += wf[j] * xf[j];
                    part[i] = sp;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < DC_PG; i++)
            if (eg[i] < a.E) dc_add(a, pp, g0 + i, eg[i], part[i], d, lane, s0, s1); /* uniform: past N, a bad id */
    }
    dc_store(a, lane, d, s0, s1);
}


/* ---- larger batches: the grouped GEMM on the tensor cores ---- */

/* mma.sync m16n8k16 (BF16 in, f32 accumulate) over tiles of BM pairs x 128 weight rows, MM_BK inputs a step,
 * loaded by cp.async MM_STAGES(BM) steps deep into XOR-swizzled shared memory and read by ldmatrix. The weight
 * rows of a CTA: the gated form (NR 2) gate rows [c0, c0 + 64) then up rows [R + c0, R + c0 + 64), 64 outputs;
 * NR 1 rows [c0, c0 + 128), 128 outputs. 2 x WN warps: 2 along the pairs (BM / 2 each) x WN along the rows (each
 * 128 / WN rows: NR 2 the gate and up rows of 64 / WN outputs, so that act(gate) * up is formed in registers).
 * WN is MM_WN. BM is the host's choice from the pairs per expert (a decode batch of 256 tokens of top 8 over 128
 * experts: ~16, BM 32; a 2,048-token prefill chunk: ~128, BM 128), so that few rows of a tile are idle. */
#define MM_BK 64                /* inputs a step: 128-byte rows of 8 16-byte chunks */
#define MM_BW 128               /* weight rows a CTA */
/* 4 warps along the weight rows (32-row warp tiles). 2 (4 warps of 64 x 64, half the shared-memory reads a
 * multiply) measured slower in session 30 (H100, test_cuda_perf's MoE layer: 2,048 tokens 859 -> 935 us at 128
 * pairs a tile, 879 at 64; 256 tokens 464 -> 478 at 64) */
#define MM_WN 4
#define MM_STAGES(BM) ((BM) >= 128 ? 3 : 4)
/* bytes of shared memory a CTA: the stages' A (BM x 64) and B (128 x 64) BF16 tiles */
#define MM_SMEM(BM) ((size_t)MM_STAGES(BM) * ((BM) + MM_BW) * MM_BK * 2)

/* byte offset of 16-byte chunk c of row r in a swizzled tile of 128-byte rows (ldmatrix's 8 rows of one chunk
 * column land on 8 distinct bank groups) */
__device__ __forceinline__ int mm_sw(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

/* A grouped-GEMM CTA's copies (TH threads; k_moe_mma and k_moe_wg): each K step, its BM pair rows (A: the pairs' x
 * rows, x[perm[p] / k] by_token, else h[p]; rows past the block's n repeat its last) and MM_BW weight rows (B: NR 2
 * expert e's gate rows [c0, c0 + 64) then its up rows [R + c0, ..), NR 1 rows [c0, c0 + 128); rows past R repeat
 * the last) into a stage, A then B, of XOR-swizzled 128-byte rows; a thread copies 16-byte chunk column cq of
 * rows r0 + RS j; inputs past K are zeros (K % 8 == 0). */
template <int NR, int BM, int TH>
struct mm_copier {
    static constexpr int RS = TH / 8, AQ = BM * 8 / TH, BQ = MM_BW * 8 / TH, A_BYTES = BM * MM_BK * 2;
    static_assert(AQ >= 1 && BQ >= 1, "mm_copier: tile shape");
    const __nv_bfloat16 *ap[AQ], *bp[BQ];
    int cq, r0, K;
    __device__ __forceinline__ mm_copier(const mgv_args &a, int e, int p0, int n, int c0)
        : cq(threadIdx.x & 7), r0(threadIdx.x >> 3), K(a.K) {
#pragma unroll
        for (int j = 0; j < AQ; j++) {
            const int pp = p0 + min(r0 + RS * j, n - 1);
            ap[j] = a.x + (a.by_token ? (int64_t)(a.perm[pp] / a.k) : (int64_t)pp) * a.xs + cq * 8;
        }
#pragma unroll
        for (int j = 0; j < BQ; j++) {
            const int row = r0 + RS * j;                                        /* the CTA's weight row */
            const int q = NR == 2 ? row / 64 : 0, o = NR == 2 ? row % 64 : row; /* gate / up, its output */
            const int col = min(c0 + o, a.R - 1);
            bp[j] = a.W + (int64_t)e * a.wes + ((int64_t)q * a.R + col) * a.K + cq * 8;
        }
    }
    /* K step kt into the stage at st */
    __device__ __forceinline__ void load(unsigned char *st, int kt) const {
        const int k0 = kt * MM_BK;
        const bool in = k0 + cq * 8 < K;
#pragma unroll
        for (int j = 0; j < AQ; j++) cp_async16(st + mm_sw(r0 + RS * j, cq), in ? ap[j] + k0 : ap[j], in);
#pragma unroll
        for (int j = 0; j < BQ; j++) cp_async16(st + A_BYTES + mm_sw(r0 + RS * j, cq), in ? bp[j] + k0 : bp[j], in);
    }
};

/* The grouped GEMMs' epilogue for one pair row and two outputs col, col + 1 (col < R, even): v (+ the bias), NR 2:
 * act(v + gate bias) * (u + up bias) (mgv_glu), stored as BF16 at orow + col. bias: expert e's, or NULL. */
template <int NR>
__device__ __forceinline__ void mm_store2(const mgv_args &a, const __nv_bfloat16 *bias, __nv_bfloat16 *orow, int col,
                                          float v0, float v1, float u0, float u1) {
    if (bias) {
        v0 += __bfloat162float(bias[col]);
        v1 += __bfloat162float(bias[col + 1]);
    }
    if constexpr (NR == 2) {
        if (bias) {
            u0 += __bfloat162float(bias[a.R + col]);
            u1 += __bfloat162float(bias[a.R + col + 1]);
        }
        v0 = mgv_glu(a, v0, u0);
        v1 = mgv_glu(a, v1, u1);
    } else {
        (void)u0;
        (void)u1;
    }
    *(uint32_t *)(orow + col) = pack_bf16(v0, v1);
}

/* CTA (x, y): outputs [64 x, 64 x + 64) (NR 2) or [128 x, 128 x + 128) (NR 1) of pair block y (CTAs past the
 * list's end exit): out = A W_e^T over K, A's rows the pairs' x rows (by_token: x[perm[p] / k]) or h[p];
 * NR 2: act(gate) * up. Rows past the block's pairs or the expert's outputs load a valid row and are not
 * stored; inputs past K load as zeros (K % 8 == 0). Same args as k_moe_gemv. */
template <int NR, int BM>
__global__ void __launch_bounds__(64 * MM_WN, 2) k_moe_mma(mgv_args a) {
    constexpr int WN = MM_WN, TH = 64 * WN, ST = MM_STAGES(BM);
    constexpr int WM = BM / 2, MI = WM / 16;             /* pairs a warp, its 16-row tiles */
    constexpr int A_BYTES = BM * MM_BK * 2, STAGE = A_BYTES + MM_BW * MM_BK * 2;
    constexpr int OUT = MM_BW / NR;                      /* outputs a CTA */
    constexpr int WR = MM_BW / WN, NJ = WR / 16;         /* weight rows a warp, its 16-row groups */
    static_assert(MI >= 1 && (NR == 1 || NJ % 2 == 0), "k_moe_mma: tile shape");
    extern __shared__ __align__(128) unsigned char mm_smem[];
    pdl_launch();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int4 tl = a.tiles[blockIdx.y]; /* (expert, first position, pairs): the permutation's table */
    const int e = tl.x, p0 = tl.y, n = tl.z;
    if (e < 0) return;
    const int c0 = blockIdx.x * OUT;
    const mm_copier<NR, BM, TH> cp(a, e, p0, n, c0);
    const uint32_t sbase = smem_u32(mm_smem);
    auto load = [&](int kt, int s) { cp.load(mm_smem + s * STAGE, kt); };

    float acc[MI][2 * NJ][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 2 * NJ; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;

    const int wm = (warp / WN) * WM, wn = warp % WN;
    /* the warp's 16-row groups of the B tile, j < NJ: NR 2 its outputs' gate rows (j < NJ / 2) then their up rows,
     * NR 1 rows WR wn + 16 j */
    auto nrow = [&](int j) {
        return NR == 2 ? (j < NJ / 2 ? 0 : 64) + (WR / 2) * wn + 16 * (j % (NJ / 2)) : WR * wn + 16 * j;
    };
    /* ldmatrix lanes: A rows wm + 16 i + (lane & 15), chunk 2 kk + (lane >> 4); B rows (lane & 7) + 8 (lane >> 4),
     * chunk 2 kk + ((lane >> 3) & 1) */
    const int la_r = lane & 15, la_c = lane >> 4, lb_r = (lane & 7) + 8 * (lane >> 4), lb_c = (lane >> 3) & 1;

    const int KT = (a.K + MM_BK - 1) / MM_BK;
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<ST - 2>();
        __syncthreads(); /* step kt has landed for every thread; step kt - 1's stage is free */
        if (kt + ST - 1 < KT) load(kt + ST - 1, (kt + ST - 1) % ST);
        cp_async_commit();
        const uint32_t sa = sbase + (kt % ST) * STAGE, sb = sa + A_BYTES;
#pragma unroll
        for (int kk = 0; kk < MM_BK / 16; kk++) {
            uint32_t fa[MI][4], fb[NJ][4];
#pragma unroll
            for (int i = 0; i < MI; i++) {
                const int r = wm + 16 * i + la_r;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(fa[i][0]), "=r"(fa[i][1]), "=r"(fa[i][2]), "=r"(fa[i][3])
                             : "r"(sa + mm_sw(r, 2 * kk + la_c)));
            }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int r = nrow(j) + lb_r;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(fb[j][0]), "=r"(fb[j][1]), "=r"(fb[j][2]), "=r"(fb[j][3])
                             : "r"(sb + mm_sw(r, 2 * kk + lb_c)));
            }
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NJ; j++) {
                    mma16816(acc[i][2 * j], fa[i], fb[j][0], fb[j][1]);
                    mma16816(acc[i][2 * j + 1], fa[i], fb[j][2], fb[j][3]);
                }
        }
    }
    cp_async_wait<0>();

    /* the epilogue from registers: lane (g, t) holds rows g and g + 8 of each 16-row tile, columns 2t, 2t + 1 of
     * each 8-row block b = 2 j + h of its groups (NR 2: blocks b < NJ the gate of outputs (WR / 2) wn + 8 b, block
     * b + NJ their up) */
    const int g = lane >> 2, t = lane & 3;
    const __nv_bfloat16 *bias = a.bias ? a.bias + (int64_t)e * a.bes : nullptr;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = wm + 16 * i + g + 8 * hh; /* the pair in the block */
            if (r >= n) continue;
            __nv_bfloat16 *orow = a.out + (int64_t)(p0 + r) * a.os;
#pragma unroll
            for (int b = 0; b < 2 * NJ / NR; b++) {
                const int col = c0 + (NR == 2 ? (WR / 2) * wn : WR * wn) + 8 * b + 2 * t;
                if (col >= a.R) continue; /* R % 8 == 0: col + 1 < R too */
                const int bu = NR == 2 ? b + NJ : b; /* NR 2: the up of the same outputs */
                mm_store2<NR>(a, bias, orow, col, acc[i][b][2 * hh], acc[i][b][2 * hh + 1], acc[i][bu][2 * hh],
                              acc[i][bu][2 * hh + 1]);
            }
        }
}

/* ---- prefill: the grouped GEMM on wgmma (sm_90a) ---- */

/* k_moe_mma's tiles of 128 pairs x 128 weight rows on the warpgroup MMA: the same cp.async pipeline and XOR-swizzled
 * tiles (mm_sw is the 128-byte swizzle of wgmma's K-major canonical layout: 8-row atoms of 128-byte rows, 1,024
 * bytes apart), read by wgmma.mma_async m64n128k16 straight from shared memory instead of ldmatrix into registers
 * (k_moe_mma's limit at 128-pair tiles: its shared-memory reads). 2 warpgroups, warpgroup g the pairs [64 g, 64 g +
 * 64) of the tile against all 128 weight rows; the accumulators (64 a thread) in mma.sync's C layout per 8 columns,
 * so the epilogue is k_moe_mma's. Only where the compiler targets sm_90a (the `a` features); elsewhere the host
 * keeps k_moe_mma. */
#define WG_BM 128               /* pairs a tile (2 warpgroups of 64) */
#define WG_ST 3                 /* stages: 3 x 32 KB, 2 CTAs an SM */
#define WG_STAGE ((WG_BM + MM_BW) * MM_BK * 2)
#define WG_SMEM ((size_t)WG_ST * WG_STAGE + 1024) /* + the 1,024-byte alignment of the atoms */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WGMMA 1
#endif

/* a shared-memory matrix descriptor: K-major, 128-byte swizzle, atoms of 8 rows 1,024 bytes apart */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

/* d (64 x 128 f32, this thread's 64) += A (64 x 16, descriptor da) B^T (128 x 16, descriptor db) */
__device__ __forceinline__ void wg_mma(float (&d)[64], uint64_t da, uint64_t db) {
#ifdef MOE_WGMMA
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63])
                 : "l"(da), "l"(db));
#else
    (void)d;
    (void)da;
    (void)db;
#endif
}
__device__ __forceinline__ void wg_fence() {
#ifdef MOE_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit_wait() {
#ifdef MOE_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

/* Same CTA grid and arguments as k_moe_mma<NR, 128>: CTA (x, y) outputs [64 x, 64 x + 64) (NR 2, act(gate) * up) or
 * [128 x, 128 x + 128) (NR 1) of tile y's pairs. */
template <int NR>
__global__ void __launch_bounds__(256, 2) k_moe_wg(mgv_args a) {
    constexpr int A_BYTES = WG_BM * MM_BK * 2, OUT = MM_BW / NR;
    extern __shared__ __align__(128) unsigned char wg_smem_raw[];
#ifndef MOE_WGMMA
    __trap(); /* never launched: the host takes it only where sm_90a's code runs (cu->sm90) */
#endif
    pdl_launch();
    pdl_wait();
    const int4 tl = a.tiles[blockIdx.y]; /* (expert, first position, pairs) */
    const int e = tl.x, p0 = tl.y, n = tl.z;
    if (e < 0) return;
    const int c0 = blockIdx.x * OUT;
    unsigned char *sm = wg_smem_raw + ((1024 - (smem_u32(wg_smem_raw) & 1023)) & 1023);
    const mm_copier<NR, WG_BM, 256> cp(a, e, p0, n, c0);
    auto load = [&](int kt, int s) { cp.load(sm + s * WG_STAGE, kt); };
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    const int wg = threadIdx.x >> 7;
    const uint32_t sbase = smem_u32(sm);
    const int KT = (a.K + MM_BK - 1) / MM_BK;
#pragma unroll
    for (int s = 0; s < WG_ST - 1; s++) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<WG_ST - 2>();
#ifdef MOE_WGMMA
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async's writes, seen by wgmma */
#endif
        __syncthreads(); /* step kt has landed for every thread; step kt - 1's stage is free (its wgmma waited) */
        if (kt + WG_ST - 1 < KT) load(kt + WG_ST - 1, (kt + WG_ST - 1) % WG_ST);
        cp_async_commit();
        const uint32_t stage = sbase + (kt % WG_ST) * WG_STAGE; /* A (this warpgroup's 64 pair rows), then B */
        const uint64_t da = wg_desc(stage + wg * 64 * 128), db = wg_desc(stage + A_BYTES);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < MM_BK / 16; kk++) wg_mma(d, da + 2 * kk, db + 2 * kk); /* + 32 bytes a k16 step */
        wg_commit_wait();
    }
    cp_async_wait<0>();

    /* the epilogue: warp w of warpgroup g holds pairs 64 g + 16 (w % 4) + (lane >> 2) (+ 8), columns 8 j + 2 (lane & 3)
     * (+ 1) in d[4 j + 2 hh + c]; NR 2: columns j < 8 the gate of outputs 8 j + .., j + 8 their up */
    const int lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3, wr = 64 * wg + 16 * ((threadIdx.x >> 5) & 3);
    const __nv_bfloat16 *bias = a.bias ? a.bias + (int64_t)e * a.bes : nullptr;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = wr + g4 + 8 * hh;
        if (r >= n) continue;
        __nv_bfloat16 *orow = a.out + (int64_t)(p0 + r) * a.os;
#pragma unroll
        for (int j = 0; j < 16 / NR; j++) {
            const int col = c0 + 8 * j + 2 * t4;
            if (col >= a.R) continue;
            const int ju = NR == 2 ? j + 8 : j; /* NR 2: the up of the same outputs */
            mm_store2<NR>(a, bias, orow, col, d[4 * j + 2 * hh], d[4 * j + 2 * hh + 1], d[4 * ju + 2 * hh],
                          d[4 * ju + 2 * hh + 1]);
        }
    }
}

/* The pair rows of a call's tiles: the smallest of 32, 64, 128 that holds the pairs of an expert when they
 * spread evenly over min(E, N) experts (a decode batch leaves most rows of a larger tile idle; a prefill chunk
 * reads each expert's weights once per tile). */
static int mm_bm(int N, int E) {
    const int per = N / (N < E ? N : E);
    return per <= 32 ? 32 : per <= 64 ? 64 : 128;
}

static void (*mm_kernel(int nr, int bm))(mgv_args) {
    if (nr == 2) return bm == 32 ? k_moe_mma<2, 32> : bm == 64 ? k_moe_mma<2, 64> : k_moe_mma<2, 128>;
    return bm == 32 ? k_moe_mma<1, 32> : bm == 64 ? k_moe_mma<1, 64> : k_moe_mma<1, 128>;
}

/* The one-token expert GEMV of NR (1, 2) split ks ways (1, 2, 4). */
typedef void (*mgv_kernel)(mgv_args);
static mgv_kernel gv_one_token(int nr, int ks) {
    if (nr == 2)
        return ks == 1 ? k_moe_gemv<2, 1, 4, 4> : ks == 2 ? k_moe_gemv<2, 1, 4, 4, 2> : k_moe_gemv<2, 1, 4, 4, 4>;
    return ks == 1 ? k_moe_gemv<1, 1> : ks == 2 ? k_moe_gemv<1, 1, 1, 0, 2> : k_moe_gemv<1, 1, 1, 0, 4>;
}

/* The one-token GEMV's split-K for rows output rows of slots experts: of 1, 2, 4, the first whose grid fills at
 * least 90% of the resident CTAs of its last wave, each finer split taken only where it fills 10 points more than
 * the coarser choice (the rows stream at the same rate whatever the split; a half-empty last wave is time with
 * half the SMs idle). */
static int gv_pick_ks(const be_experts *ex, int nr, int64_t rows, unsigned slots, int sms) {
    if (ex->gv_ks) return ex->gv_ks;
    int best = 1;
    double best_fill = 0.0;
    for (int i = 0; i < 3 && best_fill < 0.9; i++) {
        const int ks = 1 << i, res = ex->ws->gv_occ[nr - 1][i] * sms;
        if (res <= 0) continue;
        const double ctas = (double)((rows + MGV_WARPS / ks - 1) / (MGV_WARPS / ks)) * slots;
        const double fill = ctas / (ceil(ctas / res) * res);
        if (fill > best_fill + 0.1) { /* a finer split only for a clearly fuller last wave */
            best = ks;
            best_fill = fill;
        }
    }
    return best;
}

/* the grouped GEMM's dynamic shared memory limits (above the default 48 KB), raised once a device; the one-token
 * expert GEMV's occupancies */
static vllm_status mm_attrs(moe_ws *ws) {
    if (ws->mm_attr) return VLLM_OK;
    for (int nr = 1; nr <= 2; nr++)
        for (int i = 0; i < 3; i++) {
            int n = 0;
            const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gv_one_token(nr, 1 << i),
                                                                                MGV_WARPS * 32, 0);
            if (e != cudaSuccess)
                return vt_error(VLLM_ERR_BACKEND, "experts_create: the expert GEMV's occupancy: %s",
                                cudaGetErrorString(e));
            ws->gv_occ[nr - 1][i] = n;
        }
    for (int nr = 1; nr <= 2; nr++) {
        const cudaError_t e = cudaFuncSetAttribute(nr == 2 ? k_moe_wg<2> : k_moe_wg<1>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM);
        if (e != cudaSuccess)
            return vt_error(VLLM_ERR_BACKEND, "experts_create: the wgmma grouped GEMM's shared memory (%zu bytes): %s",
                            WG_SMEM, cudaGetErrorString(e));
    }
    for (int nr = 1; nr <= 2; nr++)
        for (int bm = 32; bm <= 128; bm *= 2) {
            const cudaError_t e = cudaFuncSetAttribute(mm_kernel(nr, bm), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       (int)MM_SMEM(bm));
            if (e != cudaSuccess)
                return vt_error(VLLM_ERR_BACKEND, "experts_create: the grouped GEMM's shared memory (%zu bytes): %s",
                                MM_SMEM(bm), cudaGetErrorString(e));
        }
    ws->mm_attr = true;
    return VLLM_OK;
}

/* ---- prefill: the gather ---- */

// xg (N, D) = x[perm[p] / k] for p < N
__global__ void k_moe_gather(const __nv_bfloat16 *x, int64_t xs, const int *perm, int k, int N, int D,
                             __nv_bfloat16 *xg) {
    pdl_launch();
    pdl_wait();
    for (int p = blockIdx.x; p < N; p += gridDim.x) {
        const __nv_bfloat16 *src = x + (int64_t)(perm[p] / k) * xs;
        __nv_bfloat16 *dst = xg + (int64_t)p * D;
        for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = src[d];
    }
}

/* ---- the combine ---- */

struct comb_args {
    const __nv_bfloat16 *o;     /* (N, D): the experts' outputs by pair position */
    int D;
    const int32_t *ids;         /* (T, k), row stride is */
    int64_t is;
    const float *w;             /* (T, k), row stride ws */
    int64_t ws;
    const int *inv;             /* (N), or NULL: position t * k + j (one token without a permutation) */
    int T, k, E;
    void *y;                    /* (T, D) of ydt, row stride ys */
    int ydt;
    int64_t ys;
    bool acc;
};

// y[t] = (acc: y[t] +) sum over the token's slots, in increasing position (= expert id, then slot), of w * o
__global__ void k_moe_combine(comb_args a) {
    __shared__ int spos[CU_MOE_MAX_K];
    __shared__ float sw[CU_MOE_MAX_K];
    __shared__ int sn;
    pdl_launch();
    pdl_wait();
    __shared__ int lpos[CU_MOE_MAX_K];
    __shared__ float lw[CU_MOE_MAX_K];
    for (int t = blockIdx.x; t < a.T; t += gridDim.x) {
        /* the k slots' (position, weight) loaded at once (-1: an id out of range, reported by the
         * permutation), then put in increasing position (each slot's thread its rank) in shared memory */
        for (int j = threadIdx.x; j < a.k; j += blockDim.x) {
            /* the id, position and weight loads issued together (each index is valid whatever the id; loads
             * under the id's check waited for it: two round trips) */
            const int e = a.ids[(int64_t)t * a.is + j];
            const int pos = a.inv ? a.inv[(int64_t)t * a.k + j] : (int)((int64_t)t * a.k + j);
            const float wj = a.w[(int64_t)t * a.ws + j];
            const bool ok = e >= 0 && e < a.E;
            lpos[j] = ok ? pos : -1;
            lw[j] = ok ? wj : 0.0f;
        }
        __syncthreads();
        /* slot j's rank among the valid slots by position (the positions are distinct), each slot's thread at once
         * (thread 0 inserting them one by one was a serial chain of shared-memory round trips) */
        for (int j = threadIdx.x; j < a.k; j += blockDim.x) {
            const int pos = lpos[j];
            int rank = 0, n = 0;
            for (int i = 0; i < a.k; i++) {
                const int pi = lpos[i];
                n += pi >= 0;
                rank += pi >= 0 && pi < pos;
            }
            if (pos >= 0) {
                spos[rank] = pos;
                sw[rank] = lw[j];
            }
            if (j == 0) sn = n;
        }
        __syncthreads();
        const int n = sn;
        if ((a.D & 7) == 0) {
            /* 8 columns per thread (16-byte loads), the CTAs of grid.y splitting the row; each chunk of
             * up to 8 slots loaded at once, then summed in slot order */
            for (int d0 = 8 * (blockIdx.y * blockDim.x + threadIdx.x); d0 < a.D; d0 += 8 * blockDim.x * gridDim.y) {
                float s[8];
#pragma unroll
                for (int i = 0; i < 8; i++) s[i] = a.acc ? cu_ld(a.y, a.ydt, (int64_t)t * a.ys + d0 + i) : 0.0f;
                for (int q0 = 0; q0 < n; q0 += 8) {
                    uint4 v[8];
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        if (q0 + u < n) v[u] = __ldg((const uint4 *)(a.o + (int64_t)spos[q0 + u] * a.D + d0));
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        if (q0 + u >= n) break;
                        float f[8];
                        bf16x8_to_f32(v[u], f);
#pragma unroll
                        for (int i = 0; i < 8; i++) s[i] = fmaf(sw[q0 + u], f[i], s[i]);
                    }
                }
#pragma unroll
                for (int i = 0; i < 8; i++) cu_st(a.y, a.ydt, (int64_t)t * a.ys + d0 + i, s[i]);
            }
        } else {
            for (int d = blockIdx.y * blockDim.x + threadIdx.x; d < a.D; d += blockDim.x * gridDim.y) {
                float s = a.acc ? cu_ld(a.y, a.ydt, (int64_t)t * a.ys + d) : 0.0f;
                for (int q = 0; q < n; q++) s = fmaf(sw[q], __bfloat162float(a.o[(int64_t)spos[q] * a.D + d]), s);
                cu_st(a.y, a.ydt, (int64_t)t * a.ys + d, s);
            }
        }
        __syncthreads(); /* spos / sw are rewritten for the next token */
    }
}

/* ---- moe_experts ---- */

// m (N, cols) BF16 row p += bias[e * bes + c] of its expert e (offs[e] <= p < offs[e + 1]; bucket E skipped)
__global__ void k_moe_bias_rows(__nv_bfloat16 *m, int N, int cols, const __nv_bfloat16 *bias, int64_t bes,
                                const int *offs, int E) {
    pdl_launch();
    pdl_wait();
    for (int p = blockIdx.x; p < N; p += gridDim.x) {
        if (p >= offs[E]) break; /* bad ids' pairs, last in the order */
        int lo = 0, hi = E - 1;  /* the last e with offs[e] <= p */
        while (lo < hi) {
            const int mid = lo + (hi - lo + 1) / 2;
            if (offs[mid] <= p) lo = mid;
            else hi = mid - 1;
        }
        const __nv_bfloat16 *b = bias + (int64_t)lo * bes;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const int64_t i = (int64_t)p * cols + c;
            m[i] = __float2bfloat16(__bfloat162float(m[i]) + __bfloat162float(b[c]));
        }
    }
}

/* The prefill path: per-expert cuBLAS GEMMs on the expert-sorted rows (reads the counts on the host).
 * Expert biases are added to cuBLAS's BF16 outputs (k_moe_bias_rows): gu before the activation, o before
 * the combine, so each is rounded twice (the kernels' epilogues round once). */
static void moe_gemm_path(backend *be, const be_experts *ex, const tensor *x, int N, int k, const moe_params *p,
                          const int *offs_dev, const int *perm, __nv_bfloat16 *h, __nv_bfloat16 *o) {
    cu_state *cu = cu_of(be);
    moe_ws *ws = ex->ws;
    const int E = ex->E, D = (int)ex->D, I = (int)ex->I;
    __nv_bfloat16 *xg = (__nv_bfloat16 *)ws->xg.p, *gu = (__nv_bfloat16 *)ws->gu.p;
    if (!cu_launch(cu, "moe_experts (gather)", true, k_moe_gather, dim3(cu_grid(N, 1)), dim3(256), 0,
                   (const __nv_bfloat16 *)x->data, tensor_row_stride(x), perm, k, N, D, xg))
        return;
    /* The segment sizes on the host: one synchronize per call, outside graph capture (the first
     * version; a grouped GEMM with device-side sizes removes it). */
    int *offs = (int *)ws->host.p;
    cudaError_t e = cudaMemcpyAsync(offs, offs_dev, (size_t)(E + 2) * sizeof(int), cudaMemcpyDeviceToHost, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (!cu_ok(cu, e, "moe_experts", "reading the experts' token counts")) return;
    const float alpha = 1.0f, beta = 0.0f;
    const int64_t per = ex->I * ex->D;
    /* gu (n, 2I) = xg (n, D) W_gu[e]^T: column-major D (2I, n) = W^T (D, 2I)^T B (D, n), as ops_linear.cu */
    for (int x_ = 0; x_ < E; x_++) {
        const int p0 = offs[x_], n = offs[x_ + 1] - p0;
        if (n <= 0) continue;
        cublasStatus_t s = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, 2 * I, n, D, &alpha,
                                        ex->gu + (int64_t)x_ * 2 * per, CUDA_R_16BF, D, xg + (int64_t)p0 * D,
                                        CUDA_R_16BF, D, &beta, gu + (int64_t)p0 * 2 * I, CUDA_R_16BF, 2 * I,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            cu_fail(cu, "moe_experts: cuBLAS GEMM of expert %d's gate|up (m %d, n %d, k %d) failed: %s", x_, 2 * I, n,
                    D, cublasGetStatusString(s));
            return;
        }
    }
    if (ex->bias && !cu_launch(cu, "moe_experts (gate|up bias)", true, k_moe_bias_rows, dim3(cu_grid(N, 1)),
                               dim3(256), 0, gu, N, 2 * I, (const __nv_bfloat16 *)ex->bias, 2 * ex->I + ex->D,
                               offs_dev, E))
        return;
    tensor GU = tensor_2d(DTYPE_BF16, gu, N, 2 * (int64_t)I), H = tensor_2d(DTYPE_BF16, h, N, I);
    cu_act_mul_p(be, p->act, p->swiglu_alpha > 0.0f ? p->swiglu_alpha : BE_SWIGLU_OAI_ALPHA,
                 p->swiglu_limit > 0.0f ? p->swiglu_limit : BE_SWIGLU_OAI_LIMIT, &GU, &H); /* h = act(gate) * up */
    for (int x_ = 0; x_ < E; x_++) {
        const int p0 = offs[x_], n = offs[x_ + 1] - p0;
        if (n <= 0) continue;
        cublasStatus_t s = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, D, n, I, &alpha, ex->down + (int64_t)x_ * per,
                                        CUDA_R_16BF, I, h + (int64_t)p0 * I, CUDA_R_16BF, I, &beta,
                                        o + (int64_t)p0 * D, CUDA_R_16BF, D, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            cu_fail(cu, "moe_experts: cuBLAS GEMM of expert %d's down (m %d, n %d, k %d) failed: %s", x_, D, n, I,
                    cublasGetStatusString(s));
            return;
        }
    }
    if (ex->bias)
        cu_launch(cu, "moe_experts (down bias)", true, k_moe_bias_rows, dim3(cu_grid(N, 1)), dim3(256), 0, o, N, D,
                  (const __nv_bfloat16 *)ex->bias + 2 * ex->I, 2 * ex->I + ex->D, offs_dev, E);
}

// x (T, D) BF16, ids (T, k) I32, w (T, k) F32 -> y (T, D) BF16 / F32 (+)= sum_j w[t, j] expert_{ids[t, j]}(x_t);
// k = top_k + num_shared, the experts E + num_shared (the shared ones are experts like the others)
void cu_moe_experts(backend *be, const be_experts *ex, const tensor *x, const tensor *ids, const tensor *w,
                    const moe_params *p, bool accumulate, tensor *y) {
    cu_state *cu = cu_of(be);
    if (!ex) {
        cu_fail(cu, "moe_experts: no experts");
        return;
    }
    if (!cu_moe_params_ok(cu, "moe_experts", p)) return;
    if (p->num_experts + p->num_shared != ex->E) {
        cu_fail(cu, "moe_experts: moe_params has %d experts (%d routed, %d shared), the layer %d",
                p->num_experts + p->num_shared, p->num_experts, p->num_shared, ex->E);
        return;
    }
    const int E = ex->E, k = be_moe_width(p); /* k <= CU_MOE_MAX_K (cu_moe_params_ok) */
    const int64_t D = ex->D, I = ex->I;
    if (!cu_check_mat(cu, "moe_experts", "x", x, CU_DT(DTYPE_BF16), -1, D)) return;
    const int64_t T = cu_rows(x);
    if (!cu_check_mat(cu, "moe_experts", "ids", ids, CU_DT(DTYPE_I32), T, k) ||
        !cu_check_mat(cu, "moe_experts", "w", w, CU_DT(DTYPE_F32), T, k) ||
        !cu_check_mat(cu, "moe_experts", "y", y, CU_ACT, T, D))
        return;
    if (T == 0) return;
    if (moe_overlap(x, y)) {
        cu_fail(cu, "moe_experts: y overlaps x");
        return;
    }
    if (T > INT_MAX / k) {
        cu_fail(cu, "moe_experts: %lld tokens x top_k %d pairs exceed the kernels' int range", (long long)T, k);
        return;
    }
    const int N = (int)(T * k);
    const int64_t xs = tensor_row_stride(x);
    const bool small = N <= CU_MOE_GEMV_MAX_PAIRS; /* the fixed buffers; recordable on the GEMV path */
    /* a decode batch: with shared experts, its routed pairs as without them (a DeepSeek-V3 batch of 8 keeps
     * the GEMV at 64 + 8 pairs, on the larger buffers) and at most 8 tokens (one GEMV pass: the shared
     * experts take every token) */
    const bool decode = p->num_shared ? T * p->top_k <= CU_MOE_GEMV_MAX_PAIRS && T <= 8 : small;
    const bool gemv_ok = D % 8 == 0 && I % 8 == 0 && ((uintptr_t)x->data % 16) == 0 && xs % 8 == 0;
    const bool gemv = gemv_ok && (ex->path == 1 || (ex->path == 0 && decode));
    const bool grouped = !gemv && gemv_ok && (ex->path == 3 || ex->path == 0) &&
                         gg_tiles_bound(N, E, 32) <= 65535; /* else cuBLAS per expert */
    const bool cublas = !gemv && !grouped;
    moe_ws *ws = ex->ws;
    const moe_meta ml = meta_layout(E, N);
    /* the larger calls' buffers: already big enough (experts_reserve), or grown here (eagerly, and only
     * while no recording points at them) */
    const bool fits = ws->meta.cap >= ml.bytes && ws->h.cap >= (size_t)N * (size_t)I * 2 &&
                      ws->o.cap >= (size_t)N * (size_t)D * 2;
    if ((cublas || (!small && !fits)) &&
        !cu_capture_guard(cu, "moe_experts beyond its reserved scratch (experts_reserve) or on the cuBLAS path (its "
                              "GEMMs read the experts' token counts on the host)"))
        return;
    if (!small && !fits && ws->recorded_large) {
        cu_fail(cu, "moe_experts: %d (token, expert) pairs exceed the scratch that recorded graphs use (experts_reserve)",
                N);
        return;
    }
    if (cu->capturing && !small) ws->recorded_large = true;

    /* scratch: the permutation's ints (meta_layout), then h, o (and xg, gu on the GEMM path) */
    cu_buf *bmeta = small ? &ws->dmeta : &ws->meta, *bh = small ? &ws->dh : &ws->h, *bo = small ? &ws->dout : &ws->o;
    if (cu_buf_reserve(cu, bmeta, ml.bytes, "moe_experts permutation") ||
        cu_buf_reserve(cu, bh, (size_t)N * (size_t)I * 2, "moe_experts h") ||
        cu_buf_reserve(cu, bo, (size_t)N * (size_t)D * 2, "moe_experts expert outputs") ||
        (cublas && (cu_buf_reserve(cu, &ws->xg, (size_t)N * (size_t)D * 2, "moe_experts gathered rows") ||
                   cu_buf_reserve(cu, &ws->gu, (size_t)N * (size_t)I * 4, "moe_experts gate|up") ||
                   cu_hbuf_reserve(&ws->host, (size_t)(E + 2) * 4, "moe_experts token counts")))) {
        cu_fail(cu, "moe_experts: scratch: %s", vllm_last_error());
        return;
    }
    char *mb = (char *)bmeta->p;
    int *offs = (int *)(mb + ml.offs), *perm = (int *)(mb + ml.perm), *inv = (int *)(mb + ml.inv),
        *pe = (int *)(mb + ml.pe);
    int4 *slot = (int4 *)(mb + ml.slot), *tl = (int4 *)(mb + ml.tiles);
    /* the grouped GEMM's tile height and its tiles (the grid's y) */
    const int bm = ex->mm_bm ? ex->mm_bm : mm_bm(N, E);
    const unsigned tiles = gg_tiles_bound(N, E, bm);
    __nv_bfloat16 *h = (__nv_bfloat16 *)bh->p, *o = (__nv_bfloat16 *)bo->p;

    perm_args pa = {};
    pa.ids = (const int32_t *)ids->data;
    pa.is = tensor_row_stride(ids);
    pa.N = N;
    pa.k = k;
    pa.E = E;
    pa.offs = offs;
    pa.tiles = grouped ? tl : NULL;
    pa.bm = bm;
    pa.ntiles = (int)tiles;
    pa.perm = perm;
    pa.inv = inv;
    pa.slot = slot;
    pa.pe = pe;
    pa.err = cu->derr_dev;
    /* one token on the expert GEMV: no permutation (pair j is position j and its own slot; the kernels read ids) */
    const bool direct = gemv && small && T == 1;
    if (!direct && (small ? !cu_launch(cu, "moe_experts (permutation)", true, k_moe_permute_small, dim3(1),
                                       dim3(CU_MOE_GEMV_MAX_PAIRS), 0, pa, !gemv)
                          : !cu_launch(cu, "moe_experts (permutation)", true, k_moe_permute, dim3(1),
                                       dim3(MP_THREADS), 0, pa)))
        return;

    if (gemv || grouped) {
        /* slots: the experts that can have tokens; one token without a permutation, each pair */
        const unsigned slots = direct ? (unsigned)N : (unsigned)(N < E ? N : E);
        mgv_args g = {};
        g.W = ex->gu;
        g.wes = 2 * I * D;
        g.R = (int)I;
        g.K = (int)D;
        g.x = (const __nv_bfloat16 *)x->data;
        g.xs = xs;
        g.by_token = true;
        g.one_token = T == 1;
        g.k = k;
        g.out = h;
        g.os = I;
        g.offs = offs;
        g.tiles = tl;
        g.ids = direct ? pa.ids : NULL;
        g.E = E;
        g.err = cu->derr_dev;
        g.perm = perm;
        g.slot = slot;
        g.act_fn = (int)p->act;
        g.alpha = p->swiglu_alpha > 0.0f ? p->swiglu_alpha : BE_SWIGLU_OAI_ALPHA;
        g.limit = p->swiglu_limit > 0.0f ? p->swiglu_limit : BE_SWIGLU_OAI_LIMIT;
        g.bias = ex->bias; /* gate at 0, up at I of each expert's 2I + D */
        g.bes = 2 * I + D;
        /* the down GEMV and the combine in one kernel (below), h in its shared memory where it fits (D % DC_WARPS
         * == 0 by gemv_ok's D % 8: every CTA's warps have columns); rows of two passes only with that (two passes
         * measured slower with h read through L2, session 29; with h in shared memory DeepSeek-V2-Lite's 1408 inputs
         * 3.139 -> 2.72 ms a step, H100 session 34), three or more not (gpt-oss-20b's 2880: 3.141 -> 3.236) */
        const int64_t dc_pass = 32 * DC_U * 8; /* inputs a pass */
        const bool dc_hs = !ex->dc_hs_off && (size_t)N * (size_t)I * 2 <= DC_HS_MAX;
        const bool fused_dc = gemv && small && !ex->split_comb &&
                              (I <= dc_pass || (dc_hs && (I + dc_pass - 1) / dc_pass <= ex->dc_passes));
        const bool early = fused_dc && !ex->late_off;
        g.late_launch = early; /* the down + combine follows and reads the pairs before its wait */
        /* tokens per GEMV pass: an expert has at most T of them (bar repeated ids, which take more passes) */
        /* one token: 4 chunks of each row a lane in flight and 4 CTAs an SM (60 registers), not 8 and 2: a grid of
         * 512 CTAs (Qwen3.5-35B-A3B's 64 row blocks x 8 experts) in one wave, not 1.9 (H100: 4.125 -> 4.022 ms a
         * step; Qwen3-30B-A3B and DeepSeek-V2-Lite unchanged within 0.4%) */
        /* one token: split-K where whole rows leave the grid's last wave half empty (gv_pick_ks) */
        const int ks2 = T <= 1 ? gv_pick_ks(ex, 2, I, slots, cu->num_sms) : 1,
                  ks1 = T <= 1 ? gv_pick_ks(ex, 1, D, slots, cu->num_sms) : 1;
        mgv_kernel gv2 = T <= 1 ? gv_one_token(2, ks2) : T <= 2 ? k_moe_gemv<2, 2> : T <= 4 ? k_moe_gemv<2, 4>
                                                                                     : k_moe_gemv<2, 8>;
        mgv_kernel gv1 = T <= 1 ? gv_one_token(1, ks1) : T <= 2 ? k_moe_gemv<1, 2> : T <= 4 ? k_moe_gemv<1, 4>
                                                                                     : k_moe_gemv<1, 8>;
        /* 128-pair tiles on wgmma where sm_90a's code runs */
        const bool wg = grouped && bm == WG_BM && cu->sm90 && !ex->no_wg;
        if (gemv ? !cu_launch(cu, "moe_experts (gate|up)", true, gv2,
                              dim3((unsigned)((I + MGV_WARPS / ks2 - 1) / (MGV_WARPS / ks2)), slots),
                              dim3(MGV_WARPS * 32), 0, g)
                 : wg ? !cu_launch(cu, "moe_experts (gate|up, wgmma grouped GEMM)", true, k_moe_wg<2>,
                                   dim3((unsigned)((I + MM_BW / 2 - 1) / (MM_BW / 2)), tiles), dim3(256), WG_SMEM, g)
                 : !cu_launch(cu, "moe_experts (gate|up, grouped GEMM)", true, mm_kernel(2, bm),
                              dim3((unsigned)((I + MM_BW / 2 - 1) / (MM_BW / 2)), tiles), dim3(64 * MM_WN),
                              MM_SMEM(bm), g))
            return;
        /* a decode batch whose expert rows take one pass of DC_U chunks a lane (two with h in shared memory, above):
         * the down GEMV and the combine in one kernel (with h read through L2, DeepSeek-V2-Lite's I 1408 ran 3%
         * slower a step fused: two passes of 4 pairs) */
        if (fused_dc) {
            dc_args dc = {};
            dc.W = ex->down;
            dc.wes = D * I;
            dc.D = (int)D;
            dc.K = (int)I;
            dc.h = h;
            dc.perm = perm;
            dc.ids = direct ? pa.ids : NULL;
            dc.pe = pe;
            dc.E = E;
            dc.k = k;
            dc.N = N;
            dc.T = (int)T;
            dc.w = (const float *)w->data;
            dc.ws = tensor_row_stride(w);
            dc.bias = ex->bias ? ex->bias + 2 * I : NULL; /* down at 2I */
            dc.bes = 2 * I + D;
            dc.y = y->data;
            dc.ydt = (int)y->dtype;
            dc.ys = tensor_row_stride(y);
            dc.acc = accumulate;
            dc.early = early;
            const dim3 grid((unsigned)((D + DC_WARPS - 1) / DC_WARPS));
            /* one token: the weights evict-first (no expert repeats) */
            /* h in shared memory (a one-token step of Qwen3-30B-A3B: 8 x 768 BF16, 12 KB; H100, VLLM_CUDA_MOE_DCH=0
             * against it: 3.606 -> 3.391 ms a step) */
            typedef void (*dc_kernel)(dc_args);
            static const dc_kernel dcks[2][2] = { /* [HS][STREAM] */
                {k_moe_down_comb<false, false>, k_moe_down_comb<true, false>},
                {k_moe_down_comb<false, true>, k_moe_down_comb<true, true>}};
            const dc_kernel dck = dcks[dc_hs][T == 1];
            cu_launch(cu, "moe_experts (down + combine)", true, dck, grid, dim3(DC_WARPS * 32),
                      dc_hs ? (size_t)N * (size_t)I * 2 : 0, dc);
            return;
        }
        g.W = ex->down;
        g.wes = D * I;
        g.R = (int)D;
        g.K = (int)I;
        g.x = h;
        g.xs = I;
        g.by_token = false;
        g.one_token = false;
        g.out = o;
        g.os = D;
        if (ex->bias) g.bias = ex->bias + 2 * I; /* down at 2I */
        if (gemv ? !cu_launch(cu, "moe_experts (down)", true, gv1,
                              dim3((unsigned)((D + MGV_WARPS / ks1 - 1) / (MGV_WARPS / ks1)), slots),
                              dim3(MGV_WARPS * 32), 0, g)
                 : wg ? !cu_launch(cu, "moe_experts (down, wgmma grouped GEMM)", true, k_moe_wg<1>,
                                   dim3((unsigned)((D + MM_BW - 1) / MM_BW), tiles), dim3(256), WG_SMEM, g)
                 : !cu_launch(cu, "moe_experts (down, grouped GEMM)", true, mm_kernel(1, bm),
                              dim3((unsigned)((D + MM_BW - 1) / MM_BW), tiles), dim3(64 * MM_WN), MM_SMEM(bm), g))
            return;
    } else {
        moe_gemm_path(be, ex, x, N, k, p, offs, perm, h, o);
        if (cu->err != VLLM_OK) return;
    }

    comb_args c = {};
    c.o = o;
    c.D = (int)D;
    c.ids = pa.ids;
    c.is = pa.is;
    c.w = (const float *)w->data;
    c.ws = tensor_row_stride(w);
    c.inv = direct ? NULL : inv;
    c.T = (int)T;
    c.k = k;
    c.E = E;
    c.y = y->data;
    c.ydt = (int)y->dtype;
    c.ys = tensor_row_stride(y);
    c.acc = accumulate;
    /* a CTA per (token, 2048 columns): decode batches spread the row over several CTAs */
    const unsigned cy = (unsigned)((D + 2047) / 2048);
    cu_launch(cu, "moe_experts (combine)", true, k_moe_combine, dim3(cu_grid(T, 1), cy), dim3(256), 0, c);
}

/* ---- the shared expert's gate ---- */

// x (T, D) *= sigmoid(g[t]) in f32, rounded to x's dtype; a CTA per row (grid-stride)
__global__ void k_sigmoid_gate(void *x, int xdt, int64_t xs, int64_t T, int64_t D, const void *g, int gdt,
                               int64_t gs) {
    pdl_launch();
    pdl_wait();
    cu_with_dt(xdt, [&](auto xd) {
        for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
            const float s = 1.0f / (1.0f + expf(-cu_ld(g, gdt, t * gs)));
            /* CU_ROW_BATCH elements a thread loaded together (indices past D clamped), then stored */
            for (int64_t d0 = threadIdx.x; d0 < D; d0 += (int64_t)blockDim.x * CU_ROW_BATCH) {
                float v[CU_ROW_BATCH];
#pragma unroll
                for (int u = 0; u < CU_ROW_BATCH; u++)
                    v[u] = cu_ld(x, decltype(xd)::value, t * xs + min(d0 + (int64_t)u * blockDim.x, D - 1));
#pragma unroll
                for (int u = 0; u < CU_ROW_BATCH; u++)
                    if (d0 + (int64_t)u * blockDim.x < D)
                        cu_st(x, decltype(xd)::value, t * xs + d0 + (int64_t)u * blockDim.x, v[u] * s);
            }
        }
    });
}

// x (T, D) BF16 / F32 *= sigmoid(g (T, 1)) per row
void cu_sigmoid_gate(backend *be, tensor *x, const tensor *g) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "sigmoid_gate", "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, "sigmoid_gate", "g", g, CU_FLOAT, cu_rows(x), 1))
        return;
    const int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    cu_launch(cu, "sigmoid_gate", true, k_sigmoid_gate, dim3(cu_grid(T, 1)), dim3(256), 0, x->data, (int)x->dtype,
              tensor_row_stride(x), T, D, (const void *)g->data, (int)g->dtype, tensor_row_stride(g));
}
