/* registry.c: the model registry, keyed by config.json architectures[0]: each name's config family and decoder. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"

extern const model_arch decoder_arch;
extern const model_config_family llama_family_llama, llama_family_mistral, llama_family_qwen2, llama_family_qwen3,
    gemma_family_gemma2, gemma_family_gemma3, gemma_family_gemma3_mm, phi3_family, olmo2_family, granite_family,
    glm4_family, opt_family, qwen2_moe_family, qwen3_moe_family, mixtral_family, gptoss_family, qwen3_next_family,
    qwen3_5_family, qwen3_5_mm_family, qwen3_5_moe_family, qwen3_5_moe_mm_family, deepseek_v2_family,
    deepseek_v3_family;

static const struct entry {
    const char *name;                   /* architectures[0] */
    const model_config_family *family;  /* its config.json (arch_*.c) */
    const model_arch *arch;             /* what runs it */
} ARCHS[] = {
    {"LlamaForCausalLM", &llama_family_llama, &decoder_arch},
    {"MistralForCausalLM", &llama_family_mistral, &decoder_arch},
    {"Qwen2ForCausalLM", &llama_family_qwen2, &decoder_arch},
    {"Qwen3ForCausalLM", &llama_family_qwen3, &decoder_arch},
    {"Gemma2ForCausalLM", &gemma_family_gemma2, &decoder_arch},
    {"Gemma3ForCausalLM", &gemma_family_gemma3, &decoder_arch},
    {"Gemma3ForConditionalGeneration", &gemma_family_gemma3_mm, &decoder_arch},
    {"Phi3ForCausalLM", &phi3_family, &decoder_arch},
    {"Olmo2ForCausalLM", &olmo2_family, &decoder_arch},
    {"GraniteForCausalLM", &granite_family, &decoder_arch},
    {"Glm4ForCausalLM", &glm4_family, &decoder_arch},
    {"OPTForCausalLM", &opt_family, &decoder_arch},
    {"Qwen2MoeForCausalLM", &qwen2_moe_family, &decoder_arch},
    {"Qwen3MoeForCausalLM", &qwen3_moe_family, &decoder_arch},
    {"MixtralForCausalLM", &mixtral_family, &decoder_arch},
    {"GptOssForCausalLM", &gptoss_family, &decoder_arch},
    /* gated delta-net layers: backends with BE_OP_GATED_DELTA_NET (the CPU and CUDA) */
    {"Qwen3NextForCausalLM", &qwen3_next_family, &decoder_arch},
    {"Qwen3_5ForCausalLM", &qwen3_5_family, &decoder_arch},
    {"Qwen3_5ForConditionalGeneration", &qwen3_5_mm_family, &decoder_arch},
    {"Qwen3_5MoeForCausalLM", &qwen3_5_moe_family, &decoder_arch},
    {"Qwen3_5MoeForConditionalGeneration", &qwen3_5_moe_mm_family, &decoder_arch},
    /* multi-head latent attention: backends with attention_mla / head_linear (the CPU and CUDA) */
    {"DeepseekV2ForCausalLM", &deepseek_v2_family, &decoder_arch},
    {"DeepseekV3ForCausalLM", &deepseek_v3_family, &decoder_arch},
};

static const struct entry *find_exact(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

/* vLLM's _SUFFIX_TO_DEFAULTS (vllm/config/model.py), in its order (the first suffix a name ends with
 * decides), without the classify / reward ones: the runner a name defaults to. */
static const struct suffix {
    const char *suffix;
    bool pooling;
} SUFFIXES[] = {
    {"ForCausalLM", false}, {"ForConditionalGeneration", false}, {"ChatModel", false}, {"LMHeadModel", false},
    {"ForTextEncoding", true}, {"EmbeddingModel", true}, {"Model", true},
};

/* An architecture not in the registry by its own name: its suffix's default (*sfx), and, for a pooling
 * suffix, the registered name with that suffix replaced by another of the list (vLLM's
 * ModelRegistry._normalize_arch: Qwen3Model -> Qwen3ForCausalLM, MistralModel -> MistralForCausalLM), or
 * NULL. (An unknown generative name, e.g. a vision model's *ForConditionalGeneration, is not run as the
 * text model of the same prefix.) */
static const struct entry *find_by_suffix(const char *name, const struct suffix **sfx) {
    *sfx = NULL;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof SUFFIXES / sizeof *SUFFIXES; i++) {
        size_t k = strlen(SUFFIXES[i].suffix);
        if (n <= k || strcmp(name + n - k, SUFFIXES[i].suffix)) continue;
        *sfx = &SUFFIXES[i];
        for (size_t j = 0; SUFFIXES[i].pooling && j < sizeof SUFFIXES / sizeof *SUFFIXES; j++) {
            char base[160];
            if (n - k + strlen(SUFFIXES[j].suffix) >= sizeof base) continue;
            snprintf(base, sizeof base, "%.*s%s", (int)(n - k), name, SUFFIXES[j].suffix);
            const struct entry *e = find_exact(base);
            if (e) return e;
        }
        return NULL;
    }
    return NULL;
}

static const struct entry *find(const char *name) {
    const struct entry *e = find_exact(name);
    const struct suffix *sfx;
    return e ? e : find_by_suffix(name, &sfx);
}

bool model_arch_default_pooling(const char *name) {
    const struct suffix *sfx;
    return !find_exact(name) && find_by_suffix(name, &sfx) && sfx->pooling;
}

const model_arch *model_arch_find(const char *name) {
    const struct entry *e = find(name);
    return e ? e->arch : NULL;
}

const model_config_family *model_config_family_find(const char *name) {
    const struct entry *e = find(name);
    return e ? e->family : NULL;
}

const char *model_arch_list(void) {
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, "
           "Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text), Phi3ForCausalLM, Olmo2ForCausalLM, "
           "GraniteForCausalLM, Glm4ForCausalLM, OPTForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
           "MixtralForCausalLM, GptOssForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration (text), "
           "Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration (text), DeepseekV2ForCausalLM, "
           "DeepseekV3ForCausalLM";
}
