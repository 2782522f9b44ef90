/* weights.c: weight sources: safetensors (in place; FP8 repacked), GGUF (in place or dequantized), or dummy random weights. */
#include "model/weights.h"

#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "loader/safetensors.h"
#include "tensor/ggml_dtype.h"
#include "tensor/ggml_quant.h"
#include "tensor/dummy.h"
#include "tensor/fp4.h"
#include "tensor/fp8.h"
#include "tensor/int4.h"

struct weight_source {
    st_set *st;          /* NULL for dummy and GGUF */
    gguf_file *gguf;     /* a GGUF file's tensors */
    size_t dequantized;  /* GGUF: bytes of F32 copies made of quantized tensors */
    size_t native;       /* GGUF: bytes of block-type matrices handed out as they are; FP8: of FP8_B128 rows */
    uint32_t native_blocks; /* the block dtypes the backend takes (backend.native_blocks) */
    quant_config quant;  /* safetensors: the checkpoint's quantization_config */
    size_t fp8_dequantized; /* FP8: bytes of F32 copies (a backend without FP8_B128, VLLM_FP8_DEQUANTIZE=1) */
    size_t int4_dequantized; /* AWQ / GPTQ: bytes of F32 copies of their 4-bit weights */
    size_t fp4_dequantized;  /* NVFP4: bytes of F32 copies of its 4-bit float weights */
    size_t int4_native;  /* AWQ / GPTQ: bytes of I4_B128 rows handed out */
    int int4_act_order;  /* 4-bit: matrices kept as F32 copies because their groups split 32-runs (act-order, groups of 16) */
    dtype dummy_dtype;
    uint64_t seed;       /* dummy.h's stream */
    uint64_t offset;     /* dummy: the next tensor's byte offset (as an arena would place it) */
    dummy_arena *arena;  /* dummy on the device: the tensors of 2+ dims live here */
    void **buffers;      /* dummy allocations */
    size_t num_buffers, cap_buffers;
};

vllm_status ws_open(const char *dir, const model_config *cfg, bool dummy, bool dummy_on_device, uint64_t seed,
                    weight_source **out) {
    *out = NULL;
    weight_source *ws = calloc(1, sizeof *ws);
    if (!ws) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    ws->quant = cfg->quant;
    if (dummy && cfg->quant.method != QUANT_NONE && cfg->quant.method != QUANT_FAMILY) {
        free(ws);
        return vt_error(VLLM_ERR_UNSUPPORTED, "--load-format dummy: quantization_config %s is not supported yet (dummy "
                        "weights are %s)", cfg->quant.name, dtype_name(cfg->torch_dtype));
    }
    if (dummy) {
        ws->dummy_dtype = cfg->torch_dtype == DTYPE_F32 ? DTYPE_F32 : cfg->torch_dtype;
        ws->seed = dummy_seed(seed);
        if (dummy_on_device && !(ws->arena = dummy_arena_create(ws->seed))) {
            free(ws);
            return VLLM_ERR_NO_MEMORY;
        }
    } else {
        vllm_status st = st_open_dir(dir, &ws->st);
        if (st != VLLM_OK) {
            free(ws);
            return st;
        }
    }
    *out = ws;
    return VLLM_OK;
}

vllm_status ws_open_gguf(gguf_file *f, uint32_t native_blocks, weight_source **out) {
    *out = NULL;
    weight_source *ws = calloc(1, sizeof *ws);
    if (!ws) {
        gguf_close(f);
        return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    }
    ws->gguf = f;
    ws->native_blocks = native_blocks;
    *out = ws;
    return VLLM_OK;
}

void ws_close(weight_source *ws) {
    if (!ws) return;
    st_close(ws->st);
    gguf_close(ws->gguf);
    for (size_t i = 0; i < ws->num_buffers; i++) free(ws->buffers[i]);
    free(ws->buffers);
    dummy_arena_destroy(ws->arena);
    free(ws);
}

void ws_release_copied(weight_source *ws) {
    if (!ws) return;
    for (size_t i = 0; i < ws->num_buffers; i++) free(ws->buffers[i]);
    ws->num_buffers = 0;
}

/* A host buffer the source owns (freed by ws_release_copied / ws_close); NULL when out of memory. */
static void *ws_buffer(weight_source *ws, size_t bytes) {
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) return NULL;
    if (ws->num_buffers == ws->cap_buffers) {
        size_t cap = ws->cap_buffers ? ws->cap_buffers * 2 : 64;
        void **nb = realloc(ws->buffers, cap * sizeof *nb);
        if (!nb) {
            free(buf);
            return NULL;
        }
        ws->buffers = nb;
        ws->cap_buffers = cap;
    }
    ws->buffers[ws->num_buffers++] = buf;
    return buf;
}

