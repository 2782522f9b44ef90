/* backend.c: the backend registry: creates a backend by name ("cpu", and
 * "cuda" when the build has the CUDA backend). */
#include "tensor/backend.h"

#include <string.h>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#ifdef VLLM_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

vllm_status backend_create(const char *name, const backend_options *opt, backend **out) {
    backend_options defaults = {0};
    if (!opt) opt = &defaults;
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) return cpu_backend_create(opt, out);
    if (!strcmp(name, "cuda")) {
#ifdef VLLM_HAVE_CUDA
        return cuda_backend_create(opt, out);
#else
        return vt_error(VLLM_ERR_UNSUPPORTED, "device 'cuda': this build has no CUDA backend");
#endif
    }
    return vt_error(VLLM_ERR_INVALID_ARG, "device '%s' unknown (expected cpu or cuda)", name);
}

void backend_free(backend *be) {
    if (be) be->ops->destroy(be);
}
