/* comm_nccl.cu: tensor parallelism on CUDA: all_reduce / all_gather_cols over NCCL (loaded with dlopen) and the
 * vocabulary shard's embedding_range.
 *
 * NCCL is the CUDA toolkit's libnccl.so.2, opened at the first collective (no link-time dependency, as vLLM's
 * pynccl loads it with ctypes); the few types and constants used are declared here from nccl.h's stable ABI
 * (ncclUniqueId: 128 bytes; ncclFloat32 7, ncclBfloat16 9; ncclSum 0). The ranks are threads of one process
 * (model_tp.c), each with its backend on GPU device_id + its index on its node: at the first collective rank 0
 * makes the unique id, the group (dist/tpg_group.h) broadcasts it, over the nodes' TCP links too when the ranks
 * span hosts (NCCL's own bootstrap then connects them, as torch.distributed's store hands out the id), and every
 * rank joins with ncclCommInitRank(world size, its global rank) (all ranks are in a forward then, so none waits
 * on a rank not yet created). Collectives run on the backend's stream; graphs stay
 * off under tensor parallelism (model.c), so nothing here is recorded yet. NVLink SHARP stays off
 * (NCCL_NVLS_ENABLE=0 unless the user set it), as the GPU machines here require.
 *
 * Not yet run on GPUs: written and compiled while no two-GPU machine was lent (issue 18). Known gap: a rank that
 * fails after its peers queued a collective leaves them waiting in NCCL (tpg_abort wakes only the CPU rendezvous;
 * ncclCommAbort on every rank is the fix to make with a GPU pair at hand).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

extern "C" {
#include "dist/tpg_group.h"
}

typedef struct { char internal[128]; } nccl_unique_id;  /* ncclUniqueId */
typedef void *nccl_comm;                                  /* ncclComm_t */
enum { NCCL_OK = 0, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_SUM = 0 };

static struct {
    bool tried, ok;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, cudaStream_t);
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm, cudaStream_t);
    int (*comm_destroy)(nccl_comm);
    const char *(*error_string)(int);
} nccl;
static pthread_mutex_t nccl_mu = PTHREAD_MUTEX_INITIALIZER;

static bool nccl_load(void) {
    pthread_mutex_lock(&nccl_mu);
    if (!nccl.tried) {
        nccl.tried = true;
        void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            nccl.get_unique_id = (int (*)(nccl_unique_id *))dlsym(h, "ncclGetUniqueId");
            nccl.comm_init_rank = (int (*)(nccl_comm *, int, nccl_unique_id, int))dlsym(h, "ncclCommInitRank");
            nccl.all_reduce = (int (*)(const void *, void *, size_t, int, int, nccl_comm, cudaStream_t))dlsym(
                h, "ncclAllReduce");
            nccl.all_gather = (int (*)(const void *, void *, size_t, int, nccl_comm, cudaStream_t))dlsym(
                h, "ncclAllGather");
            nccl.comm_destroy = (int (*)(nccl_comm))dlsym(h, "ncclCommDestroy");
            nccl.error_string = (const char *(*)(int))dlsym(h, "ncclGetErrorString");
            nccl.ok = nccl.get_unique_id && nccl.comm_init_rank && nccl.all_reduce && nccl.all_gather &&
                      nccl.comm_destroy && nccl.error_string;
        }
    }
    const bool ok = nccl.ok;
    pthread_mutex_unlock(&nccl_mu);
    return ok;
}

/* The rank's communicator, made at its first collective (every rank is in the same forward then). */
static bool comm_ready(cu_state *cu, const char *op) {
    if (cu->nccl) return true;
    cudaSetDevice(cu->dev); /* the communicator belongs to this rank's GPU */
    if (!nccl_load()) {
        cu_fail(cu, "%s: tensor parallelism needs NCCL (libnccl.so.2, the CUDA toolkit's), which could not be loaded",
                op);
        tpg_abort(cu->tp_group, "NCCL could not be loaded");
        return false;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink SHARP off unless asked for */
    nccl_unique_id id;
    memset(&id, 0, sizeof id);
    int r = cu->tp_rank == 0 ? nccl.get_unique_id(&id) : NCCL_OK;
    if (r != NCCL_OK || tpg_broadcast(cu->tp_group, cu->tp_rank, &id, sizeof id, 0) != VLLM_OK) {
        cu_fail(cu, "%s: the NCCL id could not be shared (%s)", op, r != NCCL_OK ? nccl.error_string(r) : "group");
        tpg_abort(cu->tp_group, "the NCCL id could not be shared");
        return false;
    }
    nccl_comm c = NULL;
    if ((r = nccl.comm_init_rank(&c, tpg_size(cu->tp_group), id, cu->tp_rank)) != NCCL_OK) {
        cu_fail(cu, "%s: ncclCommInitRank (rank %d of %d): %s", op, cu->tp_rank, tpg_size(cu->tp_group),
                nccl.error_string(r));
        tpg_abort(cu->tp_group, "ncclCommInitRank failed");
        return false;
    }
    cu->nccl = c;
    return true;
}

void cu_comm_free(cu_state *cu) {
    if (cu->nccl && nccl.ok) nccl.comm_destroy((nccl_comm)cu->nccl);
    cu->nccl = NULL;
    cu_buf_free(&cu->comm_ws);
}

static int nccl_type(dtype dt) { return dt == DTYPE_BF16 ? NCCL_BFLOAT16 : NCCL_FLOAT32; }

// x (T, D) += every other rank's, in place (rows may be strided: each row then its own call)
void cu_all_reduce(backend *be, tensor *x) {
    cu_state *cu = cu_of(be);
    if (!cu->tp_group || tpg_size(cu->tp_group) == 1) return;
    if (!cu_check_mat(cu, "all_reduce", "x", x, CU_ACT, -1, -1)) {
        tpg_abort(cu->tp_group, "all_reduce: a rank's tensor was refused"); /* the peers must not wait on it */
        return;
    }
    if (!comm_ready(cu, "all_reduce")) return;
    const int64_t rows = cu_rows(x), cols = rows ? tensor_numel(x) / rows : 0, rs = tensor_row_stride(x);
    const size_t es = dtype_size(x->dtype);
    for (int64_t r = 0; r < (rs == cols ? 1 : rows); r++) {
        char *p = (char *)x->data + (size_t)(r * rs) * es;
        const size_t n = rs == cols ? (size_t)(rows * cols) : (size_t)cols;
        const int e = nccl.all_reduce(p, p, n, nccl_type(x->dtype), NCCL_SUM, (nccl_comm)cu->nccl, cu->stream);
        if (e != NCCL_OK) {
            cu_fail(cu, "all_reduce: ncclAllReduce: %s", nccl.error_string(e));
            return;
        }
    }
}

/* out[r, k C + c] = g[k, r, c]: the gathered (tp, N, C) blocks side by side */
__global__ void k_gather_cols(const void *g, void *out, int dt, int64_t N, int64_t C, int tp, int64_t os) {
    pdl_launch();
    pdl_wait();
    const int64_t total = (int64_t)tp * N * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i / (N * C), r = (i / C) % N, c = i % C;
        cu_st(out, dt, r * os + k * C + c, cu_ld(g, dt, i));
    }
}

