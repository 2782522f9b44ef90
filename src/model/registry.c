/* registry.c: the model registry, keyed by config.json architectures[0]. */
#include <string.h>

#include "model/model_internal.h"

extern const model_arch llama_arch_llama, llama_arch_mistral, llama_arch_qwen2, llama_arch_qwen3;

static const model_arch *const ARCHS[] = {
    &llama_arch_llama, &llama_arch_mistral, &llama_arch_qwen2, &llama_arch_qwen3,
};

const model_arch *model_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i]->name, name)) return ARCHS[i];
    return NULL;
}

const char *model_arch_list(void) {
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}
