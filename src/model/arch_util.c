/* arch_util.c: config.json helpers the architectures' parsers share (model/arch.h). */
#include "model/arch.h"

#include <jansson.h>
#include <string.h>

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

vllm_status arch_layer_types(const json_t *root, const char *what, model_config *c, bool *given) {
    const json_t *lt = hf_get(root, "layer_types");
    *given = lt != NULL;
    if (!lt) return VLLM_OK;
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->num_layers)
        return vt_error(VLLM_ERR_FORMAT, "%s: layer_types must list one type for each of the %d layers", what,
                        c->num_layers);
    for (int i = 0; i < c->num_layers; i++) {
        const json_t *v = json_array_get(lt, (size_t)i);
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(s, "sliding_attention")) c->layers[i].sliding_window = c->sliding_window;
        else if (!strcmp(s, "full_attention")) c->layers[i].sliding_window = 0;
        else
            return vt_error(VLLM_ERR_UNSUPPORTED,
                            "%s: layer_types[%d] '%.64s' is not supported (full_attention, sliding_attention)", what, i,
                            s);
    }
    return VLLM_OK;
}
