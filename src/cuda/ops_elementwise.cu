/*
 * ops_elementwise.cu: the CUDA row-wise ops: embedding lookup, RMSNorm
 * (grouped, in place or not, strided input), residual add, SiLU-gated
 * product, row gather, rotary embedding (neox and interleaved), and the
 * helpers of linear layers (weight conversion to BF16, bias add).
 *
 * Loads and stores go through cu_ld / cu_st, which switch on the dtype
 * (uniform across a launch, so the branch costs little) and compute in
 * f32. Most kernels give one block to a row and stride its threads over
 * the columns; the grid strides over rows when there are many.
 */
#include "cuda/cuda_internal.h"

#define EW_THREADS 256

/* ---- embedding ---- */

// table (V, D) any float dtype, ids (T) -> out (T, D)
__global__ void k_embedding(const void *table, int tdt, int64_t ts, const int32_t *ids, int64_t T, int64_t V,
                            int64_t D, void *out, int odt, int64_t os, cu_dev_err *err) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t id = ids[t];
        if (id < 0 || id >= V) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_EMBED_ID, t, id, V);
            continue;
        }
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            cu_st(out, odt, t * os + d, cu_ld(table, tdt, (int64_t)id * ts + d));
    }
}

void cu_embedding(backend *be, const tensor *table, const tensor *ids, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "embedding", "table", table, CU_FLOAT, -1, -1) ||
        !cu_check_vec(cu, "embedding", "ids", ids, CU_DT(DTYPE_I32), -1))
        return;
    int64_t T = tensor_numel(ids), V = cu_rows(table), D = tensor_row_len(table);
    if (!cu_check_mat(cu, "embedding", "out", out, CU_FLOAT, T, D) || T == 0) return;
    k_embedding<<<cu_grid(T, 1), EW_THREADS, 0, cu->stream>>>(table->data, table->dtype, tensor_row_stride(table),
                                                               (const int32_t *)ids->data, T, V, D, out->data,
                                                               out->dtype, tensor_row_stride(out), cu->derr_dev);
    cu_launched(cu, "embedding");
}

/* ---- RMSNorm ---- */

/* Sum over a warp (every lane gets it). */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per (row, group) item: small groups (per-head q/k norm).
__global__ void k_rms_warp(const void *x, int64_t xs, const void *w, int wdt, int64_t G, int64_t groups,
                           int64_t items, float eps, void *out, int64_t os, int adt) {
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t it = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; it < items; it += warps) {
        int64_t r = it / groups, g = it % groups;
        int64_t xo = r * xs + g * G, oo = r * os + g * G;
        float ss = 0.0f;
        for (int64_t i = lane; i < G; i += 32) {
            float v = cu_ld(x, adt, xo + i);
            ss += v * v;
        }
        ss = warp_sum(ss);
        float scale = 1.0f / sqrtf(ss / (float)G + eps);
        for (int64_t i = lane; i < G; i += 32)
            cu_st(out, adt, oo + i, cu_ld(x, adt, xo + i) * scale * cu_ld(w, wdt, i));
    }
}

// One block per (row, group) item: long groups (the hidden state).
__global__ void k_rms_block(const void *x, int64_t xs, const void *w, int wdt, int64_t G, int64_t groups,
                            int64_t items, float eps, void *out, int64_t os, int adt) {
    __shared__ float part[EW_THREADS / 32];
    __shared__ float scale_s;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        int64_t r = it / groups, g = it % groups;
        int64_t xo = r * xs + g * G, oo = r * os + g * G;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < G; i += blockDim.x) {
            float v = cu_ld(x, adt, xo + i);
            ss += v * v;
        }
        ss = warp_sum(ss);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
        __syncthreads();
        if (threadIdx.x == 0) {
            float s = 0.0f;
            for (int i = 0; i < (int)(blockDim.x / 32); i++) s += part[i];
            scale_s = 1.0f / sqrtf(s / (float)G + eps);
        }
        __syncthreads();
        float scale = scale_s;
        for (int64_t i = threadIdx.x; i < G; i += blockDim.x)
            cu_st(out, adt, oo + i, cu_ld(x, adt, xo + i) * scale * cu_ld(w, wdt, i));
        __syncthreads(); /* part / scale_s are reused by the next item */
    }
}

// x (T, D), w (G) with D % G == 0 -> out (T, D); out may be x
void cu_rms_norm(backend *be, const tensor *x, const tensor *w, float eps, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "rms_norm", "x", x, CU_ACT, -1, -1) ||
        !cu_check_vec(cu, "rms_norm", "w", w, CU_FLOAT, -1))
        return;
    int64_t T = cu_rows(x), D = tensor_row_len(x), G = tensor_numel(w);
    if (G <= 0 || D % G != 0) {
        cu_fail(cu, "rms_norm: row length %lld is not a multiple of the weight length %lld", (long long)D,
                (long long)G);
        return;
    }
    if (!cu_check_mat(cu, "rms_norm", "out", out, CU_DT(x->dtype), T, D)) return;
    int64_t groups = D / G, items = T * groups;
    if (items == 0) return;
    if (G <= 256) {
        k_rms_warp<<<cu_grid(items, EW_THREADS / 32), EW_THREADS, 0, cu->stream>>>(
            x->data, tensor_row_stride(x), w->data, w->dtype, G, groups, items, eps, out->data,
            tensor_row_stride(out), x->dtype);
    } else {
        k_rms_block<<<cu_grid(items, 1), EW_THREADS, 0, cu->stream>>>(x->data, tensor_row_stride(x), w->data,
                                                                       w->dtype, G, groups, items, eps, out->data,
                                                                       tensor_row_stride(out), x->dtype);
    }
    cu_launched(cu, "rms_norm");
}

