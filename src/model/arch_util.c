/* arch_util.c: config.json helpers the architectures' parsers share (model/arch.h). */
#include "model/arch.h"

#include <jansson.h>

#include "core/error.h"
#include "loader/hf_config.h"

vllm_status arch_activation(const json_t *root, const char *what, const char *key, const char *def, model_config *c) {
    const char *name = NULL;
    vllm_status st = hf_str(root, what, key, &name);
    if (st) return st;
    if (!name) name = def;
    be_act a;
    if (!be_act_from_name(name, &a))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.64s' is not supported (silu, gelu_pytorch_tanh, gelu, relu)",
                        what, key, name);
    c->act = (int)a;
    return VLLM_OK;
}

vllm_status arch_require_bool(const json_t *root, const char *what, const char *key, bool def, bool want,
                              const char *why) {
    bool v;
    vllm_status st = hf_bool(root, what, key, def, &v);
    if (st) return st;
    if (v != want)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s %s is not supported (%s)", what, key, v ? "true" : "false", why);
    return VLLM_OK;
}