/* GGUF row r of a llama.cpp-permuted q / k projection holding HF row perm_row(r): per head of hd rows,
 * llama.cpp stores the pairs (i, i + hd/2) interleaved (convert_hf_to_gguf.py LlamaModel.permute:
 * reshape (heads, 2, hd/2) -> swap -> (heads, hd/2, 2)), so GGUF row h hd + 2 i + s is HF row
 * h hd + s hd/2 + i. */
static int64_t gguf_hf_row(int64_t hf_row, int64_t rows, int heads) {
    const int64_t hd = rows / heads, h = hf_row / hd, j = hf_row % hd, s = j / (hd / 2), i = j % (hd / 2);
    return h * hd + 2 * i + s;
}

static vllm_status gguf_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    const char *file = gguf_file_name(ws->gguf, 0);
    ggc_tensor_ref ref;
    if (!ggc_find(ws->gguf, name, &ref))
        return vt_error(VLLM_ERR_NOT_FOUND, "%s: no tensor for '%s'", file, name);
    const gguf_tensor_info *t = ref.t;
    const gguf_tensor_info *t2 = ref.t2; /* qwen3next's attn_gate: the z rows after attn_qkv's */
    if (t2 && (t->n_dims != 2 || t2->n_dims != 2 || t2->ne[0] != t->ne[0] || ref.expert >= 0))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensors '%s' and '%s' (for %s) must be matrices of the same width", file,
                        t->name, t2->name, name);
    /* its shape (outermost first): less the expert dimension of a slice, a fused half's rows, plus t2's rows */
    int64_t tshape[GGUF_MAX_DIMS];
    const int tdims = ggc_ref_shape(&ref, tshape);
    /* the same shape up to 1s (a (1, n) matrix the converter once squeezed to (n), conv1d's (C, 1, K) as (C, K):
     * the same bytes) */
    int64_t sa[GGUF_MAX_DIMS], sb[8];
    int na = 0, nb = 0;
    for (int i = 0; i < tdims; i++)
        if (tshape[i] != 1) sa[na++] = tshape[i];
    for (int i = 0; i < ndim && nb < 8; i++)
        if (shape[i] != 1) sb[nb++] = shape[i];
    bool ok = na == nb;
    for (int i = 0; ok && i < na; i++) ok = sa[i] == sb[i];
    if (!ok) {
        char got[96] = "", want[96] = "";
        for (int i = 0; i < tdims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)tshape[i]);
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' (for %s) has shape [%s], expected [%s]", file, t->name, name,
                        got, want);
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    dtype dt = DTYPE_COUNT;
    /* MXFP4 (gpt-oss's experts): where the backend does not run its blocks, BF16 copies (exact: 2-bit mantissas,
     * E8M0 scales; a quarter of F32's memory) */
    const bool mxfp4 = t->type == GGML_TYPE_MXFP4;
    for (int k = 0; k < (t2 ? 2 : 1); k++) {
        const gguf_tensor_info *tk = k ? t2 : t;
        dtype dk = DTYPE_COUNT;
        if (!dtype_from_ggml(tk->type, &dk) || (dtype_is_block(dk) && !gq_type_supported((ggml_type)tk->type)))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, not supported", file, tk->name,
                            gguf_type_name(tk->type));
        if (!k) dt = dk;
    }
    if (n == 0 || !t->nbytes || !t->data || (t2 && (!t2->nbytes || !t2->data)))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' (for %s) is empty", file, t->name, name);
    const int64_t row = ndim ? shape[ndim - 1] : 1, rows = row ? n / row : 0;
    size_t slice = t->nbytes / (ref.expert >= 0 ? (size_t)t->ne[t->n_dims - 1] : 1);
    const uint8_t *src = (const uint8_t *)t->data + (ref.expert >= 0 ? (size_t)ref.expert * slice : 0);
    if (ref.rows > 0) { /* rows [row0, row0 + rows) of the slice */
        const size_t full_row = slice / (size_t)t->ne[1];
        src += (size_t)ref.row0 * full_row;
        slice = (size_t)ref.rows * full_row;
    }
    /* (with attn_gate's rows after attn_qkv's, a row of t is t's bytes over its own rows) */
    const size_t row_bytes = t2 ? t->nbytes / (size_t)t->ne[1] : rows ? slice / (size_t)rows : 0;
    /* values or columns the converter changed, or two sources of different types: F32 rows */
    const bool to_f32 = ref.map == GGC_MAP_VHEAD_COLS || ref.neg_exp_log || (t2 && t2->type != t->type);
    if (to_f32 || (dtype_is_block(dt) && (ndim != 2 || !(ws->native_blocks >> (dt - DTYPE_FIRST_BLOCK) & 1u))))
        dt = DTYPE_COUNT; /* a block type the backend does not take (or not a matrix): dequantized below */
    else if (dtype_is_block(dt))
        ws->native += slice + (t2 ? t2->nbytes : 0);
    if (ref.norm_minus_one) { /* Gemma's norms (ggc_tensor_ref): an F32 copy of the stored w + 1, less 1 */
        float *w = ws_buffer(ws, (size_t)n * sizeof *w);
        if (!w) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for tensor '%s'", file, t->name);
        if (ndim != 1 || !gq_dequantize_row((ggml_type)t->type, src, w, n))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: norm tensor '%s' of type %s, not supported", file, t->name,
                            gguf_type_name(t->type));
        for (int64_t i = 0; i < n; i++) w[i] -= 1.0f; /* exact where the stored value came from w + 1 */
        *out = tensor_make(DTYPE_F32, w, ndim, shape);
        return VLLM_OK;
    }
    if (ref.permute_heads > 0 && (rows % ref.permute_heads || (rows / ref.permute_heads) % 2))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' has %lld rows, not a multiple of 2 x %d heads", file, t->name,
                        (long long)rows, ref.permute_heads);
    const bool rows_mapped = ref.permute_heads > 0 || ref.map == GGC_MAP_VHEAD_ROWS || ref.map == GGC_MAP_QKVZ;
    if (dt != DTYPE_COUNT && !rows_mapped) { /* in place */
        *out = tensor_make(dt, (void *)src, ndim, shape);
        return VLLM_OK;
    }
    /* a copy: F32 rows (dequantized; MXFP4's BF16) or the file's rows (plain or block) in HF order */
    const bool bf16_out = mxfp4 && !to_f32;
    const dtype odt = dt == DTYPE_COUNT ? (bf16_out ? DTYPE_BF16 : DTYPE_F32) : dt;
    const size_t orow = dt == DTYPE_COUNT ? (size_t)row * dtype_size(odt) : row_bytes;
    if (rows && orow > SIZE_MAX / (size_t)rows)
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: tensor '%s' too large", file, t->name);
    uint8_t *buf = ws_buffer(ws, (size_t)rows * orow);
    const bool via_tmp = bf16_out || ref.map == GGC_MAP_VHEAD_COLS; /* dequantized into tmp, then placed */
    float *tmp = via_tmp ? ws_buffer(ws, (size_t)row * sizeof *tmp) : NULL;
    if (!buf || (via_tmp && !tmp)) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for tensor '%s'", file, t->name);
    const size_t row_bytes2 = t2 ? t2->nbytes / (size_t)t2->ne[1] : 0;
    for (int64_t r = 0; r < rows; r++) {
        bool second = false;
        const int64_t sr = ref.permute_heads > 0                                         ? gguf_hf_row(r, rows, ref.permute_heads)
                           : ref.map == GGC_MAP_VHEAD_ROWS || ref.map == GGC_MAP_QKVZ ? ggc_source_index(&ref, r, &second)
                                                                                        : r;
        const gguf_tensor_info *ts = second ? t2 : t;
        /* a map whose metadata (ssm.*) disagrees with the tensors' shapes must not read past them */
        if (sr < 0 || sr >= (second ? t2->ne[1] : t2 ? t->ne[1] : rows))
            return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' (for %s): its rows do not match the metadata's head "
                            "layout", file, ts->name, name);
        const uint8_t *s = second ? (const uint8_t *)t2->data + (size_t)sr * row_bytes2 : src + (size_t)sr * row_bytes;
        uint8_t *d = buf + (size_t)r * orow;
        if (dt != DTYPE_COUNT) memcpy(d, s, row_bytes);
        else if (!gq_dequantize_row((ggml_type)ts->type, s, via_tmp ? tmp : (float *)d, row))
            return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': rows of %lld elements do not hold whole %s blocks", file,
                            ts->name, (long long)row, gguf_type_name(ts->type));
        else if (ref.map == GGC_MAP_VHEAD_COLS)
            for (int64_t i = 0; i < row; i++) {
                const int64_t sc = ggc_source_index(&ref, i, &second);
                if (sc < 0 || sc >= row)
                    return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' (for %s): its columns do not match the "
                                    "metadata's head layout", file, ts->name, name);
                ((float *)(void *)d)[i] = tmp[sc];
            }
        else if (bf16_out)
            for (int64_t i = 0; i < row; i++) ((uint16_t *)(void *)d)[i] = f32_to_bf16(tmp[i]);
        if (ref.neg_exp_log) /* ssm_a = -exp(A_log) */
            for (int64_t i = 0; i < row; i++) ((float *)(void *)d)[i] = logf(-((float *)(void *)d)[i]);
    }
    if (dt == DTYPE_COUNT) ws->dequantized += (size_t)rows * orow;
    *out = tensor_make(odt, buf, ndim, shape);
    return VLLM_OK;
}

