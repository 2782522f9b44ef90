/* backend.c: the backend registry: creates a backend by name ("cpu", and
 * "cuda" when the build has the CUDA backend); capability queries and the
 * names of ops and activations. */
#include "tensor/backend.h"

#include <stdio.h>
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

/* ---- capabilities ---- */

const char *be_op_name(be_op op) {
    static const char *const names[BE_OP_COUNT] = {
        [BE_OP_ATTENTION] = "attention",   [BE_OP_LINEAR_FUSED] = "linear_fused",
        [BE_OP_ACT_MUL] = "act_mul",       [BE_OP_ACTIVATION] = "activation",
        [BE_OP_NORM] = "norm",             [BE_OP_ADD_NORM] = "add_norm",
        [BE_OP_QK_NORM_ROPE_KV] = "qk_norm_rope_kv", [BE_OP_SOFTCAP] = "softcap",
        [BE_OP_MOE] = "moe",               [BE_OP_GATED_DELTA_NET] = "gated_delta_net",
        [BE_OP_MLA] = "attention_mla",     [BE_OP_DENSE_STACK] = "dense_stack_decode",
    };
    return (unsigned)op < BE_OP_COUNT ? names[op] : "unknown op";
}

const char *be_act_name(be_act act) {
    static const char *const names[BE_ACT_COUNT] = {
        [BE_ACT_SILU] = "silu", [BE_ACT_GELU_TANH] = "gelu_pytorch_tanh", [BE_ACT_GELU] = "gelu",
        [BE_ACT_RELU] = "relu", [BE_ACT_SWIGLU_OAI] = "swigluoai",
    };
    return (unsigned)act < BE_ACT_COUNT ? names[act] : NULL;
}

bool be_act_from_name(const char *name, be_act *out) {
    static const struct {
        const char *name;
        be_act act;
    } map[] = {
        {"silu", BE_ACT_SILU}, {"swish", BE_ACT_SILU},
        /* transformers' gelu_new and gelu_fast are the same tanh approximation, written out */
        {"gelu_pytorch_tanh", BE_ACT_GELU_TANH}, {"gelu_new", BE_ACT_GELU_TANH}, {"gelu_fast", BE_ACT_GELU_TANH},
        {"gelu", BE_ACT_GELU}, {"relu", BE_ACT_RELU},
    };
    if (!name) return false;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (!strcmp(name, map[i].name)) {
            *out = map[i].act;
            return true;
        }
    }
    return false;
}

be_support backend_supports(backend *be, be_op op, const void *params) {
    if (!be || !be->ops->supports || (unsigned)op >= BE_OP_COUNT) return BE_UNSUPPORTED;
    return be->ops->supports(be, op, params);
}

static const char *norm_kind_name(be_norm_kind k) {
    switch (k) {
    case BE_NORM_RMS: return "RMSNorm";
    case BE_NORM_RMS_OFFSET: return "RMSNorm (1 + w)";
    case BE_NORM_LAYER: return "LayerNorm";
    default: return "unknown norm";
    }
}

/* The parameters that decide support, in words. */
static void describe(be_op op, const void *params, char *buf, size_t n) {
    buf[0] = '\0';
    if (!params) return;
    switch (op) {
    case BE_OP_ATTENTION: {
        const attn_params *p = params;
        snprintf(buf, n, "head_dim %d, %d heads, %d kv heads, softcap %g", p->head_dim, p->num_heads,
                 p->num_kv_heads, (double)p->softcap);
        break;
    }
    case BE_OP_MLA: {
        const mla_params *p = params;
        snprintf(buf, n, "%d heads, kv_lora_rank %d, rope %d", p->num_heads, p->kv_lora_rank, p->rope_dim);
        break;
    }
    case BE_OP_ACT_MUL:
    case BE_OP_ACTIVATION: {
        const char *a = be_act_name(*(const be_act *)params);
        snprintf(buf, n, "activation %s", a ? a : "out of range");
        break;
    }
    case BE_OP_NORM:
    case BE_OP_ADD_NORM:
    case BE_OP_QK_NORM_ROPE_KV:
        snprintf(buf, n, "%s", norm_kind_name(((const be_norm *)params)->kind));
        break;
    case BE_OP_LINEAR_FUSED: {
        const linear_fuse *f = params;
        const char *a = be_act_name(f->act);
        snprintf(buf, n, "%s%s, activation %s", norm_kind_name(f->norm_kind), f->norm_w ? "" : " (no weight)",
                 a ? a : "out of range");
        break;
    }
    default: break;
    }
}

vllm_status backend_require(backend *be, be_op op, const void *params, const char *what) {
    if (backend_supports(be, op, params) != BE_UNSUPPORTED) return VLLM_OK;
    char desc[160];
    describe(op, params, desc, sizeof desc);
    return vt_error(VLLM_ERR_UNSUPPORTED, "device '%s': %s is not supported (op %s%s%s)", be ? be->name : "none",
                    what ? what : be_op_name(op), be_op_name(op), desc[0] ? ": " : "", desc);
}
