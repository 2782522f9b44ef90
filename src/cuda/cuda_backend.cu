/*
 * cuda_backend.cu: the CUDA backend object: creation on a device, the op
 * table, device memory (cudaMalloc; imports are uploaded copies), the
 * stream, uploads through a pinned staging ring, the argument checks, the
 * error reporting of synchronize / download (host-side argument failures
 * and the device-side error record that kernels write) and CUDA graphs
 * (stream capture). The kernels live in ops_*.cu.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_blocks.h"
#include "cuda/cuda_internal.h"

#define CU_ALIGN 256

/* ---- errors ---- */

void cu_fail(cu_state *cu, const char *fmt, ...) {
    if (cu->err != VLLM_OK) return; /* keep the first failure */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cu->err_msg, sizeof cu->err_msg, fmt, ap);
    va_end(ap);
    cu->err = VLLM_ERR_BACKEND;
    LOG_E("cuda backend: %s", cu->err_msg);
}

bool cu_ok(cu_state *cu, cudaError_t e, const char *op, const char *what) {
    if (e == cudaSuccess) return true;
    cu_fail(cu, "%s: %s failed: %s", op, what, cudaGetErrorString(e));
    return false;
}

bool cu_launched(cu_state *cu, const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return true;
    cu_fail(cu, "%s: kernel launch failed: %s", op, cudaGetErrorString(e));
    return false;
}

bool cu_capture_guard(cu_state *cu, const char *what) {
    if (!cu->capturing) return true;
    cu_fail(cu, "%s is not allowed while a graph is being recorded", what);
    return false;
}

vllm_status cu_buf_reserve(cu_state *cu, cu_buf *b, size_t bytes, const char *what) {
    if (b->p && b->cap >= bytes) return VLLM_OK;
    if (cu->capturing) {
        /* growing would synchronize and allocate: the step must run eagerly once first */
        cu_fail(cu, "%s: its device workspace must grow to %zu bytes while a graph is being recorded "
                "(run the same step shape eagerly before recording it)", what, bytes);
        return vt_error(VLLM_ERR_BACKEND, "cuda: %s", cu->err_msg);
    }
    size_t cap = b->cap * 2 > bytes ? b->cap * 2 : bytes;
    if (cap < CU_ALIGN) cap = CU_ALIGN;
    /* the stream may still read the old buffer */
    cudaStreamSynchronize(cu->stream);
    if (b->p) {
        cudaFree(b->p);
        cu->bytes_allocated -= b->cap;
    }
    b->p = NULL;
    b->cap = 0;
    cudaError_t e = cudaMalloc(&b->p, cap);
    if (e != cudaSuccess) {
        b->p = NULL;
        cudaGetLastError();
        return vt_error(VLLM_ERR_NO_MEMORY, "cuda: out of device memory for %s (%zu bytes): %s", what, cap,
                        cudaGetErrorString(e));
    }
    b->cap = cap;
    /* a kernel may read a workspace's padding before anything wrote it (the chunked delta rule's tiles): zeros */
    cudaMemsetAsync(b->p, 0, cap, cu->stream);
    cu->bytes_allocated += cap;
    return VLLM_OK;
}

void cu_buf_free(cu_buf *b) {
    if (b->p) cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
}

vllm_status cu_hbuf_reserve(cu_buf *b, size_t bytes, const char *what) {
    if (b->p && b->cap >= bytes) return VLLM_OK;
    size_t cap = b->cap * 2 > bytes ? b->cap * 2 : bytes;
    if (cap < CU_ALIGN) cap = CU_ALIGN;
    if (b->p) cudaFreeHost(b->p);
    b->p = NULL;
    b->cap = 0;
    cudaError_t e = cudaMallocHost(&b->p, cap);
    if (e != cudaSuccess) {
        b->p = NULL;
        cudaGetLastError();
        return vt_error(VLLM_ERR_NO_MEMORY, "cuda: out of pinned host memory for %s (%zu bytes): %s", what, cap,
                        cudaGetErrorString(e));
    }
    b->cap = cap;
    return VLLM_OK;
}

