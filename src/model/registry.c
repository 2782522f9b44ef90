/* registry.c: the model registry, keyed by config.json architectures[0]: each name's config family and decoder. */
#include <string.h>

#include "model/model_internal.h"

extern const model_arch decoder_arch;
extern const model_config_family llama_family_llama, llama_family_mistral, llama_family_qwen2, llama_family_qwen3,
    gemma_family_gemma2, gemma_family_gemma3, gemma_family_gemma3_mm, phi3_family, olmo2_family, granite_family,
    glm4_family, opt_family, qwen2_moe_family, qwen3_moe_family, mixtral_family, gptoss_family, qwen3_next_family,
    qwen3_5_family, qwen3_5_mm_family, qwen3_5_moe_family, qwen3_5_moe_mm_family;

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
};

static const struct entry *find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
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
           "Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration (text)";
}