/* ---- add ---- */

// x (T, D) += y (T, D)
__global__ void k_add(void *x, int xdt, int64_t xs, const void *y, int ydt, int64_t ys, int64_t T, int64_t D) {
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
            cu_st(x, xdt, r * xs + i, cu_ld(x, xdt, r * xs + i) + cu_ld(y, ydt, r * ys + i));
}

void cu_add(backend *be, tensor *x, const tensor *y) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "add", "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, "add", "y", y, CU_ACT, cu_rows(x), tensor_row_len(x)))
        return;
    int64_t T = cu_rows(x), D = tensor_row_len(x);
    if (T == 0 || D == 0) return;
    k_add<<<cu_grid(T, 1), EW_THREADS, 0, cu->stream>>>(x->data, x->dtype, tensor_row_stride(x), y->data, y->dtype,
                                                        tensor_row_stride(y), T, D);
    cu_launched(cu, "add");
}

/* ---- SiLU-gated product ---- */

// gate_up (T, 2I) -> out (T, I) = silu(gate) * up
__global__ void k_silu_mul(const void *gu, int64_t gs, void *out, int64_t os, int dt, int64_t T, int64_t I) {
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
            float g = cu_ld(gu, dt, r * gs + i), u = cu_ld(gu, dt, r * gs + I + i);
            cu_st(out, dt, r * os + i, g / (1.0f + expf(-g)) * u);
        }
}

void cu_silu_mul(backend *be, const tensor *gate_up, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!cu_check_mat(cu, "silu_mul", "gate_up", gate_up, CU_ACT, -1, -1)) return;
    int64_t T = cu_rows(gate_up), D = tensor_row_len(gate_up);
    if (D % 2) {
        cu_fail(cu, "silu_mul: gate_up row length %lld is odd", (long long)D);
        return;
    }
    if (!cu_check_mat(cu, "silu_mul", "out", out, CU_DT(gate_up->dtype), T, D / 2) || T == 0 || D == 0) return;
    k_silu_mul<<<cu_grid(T, 1), EW_THREADS, 0, cu->stream>>>(gate_up->data, tensor_row_stride(gate_up), out->data,
                                                             tensor_row_stride(out), gate_up->dtype, T, D / 2);
    cu_launched(cu, "silu_mul");
}

/* ---- gather rows ---- */

// x (M, D), idx (N) -> out (N, D)
__global__ void k_gather(const void *x, int xdt, int64_t xs, const int32_t *idx, int64_t N, int64_t M, int64_t D,
                         void *out, int odt, int64_t os, cu_dev_err *err) {
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        int32_t j = idx[r];
        if (j < 0 || j >= M) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_GATHER_IDX, r, j, M);
            continue;
        }
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
            cu_st(out, odt, r * os + i, cu_ld(x, xdt, (int64_t)j * xs + i));
    }
}

// out is x's dtype, or F32 from any float x (as the CPU backend)
void cu_gather_rows(backend *be, const tensor *x, const tensor *idx, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!x || !out) {
        cu_fail(cu, "gather_rows: missing x or out");
        return;
    }
    bool widen = x->dtype != out->dtype;
    if (!cu_check_mat(cu, "gather_rows", "x", x, CU_FLOAT, -1, -1) ||
        !cu_check_vec(cu, "gather_rows", "idx", idx, CU_DT(DTYPE_I32), -1))
        return;
    int64_t N = tensor_numel(idx), M = cu_rows(x), D = tensor_row_len(x);
    if (!cu_check_mat(cu, "gather_rows", "out", out, widen ? CU_DT(DTYPE_F32) : CU_DT(x->dtype), N, D) || N == 0)
        return;
    k_gather<<<cu_grid(N, 1), EW_THREADS, 0, cu->stream>>>(x->data, x->dtype, tensor_row_stride(x),
                                                           (const int32_t *)idx->data, N, M, D, out->data,
                                                           out->dtype, tensor_row_stride(out), cu->derr_dev);
    cu_launched(cu, "gather_rows");
}

/* ---- rotary embedding ---- */

/* One block per token; its threads walk the (head, pair) rotations of q
 * then k. cos_sin row p = [cos(p f_0) .. cos(p f_{r/2-1}) | sin(...)] (F32);
 * neox rotates (i, i + r/2), else (2i, 2i + 1); dims past rot_dim stay. */