void cu_hbuf_free(cu_buf *b) {
    if (b->p) cudaFreeHost(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* ---- argument checks ---- */

bool cu_check_mat(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t rows,
                  int64_t cols) {
    char msg[512];
    if (tensor_check_mat(t, mask, rows, cols, op, arg, msg, sizeof msg)) return true;
    cu_fail(cu, "%s", msg);
    return false;
}

bool cu_check_vec(cu_state *cu, const char *op, const char *arg, const tensor *t, unsigned mask, int64_t n) {
    char msg[512];
    if (tensor_check_vec(t, mask, n, op, arg, msg, sizeof msg)) return true;
    cu_fail(cu, "%s", msg);
    return false;
}

/* ---- memory ---- */

static vllm_status cu_alloc_bytes(cu_state *cu, size_t bytes, void **out, const char *what) {
    size_t size = bytes < CU_ALIGN ? CU_ALIGN : bytes;
    cudaError_t e = cudaMalloc(out, size);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return vt_error(VLLM_ERR_NO_MEMORY, "cuda %s: out of device memory (%zu bytes asked, %zu MiB free of %zu MiB): %s",
                        what, size, free_b >> 20, total_b >> 20, cudaGetErrorString(e));
    }
    cu->bytes_allocated += size;
    return VLLM_OK;
}

static vllm_status cu_alloc(backend *be, tensor *t) {
    cu_state *cu = cu_of(be);
    if (!cu_capture_guard(cu, "alloc")) return vt_error(VLLM_ERR_BACKEND, "cuda alloc: %s", cu->err_msg);
    if ((unsigned)t->dtype >= DTYPE_COUNT || t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda alloc: bad dtype or ndim (%d)", t->ndim);
    t->row_stride = 0;
    int64_t bytes = tensor_extent_bytes(t);
    if (bytes < 0 || (uint64_t)bytes > (uint64_t)SIZE_MAX - CU_ALIGN)
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda alloc: bad or too large shape for %s tensor", dtype_name(t->dtype));
    return cu_alloc_bytes(cu, (size_t)bytes, &t->data, "alloc");
}

static void cu_release(backend *be, tensor *t) {
    if (!t) return;
    if (!cu_capture_guard(cu_of(be), "release")) return; /* the caller may release it after the recording */
    if (t->data) cudaFree(t->data);
    t->data = NULL;
}

/* A 2-D host tensor of a ggml block dtype (a GGUF embedding table): its rows' blocks copied as they are
 * (the file's layout; the embedding reads it, ops_linear_blocks.cu), the rows made contiguous. */
static vllm_status cu_import_blocks(cu_state *cu, const tensor *host, tensor *out) {
    const dtype dt = host->dtype;
    const int64_t blk = dtype_block(dt);
    if (host->ndim != 2 || host->shape[0] < 0 || host->shape[1] < 0 || host->shape[1] % blk ||
        (host->row_stride && (host->row_stride < host->shape[1] || host->row_stride % blk)))
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: a %s tensor must be 2-D with rows of whole blocks of %lld",
                        dtype_name(dt), (long long)blk);
    const size_t rb = cu_qrow_bytes(dt, host->shape[1]), pitch = cu_qrow_bytes(dt, tensor_row_stride(host));
    const size_t rows = (size_t)host->shape[0];
    if (rows && rb > SIZE_MAX / 2 / rows) return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: tensor too large");
    if (rows && rb && !host->data) return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: tensor has no data");
    tensor t = *host;
    t.row_stride = 0;
    t.data = NULL;
    vllm_status st = cu_alloc_bytes(cu, rows * rb, &t.data, "import");
    if (st != VLLM_OK) return st;
    cudaError_t e = cu_h2d_2d(cu, t.data, rb, host->data, pitch, rb, rows, dt);
    if (e != cudaSuccess) {
        cudaFree(t.data);
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda import: upload of %zu bytes failed: %s", rows * rb, cudaGetErrorString(e));
    }
    *out = t;
    return VLLM_OK;
}

/* Uploads a host tensor (any dtype, rows possibly strided) into a new
 * contiguous device tensor of the same dtype and shape. */
static vllm_status cu_import(backend *be, const tensor *host, tensor *out) {
    cu_state *cu = cu_of(be);
    if (!cu_capture_guard(cu, "import")) return vt_error(VLLM_ERR_BACKEND, "cuda import: %s", cu->err_msg);
    if (dtype_is_block(host->dtype)) return cu_import_blocks(cu, host, out);
    int64_t extent = tensor_extent_bytes(host);
    if (extent < 0) return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: bad dtype, shape or stride");
    if (!host->data && extent > 0) return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: tensor has no data");
    tensor t = *host;
    t.row_stride = 0;
    t.data = NULL;
    int64_t bytes = tensor_extent_bytes(&t);
    if (bytes < 0) return vt_error(VLLM_ERR_INVALID_ARG, "cuda import: bad shape");
    vllm_status st = cu_alloc_bytes(cu, (size_t)bytes, &t.data, "import");
    if (st != VLLM_OK) return st;
    if (bytes > 0) {
        int64_t rows = cu_rows(host), es = (int64_t)dtype_size(host->dtype);
        int64_t row_bytes = rows ? bytes / rows : 0;
        int64_t pitch = (host->row_stride ? host->row_stride * es : row_bytes);
        /* on the backend's stream, so that later kernels see the data; from pageable
         * memory the copy is staged before this returns */
        cudaError_t e = cu_h2d_2d(cu, t.data, (size_t)row_bytes, host->data, (size_t)pitch, (size_t)row_bytes,
                                  (size_t)rows, host->dtype);
        if (e != cudaSuccess) {
            cudaFree(t.data);
            cudaGetLastError();
            return vt_error(VLLM_ERR_BACKEND, "cuda import: upload of %lld bytes failed: %s", (long long)bytes,
                            cudaGetErrorString(e));
        }
    }
    *out = t;
    return VLLM_OK;
}

static vllm_status cu_copy_check(const char *what, const tensor *t, const void *host, size_t nbytes) {
    int64_t extent = tensor_extent_bytes(t);
    if (extent < 0) return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: bad tensor shape or stride", what);
    if ((uint64_t)nbytes > (uint64_t)extent)
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: %zu bytes do not fit a tensor of %lld bytes", what, nbytes,
                        (long long)extent);
    if (nbytes && (!t->data || !host)) return vt_error(VLLM_ERR_INVALID_ARG, "cuda %s: NULL pointer", what);
    return VLLM_OK;
}

/* ---- uploads ---- */

#define CU_STAGE_MIN ((size_t)1 << 20)
#define CU_STAGE_MAX ((size_t)64 << 20)  /* larger uploads are copied from the caller's memory */

/* Waits for the pending copies out of the ring: those up to and including
 * the newest one whose range overlaps [lo, hi) (all when hi == 0). Copies
 * run in stream order, so the older ones are done when it is. */