void ws_set_native_blocks(weight_source *ws, uint32_t native_blocks) {
    if (ws && !ws->gguf) ws->native_blocks = native_blocks;
}

/* An F8_E4M3 matrix of an FP8 checkpoint (tensor/fp8.h): W (N, K) and its scales, F32 (or F16 / BF16):
 * `<name>_scale_inv` (ceil(N / bn), K / 128) per block ("fp8" with weight_block_size), or `<name>_scale` per block,
 * per output row ((N) or (N, 1)) or per matrix (() or (1)) (AutoFP8, compressed-tensors). W[n][k] = q[n][k] times
 * the scale covering (n, k); as FP8_B128 rows (each 128-block of a row carries that scale: exact for all three)
 * when the backend takes them, else an F32 copy of W's values (exact). */
static vllm_status fp8_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    const char *file = st_file_of(ws->st, name);
    if (ws->quant.method != QUANT_FP8)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' is F8_E4M3 but config.json's quantization_config is "
                        "not an fp8 scheme (%s)", file, name, ws->quant.name[0] ? ws->quant.name : "none");
    if (ndim != 2)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: F8_E4M3 tensor '%s' is used as a %d-dim tensor: only weight "
                        "matrices may be fp8", file, name, ndim);
    const int64_t N = shape[0], K = shape[1], bn = ws->quant.block_n;
    tensor q, sc;
    vllm_status st = st_get_as(ws->st, name, DTYPE_F8_E4M3, ndim, shape, &q);
    if (st != VLLM_OK) return st;
    if (K % FP8_B)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: F8_E4M3 tensor '%s' has %lld columns, not a multiple of the block "
                        "width 128", file, name, (long long)K);
    const size_t nl = strlen(name);
    char sname[512];
    if (nl < 7 || strcmp(name + nl - 7, ".weight") || nl + 11 > sizeof sname)
        return vt_error(VLLM_ERR_FORMAT, "%s: F8_E4M3 tensor '%s' is not a '.weight'", file, name);
    snprintf(sname, sizeof sname, "%s%s", name, ws->quant.fp8_scale_inv ? "_scale_inv" : "_scale");
    /* the scale of (n, 128-block g) is at n / rdiv * gmul + g * gstep */
    int64_t sshape[2] = {1, 1}, rdiv = N, gmul = 0, gstep = 0;
    int sdim;
    if (ws->quant.fp8_scales == FP8_SCALE_BLOCK) {
        sdim = 2, sshape[0] = (N + bn - 1) / bn, sshape[1] = K / FP8_B;
        rdiv = bn, gmul = K / FP8_B, gstep = 1;
    } else {
        const tensor *t = st_find(ws->st, sname);
        if (!t) return vt_error(VLLM_ERR_NOT_FOUND, "%s: tensor '%s' (the scales of '%s') not found", file, sname, name);
        sdim = t->ndim;
        if (ws->quant.fp8_scales == FP8_SCALE_CHANNEL) {
            if (sdim == 2) sshape[1] = 1; /* (N, 1) */
            sshape[0] = N, rdiv = 1, gmul = 1;
            if (sdim != 1 && sdim != 2) sdim = 2; /* st_get names the expected (N, 1) */
        } else if (sdim > 1) sdim = 1; /* () or (1) */
    }
    if ((st = st_get(ws->st, sname, sdim, sshape, &sc)) != VLLM_OK) return st;
    const bool native = ws->native_blocks >> (DTYPE_FP8_B128 - DTYPE_FIRST_BLOCK) & 1u;
    const int64_t G = K / FP8_B;
    const size_t bytes = native ? (size_t)N * (size_t)G * sizeof(fp8_block) : (size_t)N * (size_t)K * 4;
    uint8_t *buf = ws_buffer(ws, bytes);
    if (!buf) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for tensor '%s'", file, name);
    const float *tab = fp8_e4m3_table();
    const uint8_t *qd = q.data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const int64_t si = n / rdiv * gmul + g * gstep;
            float s;
            if (sc.dtype == DTYPE_F32) memcpy(&s, (const uint8_t *)sc.data + 4 * si, 4);
            else {
                uint16_t h;
                memcpy(&h, (const uint8_t *)sc.data + 2 * si, 2);
                s = sc.dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
            if (!isfinite(s))
                return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' holds a scale that is not finite", file, sname);
            const uint8_t *src = qd + (size_t)n * (size_t)K + (size_t)g * FP8_B;
            if (native) {
                fp8_block *b = (fp8_block *)(void *)buf + (size_t)n * (size_t)G + (size_t)g;
                memcpy(b->q, src, FP8_B);
                fp8_block_set_scale(b, s);
            } else {
                float *d = (float *)(void *)buf + (size_t)n * (size_t)K + (size_t)g * FP8_B;
                for (int i = 0; i < FP8_B; i++) d[i] = tab[src[i]] * s;
            }
        }
    if (native) ws->native += bytes;
    else ws->fp8_dequantized += bytes;
    *out = tensor_make(native ? DTYPE_FP8_B128 : DTYPE_F32, buf, ndim, shape);
    return VLLM_OK;
}