__global__ void k_rope(void *q, int64_t qs, int64_t nq, void *k, int64_t ks, int64_t nk, int dt,
                       const int32_t *pos, int64_t T, const float *cs, int64_t css, int64_t max_pos, int hd,
                       int half, bool neox, cu_dev_err *err) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t p = pos[t];
        if (p < 0 || p >= max_pos) {
            if (threadIdx.x == 0) cu_report(err, CU_DEV_ROPE_POS, t, p, max_pos);
            continue;
        }
        const float *c = cs + (int64_t)p * css, *s = c + half;
        int64_t total = (nq + nk) * half;
        for (int64_t j = threadIdx.x; j < total; j += blockDim.x) {
            int64_t h = j / half;
            int i = (int)(j % half);
            void *x;
            int64_t base;
            if (h < nq) {
                x = q;
                base = t * qs + h * hd;
            } else {
                x = k;
                base = t * ks + (h - nq) * hd;
            }
            int64_t i1 = neox ? base + i : base + 2 * i, i2 = neox ? base + i + half : base + 2 * i + 1;
            float x1 = cu_ld(x, dt, i1), x2 = cu_ld(x, dt, i2);
            cu_st(x, dt, i1, x1 * c[i] - x2 * s[i]);
            cu_st(x, dt, i2, x2 * c[i] + x1 * s[i]);
        }
    }
}

// q (T, nq*hd), k (T, nk*hd) in place; positions (T); cos_sin (max_pos, rot_dim)
void cu_rope(backend *be, tensor *q, tensor *k, const tensor *positions, const tensor *cos_sin, int head_dim,
             int rot_dim, bool neox) {
    cu_state *cu = cu_of(be);
    if (head_dim <= 0 || rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) {
        cu_fail(cu, "rope: bad head_dim %d / rot_dim %d (need 0 < rot_dim <= head_dim, rot_dim even)", head_dim,
                rot_dim);
        return;
    }
    if (!cu_check_vec(cu, "rope", "positions", positions, CU_DT(DTYPE_I32), -1) ||
        !cu_check_mat(cu, "rope", "cos_sin", cos_sin, CU_DT(DTYPE_F32), -1, rot_dim))
        return;
    int64_t T = tensor_numel(positions);
    tensor *xs[2] = {q, k};
    const char *names[2] = {"q", "k"};
    int64_t heads[2] = {0, 0}, strides[2] = {0, 0};
    void *data[2] = {NULL, NULL};
    int dt = -1;
    for (int i = 0; i < 2; i++) {
        if (!xs[i]) continue; /* k may be omitted */
        if (!cu_check_mat(cu, "rope", names[i], xs[i], CU_ACT, T, -1)) return;
        int64_t D = tensor_row_len(xs[i]);
        if (D % head_dim) {
            cu_fail(cu, "rope: %s row length %lld is not a multiple of head_dim %d", names[i], (long long)D, head_dim);
            return;
        }
        if (dt >= 0 && xs[i]->dtype != dt) {
            cu_fail(cu, "rope: q and k have different dtypes");
            return;
        }
        dt = xs[i]->dtype;
        heads[i] = D / head_dim;
        strides[i] = tensor_row_stride(xs[i]);
        data[i] = xs[i]->data;
    }
    if (T == 0 || dt < 0 || heads[0] + heads[1] == 0) return;
    k_rope<<<cu_grid(T, 1), EW_THREADS, 0, cu->stream>>>(data[0], strides[0], heads[0], data[1], strides[1], heads[1],
                                                         dt, (const int32_t *)positions->data, T,
                                                         (const float *)cos_sin->data, tensor_row_stride(cos_sin),
                                                         cu_rows(cos_sin), head_dim, rot_dim / 2, neox, cu->derr_dev);
    cu_launched(cu, "rope");
}

/* ---- linear helpers ---- */

__global__ void k_convert_bf16(__nv_bfloat16 *dst, const void *src, int sdt, int64_t rows, int64_t cols,
                               int64_t ss) {
    int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        dst[i] = __float2bfloat16(cu_ld(src, sdt, r * ss + c));
    }
}

bool cu_convert_bf16(cu_state *cu, void *dst, const void *src, dtype sdt, int64_t rows, int64_t cols, int64_t ss) {
    if (rows * cols == 0) return true;
    k_convert_bf16<<<cu_grid(rows * cols, EW_THREADS), EW_THREADS, 0, cu->stream>>>((__nv_bfloat16 *)dst, src, sdt,
                                                                                    rows, cols, ss);
    return cu_launched(cu, "linear weight conversion");
}

__global__ void k_add_bias(void *y, int ydt, int64_t ys, const float *bias, int64_t T, int64_t N) {
    for (int64_t r = blockIdx.x; r < T; r += gridDim.x)
        for (int64_t i = threadIdx.x; i < N; i += blockDim.x) cu_st(y, ydt, r * ys + i, cu_ld(y, ydt, r * ys + i) + bias[i]);
}

bool cu_add_bias(cu_state *cu, void *y, dtype ydt, int64_t ys, const float *bias, int64_t T, int64_t N) {
    if (T == 0 || N == 0) return true;
    k_add_bias<<<cu_grid(T, 1), EW_THREADS, 0, cu->stream>>>(y, ydt, ys, bias, T, N);
    return cu_launched(cu, "linear bias");
}