static bool stage_wait(cu_state *cu, size_t lo, size_t hi) {
    cu_stage *sg = &cu->stage;
    int newest = -1;
    for (int i = 0; i < sg->count; i++) {
        const cu_stage_rec *r = &sg->recs[(sg->first + i) % CU_STAGE_RECS];
        if (hi == 0 || (r->lo < hi && lo < r->hi)) newest = i;
    }
    if (newest < 0) return true;
    cudaError_t e = cudaEventSynchronize(sg->recs[(sg->first + newest) % CU_STAGE_RECS].ev);
    sg->first = (sg->first + newest + 1) % CU_STAGE_RECS;
    sg->count -= newest + 1;
    if (e != cudaSuccess) {
        cudaGetLastError();
        vt_error(VLLM_ERR_BACKEND, "cuda upload: waiting for an earlier copy failed: %s", cudaGetErrorString(e));
        return false;
    }
    return true;
}

/* Copies n bytes of src into the ring and queues their copy to dst; src
 * may be reused when this returns. */
static vllm_status stage_upload(cu_state *cu, void *dst, const void *src, size_t n) {
    cu_stage *sg = &cu->stage;
    size_t need = (n + 255) & ~(size_t)255;
    if (need > sg->buf.cap) {
        if (!stage_wait(cu, 0, 0)) return VLLM_ERR_BACKEND;
        size_t cap = sg->buf.cap * 2 > need ? sg->buf.cap * 2 : need;
        if (cap < CU_STAGE_MIN) cap = CU_STAGE_MIN;
        cu_hbuf_free(&sg->buf);
        vllm_status st = cu_hbuf_reserve(&sg->buf, cap, "upload staging");
        if (st != VLLM_OK) return st;
        sg->head = 0;
    }
    if (sg->head + need > sg->buf.cap) sg->head = 0;
    size_t lo = sg->head, hi = lo + need;
    if (sg->count == CU_STAGE_RECS && !stage_wait(cu, sg->recs[sg->first].lo, sg->recs[sg->first].hi))
        return VLLM_ERR_BACKEND;
    if (!stage_wait(cu, lo, hi)) return VLLM_ERR_BACKEND;
    memcpy((char *)sg->buf.p + lo, src, n);
    cu_stage_rec *r = &sg->recs[(sg->first + sg->count) % CU_STAGE_RECS];
    cudaError_t e = cudaMemcpyAsync(dst, (char *)sg->buf.p + lo, n, cudaMemcpyHostToDevice, cu->stream);
    if (e == cudaSuccess) e = cudaEventRecord(r->ev, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        /* the copy may be queued: let nothing reuse the ring before the stream drains */
        cudaStreamSynchronize(cu->stream);
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda upload of %zu bytes failed: %s", n, cudaGetErrorString(e));
    }
    r->lo = lo;
    r->hi = hi;
    sg->count++;
    sg->head = hi;
    return VLLM_OK;
}

static vllm_status cu_upload(backend *be, tensor *dst, const void *src, size_t nbytes) {
    cu_state *cu = cu_of(be);
    vllm_status st = cu_copy_check("upload", dst, src, nbytes);
    if (st != VLLM_OK || !nbytes) return st;
    /* a recorded copy would replay the staging memory of the recording */
    if (!cu_capture_guard(cu, "upload")) return vt_error(VLLM_ERR_BACKEND, "cuda upload: %s", cu->err_msg);
    if (nbytes <= CU_STAGE_MAX) return stage_upload(cu, dst->data, src, nbytes);
    /* large: from pageable memory the copy is staged by the driver before this returns */
    cudaError_t e = cudaMemcpyAsync(dst->data, src, nbytes, cudaMemcpyHostToDevice, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda upload of %zu bytes failed: %s", nbytes, cudaGetErrorString(e));
    }
    return VLLM_OK;
}

static const char *cu_dev_message(const cu_dev_err *d, char *buf, size_t n) {
    long long a = d->a, b = d->b, c = d->c;
    switch (d->code) {
    case CU_DEV_EMBED_ID: snprintf(buf, n, "embedding: token id %lld at position %lld is out of range [0, %lld)", b, a, c); break;
    case CU_DEV_GATHER_IDX: snprintf(buf, n, "gather_rows: index %lld at %lld is out of range [0, %lld)", b, a, c); break;
    case CU_DEV_ROPE_POS: snprintf(buf, n, "rope: position %lld of token %lld is out of range [0, %lld)", b, a, c); break;
    case CU_DEV_KV_SLOT: snprintf(buf, n, "kv_write: slot %lld of token %lld is past the cache's %lld slots", b, a, c); break;
    case CU_DEV_ATTN_META:
        snprintf(buf, n, "attention: sequence %lld has %lld queries and %lld context tokens (more queries than "
                 "context, or more context than its block table holds)", a, b, c);
        break;
    case CU_DEV_ATTN_QSL:
        snprintf(buf, n, "attention: query_start_loc[%lld] = %lld is not in order within [0, num_tokens %lld]", a, b, c);
        break;
    case CU_DEV_MOE_ID: snprintf(buf, n, "moe_experts: expert id %lld of token %lld is out of range [0, %lld)", b, a, c); break;
    case CU_DEV_ATTN_BLOCK:
        snprintf(buf, n, "attention: sequence %lld block %lld is %lld, outside the cache's blocks", a, b, c);
        break;
    case CU_DEV_LA_SLOT:
        snprintf(buf, n, "linear attention: sequence %lld has state slot %lld, outside the pool's %lld slots", a, b, c);
        break;
    default: snprintf(buf, n, "device error code %d", d->code); break;
    }
    return buf;
}

