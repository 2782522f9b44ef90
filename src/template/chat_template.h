/*
 * chat_template.h: rendering a model's chat template (transformers' apply_chat_template
 * semantics) and loading it, with bos/eos tokens, from a Hugging Face folder.
 */
#ifndef VLLM_TEMPLATE_CHAT_TEMPLATE_H
#define VLLM_TEMPLATE_CHAT_TEMPLATE_H

#include <jansson.h>

#include "vllm.h"

/* Renders a chat template. ctx is a JSON object of variables: "messages" (array), optional "tools",
   "add_generation_prompt" (bool), "bos_token", "eos_token", and any extra keyword vars
   (enable_thinking...). *out is malloc'd. */
vllm_status ct_render(const char *template_src, const json_t *ctx, char **out);

/* Reads dir/chat_template.jinja when present, else dir/tokenizer_config.json's "chat_template"
   (a string, or a list of {name, template}: "default" is picked), and bos_token / eos_token
   (a string or {"content": ...}; NULL when absent). All outputs malloc'd. */
vllm_status ct_load_dir(const char *dir, char **template_src, char **bos_token, char **eos_token);

#endif