/* An NVFP4 weight (tensor/fp4.h) asked for as `base.weight` (N, K): compressed-tensors' base.weight_packed (N, K / 2)
 * U8, base.weight_scale (N, K / 16) F8_E4M3, base.weight_global_scale (1) F32, or ModelOpt's base.weight (U8),
 * base.weight_scale, base.weight_scale_2 (); an F32 copy of its values (dequantized at load: weight-only, as
 * vLLM's Marlin FP4 on Hopper, which multiplies BF16 activations by the dequantized weights). */
static vllm_status nvfp4_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    const char *file = st_file_of(ws->st, name) ? st_file_of(ws->st, name) : "checkpoint";
    const size_t nl = strlen(name);
    if (ndim != 2 || nl < 7 || nl + 24 > 512 || strcmp(name + nl - 7, ".weight"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' is NVFP4-packed but used as a %d-dim tensor: only "
                        "weight matrices may be", file, name, ndim);
    const int64_t N = shape[0], K = shape[1];
    if (K % NVFP4_GROUP)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: NVFP4 weight '%s' has %lld columns, not a multiple of 16", file, name,
                        (long long)K);
    const bool ct = ws->quant.nvfp4_ct;
    char qn[512], sn[512], gn[512];
    snprintf(qn, sizeof qn, "%.*s%s", (int)(nl - 7), name, ct ? ".weight_packed" : ".weight");
    snprintf(sn, sizeof sn, "%.*s.weight_scale", (int)(nl - 7), name);
    snprintf(gn, sizeof gn, "%.*s%s", (int)(nl - 7), name, ct ? ".weight_global_scale" : ".weight_scale_2");
    const int64_t qshape[2] = {N, K / 2}, sshape[2] = {N, K / NVFP4_GROUP};
    tensor q, sc;
    float g = 0.0f;
    vllm_status st;
    if ((st = st_get_as(ws->st, qn, DTYPE_U8, 2, qshape, &q)) || (st = st_get_as(ws->st, sn, DTYPE_F8_E4M3, 2, sshape, &sc)))
        return st;
    if ((st = ws_get_scalar(ws, gn, &g)) != VLLM_OK) return st;
    if (!(g > 0.0f) || !isfinite(g))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' must be positive and finite, got %g", file, gn, (double)g);
    const size_t bytes = (size_t)N * (size_t)K * sizeof(float);
    float *buf = ws_buffer(ws, bytes);
    if (!buf) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for tensor '%s'", file, name);
    for (int64_t n = 0; n < N; n++)
        nvfp4_dequantize_row((const uint8_t *)q.data + n * (K / 2), (const uint8_t *)sc.data + n * (K / NVFP4_GROUP), g,
                             ct, K, buf + n * K);
    ws->fp4_dequantized += bytes;
    *out = tensor_make(DTYPE_F32, buf, ndim, shape);
    return VLLM_OK;
}