vllm_status cu_sync(backend *be) {
    cu_state *cu = cu_of(be);
    if (!cu_capture_guard(cu, "synchronize")) return vt_error(VLLM_ERR_BACKEND, "cuda synchronize: %s", cu->err_msg);
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) cu_fail(cu, "device failure: %s", cudaGetErrorString(e));
    else cu->stage.count = 0; /* every staged copy is done */
    volatile cu_dev_err *d = cu->derr;
    if (d->code != 0) {
        char msg[300];
        cu_dev_err copy = {d->code, 0, d->a, d->b, d->c};
        cu_fail(cu, "%s", cu_dev_message(&copy, msg, sizeof msg));
        d->code = 0;
    }
    if (cu->err == VLLM_OK) return VLLM_OK;
    vllm_status st = vt_error(cu->err, "cuda backend: %s", cu->err_msg);
    cu->err = VLLM_OK;
    cu->err_msg[0] = '\0';
    return st;
}

/* Reports a pending op failure first, then copies (and waits for the copy). */
static vllm_status cu_download(backend *be, void *dst, const tensor *src, size_t nbytes) {
    cu_state *cu = cu_of(be);
    vllm_status st = cu_sync(be);
    if (st != VLLM_OK) return st;
    st = cu_copy_check("download", src, dst, nbytes);
    if (st != VLLM_OK || !nbytes) return st;
    cudaError_t e = cudaMemcpyAsync(dst, src->data, nbytes, cudaMemcpyDeviceToHost, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda download of %zu bytes failed: %s", nbytes, cudaGetErrorString(e));
    }
    return VLLM_OK;
}

static vllm_status cu_zero(backend *be, tensor *t) {
    cu_state *cu = cu_of(be); /* a memset node when recorded */
    int64_t len;
    if (tensor_extent_bytes(t) < 0 || !tensor_row_len_checked(t, &len))
        return vt_error(VLLM_ERR_INVALID_ARG, "cuda zero: bad tensor shape or stride");
    int64_t rows = cu_rows(t);
    size_t es = dtype_size(t->dtype);
    if (rows == 0 || len == 0) return VLLM_OK;
    if (!t->data) return vt_error(VLLM_ERR_INVALID_ARG, "cuda zero: tensor has no data");
    cudaError_t e;
    if (!t->row_stride || t->row_stride == len)
        e = cudaMemsetAsync(t->data, 0, (size_t)(rows * len) * es, cu->stream);
    else
        e = cudaMemset2DAsync(t->data, (size_t)t->row_stride * es, 0, (size_t)len * es, (size_t)rows, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda zero failed: %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

/* dst = src on the stream: a device-to-device copy (a memcpy node when recorded); failures through cu_fail. */
static void cu_copy(backend *be, const tensor *src, tensor *dst) {
    cu_state *cu = cu_of(be);
    if ((unsigned)src->dtype >= DTYPE_COUNT) {
        cu_fail(cu, "copy: src has a bad dtype");
        return;
    }
    if (!cu_check_vec(cu, "copy", "src", src, TENSOR_DT(src->dtype), -1) ||
        !cu_check_vec(cu, "copy", "dst", dst, TENSOR_DT(src->dtype), tensor_numel(src)))
        return;
    const size_t n = (size_t)tensor_numel(src) * dtype_size(src->dtype);
    if (n == 0 || dst->data == src->data) return;
    cu_ok(cu, cudaMemcpyAsync(dst->data, src->data, n, cudaMemcpyDeviceToDevice, cu->stream), "copy",
          "cudaMemcpyAsync");
}

/* ---- graphs ---- */

struct be_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

/* Ops issued from here until graph_end are recorded on the stream, not run. */
static vllm_status cu_graph_begin(backend *be) {
    cu_state *cu = cu_of(be);
    if (cu->capturing) return vt_error(VLLM_ERR_INVALID_ARG, "cuda graph_begin: a graph is already being recorded");
    /* earlier failures belong to the eager work: report them now */
    vllm_status st = cu_sync(be);
    if (st != VLLM_OK) return st;
    /* thread-local: other threads' CUDA calls neither break nor join the capture */
    cudaError_t e = cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda graph_begin: %s", cudaGetErrorString(e));
    }
    cu->capturing = true;
    return VLLM_OK;
}

static void graph_destroy(be_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}

/* Ends the recording; an op failure during it (a bad argument, a workspace
 * that had to grow, a forbidden call) fails it with that op's message. */
static vllm_status cu_graph_end(backend *be, be_graph **out) {
    cu_state *cu = cu_of(be);
    *out = NULL;
    if (!cu->capturing) return vt_error(VLLM_ERR_INVALID_ARG, "cuda graph_end: no graph is being recorded");
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cu->stream, &graph);
    cu->capturing = false;
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (cu->err == VLLM_OK) cu_fail(cu, "recording failed: %s", cudaGetErrorString(e));
    }
    if (cu->err != VLLM_OK) {
        if (graph) cudaGraphDestroy(graph);
        vllm_status st = vt_error(cu->err, "cuda graph_end: %s", cu->err_msg);
        cu->err = VLLM_OK;
        cu->err_msg[0] = '\0';
        return st;
    }
    be_graph *g = (be_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(graph);
        return vt_error(VLLM_ERR_NO_MEMORY, "cuda graph_end: out of memory");
    }
    g->graph = graph;
    e = cudaGraphInstantiateWithFlags(&g->exec, graph, 0);
    if (e == cudaSuccess) e = cudaGraphUpload(g->exec, cu->stream); /* the first launch is as fast as the next */
    if (e != cudaSuccess) {
        cudaGetLastError();
        g->exec = NULL;
        graph_destroy(g);
        return vt_error(VLLM_ERR_BACKEND, "cuda graph_end: instantiating the graph failed: %s", cudaGetErrorString(e));
    }
    *out = g;
    return VLLM_OK;
}

