// ops_dummy.cu: host-to-device weight copies that write dummy weights (tensor/dummy.h) on the device.
#include <algorithm>
#include <type_traits>

#include "cuda/cuda_internal.h"
#include "tensor/dummy.h"

// dst (rows, cols) with row pitch dp elements <- dummy_value(seed, base + r * sp + c): the element of
// the host view at arena element index base (rows sp elements apart)
template <typename T>
__global__ void k_dummy_fill(T *dst, int64_t dp, int64_t rows, int64_t cols, uint64_t seed, uint64_t base, int64_t sp) {
    const int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const float v = dummy_value(seed, base + (uint64_t)(r * sp + c));
        if constexpr (std::is_same<T, float>::value) dst[r * dp + c] = v;
        else if constexpr (std::is_same<T, __nv_bfloat16>::value) dst[r * dp + c] = __float2bfloat16_rn(v);
        else dst[r * dp + c] = __float2half_rn(v);
    }
}

// rows of width bytes, spitch apart at src (host memory or a dummy arena), to dst dpitch apart, on
// cu's stream; dt: the elements' dtype (how a dummy arena's values are written)
cudaError_t cu_h2d_2d(cu_state *cu, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                      dtype dt) {
    if (!rows || !width) return cudaSuccess;
    uint64_t seed, off;
    if (!dummy_lookup(src, &seed, &off)) {
        if (rows == 1 || (spitch == width && dpitch == width))
            return cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyHostToDevice, cu->stream);
        return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyHostToDevice, cu->stream);
    }
    const size_t es = dtype_size(dt);
    if ((dt != DTYPE_F32 && dt != DTYPE_BF16 && dt != DTYPE_F16) || width % es || spitch % es || dpitch % es ||
        off % es)
        return cudaErrorInvalidValue;
    const int64_t cols = (int64_t)(width / es), dp = (int64_t)(dpitch / es), sp = (int64_t)(spitch / es);
    const int64_t n = (int64_t)rows * cols;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, (int64_t)cu->num_sms * 16);
    const uint64_t base = off / es;
    if (dt == DTYPE_F32)
        k_dummy_fill<<<blocks, threads, 0, cu->stream>>>((float *)dst, dp, (int64_t)rows, cols, seed, base, sp);
    else if (dt == DTYPE_BF16)
        k_dummy_fill<<<blocks, threads, 0, cu->stream>>>((__nv_bfloat16 *)dst, dp, (int64_t)rows, cols, seed, base, sp);
    else
        k_dummy_fill<<<blocks, threads, 0, cu->stream>>>((__half *)dst, dp, (int64_t)rows, cols, seed, base, sp);
    return cudaGetLastError();
}