/* An I32 / float tensor of the checkpoint as host data of exactly this shape; floats converted into a buffer */
static vllm_status i4_part(weight_source *ws, const char *base, const char *suffix, dtype want, int64_t d0,
                           int64_t d1, int ndim, const void **out) {
    char name[512];
    if (snprintf(name, sizeof name, "%s%s", base, suffix) >= (int)sizeof name)
        return vt_error(VLLM_ERR_INVALID_ARG, "tensor name too long");
    const int64_t shape[2] = {d0, d1};
    tensor t;
    vllm_status st = want == DTYPE_I32 ? st_get_as(ws->st, name, DTYPE_I32, ndim, shape, &t)
                                       : st_get(ws->st, name, ndim, shape, &t);
    if (st != VLLM_OK) return st;
    if (want == DTYPE_I32) return *out = t.data, VLLM_OK;
    const int64_t n = ndim == 1 ? d0 : d0 * d1;
    float *f = ws_buffer(ws, (size_t)n * sizeof *f);
    if (!f) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory for tensor '%s'", name);
    for (int64_t i = 0; i < n; i++) {
        if (t.dtype == DTYPE_F32) {
            memcpy(&f[i], (const uint8_t *)t.data + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t.data + 2 * i, 2);
            f[i] = t.dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
    *out = f;
    return VLLM_OK;
}

/* A 4-bit AWQ / GPTQ / compressed-tensors W4A16 weight (tensor/int4.h) asked for as `base.weight` (N, K): I4_B128
 * rows for a backend that takes them (and groups keeping whole 32-runs), else an F32 copy of its values */
static vllm_status int4_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    const char *file = st_file_of(ws->st, name) ? st_file_of(ws->st, name) : "checkpoint";
    const size_t nl = strlen(name);
    char base[512];
    if (ndim != 2 || nl < 7 || nl - 7 >= sizeof base)
        return vt_error(VLLM_ERR_NOT_FOUND, "%s: tensor '%s' missing", file, name);
    memcpy(base, name, nl - 7);
    base[nl - 7] = 0;
    const int64_t N = shape[0], K = shape[1], G = ws->quant.group_size > 0 ? ws->quant.group_size : K;
    const bool ct = ws->quant.method == QUANT_CT_W4A16;
    if ((!ct && N % 8) || K % 8 || K % G)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s 4-bit weight '%s' of (%lld, %lld): out and in features must "
                        "be multiples of 8 and in of the group size %lld", file, ws->quant.name, base, (long long)N,
                        (long long)K, (long long)G);
    const int64_t groups = K / G;
    const void *qw = NULL, *qz = NULL, *sc = NULL, *gi = NULL;
    vllm_status st;
    const bool awq = ws->quant.method == QUANT_AWQ;
    if (ct) { /* compressed-tensors: weight_packed (N, K / 8), weight_scale (N, groups), weight_g_idx */
        if ((st = i4_part(ws, base, ".weight_packed", DTYPE_I32, N, K / 8, 2, &qw)) ||
            (st = i4_part(ws, base, ".weight_scale", DTYPE_F32, N, groups, 2, &sc)) ||
            (ws->quant.desc_act && (st = i4_part(ws, base, ".weight_g_idx", DTYPE_I32, K, 0, 1, &gi))))
            return st;
    } else if ((st = i4_part(ws, base, ".qweight", DTYPE_I32, awq ? K : K / 8, awq ? N / 8 : N, 2, &qw)) ||
        (st = i4_part(ws, base, ".qzeros", DTYPE_I32, groups, N / 8, 2, &qz)) ||
        (st = i4_part(ws, base, ".scales", DTYPE_F32, groups, N, 2, &sc)) ||
        (!awq && ws->quant.desc_act && (st = i4_part(ws, base, ".g_idx", DTYPE_I32, K, 0, 1, &gi))))
        return st;
    const bool native = ws->native_blocks >> (DTYPE_I4_B128 - DTYPE_FIRST_BLOCK) & 1u;
    if (native && !i4_blocks_fit(gi, K, G)) { /* (checked first: no block buffer wasted) */
        if (K % I4_B == 0) ws->int4_act_order++;
    } else if (native) {
        /* the backend's 4-bit layout: I4_B128 rows, where every 32-run of a row shares its group */
        const size_t bytes = (size_t)N * (size_t)(K / I4_B) * sizeof(i4_block);
        i4_block *b = ws_buffer(ws, bytes);
        if (!b) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for '%s'", file, name);
        memset(b, 0, bytes);
        if (ct    ? i4_ct_blocks(qw, sc, gi, N, K, G, groups, b)
            : awq ? i4_awq_blocks(qw, qz, sc, N, K, G, b)
                  : i4_gptq_blocks(qw, qz, sc, gi, N, K, G, groups, ws->quant.gptq_v1, b)) {
            ws->int4_native += bytes;
            *out = tensor_make(DTYPE_I4_B128, b, ndim, shape);
            return VLLM_OK;
        } /* a g_idx out of range: reported below */
    }
    float *w = ws_buffer(ws, (size_t)N * (size_t)K * sizeof *w);
    if (!w) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for '%s'", file, name);
    if (ct) {
        if (!i4_ct_dequantize(qw, sc, gi, N, K, G, groups, w))
            return vt_error(VLLM_ERR_FORMAT, "%s: '%s.weight_g_idx' has a group outside [0, %lld)", file, base,
                            (long long)groups);
    } else if (awq) i4_awq_dequantize(qw, qz, sc, N, K, G, w);
    else if (!i4_gptq_dequantize(qw, qz, sc, gi, N, K, G, groups, ws->quant.gptq_v1, w))
        return vt_error(VLLM_ERR_FORMAT, "%s: '%s.g_idx' has a group outside [0, %lld)", file, base, (long long)groups);
    ws->int4_dequantized += (size_t)N * (size_t)K * sizeof *w;
    *out = tensor_make(DTYPE_F32, w, ndim, shape);
    return VLLM_OK;
}