static vllm_status cu_graph_launch(backend *be, be_graph *g) {
    cu_state *cu = cu_of(be);
    if (!g) return vt_error(VLLM_ERR_INVALID_ARG, "cuda graph_launch: no graph");
    if (cu->capturing) return vt_error(VLLM_ERR_INVALID_ARG, "cuda graph_launch: a graph is being recorded");
    cudaError_t e = cudaGraphLaunch(g->exec, cu->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda graph_launch: %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

static void cu_graph_free(backend *be, be_graph *g) {
    cu_state *cu = cu_of(be);
    if (!g) return;
    /* a replay may still be running */
    if (!cu->capturing) cudaStreamSynchronize(cu->stream);
    graph_destroy(g);
}

/* ---- the backend object ---- */

static void cu_destroy(backend *be) {
    if (!be) return;
    cu_state *cu = cu_of(be);
    if (cu) {
        if (cu->capturing) {
            cudaGraph_t g = NULL;
            cudaStreamEndCapture(cu->stream, &g);
            if (g) cudaGraphDestroy(g);
            cudaGetLastError();
        }
        if (cu->stream) cudaStreamSynchronize(cu->stream);
        cu_comm_free(cu);
        LOG_D("cuda backend: %zu MiB of device memory held at exit", cu->bytes_allocated >> 20);
        cu_sample_free(cu);
        cu_plans_free(cu);
        if (cu->mm_desc) cublasLtMatmulDescDestroy(cu->mm_desc);
        if (cu->lt) cublasLtDestroy(cu->lt);
        if (cu->blas) cublasDestroy(cu->blas);
        cu_buf_free(&cu->lt_ws);
        cu_buf_free(&cu->attn_ws);
        cu_buf_free(&cu->gdn_ws);
        cu_buf_free(&cu->qlin_ws);
        cu_buf_free(&cu->i4g_ws);
        cu_buf_free(&cu->qx_ws);
        cu_f8_plans_free(cu);
        cu_buf_free(&cu->f8x_ws);
        cu_buf_free(&cu->f8xb_ws);
        cu_buf_free(&cu->attn_cnt);
        cu_buf_free(&cu->stack_ws);
        cu_buf_free(&cu->stack_cnt);
        cu_hbuf_free(&cu->stage.buf);
        for (int i = 0; i < CU_STAGE_RECS; i++)
            if (cu->stage.recs[i].ev) cudaEventDestroy(cu->stage.recs[i].ev);
        if (cu->derr) cudaFreeHost(cu->derr);
        if (cu->stream) cudaStreamDestroy(cu->stream);
        free(cu);
    }
    free(be);
}

static vllm_status cu_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_BACKEND, "cuda mem_info: %s", cudaGetErrorString(e));
    }
    return VLLM_OK;
}

