/*
 * fuzz_gguf_model.c: libFuzzer target for a GGUF file read as a model: the metadata mapped to its config.json
 * (loader/gguf_config.c ggc_hf_config, then hf_config_parse) and its tensors handed out under Hugging Face names
 * (ggc_find, model/weights.c: expert slices, fused halves, q / k row permutations, the hybrids' row and column
 * maps, w + 1 norms, -exp(A_log), MXFP4 and block types dequantized). Input: the file's bytes (gguf_open_memory).
 * For an accepted config, the weights of up to 3 layers and 3 experts are asked for by every name the mapping
 * knows, in the shape the file holds; each answer must be that shape with readable bytes, or a clean error. Any
 * crash, leak or sanitizer report is a bug.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "loader/hf_config.h"
#include "model/weights.h"
#include "tensor/ggml_dtype.h"

static void fail(const char *what, const char *name) {
    fprintf(fuzz_quiet_stderr(), "fuzz_gguf_model: %s ('%s'): %s\n", what, name, vllm_last_error());
    abort();
}

static volatile uint8_t g_sink;

/* every HF per-layer suffix the mapping answers (gguf_config.c's tables) */
static const char *const SUFFIXES[] = {
    "input_layernorm.weight", "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
    "post_feedforward_layernorm.weight", "post_self_attn_layernorm.weight", "post_mlp_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
    "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.qkv_proj.weight", "self_attn.sinks",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "mlp.gate_up_proj.weight",
    "mlp.gate.weight", "block_sparse_moe.gate.weight", "mlp.router.weight", "mlp.router.bias",
    "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight", "mlp.shared_expert.down_proj.weight",
    "mlp.shared_expert_gate.weight", "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
    "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight", "linear_attn.A_log", "linear_attn.dt_bias",
    "linear_attn.conv1d.weight", "linear_attn.norm.weight", "linear_attn.out_proj.weight",
    "linear_attn.in_proj_ba.weight", "linear_attn.in_proj_qkvz.weight", "self_attn.q_a_proj.weight",
    "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight",
    "self_attn.kv_a_layernorm.weight", "self_attn.k_b_proj.weight", "self_attn.v_b_proj.weight",
    "self_attn.kv_b_proj.weight", "mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
    "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight",
};
static const char *const EXPERT_SUFFIXES[] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight", "w1.weight",
                                              "w3.weight", "w2.weight", "gate_proj.bias", "up_proj.bias",
                                              "down_proj.bias"};

static void read_weight(weight_source *ws, const gguf_file *f, const char *name) {
    ggc_tensor_ref ref;
    if (!ggc_find(f, name, &ref)) return;
    int64_t shape[GGUF_MAX_DIMS];
    const int nd = ggc_ref_shape(&ref, shape);
    if (nd < 1 || nd > 4) return;
    tensor t;
    if (ws_get(ws, name, nd, shape, &t) != VLLM_OK) return; /* a clean refusal */
    int64_t n = 1;
    for (int i = 0; i < t.ndim; i++) {
        if (t.shape[i] != shape[i]) fail("a weight of another shape", name);
        n *= t.shape[i];
    }
    if (t.ndim != nd || (n > 0 && !t.data)) fail("a weight of another rank or without data", name);
    const size_t bytes = tensor_nbytes(&t);
    const uint8_t *p = t.data;
    for (size_t i = 0; i < bytes; i += 61) g_sink ^= p[i];
    if (bytes) g_sink ^= p[bytes - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    gguf_file *f = NULL;
    if (gguf_open_memory(data, size, &f) != VLLM_OK) return 0;
    char *json = NULL;
    if (ggc_hf_config(f, "fuzz.gguf", &json) != VLLM_OK) {
        gguf_close(f);
        return 0;
    }
    model_config *c = calloc(1, sizeof *c);
    if (!c) abort();
    const vllm_status st = hf_config_parse(json, NULL, "fuzz.gguf", c);
    free(json);
    if (st != VLLM_OK) {
        free(c);
        gguf_close(f);
        return 0;
    }
    /* every block type counts as native (used in place), and none (dequantized) on alternate inputs */
    weight_source *ws = NULL;
    if (ws_open_gguf(f, size % 2 ? 0xffffffffu : 0u, &ws) != VLLM_OK) {
        free(c);
        return 0;
    }
    char name[256];
    static const char *const globals[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++) read_weight(ws, f, globals[i]);
    const int layers = c->num_layers < 3 ? c->num_layers : 3;
    for (int l = 0; l < layers; l++) {
        for (size_t i = 0; i < sizeof SUFFIXES / sizeof *SUFFIXES; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, SUFFIXES[i]);
            read_weight(ws, f, name);
        }
        for (int e = 0; e < 3; e++)
            for (size_t i = 0; i < sizeof EXPERT_SUFFIXES / sizeof *EXPERT_SUFFIXES; i++) {
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s", l, e, EXPERT_SUFFIXES[i]);
                read_weight(ws, f, name);
                snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s", l, e, EXPERT_SUFFIXES[i]);
                read_weight(ws, f, name);
            }
        ws_release_copied(ws);
    }
    ws_close(ws); /* closes f */
    free(c);
    return 0;
}