/* Dummy weights: uniform(-1e-3, 1e-3) like vLLM's initialize_dummy_weights, element i of a
 * tensor at byte offset o being dummy_value(seed, o / size + i), where o advances as a dummy
 * arena's allocations do: host-made and device-filled weights are the same numbers. */
static vllm_status dummy_get(weight_source *ws, const char *name, int ndim, const int64_t *shape,
                             tensor *out) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 || n > INT64_MAX / shape[i])
            return vt_error(VLLM_ERR_INVALID_ARG, "dummy weight '%s': bad shape", name);
        n *= shape[i];
    }
    size_t esz = dtype_size(ws->dummy_dtype);
    if ((uint64_t)n > SIZE_MAX / esz) return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s' too large", name);
    const size_t bytes = (size_t)n * esz;
    uint64_t offset = ws->offset;
    if (ws->arena) { /* the arena places it (the same offsets as below) */
        void *p = dummy_arena_take(ws->arena, bytes);
        uint64_t seed;
        if (!p || !dummy_lookup(p, &seed, &offset))
            return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s': the dummy arena is exhausted", name);
        if (ndim >= 2) { /* the backend fills it on the device */
            *out = tensor_make(ws->dummy_dtype, p, ndim, shape);
            return VLLM_OK;
        }
    }
    ws->offset = offset + (bytes ? (bytes + DUMMY_ALIGN - 1) / DUMMY_ALIGN * DUMMY_ALIGN : DUMMY_ALIGN);
    void *buf = ws_buffer(ws, bytes);
    if (!buf) return vt_error(VLLM_ERR_NO_MEMORY, "dummy weight '%s': out of memory", name);
    const uint64_t base = offset / esz;
    for (int64_t i = 0; i < n; i++) {
        float v = dummy_value(ws->seed, base + (uint64_t)i);
        if (ws->dummy_dtype == DTYPE_F32) ((float *)buf)[i] = v;
        else if (ws->dummy_dtype == DTYPE_BF16) ((uint16_t *)buf)[i] = f32_to_bf16(v);
        else ((uint16_t *)buf)[i] = f32_to_f16(v);
    }
    *out = tensor_make(ws->dummy_dtype, buf, ndim, shape);
    return VLLM_OK;
}