/* What the CUDA backend runs natively, as a composite, or refuses (backend.h supports). */
static be_support cu_supports(backend *be, be_op op, const void *params) {
    switch (op) {
    case BE_OP_ATTENTION: { /* every head_dim the kernels take: even, up to 256 (ops_attention.cu AT_MAX_HD) */
        const attn_params *p = (const attn_params *)params;
        return p && p->head_dim > 0 && p->head_dim <= 256 && p->head_dim % 2 == 0 && p->softcap >= 0.0f &&
                       !isinf(p->softcap) /* attention sinks (gpt-oss) included */
                   ? BE_NATIVE
                   : BE_UNSUPPORTED;
    }
    case BE_OP_ACT_MUL: /* gpt-oss's clamped SwiGLU included: it is gated only (not activation's) */
        return params && (unsigned)*(const be_act *)params < BE_ACT_COUNT ? BE_NATIVE : BE_UNSUPPORTED;
    case BE_OP_ACTIVATION:
        return params && (unsigned)*(const be_act *)params < CU_ACT_COUNT ? BE_NATIVE : BE_UNSUPPORTED;
    case BE_OP_NORM:
    case BE_OP_ADD_NORM: /* add_norm: one kernel for BF16 rows normalised whole, the two ops else */
        return params && (unsigned)((const be_norm *)params)->kind < BE_NORM_COUNT ? BE_NATIVE : BE_UNSUPPORTED;
    case BE_OP_QK_NORM_ROPE_KV: {
        const be_norm *n = (const be_norm *)params;
        if (!n || n->kind == BE_NORM_RMS || n->kind == BE_NORM_RMS_OFFSET) return BE_NATIVE;
        return (unsigned)n->kind < BE_NORM_COUNT ? BE_COMPOSITE : BE_UNSUPPORTED;
    }
    case BE_OP_LINEAR_FUSED: { /* NATIVE: decode-sized batches run as one GEMV kernel */
        const linear_fuse *f = (const linear_fuse *)params;
        if (!f) return BE_NATIVE;
        if ((f->silu_mul && f->accumulate) || (unsigned)f->act >= CU_ACT_COUNT || (unsigned)f->norm_kind >= BE_NORM_COUNT ||
            (f->res && (!f->res_out || !f->res_norm || (unsigned)f->res_norm->kind >= BE_NORM_COUNT)))
            return BE_UNSUPPORTED;
        const bool kernel_norm = f->norm_kind == BE_NORM_RMS || (f->norm_kind == BE_NORM_RMS_OFFSET && f->norm_w);
        return kernel_norm && !f->norm_b ? BE_NATIVE : BE_COMPOSITE;
    }
    case BE_OP_SOFTCAP: return BE_NATIVE;
    case BE_OP_DENSE_STACK: return cu_dense_stack_supports(cu_of(be), (const be_dense_stack *)params);
    case BE_OP_MOE: { /* ops_moe.cu's kernels */
        const moe_params *p = (const moe_params *)params;
        /* be_moe_routing_check first: it bounds num_shared */
        return p && p->top_k >= 1 && p->top_k <= p->num_experts && (unsigned)p->scoring < BE_MOE_SCORING_COUNT &&
                       (unsigned)p->act < BE_ACT_COUNT && !be_moe_routing_check(p) &&
                       p->num_experts + p->num_shared <= CU_MOE_MAX_E && /* shared experts included */
                       be_moe_width(p) <= CU_MOE_MAX_K && p->num_groups <= 32 /* k_moe_route: a lane per group */
                   ? BE_NATIVE /* expert biases, gpt-oss's clamped SwiGLU and DeepSeek's routings included */
                   : BE_UNSUPPORTED;
    }
    case BE_OP_GATED_DELTA_NET: { /* ops_linear_attn.cu: d_k up to 256, conv widths 2..8, F32 / F16 / BF16 states */
        const gdn_params *p = (const gdn_params *)params;
        return p && p->num_k_heads > 0 && p->num_v_heads > 0 && p->num_v_heads % p->num_k_heads == 0 &&
                       p->head_k_dim > 0 && p->head_k_dim <= CU_LA_MAX_DK && p->head_v_dim > 0 &&
                       (p->conv_kernel == 0 || (p->conv_kernel >= 2 && p->conv_kernel <= CU_LA_MAX_CONV_K)) &&
                       (p->state_dtype == DTYPE_F32 || p->state_dtype == DTYPE_F16 || p->state_dtype == DTYPE_BF16)
                   ? BE_NATIVE
                   : BE_UNSUPPORTED;
    }
    case BE_OP_MLA: { /* ops_attention_mla*.cu: head counts and the kernels' shared memory on this GPU */
        const char *why = params ? cu_attention_mla_unsupported(cu_of(be), (const mla_params *)params, be->kv_dtype)
                                 : "no parameters";
        if (why) LOG_W("cuda backend: attention_mla: %s", why);
        return why ? BE_UNSUPPORTED : BE_NATIVE;
    }
    default: return BE_UNSUPPORTED;
    }
}

/* An empty kernel whose attributes say which code of this build the GPU runs (sm_90a SASS, or compute_80 PTX). */
__global__ void k_arch_probe() {}

/* Whether the GPU runs the kernels' sm_90 code, which PDL and the decode attention's cluster merge need (pdl_wait
 * and the cluster merge compile to nothing below it): Hopper runs the build's sm_90a code; a newer GPU runs the
 * compute_80 PTX, JIT-compiled, unless the kernels were built for it (their PTX version says which). */
static bool sm90_code(const cudaDeviceProp *prop) {
    if (prop->major < 9) return false;
    if (prop->major == 9) return true;
    cudaFuncAttributes fa;
    bool ok = false;
    if (cudaFuncGetAttributes(&fa, (const void *)k_arch_probe) == cudaSuccess) ok = fa.ptxVersion >= 90;
    else cudaGetLastError();
    if (!ok)
        LOG_I("cuda: sm_%d%d runs this build's compute_80 code: no programmatic dependent launch, no cluster merge",
              prop->major, prop->minor);
    return ok;
}

static const backend_ops CU_OPS = {
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .release = cu_release,
    .import = cu_import,
    .release_import = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .copy = cu_copy,
    .synchronize = cu_sync,
    .mem_info = cu_mem_info,
    .linear_create = cu_linear_create,
    .linear_free = cu_linear_free,
    .linear = cu_linear,
    .linear_fused = cu_linear_fused,
    .embedding = cu_embedding,
    .rms_norm = cu_rms_norm,
    .add = cu_add,
    .add_rms_norm = cu_add_rms_norm,
    .silu_mul = cu_silu_mul,
    .act_mul = cu_act_mul,
    .activation = cu_activation,
    .softcap = cu_softcap,
    .scale = cu_scale,
    .norm = cu_norm,
    .add_norm = cu_add_norm,
    .norm_add_norm = cu_norm_add_norm,
    .rope = cu_rope,
    .kv_write = cu_kv_write,
    .qk_norm_rope_kv = cu_qk_norm_rope_kv,
    .qk_norm_rope_kv_ex = cu_qk_norm_rope_kv_ex,
    .attention = cu_attention,
    .head_linear = cu_head_linear,     /* multi-head latent attention (ops_attention_mla.cu) */
    .attention_mla = cu_attention_mla,
    .mla_prep = cu_mla_prep,
    .dense_stack_decode = cu_dense_stack_decode,
    .gather_rows = cu_gather_rows,
    .all_reduce = cu_all_reduce, /* tensor parallelism over NCCL (comm_nccl.cu) */
    .all_gather_cols = cu_all_gather_cols,
    .embedding_range = cu_embedding_range,
    .bind_thread = cu_bind_thread,
    /* mixture of experts (ops_moe.cu) */
    .experts_create = cu_experts_create,
    .experts_free = cu_experts_free,
    .experts_reserve = cu_experts_reserve,
    .moe_route = cu_moe_route,
    .moe_experts = cu_moe_experts,
    .sigmoid_gate = cu_sigmoid_gate,
    /* the gated delta-net mixer (ops_linear_attn.cu) */
    .causal_conv1d = cu_causal_conv1d,
    .gated_delta_rule = cu_gated_delta_rule,
    .gdn_reserve = cu_gdn_reserve,
    .rms_norm_gated = cu_rms_norm_gated,
    .gdn_gating = cu_gdn_gating,
    .sigmoid_mul = cu_sigmoid_mul,
    .sample = cu_sample,
    .logprobs = cu_logprobs,
    .supports = cu_supports,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
};