// x (N, C) -> out (N, C tp): rank k's columns [k C, (k + 1) C)
void cu_all_gather_cols(backend *be, const tensor *x, tensor *out) {
    cu_state *cu = cu_of(be);
    const int n = cu->tp_group ? tpg_size(cu->tp_group) : 1;
    const int64_t N = x ? cu_rows(x) : 0, C = N ? tensor_numel(x) / N : 0;
    if (!cu_check_mat(cu, "all_gather_cols", "x", x, CU_ACT, -1, -1) ||
        !cu_check_mat(cu, "all_gather_cols", "out", out, CU_DT(x->dtype), N, C * n) ||
        tensor_row_stride(x) != C) {
        if (x && tensor_row_stride(x) != C) cu_fail(cu, "all_gather_cols: x must be contiguous");
        if (cu->tp_group) tpg_abort(cu->tp_group, "all_gather_cols: a rank's tensors were refused");
        return;
    }
    const size_t es = dtype_size(x->dtype), bytes = (size_t)(N * C) * es;
    if (n == 1) {
        cu_ok(cu, cudaMemcpy2DAsync(out->data, (size_t)tensor_row_stride(out) * es, x->data, (size_t)C * es,
                                    (size_t)C * es, (size_t)N, cudaMemcpyDeviceToDevice, cu->stream),
              "all_gather_cols", "cudaMemcpy2DAsync");
        return;
    }
    if (!comm_ready(cu, "all_gather_cols") ||
        cu_buf_reserve(cu, &cu->comm_ws, bytes * n, "all_gather_cols (the gathered blocks)") != VLLM_OK)
        return;
    const int e = nccl.all_gather(x->data, cu->comm_ws.p, (size_t)(N * C), nccl_type(x->dtype),
                                  (nccl_comm)cu->nccl, cu->stream);
    if (e != NCCL_OK) {
        cu_fail(cu, "all_gather_cols: ncclAllGather: %s", nccl.error_string(e));
        return;
    }
    cu_launch(cu, "all_gather_cols", true, k_gather_cols, dim3(cu_grid(N * C * n, 256)), dim3(256), 0,
              (const void *)cu->comm_ws.p, out->data, (int)out->dtype, N, C, n, tensor_row_stride(out));
}

/* out[t] = table[ids[t] - row0] inside [0, V), else zeros */
__global__ void k_embedding_range(const void *table, int tdt, int64_t ts, int64_t V, const int32_t *ids,
                                  int64_t row0, void *out, int odt, int64_t os, int64_t T, int64_t D) {
    pdl_launch();
    pdl_wait();
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const int64_t r = (int64_t)ids[t] - row0;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            cu_st(out, odt, t * os + d, r >= 0 && r < V ? cu_ld(table, tdt, r * ts + d) : 0.0f);
    }
}

void cu_embedding_range(backend *be, const tensor *table, const tensor *ids, int64_t row0, tensor *out) {
    cu_state *cu = cu_of(be);
    const int64_t T = ids ? tensor_numel(ids) : 0, V = table ? cu_rows(table) : 0;
    const int64_t D = V ? tensor_numel(table) / V : 0;
    if (!cu_check_mat(cu, "embedding_range", "table", table, CU_FLOAT, -1, -1) ||
        !cu_check_vec(cu, "embedding_range", "ids", ids, CU_DT(DTYPE_I32), -1) ||
        !cu_check_mat(cu, "embedding_range", "out", out, CU_ACT, T, D) || T == 0)
        return;
    cu_launch(cu, "embedding_range", true, k_embedding_range, dim3(cu_grid(T, 1)), dim3(256), 0,
              (const void *)table->data, (int)table->dtype, tensor_row_stride(table), V,
              (const int32_t *)ids->data, row0, out->data, (int)out->dtype, tensor_row_stride(out), T, D);
}

void cu_bind_thread(backend *be) { cudaSetDevice(cu_of(be)->dev); }