vllm_status ws_get(weight_source *ws, const char *name, int ndim, const int64_t *shape, tensor *out) {
    if (ws->gguf) return gguf_get(ws, name, ndim, shape, out);
    if (!ws->st) return dummy_get(ws, name, ndim, shape, out);
    const char *dts = st_dtype_str(ws->st, name);
    if (dts && !strcmp(dts, "F8_E4M3")) return fp8_get(ws, name, ndim, shape, out);
    if (ws->quant.method == QUANT_NVFP4 && (ws->quant.nvfp4_ct ? !dts : dts && !strcmp(dts, "U8")))
        return nvfp4_get(ws, name, ndim, shape, out);
    if (dts && ws->quant.method == QUANT_FP8) { /* a float weight beside FP8 scales would be used unscaled */
        char sname[512];
        const int n = snprintf(sname, sizeof sname, "%.480s%s", name, ws->quant.fp8_scale_inv ? "_scale_inv" : "_scale");
        if (n > 0 && (size_t)n < sizeof sname && st_find(ws->st, sname))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' is %s but has FP8 scales '%s': only F8_E4M3 weights "
                            "are scaled", st_file_of(ws->st, name), name, dts, sname);
    }
    if (!dts && (ws->quant.method == QUANT_AWQ || ws->quant.method == QUANT_GPTQ || ws->quant.method == QUANT_CT_W4A16))
        return int4_get(ws, name, ndim, shape, out);
    return st_get(ws->st, name, ndim, shape, out);
}

vllm_status ws_get_as(weight_source *ws, const char *name, dtype dt, int ndim, const int64_t *shape, tensor *out) {
    if (ws->gguf) return vt_error(VLLM_ERR_NOT_FOUND, "%s: no %s tensor '%s'", gguf_file_name(ws->gguf, 0), dtype_name(dt), name);
    if (!ws->st) return vt_error(VLLM_ERR_NOT_FOUND, "dummy weights: no %s tensor '%s'", dtype_name(dt), name);
    return st_get_as(ws->st, name, dt, ndim, shape, out);
}