#define CU_LT_WORKSPACE ((size_t)32 << 20)

extern "C" vllm_status cuda_backend_create(const backend_options *opt, backend **out) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return vt_error(VLLM_ERR_UNSUPPORTED, "device 'cuda': no CUDA device (%s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "the runtime found 0 GPUs");
    }
    int dev = opt ? opt->device_id : 0;
    if (dev < 0 || dev >= count)
        return vt_error(VLLM_ERR_INVALID_ARG, "device 'cuda': GPU %d does not exist (%d found)", dev, count);
    backend *be = (backend *)calloc(1, sizeof *be);
    cu_state *cu = (cu_state *)calloc(1, sizeof *cu);
    if (!be || !cu) {
        free(be);
        free(cu);
        return vt_error(VLLM_ERR_NO_MEMORY, "cuda backend: out of memory");
    }
    be->ops = &CU_OPS;
    be->name = "cuda";
    be->act_dtype = DTYPE_BF16;
    be->kv_dtype = opt && opt->kv_cache_fp8 ? DTYPE_F8_E4M3 : DTYPE_BF16; /* ops_attention.cu reads both */
    be->import_copies = true;
    be->async = true;
    be->dummy_fill = true; /* cu_h2d_2d */
    be->graph_moe_pairs = CU_MOE_GEMV_MAX_PAIRS; /* ops_moe.cu's recordable path */
    /* ggml block weights: linear_create / linear / linear_fused, embedding and experts_create take every
     * type ops_linear_blocks.cu has kernels for */
    be->native_blocks = cu_qtypes() | 1u << (DTYPE_FP8_B128 - DTYPE_FIRST_BLOCK) | /* FP8: ops_linear_fp8.cu */
                        1u << (DTYPE_I4_B128 - DTYPE_FIRST_BLOCK);                   /* int4: ops_linear_int4.cu */
    be->impl = cu;
    cu->device = dev;
    vllm_status st = VLLM_OK;
    cudaDeviceProp prop;
    const char *what = "cudaSetDevice";
    if ((e = cudaSetDevice(dev)) != cudaSuccess) goto cuda_fail;
    what = "cudaGetDeviceProperties";
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) goto cuda_fail;
    cu->num_sms = prop.multiProcessorCount;
    cu->dev = dev;
    cu->tp_group = opt ? opt->tp_group : NULL;
    cu->tp_rank = opt ? opt->tp_rank : 0;
    cu->smem_optin = prop.sharedMemPerBlockOptin;
    /* PDL and the decode attention's cluster merge need the kernels' sm_90 code (pdl_wait and the cluster merge
     * compile to nothing below it): Hopper runs the build's sm_90a code; a newer GPU runs the compute_80 PTX,
     * JIT-compiled, unless the kernels were built for it (their PTX version says which) */
    cu->sm90 = sm90_code(&prop);
    cu->pdl = cu->sm90 && !getenv("VLLM_CUDA_NO_PDL");
    cu->no_tc_attention = getenv("VLLM_CUDA_NO_TC_ATTN") != NULL;
    cu->gemv_rows = getenv("VLLM_CUDA_GEMV") && !strcmp(getenv("VLLM_CUDA_GEMV"), "rows");
    cu->gemv_ks = getenv("VLLM_CUDA_GEMV_KS") ? atoi(getenv("VLLM_CUDA_GEMV_KS")) : 0;
    cu->gemv_max_t = getenv("VLLM_CUDA_GEMV_MAX_T") ? atoi(getenv("VLLM_CUDA_GEMV_MAX_T")) : 0;
    if (cu->gemv_max_t < 1 || cu->gemv_max_t > CU_GEMV_MAX_T) cu->gemv_max_t = 0; /* by layer size (ops_linear.cu) */
    cu->qgemv_ks = getenv("VLLM_CUDA_QGEMV_KS") ? atoi(getenv("VLLM_CUDA_QGEMV_KS")) : 0;
    if (cu->qgemv_ks != 1 && cu->qgemv_ks != 2 && cu->qgemv_ks != 4 && cu->qgemv_ks != 8) cu->qgemv_ks = 0;
    cu->qgemv_f32x = getenv("VLLM_CUDA_QGEMV_XQ") && strcmp(getenv("VLLM_CUDA_QGEMV_XQ"), "0") == 0;
    cu->f8_mma = (prop.major > 8 || (prop.major == 8 && prop.minor >= 9)) &&
                 !(getenv("VLLM_CUDA_F8_GEMV") && strcmp(getenv("VLLM_CUDA_F8_GEMV"), "warp") == 0);
    cu->f8_lt = !(getenv("VLLM_CUDA_F8_GEMM") && strcmp(getenv("VLLM_CUDA_F8_GEMM"), "tiles") == 0);
    cu->attn_min_keys = getenv("VLLM_CUDA_ATTN_MIN_KEYS") ? atoi(getenv("VLLM_CUDA_ATTN_MIN_KEYS")) : 0;
    cu->qkr_scalar = getenv("VLLM_CUDA_QKR") && !strcmp(getenv("VLLM_CUDA_QKR"), "scalar");
    {
        const char *ac = getenv("VLLM_CUDA_ATTN_CLUSTER");
        cu->attn_climit = ac && !strcmp(ac, "0") ? 0 : ac && !strcmp(ac, "8") ? 8 : 16;
    }
    cu->attn_cluster = cu->sm90 && cu->attn_climit > 0;
    cu->lt_tune = getenv("VLLM_CUDA_LT_TUNE") && strcmp(getenv("VLLM_CUDA_LT_TUNE"), "0") != 0;
    cu->no_dtc_attention = getenv("VLLM_CUDA_NO_DTC_ATTN") != NULL;
    cu->dtc_stages = getenv("VLLM_CUDA_DTC_STAGES") && atoi(getenv("VLLM_CUDA_DTC_STAGES")) == 3 ? 3 : 2;
    /* head_dim 256 (Gemma 3) on the tensor-core decode kernel: opt-in until measured on the device */
    cu->dtc_hd256 = getenv("VLLM_CUDA_DTC_HD256") && strcmp(getenv("VLLM_CUDA_DTC_HD256"), "0") != 0;
    cu->stack_on = getenv("VLLM_CUDA_STACK") && strcmp(getenv("VLLM_CUDA_STACK"), "0") != 0;
    cu->attn_hp = getenv("VLLM_CUDA_ATTN_HP") ? atoi(getenv("VLLM_CUDA_ATTN_HP")) : 0;
    if (cu->attn_hp < 0 || cu->attn_hp > 8) cu->attn_hp = 0;
    if (cu->attn_min_keys < 0 || cu->attn_min_keys > 4096) cu->attn_min_keys = 0;
    cu->sample_bisect = getenv("VLLM_CUDA_SAMPLE_BISECT") && strcmp(getenv("VLLM_CUDA_SAMPLE_BISECT"), "0") != 0;
    cu->sample_radix = getenv("VLLM_CUDA_SAMPLE_RADIX") && strcmp(getenv("VLLM_CUDA_SAMPLE_RADIX"), "0") != 0;
    cu->attn_splits = getenv("VLLM_CUDA_ATTN_SPLITS") ? atoi(getenv("VLLM_CUDA_ATTN_SPLITS")) : 0;
    if (cu->attn_splits < 0 || cu->attn_splits > 32) cu->attn_splits = 0;
    what = "cudaStreamCreate";
    if ((e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess) goto cuda_fail;
    what = "cudaEventCreate";
    for (int i = 0; i < CU_STAGE_RECS; i++)
        if ((e = cudaEventCreateWithFlags(&cu->stage.recs[i].ev, cudaEventDisableTiming)) != cudaSuccess) goto cuda_fail;
    what = "cudaHostAlloc (error record)";
    if ((e = cudaHostAlloc((void **)&cu->derr, sizeof *cu->derr, cudaHostAllocMapped)) != cudaSuccess) goto cuda_fail;
    memset(cu->derr, 0, sizeof *cu->derr);
    what = "cudaHostGetDevicePointer";
    if ((e = cudaHostGetDevicePointer((void **)&cu->derr_dev, cu->derr, 0)) != cudaSuccess) goto cuda_fail;
    if (cublasCreate(&cu->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(cu->blas, cu->stream) != CUBLAS_STATUS_SUCCESS) {
        cu->blas = NULL;
        st = vt_error(VLLM_ERR_BACKEND, "cuda backend: cuBLAS could not be initialised");
        goto fail;
    }
    if (cublasLtCreate(&cu->lt) != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        st = vt_error(VLLM_ERR_BACKEND, "cuda backend: cuBLASLt could not be initialised");
        goto fail;
    }
    {
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        if (cublasLtMatmulDescCreate(&cu->mm_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(cu->mm_desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(cu->mm_desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) !=
                CUBLAS_STATUS_SUCCESS) {
            st = vt_error(VLLM_ERR_BACKEND, "cuda backend: cuBLASLt matmul descriptor");
            goto fail;
        }
    }
    if ((st = cu_buf_reserve(cu, &cu->lt_ws, CU_LT_WORKSPACE, "cuBLASLt workspace"))) goto fail;
    if (cublasSetWorkspace(cu->blas, cu->lt_ws.p, cu->lt_ws.cap) != CUBLAS_STATUS_SUCCESS) {
        st = vt_error(VLLM_ERR_BACKEND, "cuda backend: cuBLAS workspace");
        goto fail;
    }
    if ((st = cu_attention_reserve(cu))) goto fail;
    if ((st = cu_stack_reserve(cu))) goto fail;
    {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        LOG_I("cuda backend: %s (sm_%d%d, %d SMs), %zu MiB free of %zu MiB", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, free_b >> 20, total_b >> 20);
    }
    *out = be;
    return VLLM_OK;
cuda_fail:
    cudaGetLastError();
    st = vt_error(VLLM_ERR_BACKEND, "cuda backend: %s on GPU %d failed: %s", what, dev, cudaGetErrorString(e));
fail:
    cu_destroy(be);
    return st;
}
