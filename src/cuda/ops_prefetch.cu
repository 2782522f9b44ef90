/*
 * ops_prefetch.cu: the L2 prefetch of weights on a side stream (backend_ops.prefetch_linear's device half).
 *
 * A one-token decode step is a chain of kernels, each waiting for the one before; between the bandwidth-bound
 * GEMVs come latency-bound ones (the q/k norm + RoPE, the attention, the routing) during which the DRAM is all
 * but idle. cu_l2_prefetch asks the L2 to fetch a weight range meanwhile: at its call point on the stream, a side
 * stream waits for the work queued so far (an event), then runs k_l2_prefetch, a few CTAs whose threads issue
 * sm_90's bulk prefetches (cp.async.bulk.prefetch.L2: the TMA unit fetches the range into L2, nothing returns to
 * the SM, the CTA exits at once). The main stream does not wait for it: a prefetch writes nothing, so no result
 * depends on it. A graph recording joins the side stream back before it ends (cu_prefetch_join: CUDA requires
 * it); the prefetch nodes are then leaves of the step's graph, concurrent with the chain after their fork.
 *
 * VLLM_CUDA_L2PF: 0 (default: no prefetch), 1 (bulk prefetches with the default eviction policy), last (with an
 * L2::evict_last cache policy, so that the streaming loads of other weights in between do not evict them first).
 * GPUs before sm_90 prefetch line by line (prefetch.global.L2).
 */
#include "cuda/cuda_internal.h"

#define PF_CHUNK (16 << 10) /* bytes a bulk prefetch instruction */
#define PF_THREADS 32
#define PF_MAX_CTAS 32

/* Thread tid of nthr: its 16 KB chunks of [p, p + bytes) toward L2 (bytes a multiple of 16). */
__device__ __forceinline__ void pf_range(const unsigned char *p, size_t bytes, size_t tid, size_t nthr, bool last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t pol = 0;
    if (last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    for (size_t off = tid * PF_CHUNK; off < bytes; off += nthr * PF_CHUNK) {
        const unsigned n = (unsigned)(bytes - off < PF_CHUNK ? bytes - off : PF_CHUNK);
        if (last)
            asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p + off), "r"(n),
                         "l"(pol)
                         : "memory");
        else
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
    }
#else
    (void)last;
    for (size_t off = tid * 128; off < bytes; off += nthr * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
#endif
}

__global__ void __launch_bounds__(PF_THREADS) k_l2_prefetch(const unsigned char *p, size_t bytes, bool last) {
    pf_range(p, bytes, (size_t)blockIdx.x * PF_THREADS + threadIdx.x, (size_t)gridDim.x * PF_THREADS, last);
}

/* The side stream and its two events, made at the first prefetch. */
static bool pf_ready(cu_state *cu) {
    if (cu->pf_stream) return true;
    if (cudaStreamCreateWithFlags(&cu->pf_stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&cu->pf_fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&cu->pf_join, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        cu_prefetch_free(cu);
        cu->l2pf = 0; /* a hint: without its stream, none */
        return false;
    }
    return true;
}

/* The side stream waits for what cu->stream has queued so far. */
static bool pf_fork(cu_state *cu) {
    if (!pf_ready(cu)) return false;
    if (cudaEventRecord(cu->pf_fork, cu->stream) != cudaSuccess ||
        cudaStreamWaitEvent(cu->pf_stream, cu->pf_fork, 0) != cudaSuccess) {
        cudaGetLastError();
        cu_fail(cu, "prefetch: forking the side stream failed");
        return false;
    }
    if (cu->capturing) cu->pf_forked = true;
    return true;
}

static unsigned pf_ctas(size_t bytes) {
    const size_t chunks = (bytes + PF_CHUNK - 1) / PF_CHUNK;
    size_t ctas = (chunks + 4 * PF_THREADS - 1) / (4 * PF_THREADS); /* ~4 chunks a thread */
    return (unsigned)(ctas < 1 ? 1 : ctas > PF_MAX_CTAS ? PF_MAX_CTAS : ctas);
}

void cu_l2_prefetch(cu_state *cu, const void *p, size_t bytes) {
    if (!cu->l2pf || !p || bytes < 16 || ((uintptr_t)p & 15) || !pf_fork(cu)) return;
    bytes &= ~(size_t)15;
    k_l2_prefetch<<<pf_ctas(bytes), PF_THREADS, 0, cu->pf_stream>>>((const unsigned char *)p, bytes, cu->l2pf == 2);
    if (cudaGetLastError() != cudaSuccess) cu_fail(cu, "prefetch: the launch failed");
}

/* CTA (x, j): the x-th share of block ids[j]'s bytes [off, off + bytes) of base + ids[j] * stride (ids out of
 * [0, E): none). The ids are read after the fork: the work before it wrote them. Run eagerly, the stream may
 * already be rewriting them for a later call (a buffer the layers share): the prefetch then fetches other blocks,
 * a wasted hint and no wrong result (every id is checked against E). */
__global__ void __launch_bounds__(PF_THREADS) k_l2_prefetch_ids(const unsigned char *base, const int32_t *ids, int E,
                                                                 size_t stride, size_t off, size_t bytes, bool last) {
    const int e = ids[blockIdx.y];
    if (e < 0 || e >= E) return;
    pf_range(base + (size_t)e * stride + off, bytes, (size_t)blockIdx.x * PF_THREADS + threadIdx.x,
             (size_t)gridDim.x * PF_THREADS, last);
}

void cu_l2_prefetch_ids(cu_state *cu, const void *base, const int32_t *ids, int n, int E, size_t stride, size_t off,
                        size_t bytes, bool last) {
    if (n <= 0 || bytes < 16 || (((uintptr_t)base + off) & 15) || (stride & 15) || !pf_fork(cu)) return;
    bytes &= ~(size_t)15;
    unsigned cx = pf_ctas(bytes);
    k_l2_prefetch_ids<<<dim3(cx, (unsigned)n), PF_THREADS, 0, cu->pf_stream>>>((const unsigned char *)base, ids, E,
                                                                                stride, off, bytes, last);
    if (cudaGetLastError() != cudaSuccess) cu_fail(cu, "prefetch: the launch failed");
}

void cu_prefetch_join(cu_state *cu) {
    if (!cu->pf_forked) return;
    cu->pf_forked = false;
    if (cudaEventRecord(cu->pf_join, cu->pf_stream) != cudaSuccess ||
        cudaStreamWaitEvent(cu->stream, cu->pf_join, 0) != cudaSuccess) {
        cudaGetLastError();
        cu_fail(cu, "prefetch: joining the side stream failed");
    }
}

void cu_prefetch_free(cu_state *cu) {
    if (cu->pf_stream) {
        cudaStreamSynchronize(cu->pf_stream);
        cudaStreamDestroy(cu->pf_stream);
    }
    if (cu->pf_fork) cudaEventDestroy(cu->pf_fork);
    if (cu->pf_join) cudaEventDestroy(cu->pf_join);
    cu->pf_stream = NULL;
    cu->pf_fork = cu->pf_join = NULL;
    cu->pf_forked = false;
}