void ws_log_summary(const weight_source *ws) {
    if (ws && ws->st && ws->int4_dequantized)
        LOG_I("%s checkpoint: %.1f MiB of F32 copies of 4-bit weights (a backend without 4-bit kernels, "
              "VLLM_INT4_DEQUANTIZE=1, rows not a multiple of 128, or %d act-order matrices whose groups split "
              "runs of 32 features): run as float weights", ws->quant.name, (double)ws->int4_dequantized / 1048576.0,
              ws->int4_act_order);
    if (ws && ws->st && ws->fp4_dequantized)
        LOG_I("%s checkpoint: %.1f MiB of F32 copies of its NVFP4 weights (dequantized at load, weight-only%s)",
              ws->quant.name, (double)ws->fp4_dequantized / 1048576.0,
              ws->quant.nvfp4_w4a4 ? "; its W4A4 activation scales are not applied, as vLLM's Marlin FP4 on Hopper" : "");
    if (ws && ws->st && ws->int4_native)
        LOG_I("%s checkpoint: %.1f MiB of 4-bit weights loaded as I4_B128 blocks (128 values, a scale and a zero "
              "per 32)", ws->quant.name, (double)ws->int4_native / 1048576.0);
    if (ws && ws->st && ws->native)
        LOG_I("%s checkpoint: %.1f MiB of F8_E4M3 weights loaded as FP8_B128 blocks (128 values + an F32 scale, "
              "scales per %s), activations quantized to FP8 per token and group of 128", ws->quant.name,
              (double)ws->native / 1048576.0,
              ws->quant.fp8_scales == FP8_SCALE_BLOCK ? "block" : ws->quant.fp8_scales == FP8_SCALE_CHANNEL ? "row" : "matrix");
    if (ws && ws->st && (ws->native || ws->fp8_dequantized) && ws->quant.fp8_static_act)
        LOG_W("%s checkpoint: its static activation scales (input_scale) are not applied: activations are quantized "
              "dynamically per token and group of 128 (finer than one scale per layer, no clipping; vLLM's results "
              "differ by that rounding)", ws->quant.name);
    if (ws && ws->st && ws->fp8_dequantized)
        LOG_W("fp8 checkpoint: %.1f MiB of F32 copies of the FP8 weights (VLLM_FP8_DEQUANTIZE=1, or a backend "
              "without FP8 kernels): activations are not quantized, results differ from vLLM's fp8 path",
              (double)ws->fp8_dequantized / 1048576.0);
    if (ws && ws->gguf && ws->native)
        LOG_I("%s: %.1f MiB of ggml block-type weights used as they are", gguf_file_name(ws->gguf, 0),
              (double)ws->native / 1048576.0);
    if (ws && ws->gguf && ws->dequantized)
        LOG_I("%s: %.1f MiB of block-type weights dequantized to F32 copies (MXFP4: BF16; types or tensors this backend does not "
              "run on their blocks)", gguf_file_name(ws->gguf, 0), (double)ws->dequantized / 1048576.0);
}

bool ws_is_dummy(const weight_source *ws) { return !ws->st && !ws->gguf; }

vllm_status ws_get_scalar(weight_source *ws, const char *name, float *out) {
    const tensor *t = ws && ws->st ? st_find(ws->st, name) : NULL;
    const char *dts = ws && ws->st ? st_dtype_str(ws->st, name) : NULL;
    if (!t && dts) /* present in a dtype the loader does not read: not to be taken for absent */
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, not supported (F32, F16, BF16)",
                        st_file_of(ws->st, name), name, dts);
    if (!t) return vt_error(VLLM_ERR_NOT_FOUND, "no tensor '%s'", name);
    const char *file = st_file_of(ws->st, name);
    if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' must hold one value (shape () or (1))", file, name);
    tensor v;
    vllm_status st = st_get(ws->st, name, t->ndim, t->shape, &v);
    if (st != VLLM_OK) return st;
    uint16_t h;
    if (v.dtype == DTYPE_F32) memcpy(out, v.data, 4);
    else memcpy(&h, v.data, 2), *out = v.dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    return VLLM_OK;
}

bool ws_has(const weight_source *ws, const char *name) {
    if (ws->gguf) {
        ggc_tensor_ref ref;
        return ggc_find(ws->gguf, name, &ref);
    }
    if (!ws->st || st_find(ws->st, name) != NULL) return true;
    /* an AWQ / GPTQ weight: `base.weight` held as base.qweight; compressed-tensors W4A16: as base.weight_packed */
    const size_t nl = strlen(name);
    char q[512];
    const bool ct = ws->quant.method == QUANT_CT_W4A16 || (ws->quant.method == QUANT_NVFP4 && ws->quant.nvfp4_ct);
    if ((ws->quant.method == QUANT_AWQ || ws->quant.method == QUANT_GPTQ || ct) && nl > 7 && nl + 8 < sizeof q &&
        !strcmp(name + nl - 7, ".weight")) {
        snprintf(q, sizeof q, "%.*s.%s", (int)(nl - 7), name, ct ? "weight_packed" : "qweight");
        return st_find(ws->st, q) != NULL;
    }
    return false;
}

vllm_status ws_getf(weight_source *ws, tensor *out, int ndim, const int64_t *shape, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ws_get(ws, name, ndim, shape, out);
}
