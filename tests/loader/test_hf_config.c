/* test_hf_config.c: config.json / generation_config.json parsing of real model configs and error cases. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "loader/hf_config.h"
#include "tensor/backend.h"
#include "test.h"


/* meta-llama/Llama-3.2-1B-Instruct (transformers v4 spelling) */
static const char *LLAMA =
    "{\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 128000,\n"
    "  \"eos_token_id\": [128001, 128008, 128009],\n"
    "  \"head_dim\": 64,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 2048,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8192,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 16,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,\n"
    "                   \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"use_cache\": true,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static const char *LLAMA_GEN =
    "{\"bos_token_id\": 128000, \"do_sample\": true, \"eos_token_id\": [128001, 128008, 128009],\n"
    " \"temperature\": 0.6, \"top_p\": 0.9, \"transformers_version\": \"4.45.0.dev0\"}";

/* Qwen/Qwen2.5-0.5B-Instruct */
static const char *QWEN2 =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"eos_token_id\": 151645, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 21,"
    " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.1\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

static const char *QWEN2_GEN =
    "{\"bos_token_id\": 151643, \"pad_token_id\": 151643, \"do_sample\": true, \"eos_token_id\": [151645, 151643],"
    " \"repetition_penalty\": 1.1, \"temperature\": 0.7, \"top_p\": 0.8, \"top_k\": 20}";

/* Qwen/Qwen3-0.6B */
static const char *QWEN3 =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* mistralai/Mistral-7B-v0.1 */
static const char *MISTRAL =
    "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", \"num_attention_heads\": 32,"
    " \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
    " \"sliding_window\": 4096, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.34.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}";

/* transformers v5 save_pretrained: dtype + rope_parameters */
static const char *V5 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"dtype\": \"float16\","
    " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": null, \"head_dim\": null, \"vocab_size\": 256, \"pad_token_id\": null,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2,"
    " \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 50000.0,"
    " \"partial_rotary_factor\": 0.5}, \"transformers_version\": \"5.0.0\"}";

/* smallest valid config, for the error cases to edit */
static const char *MINI_FMT =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256%s}";

static void test_llama(void) {
    model_config c;
    CHECK_OK(hf_config_parse(LLAMA, NULL, "config.json", &c));
    CHECK(!strcmp(c.architecture, "LlamaForCausalLM") && !strcmp(c.model_type, "llama"));
    CHECK(c.vocab_size == 128256 && c.hidden_size == 2048 && c.intermediate_size == 8192);
    CHECK(c.num_layers == 16 && c.num_heads == 32 && c.num_kv_heads == 8 && c.head_dim == 64);
    CHECK(c.max_position_embeddings == 131072);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 1e-12);
    CHECK(c.rope.type == ROPE_LLAMA3);
    CHECK_NEAR(c.rope.theta, 500000.0, 0);
    CHECK_NEAR(c.rope.factor, 32.0, 0);
    CHECK_NEAR(c.rope.low_freq_factor, 1.0, 0);
    CHECK_NEAR(c.rope.high_freq_factor, 4.0, 0);
    CHECK(c.rope.original_max_position == 8192);
    CHECK_NEAR(c.rope.partial_rotary_factor, 1.0, 0);
    CHECK(c.tie_word_embeddings && !c.attention_bias && !c.qk_norm && c.sliding_window == 0);
    CHECK(c.torch_dtype == DTYPE_BF16);
    CHECK(c.bos_token_id == 128000 && c.pad_token_id == -1);
    CHECK(c.num_eos == 3 && c.eos_token_ids[0] == 128001 && c.eos_token_ids[2] == 128009);
    CHECK(!c.has_temperature && !c.has_top_p && !c.has_top_k);
    int kinds_ok = 1;
    for (int i = 0; i < c.num_layers; i++) kinds_ok &= c.layers[i].kind == LAYER_ATTENTION && c.layers[i].mlp == MLP_DENSE && c.layers[i].sliding_window == 0;
    CHECK(kinds_ok);

    CHECK_OK(hf_config_parse(LLAMA, LLAMA_GEN, "config.json", &c));
    CHECK(c.has_temperature && c.has_top_p && !c.has_top_k);
    CHECK_NEAR(c.gen_temperature, 0.6, 1e-12);
    CHECK_NEAR(c.gen_top_p, 0.9, 1e-12);
}

static void test_qwen(void) {
    model_config c;
    CHECK_OK(hf_config_parse(QWEN2, QWEN2_GEN, "config.json", &c));
    CHECK(!strcmp(c.architecture, "Qwen2ForCausalLM"));
    CHECK(c.attention_bias);  /* forced: Qwen2 always has q/k/v bias */
    CHECK(!c.qk_norm && c.sliding_window == 0);
    CHECK(c.num_heads == 14 && c.num_kv_heads == 2 && c.head_dim == 64);
    CHECK_NEAR(c.rope.theta, 1e6, 0);
    CHECK(c.rope.type == ROPE_DEFAULT);
    /* generation_config's eos list replaces config's single eos */
    CHECK(c.num_eos == 2 && c.eos_token_ids[0] == 151645 && c.eos_token_ids[1] == 151643);
    CHECK(c.has_top_k && c.gen_top_k == 20);
    CHECK_NEAR(c.gen_temperature, 0.7, 1e-12);
    CHECK_NEAR(c.gen_top_p, 0.8, 1e-12);
    CHECK(c.pad_token_id == -1);  /* generation_config's pad is not config's */

    CHECK_OK(hf_config_parse(QWEN3, NULL, "config.json", &c));
    CHECK(!strcmp(c.architecture, "Qwen3ForCausalLM") && !strcmp(c.model_type, "qwen3"));
    CHECK(c.head_dim == 128 && c.hidden_size == 1024 && c.num_heads == 16);  /* heads * head_dim != hidden */
    CHECK(c.qk_norm && !c.attention_bias && c.sliding_window == 0);
    CHECK(c.num_eos == 1 && c.eos_token_ids[0] == 151645);
    CHECK(c.rope.type == ROPE_DEFAULT);
    CHECK_NEAR(c.rope.theta, 1e6, 0);
}

/* transformers' per-family defaults for keys config.json leaves out, and the values the
 * families ignore (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config). */
static void test_family_defaults(void) {
    model_config c;
    char buf[2048];
    /* hidden_act: "silu" and its ACT2FN alias "swish" (both SiLUActivation); absent = silu */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"hidden_act\": \"swish\"");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    snprintf(buf, sizeof buf, MINI_FMT, ", \"hidden_act\": null, \"mlp_bias\": false, \"pretraining_tp\": 2");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));

    /* Llama: max_position_embeddings 2048, num_key_value_heads = heads, head_dim = hidden / heads */
    snprintf(buf, sizeof buf, MINI_FMT, "");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.max_position_embeddings == 2048 && c.num_kv_heads == 4 && c.head_dim == 16 && c.sliding_window == 0);

    /* Mistral: 4096 * 32 positions, 8 kv heads, a 4096-token window when sliding_window is absent
     * (null: none); no attention biases and mlp_bias is not read */
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"architectures\": [\"MistralForCausalLM\"], \"num_attention_heads\": 8, \"attention_bias\": true, "
             "\"mlp_bias\": true");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.max_position_embeddings == 131072 && c.num_kv_heads == 8 && c.head_dim == 8);
    CHECK(c.sliding_window == 4096 && !c.attention_bias);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"architectures\": [\"MistralForCausalLM\"], \"num_key_value_heads\": null, \"sliding_window\": null");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.num_kv_heads == 4 && c.sliding_window == 0);

    /* Qwen2: 32768 positions, 32 kv heads, q/k/v bias always; sliding_window without
     * use_sliding_window and the layer_types are both no window */
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"architectures\": [\"Qwen2ForCausalLM\"], \"num_attention_heads\": 32, \"hidden_size\": 256, "
             "\"attention_bias\": false, \"sliding_window\": 4096, \"max_window_layers\": 1, "
             "\"layer_types\": [\"full_attention\", \"sliding_attention\"]");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.max_position_embeddings == 32768 && c.num_kv_heads == 32 && c.head_dim == 8);
    CHECK(c.attention_bias && c.sliding_window == 0 && !c.qk_norm);

    /* Qwen3: head_dim 128 when absent (hidden / heads when null) */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"architectures\": [\"Qwen3ForCausalLM\"], \"num_key_value_heads\": 2");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.max_position_embeddings == 32768 && c.num_kv_heads == 2 && c.head_dim == 128 && c.qk_norm);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"architectures\": [\"Qwen3ForCausalLM\"], \"num_key_value_heads\": 2, \"head_dim\": null");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.head_dim == 16);

    /* partial_rotary_factor: int(head_dim * factor) must be even (vLLM's rotary_dim) */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"partial_rotary_factor\": 0.25");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
}

static void test_mistral_v5(void) {
    model_config c;
    CHECK_OK(hf_config_parse(MISTRAL, NULL, "config.json", &c));
    CHECK(c.sliding_window == 4096 && !c.tie_word_embeddings && c.head_dim == 128);
    CHECK(c.bos_token_id == 1 && c.num_eos == 1 && c.eos_token_ids[0] == 2);

    char buf[2048];
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"architectures\": [\"MistralForCausalLM\"], \"num_key_value_heads\": 4, \"sliding_window\": null");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.sliding_window == 0);

    CHECK_OK(hf_config_parse(V5, NULL, "config.json", &c));
    CHECK(c.torch_dtype == DTYPE_F16);
    CHECK(c.num_kv_heads == 4 && c.head_dim == 16);  /* nulls take the defaults */
    CHECK(c.rope.type == ROPE_LINEAR);
    CHECK_NEAR(c.rope.factor, 2.0, 0);
    CHECK_NEAR(c.rope.theta, 50000.0, 0);
    CHECK_NEAR(c.rope.partial_rotary_factor, 0.5, 0);
    CHECK(c.pad_token_id == -1 && c.bos_token_id == 1);
    CHECK(c.max_position_embeddings == 2048);  /* default */
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 0);

    /* defaults of the smallest config */
    snprintf(buf, sizeof buf, MINI_FMT, "");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.num_kv_heads == 4 && c.head_dim == 16 && c.torch_dtype == DTYPE_BF16 && c.num_eos == 0);
    CHECK(c.bos_token_id == -1 && c.rope.type == ROPE_DEFAULT && c.model_type[0] == '\0');
    CHECK_NEAR(c.rope.theta, 10000.0, 0);
    CHECK(!c.tie_word_embeddings && !c.attention_bias);

    /* legacy "type" spelling, v5 default rope_parameters */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.rope.type == ROPE_LINEAR);
    CHECK_NEAR(c.rope.factor, 4.0, 0);
    snprintf(buf, sizeof buf, MINI_FMT, ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.rope.type == ROPE_DEFAULT);
    CHECK_NEAR(c.rope.theta, 1e6, 0);

    /* generation_config eos as an int, bos override */
    CHECK_OK(hf_config_parse(QWEN3, "{\"eos_token_id\": 7, \"bos_token_id\": 3, \"top_k\": -1}", NULL, &c));
    CHECK(c.num_eos == 1 && c.eos_token_ids[0] == 7 && c.bos_token_id == 3 && c.has_top_k && c.gen_top_k == -1);
    CHECK_OK(hf_config_parse(QWEN3, "{\"eos_token_id\": null, \"temperature\": 0}", NULL, &c));
    CHECK(c.num_eos == 1 && c.eos_token_ids[0] == 151645 && c.has_temperature && c.gen_temperature == 0.0);
}

/* a compressed-tensors pack-quantized W4A16 quantization_config body: strategy, group_size, actorder */
#define CT_W4A16(strategy, gs, actorder)                                                                         \
    "\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"quantization_status\": "          \
    "\"compressed\", \"ignore\": [\"lm_head\"], \"kv_cache_scheme\": null, \"sparsity_config\": {}, "          \
    "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"input_activations\": null, "              \
    "\"output_activations\": null, \"weights\": {\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true, "    \
    "\"dynamic\": false, \"strategy\": " strategy ", \"group_size\": " gs ", \"actorder\": " actorder             \
    ", \"observer\": \"minmax\"}}}"

/* compressed-tensors float-quantized FP8 W8A8 pieces (llm-compressor's FP8_DYNAMIC / FP8 / FP8_BLOCK presets) */
#define CT_F8W(strategy)                                                                                        \
    "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"dynamic\": false, \"strategy\": " strategy      \
    ", \"group_size\": null, \"block_structure\": null, \"observer\": \"minmax\"}"
#define CT_F8A(strategy, dynamic)                                                                               \
    "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"dynamic\": " dynamic ", \"strategy\": " strategy "}"
#define CT_FP8(wstrategy, astrategy, dynamic)                                                                   \
    "\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"quantization_status\": "         \
    "\"compressed\", \"ignore\": [\"lm_head\"], \"kv_cache_scheme\": null, \"sparsity_config\": {}, "         \
    "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": " CT_F8W(wstrategy)           \
    ", \"input_activations\": " CT_F8A(astrategy, dynamic) ", \"output_activations\": null}}"

/* a compressed-tensors kv_cache_scheme */
#define CT_KV(strategy)                                                                                        \
    "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"dynamic\": false, \"strategy\": " strategy "}"

/* quantization_config: block-scaled fp8 as Qwen3-8B-FP8 writes it (and DeepSeek-V3's [128, 128] without fmt) */
static void test_quant(void) {
    model_config c;
    char buf[2048];
    CHECK_OK(hf_config_parse(QWEN3, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_NONE && c.quant.name[0] == 0);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
             "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.block_n == 128 && c.quant.block_k == 128 &&
          !strcmp(c.quant.name, "fp8"));
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [64, 128], "
             "\"ignored_layers\": [\"lm_head\"]}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.block_n == 64 && c.quant.fp8_scales == FP8_SCALE_BLOCK &&
          c.quant.fp8_scale_inv && !c.quant.fp8_static_act);
    /* AutoFP8: per-tensor weight_scale, dynamic or static activations */
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"static\", "
             "\"ignored_layers\": [\"lm_head\"]}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_TENSOR && !c.quant.fp8_scale_inv &&
          c.quant.fp8_static_act);
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"fp8\"}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_TENSOR && !c.quant.fp8_static_act);
    /* compressed-tensors FP8: FP8_DYNAMIC (channel, token), FP8 (tensor, static tensor), FP8_BLOCK */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {" CT_FP8("\"channel\"", "\"token\"", "true") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_CHANNEL && !c.quant.fp8_scale_inv &&
          !c.quant.fp8_static_act && !strcmp(c.quant.name, "compressed-tensors"));
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {" CT_FP8("\"tensor\"", "\"tensor\"", "false") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_TENSOR && c.quant.fp8_static_act);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
             "\"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
             "\"block\", \"block_structure\": [128, 128]}, \"input_activations\": {\"num_bits\": 8, \"type\": "
             "\"float\", \"strategy\": \"group\", \"group_size\": 128, \"dynamic\": true}}}}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_BLOCK && c.quant.block_n == 128 &&
          !c.quant.fp8_scale_inv);
    /* AutoAWQ's and GPTQModel's configs */
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"bits\": 4, \"group_size\": 128, \"modules_to_not_convert\": null, "
             "\"quant_method\": \"awq\", \"version\": \"gemm\", \"zero_point\": true}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_AWQ && c.quant.group_size == 128);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"bits\": 4, \"group_size\": -1, \"desc_act\": true, \"sym\": false, "
             "\"quant_method\": \"gptq\", \"checkpoint_format\": \"gptq_v2\"}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_GPTQ && c.quant.group_size == -1 && c.quant.desc_act && !c.quant.gptq_v1);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"quantization_config\": {\"bits\": 4, \"group_size\": 64, \"quant_method\": \"gptq\"}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_GPTQ && c.quant.group_size == 64 && !c.quant.desc_act && c.quant.gptq_v1);
    /* compressed-tensors W4A16 as llm-compressor's W4A16 preset writes it; channel strategy, actorder group */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_CT_W4A16 && c.quant.group_size == 128 && !c.quant.desc_act &&
          !strcmp(c.quant.name, "compressed-tensors"));
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {" CT_W4A16("\"channel\"", "null", "\"group\"") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_CT_W4A16 && c.quant.group_size == -1 && c.quant.desc_act && !c.quant.kv_fp8_scales);
    /* NVIDIA ModelOpt: FP8 (per tensor, static input scales), FP8_PER_CHANNEL_PER_TOKEN, the nested form of
     * hf_quant_config.json with the FP8 KV cache's scales */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": "
             "\"FP8\", \"ignore\": [\"lm_head\"]}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_TENSOR && c.quant.fp8_static_act &&
          !c.quant.fp8_scale_inv && !c.quant.kv_fp8_scales && !strcmp(c.quant.name, "modelopt"));
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quantization\": "
             "{\"quant_algo\": \"fp8_per_channel_per_token\", \"kv_cache_quant_algo\": \"FP8\"}}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_FP8 && c.quant.fp8_scales == FP8_SCALE_CHANNEL && !c.quant.fp8_static_act &&
          c.quant.kv_fp8_scales);
    /* NVFP4: compressed-tensors nvfp4-pack-quantized (W4A16, and W4A4 run weight-only), ModelOpt NVFP4 */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
             "\"format\": \"nvfp4-pack-quantized\", \"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 4, "
             "\"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16}, \"input_activations\": "
             "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", \"group_size\": 16, "
             "\"dynamic\": \"local\"}}}}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_NVFP4 && c.quant.nvfp4_ct && c.quant.nvfp4_w4a4);
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": "
             "\"W4A16_NVFP4\", \"group_size\": 16}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_NVFP4 && !c.quant.nvfp4_ct && !c.quant.nvfp4_w4a4);
    /* an FP8 KV-cache scheme (llm-compressor's kv_cache_scheme: k_scale / v_scale per layer), with weights and alone */
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null")
             ", \"kv_cache_scheme\": " CT_KV("\"tensor\"") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_CT_W4A16 && c.quant.kv_fp8_scales);
    snprintf(buf, sizeof buf, MINI_FMT, ", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
             "\"config_groups\": {}, \"kv_cache_scheme\": " CT_KV("\"tensor\"") "}");
    CHECK_OK(hf_config_parse(buf, NULL, NULL, &c));
    CHECK(c.quant.method == QUANT_NONE && c.quant.kv_fp8_scales);
}

/* One bad config built from MINI_FMT + extra (later keys replace earlier ones in jansson). */
#define BAD(extra, want, w1, w2)                                               \
    do {                                                                       \
        snprintf(buf, sizeof buf, MINI_FMT, extra);                            \
        c.vocab_size = 12345;                                                  \
        EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), want, w1, w2); \
        CHECK(c.vocab_size == 12345); /* untouched on failure */               \
    } while (0)

static void test_errors(void) {
    model_config c;
    char buf[2048];
    EXPECT_ERR(hf_config_parse("{\n  \"a\": 1,\n  \"b\": }\n", NULL, "config.json", &c), VLLM_ERR_FORMAT,
               "config.json: invalid JSON at line 3", "");
    EXPECT_ERR(hf_config_parse("[1]", NULL, "config.json", &c), VLLM_ERR_FORMAT, "config.json", "object");
    EXPECT_ERR(hf_config_parse("{\"architectures\": [\"X\"]}", NULL, "config.json", &c), VLLM_ERR_FORMAT,
               "config.json: vocab_size missing", "");
    EXPECT_ERR(hf_config_parse("{\"vocab_size\": 3}", NULL, "config.json", &c), VLLM_ERR_FORMAT,
               "config.json: architectures missing", "");
    BAD(", \"hidden_size\": \"2048\"", VLLM_ERR_FORMAT, "config.json: hidden_size must be a positive integer", "");
    BAD(", \"hidden_size\": 0", VLLM_ERR_FORMAT, "config.json: hidden_size must be a positive integer", "");
    BAD(", \"hidden_size\": 64.5", VLLM_ERR_FORMAT, "hidden_size must be a positive integer", "");
    BAD(", \"hidden_size\": null", VLLM_ERR_FORMAT, "config.json: hidden_size missing", "");
    BAD(", \"hidden_size\": 4294967360", VLLM_ERR_FORMAT, "hidden_size", "too large");
    BAD(", \"architectures\": []", VLLM_ERR_FORMAT, "architectures", "non-empty");
    BAD(", \"architectures\": [3]", VLLM_ERR_FORMAT, "architectures", "strings");
    BAD(", \"architectures\": \"LlamaForCausalLM\"", VLLM_ERR_FORMAT, "architectures", "list");
    BAD(", \"num_key_value_heads\": 3", VLLM_ERR_FORMAT, "num_key_value_heads 3", "num_attention_heads 4");
    BAD(", \"num_key_value_heads\": 0", VLLM_ERR_FORMAT, "num_key_value_heads", "positive");
    BAD(", \"num_attention_heads\": 5", VLLM_ERR_FORMAT, "hidden_size 64", "num_attention_heads 5");
    BAD(", \"num_hidden_layers\": 0", VLLM_ERR_FORMAT, "num_hidden_layers", "positive");
    BAD(", \"num_hidden_layers\": 513", VLLM_ERR_UNSUPPORTED, "num_hidden_layers 513", "512");
    BAD(", \"head_dim\": 1073741824", VLLM_ERR_FORMAT, "head_dim", "too large");
    BAD(", \"intermediate_size\": 2147483647", VLLM_ERR_FORMAT, "intermediate_size", "too large");
    BAD(", \"rms_norm_eps\": \"1e-5\"", VLLM_ERR_FORMAT, "rms_norm_eps", "number");
    BAD(", \"rms_norm_eps\": -1", VLLM_ERR_FORMAT, "rms_norm_eps", "greater than 0");
    BAD(", \"tie_word_embeddings\": 1", VLLM_ERR_FORMAT, "tie_word_embeddings", "true or false");
    BAD(", \"rope_theta\": \"big\"", VLLM_ERR_FORMAT, "rope_theta", "number");
    BAD(", \"rope_scaling\": {\"rope_type\": \"ntk\", \"factor\": 4.0}", VLLM_ERR_UNSUPPORTED, "config.json",
        "rope type 'ntk' is not supported");
    BAD(", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"beta_fast\": 1, \"beta_slow\": 32}",
        VLLM_ERR_FORMAT, "beta_fast 1 must exceed beta_slow 32", "");
    BAD(", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"mscale\": \"x\"}", VLLM_ERR_FORMAT,
        "mscale", "numbers");
    BAD(", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", VLLM_ERR_UNSUPPORTED, "'dynamic'", "");
    BAD(", \"rope_parameters\": {\"rope_type\": \"longrope\"}", VLLM_ERR_FORMAT, "short_factor", "list");
    BAD(", \"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": [1, 1], \"long_factor\": [1, 2]}",
        VLLM_ERR_FORMAT, "short_factor / long_factor have 2 entries", "");
    BAD(", \"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": [1, 1], \"long_factor\": [1]}",
        VLLM_ERR_FORMAT, "differ in length", "");
    BAD(", \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1], \"long_factor\": [1], \"long_mscale\": 2}",
        VLLM_ERR_UNSUPPORTED, "long_mscale", "");
    BAD(", \"rope_scaling\": {\"rope_type\": \"linear\"}", VLLM_ERR_FORMAT, "factor missing", "");
    BAD(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1}", VLLM_ERR_FORMAT,
        "high_freq_factor missing", "");
    BAD(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
        "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}",
        VLLM_ERR_FORMAT, "high_freq_factor", "low_freq_factor");
    BAD(", \"rope_scaling\": [1]", VLLM_ERR_FORMAT, "rope_scaling", "object");
    BAD(", \"rope_scaling\": {\"rope_type\": 3}", VLLM_ERR_FORMAT, "rope_type", "string");
    BAD(", \"partial_rotary_factor\": 1.5", VLLM_ERR_FORMAT, "partial_rotary_factor", "");
    BAD(", \"torch_dtype\": \"float64\"", VLLM_ERR_UNSUPPORTED, "torch_dtype 'float64'", "");
    BAD(", \"dtype\": 16", VLLM_ERR_FORMAT, "dtype", "string");
    BAD(", \"architectures\": [\"Qwen2ForCausalLM\"], \"num_key_value_heads\": 2, \"use_sliding_window\": true", VLLM_ERR_UNSUPPORTED,
        "config.json", "use_sliding_window is not supported yet");
    BAD(", \"architectures\": [\"Qwen3ForCausalLM\"], \"num_key_value_heads\": 2, \"use_sliding_window\": true", VLLM_ERR_UNSUPPORTED,
        "use_sliding_window", "");
    BAD(", \"architectures\": [\"MistralForCausalLM\"], \"num_key_value_heads\": 2, \"sliding_window\": -5", VLLM_ERR_FORMAT, "sliding_window",
        "non-negative");
    /* values the families depend on: honoured or refused, never silently run as something else */
    BAD(", \"hidden_act\": \"gelu\"", VLLM_ERR_UNSUPPORTED, "config.json: hidden_act 'gelu' is not supported",
        "silu");
    BAD(", \"hidden_act\": \"gelu_pytorch_tanh\", \"architectures\": [\"Qwen3ForCausalLM\"], \"num_key_value_heads\": 2",
        VLLM_ERR_UNSUPPORTED, "hidden_act 'gelu_pytorch_tanh'", "");
    BAD(", \"hidden_act\": \"relu\", \"architectures\": [\"MistralForCausalLM\"], \"num_key_value_heads\": 2",
        VLLM_ERR_UNSUPPORTED, "hidden_act 'relu'", "");
    BAD(", \"hidden_act\": \"gelu\", \"architectures\": [\"Qwen2ForCausalLM\"], \"num_key_value_heads\": 2",
        VLLM_ERR_UNSUPPORTED, "hidden_act 'gelu'", "");
    BAD(", \"hidden_act\": 1", VLLM_ERR_FORMAT, "hidden_act", "string");
    BAD(", \"mlp_bias\": true", VLLM_ERR_UNSUPPORTED, "config.json: mlp_bias", "not supported");
    BAD(", \"mlp_bias\": \"yes\"", VLLM_ERR_FORMAT, "mlp_bias", "true or false");
    BAD(", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}", VLLM_ERR_FORMAT, "awq group_size", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 3, \"group_size\": 128}",
        VLLM_ERR_UNSUPPORTED, "awq with bits 3", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128, \"version\": \"gemv\"}",
        VLLM_ERR_UNSUPPORTED, "awq version 'gemv'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128, \"zero_point\": false}",
        VLLM_ERR_UNSUPPORTED, "zero_point false", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 8, \"group_size\": 128}",
        VLLM_ERR_UNSUPPORTED, "gptq with bits 8", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 100}", VLLM_ERR_FORMAT,
        "group_size must be", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, "
        "\"checkpoint_format\": \"marlin\"}",
        VLLM_ERR_UNSUPPORTED, "checkpoint_format 'marlin'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 128, \"desc_act\": 1}",
        VLLM_ERR_FORMAT, "desc_act", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"bitsandbytes\"}", VLLM_ERR_UNSUPPORTED,
        "quant_method 'bitsandbytes' is not supported", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"compressed-tensors\"}", VLLM_ERR_FORMAT,
        "compressed-tensors needs config_groups", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"W4A8_AWQ\"}",
        VLLM_ERR_UNSUPPORTED, "modelopt quant_algo 'W4A8_AWQ'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"FP8\", "
        "\"kv_cache_quant_algo\": \"NVFP4\"}", VLLM_ERR_UNSUPPORTED, "kv_cache_quant_algo 'NVFP4'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"modelopt\"}", VLLM_ERR_FORMAT, "no quant_algo", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", \"group_size\": 32}",
        VLLM_ERR_UNSUPPORTED, "NVFP4 group_size must be 16", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"nvfp4-pack-quantized\", "
        "\"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
        "\"tensor_group\", \"group_size\": 32}}}}", VLLM_ERR_UNSUPPORTED, "group_size 16", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") ", \"kv_cache_scheme\": "
        CT_KV("\"attn_head\"") "}", VLLM_ERR_UNSUPPORTED, "kv_cache_scheme", "strategy 'attn_head'");
    /* FP8 weights without activation quantization (W8A16), static per-token activations, 4-bit floats (NVFP4),
     * another block width, an int-quantized format, mixed schemes, asymmetric, 8 bits, sparse: refused naming them */
    BAD(", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"config_groups\": {\"group_0\": {\"weights\": " CT_F8W("\"channel\"") "}}}", VLLM_ERR_UNSUPPORTED,
        "without input_activations (W8A16", "");
    BAD(", \"quantization_config\": {" CT_FP8("\"channel\"", "\"token\"", "false") "}", VLLM_ERR_UNSUPPORTED,
        "static activation strategy 'token'", "");
    BAD(", \"quantization_config\": {" CT_FP8("\"group\"", "\"token\"", "true") "}", VLLM_ERR_UNSUPPORTED,
        "FP8 weight strategy 'group'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
        "\"tensor_group\", \"group_size\": 16}, \"input_activations\": null}}}", VLLM_ERR_UNSUPPORTED,
        "4-bit float float-quantized weights", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
        "\"block\", \"block_structure\": [128, 64]}, \"input_activations\": null}}}", VLLM_ERR_UNSUPPORTED,
        "block_structure must be [block_n, 128]", "");
    BAD(", \"quantization_config\": {" CT_FP8("\"channel\"", "\"token\"", "true") ", \"format\": "
        "\"int-quantized\"}", VLLM_ERR_UNSUPPORTED, "format 'int-quantized'", "");
    BAD(", \"quantization_config\": {" CT_FP8("\"channel\"", "\"token\"", "true") ", \"config_groups\": {"
        "\"a\": {\"weights\": " CT_F8W("\"channel\"") ", \"input_activations\": " CT_F8A("\"token\"", "true") "}, "
        "\"b\": {\"weights\": " CT_F8W("\"tensor\"") ", \"input_activations\": " CT_F8A("\"token\"", "true") "}}}",
        VLLM_ERR_UNSUPPORTED, "config groups with different schemes", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") ", \"config_groups\": {\"g\": "
        "{\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 128, "
        "\"symmetric\": false}}}}", VLLM_ERR_UNSUPPORTED, "asymmetric", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") ", \"config_groups\": {\"g\": "
        "{\"weights\": {\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"channel\"}}}}",
        VLLM_ERR_UNSUPPORTED, "8-bit int pack-quantized weights", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") ", \"config_groups\": {\"g\": "
        "{\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 128}, "
        "\"input_activations\": {\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"token\"}}}}",
        VLLM_ERR_UNSUPPORTED, "quantizes activations", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"group\"", "128", "null") ", \"sparsity_config\": "
        "{\"format\": \"sparse-24-bitmask\"}}", VLLM_ERR_UNSUPPORTED, "sparsity_config", "");
    BAD(", \"quantization_config\": {" CT_W4A16("\"tensor\"", "null", "null") "}", VLLM_ERR_UNSUPPORTED,
        "weight strategy 'tensor'", "");
    BAD(", \"quantization_config\": {\"bits\": 4}", VLLM_ERR_FORMAT, "quantization_config has no quant_method", "");
    BAD(", \"quantization_config\": [1]", VLLM_ERR_FORMAT, "quantization_config must be an object", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"tensorwise\"}",
        VLLM_ERR_UNSUPPORTED, "activation_scheme 'tensorwise'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 64]}",
        VLLM_ERR_UNSUPPORTED, "weight_block_size [128, 64]", "block_k 128");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128]}", VLLM_ERR_FORMAT,
        "weight_block_size must be", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [0, 128]}", VLLM_ERR_FORMAT,
        "weight_block_size must be", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
        "\"activation_scheme\": \"static\"}",
        VLLM_ERR_UNSUPPORTED, "activation_scheme 'static'", "");
    BAD(", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], \"fmt\": \"e5m2\"}",
        VLLM_ERR_UNSUPPORTED, "fmt 'e5m2'", "");
    BAD(", \"partial_rotary_factor\": 0.1", VLLM_ERR_UNSUPPORTED, "partial_rotary_factor 0.1 with head_dim 16",
        "rotary dimension of 1");
    BAD(", \"head_dim\": 64, \"partial_rotary_factor\": 0.3", VLLM_ERR_UNSUPPORTED, "rotary dimension of 19", "even");
    BAD(", \"head_dim\": 3", VLLM_ERR_UNSUPPORTED, "rotary dimension of 3", "");
    BAD(", \"architectures\": [\"Qwen3ForCausalLM\"], \"num_key_value_heads\": 2, \"layer_types\": "
        "[\"full_attention\", \"linear_attention\"]",
        VLLM_ERR_UNSUPPORTED, "layer_types[1] 'linear_attention'", "");
    BAD(", \"architectures\": [\"Qwen2ForCausalLM\"], \"num_key_value_heads\": 2, \"layer_types\": "
        "[\"full_attention\"]",
        VLLM_ERR_FORMAT, "layer_types has 1 entries for 2 layers", "");
    /* Qwen2Config / Qwen3Config default num_key_value_heads to 32 when the key is absent */
    BAD(", \"architectures\": [\"Qwen2ForCausalLM\"]", VLLM_ERR_FORMAT, "num_key_value_heads 32",
        "num_attention_heads 4");
    BAD(", \"eos_token_id\": \"</s>\"", VLLM_ERR_FORMAT, "eos_token_id", "integer or a list");
    BAD(", \"eos_token_id\": [1, -2]", VLLM_ERR_FORMAT, "eos_token_id[1]", "");
    BAD(", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]", VLLM_ERR_UNSUPPORTED, "eos_token_id", "9 ids");
    BAD(", \"bos_token_id\": -3", VLLM_ERR_FORMAT, "bos_token_id", "");
    BAD(", \"pad_token_id\": \"x\"", VLLM_ERR_FORMAT, "pad_token_id", "");

    /* generation_config.json errors name that file */
    snprintf(buf, sizeof buf, MINI_FMT, "");
    EXPECT_ERR(hf_config_parse(buf, "{\"top_p\": ", "config.json", &c), VLLM_ERR_FORMAT,
               "generation_config.json: invalid JSON at line 1", "");
    EXPECT_ERR(hf_config_parse(buf, "{\"top_p\": 2}", "config.json", &c), VLLM_ERR_FORMAT,
               "generation_config.json", "top_p");
    EXPECT_ERR(hf_config_parse(buf, "{\"temperature\": -1}", "config.json", &c), VLLM_ERR_FORMAT,
               "generation_config.json", "temperature");
    EXPECT_ERR(hf_config_parse(buf, "{\"top_k\": 2.5}", "config.json", &c), VLLM_ERR_FORMAT,
               "generation_config.json", "top_k");
    EXPECT_ERR(hf_config_parse(buf, "{\"eos_token_id\": {}}", "config.json", &c), VLLM_ERR_FORMAT,
               "generation_config.json", "eos_token_id");
    EXPECT_ERR(hf_config_parse(NULL, NULL, "config.json", &c), VLLM_ERR_INVALID_ARG, "", "");
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    fputs(text, fp);
    fclose(fp);
}

static void test_load(void) {
    char dir[] = "/tmp/vllm_test_hf_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char cfg_path[256], gen_path[256], want[300];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(gen_path, sizeof gen_path, "%s/generation_config.json", dir);
    model_config c;

    snprintf(want, sizeof want, "%s/config.json: No such file or directory", dir);
    EXPECT_ERR(hf_config_load(dir, &c), VLLM_ERR_IO, want, "");

    write_text(cfg_path, QWEN2);
    CHECK_OK(hf_config_load(dir, &c));
    CHECK(c.num_eos == 1 && !c.has_temperature && c.attention_bias);

    write_text(gen_path, QWEN2_GEN);
    CHECK_OK(hf_config_load(dir, &c));
    CHECK(c.num_eos == 2 && c.has_temperature && c.gen_top_k == 20);

    write_text(gen_path, "{\"eos_token_id\": [1,");
    EXPECT_ERR(hf_config_load(dir, &c), VLLM_ERR_FORMAT, "generation_config.json", "invalid JSON");

    write_text(cfg_path, "{\"architectures\": [\"X\"],\n\"hidden_size\": true}");
    unlink(gen_path);
    EXPECT_ERR(hf_config_load(dir, &c), VLLM_ERR_FORMAT, "config.json: ", "");

    FILE *fp = fopen(cfg_path, "wb");  /* embedded NUL */
    if (fp) {
        fwrite("{\"a\": 1}\0xx", 1, 11, fp);
        fclose(fp);
    }
    EXPECT_ERR(hf_config_load(dir, &c), VLLM_ERR_FORMAT, "config.json", "NUL");

    unlink(cfg_path);
    mkdir(cfg_path, 0700);  /* a directory where the file should be */
    EXPECT_ERR(hf_config_load(dir, &c), VLLM_ERR_IO, "config.json", "");
    rmdir(cfg_path);
    rmdir(dir);
}


/* google/gemma-2-2b-it (trimmed to what the parser reads) */
static const char *GEMMA2 =
    "{\"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": \"gemma2\", \"attn_logit_softcapping\": 50.0,"
    " \"final_logit_softcapping\": 30.0, \"head_dim\": 256, \"hidden_act\": \"gelu_pytorch_tanh\","
    " \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 2304, \"intermediate_size\": 9216,"
    " \"max_position_embeddings\": 8192, \"num_attention_heads\": 8, \"num_hidden_layers\": 26,"
    " \"num_key_value_heads\": 4, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"
    " \"sliding_window\": 4096, \"torch_dtype\": \"float32\", \"vocab_size\": 256000, \"eos_token_id\": [1, 107],"
    " \"bos_token_id\": 2, \"pad_token_id\": 0}";

/* google/gemma-3-4b-it: the text model nested in text_config (transformers 4.5x spelling) */
static const char *GEMMA3_MM =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\","
    " \"eos_token_id\": [1, 106], \"torch_dtype\": \"bfloat16\", \"mm_tokens_per_image\": 256,"
    " \"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": \"gemma3_text\","
    "  \"num_hidden_layers\": 34, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
    "  \"sliding_window\": 1024, \"vocab_size\": 262208, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
    "  \"head_dim\": 256, \"query_pre_attn_scalar\": 256, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0,"
    "  \"sliding_window_pattern\": 6},"
    " \"vision_config\": {\"hidden_size\": 1152}}";

/* a transformers 5 Gemma 3 text config: layer_types and per-layer-type rope_parameters */
static const char *GEMMA3_V5 =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\", \"hidden_size\": 64,"
    " \"intermediate_size\": 128, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 32, \"vocab_size\": 512, \"sliding_window\": 8, \"query_pre_attn_scalar\": 32,"
    " \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"],"
    " \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0},"
    "  \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0}}, \"dtype\": \"bfloat16\"}";

static void test_gemma(void) {
    model_config c;
    CHECK_OK(hf_config_parse(GEMMA2, NULL, "config.json", &c));
    CHECK(c.act == BE_ACT_GELU_TANH && c.norm == NORM_STYLE_RMS_OFFSET && c.norm_layout == NORM_LAYOUT_SANDWICH && c.embed_scale_sqrt);
    CHECK(c.head_dim == 256 && c.num_kv_heads == 4 && c.tie_word_embeddings && !c.qk_norm);
    CHECK_NEAR(c.attn_scale, 1.0 / 16.0, 1e-12);
    CHECK(c.attn_softcap == 50.0 && c.final_softcap == 30.0 && c.num_ropes == 1);
    CHECK(c.layers[0].sliding_window == 4096 && c.layers[1].sliding_window == 0 && c.layers[24].sliding_window == 4096 &&
          c.layers[25].sliding_window == 0);
    CHECK(c.num_eos == 2 && c.eos_token_ids[1] == 107 && !strcmp(c.weight_prefix, "model."));

    CHECK_OK(hf_config_parse(GEMMA3_MM, NULL, "config.json", &c));
    CHECK(c.num_layers == 34 && c.hidden_size == 2560 && c.vocab_size == 262208 && c.qk_norm);
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0 && c.torch_dtype == DTYPE_BF16);
    CHECK(c.num_eos == 2 && c.eos_token_ids[1] == 106);
    CHECK(c.num_ropes == 2 && c.ropes[0].type == ROPE_LINEAR && c.ropes[0].factor == 8.0 && c.ropes[0].theta == 1e6 &&
          c.ropes[1].type == ROPE_DEFAULT && c.ropes[1].theta == 1e4);
    /* sliding_window_pattern 6: layers 5, 11, ... global, on the global RoPE table */
    CHECK(c.layers[0].sliding_window == 1024 && c.layers[0].rope == 1 && c.layers[5].sliding_window == 0 &&
          c.layers[5].rope == 0 && c.layers[6].sliding_window == 1024 && c.layers[33].sliding_window == 1024);

    CHECK_OK(hf_config_parse(GEMMA3_V5, NULL, "config.json", &c));
    CHECK(c.ropes[0].theta == 1e6 && c.ropes[1].theta == 1e4 && c.layers[0].rope == 1 && c.layers[1].rope == 0);
    CHECK(c.layers[2].sliding_window == 8 && c.layers[3].sliding_window == 0);
    CHECK_NEAR(c.attn_scale, 1.0 / sqrt(32.0), 1e-12);

    /* refused: an unknown activation, a layer type we do not run, a multimodal config without text_config */
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", GEMMA2);
    char *a = strstr(buf, "\"hidden_activation\": \"gelu_pytorch_tanh\"");
    memcpy(a + strlen("\"hidden_activation\": \""), "xielu_pytorch_tan", strlen("xielu_pytorch_tan")); /* same length */
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "hidden_activation", "xielu");
    EXPECT_ERR(hf_config_parse("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"vision_config\": {}}", NULL,
                               "config.json", &c),
               VLLM_ERR_FORMAT, "text_config", "Gemma3ForConditionalGeneration");
}

/* microsoft/Phi-3.5-mini-instruct's layout (transformers 4.x): rope_scaling "longrope" with 48 factors,
 * original_max_position_embeddings at the top level */
static void test_phi3_glm4_opt(void) {
    model_config c;
    char buf[8192], sf[2048] = "", lf[2048] = "";
    for (int i = 0; i < 48; i++) {
        size_t n = strlen(sf), m = strlen(lf);
        snprintf(sf + n, sizeof sf - n, "%s%.2f", i ? ", " : "", 1.0 + 0.01 * i);
        snprintf(lf + m, sizeof lf - m, "%s%.2f", i ? ", " : "", 1.0 + 0.5 * i);
    }
    snprintf(buf, sizeof buf,
             "{\"architectures\": [\"Phi3ForCausalLM\"], \"hidden_size\": 3072, \"intermediate_size\": 8192,"
             " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 32,"
             " \"vocab_size\": 32064, \"max_position_embeddings\": 131072,"
             " \"original_max_position_embeddings\": 4096, \"rope_theta\": 10000.0, \"sliding_window\": 262144,"
             " \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [%s], \"long_factor\": [%s]}}",
             sf, lf);
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.rope.type == ROPE_LONGROPE && c.rope.num_factors == 48 && c.rope.original_max_position == 4096);
    CHECK_NEAR(c.rope.factor, 32.0, 0);
    CHECK_NEAR(c.rope.attention_factor, sqrt(1.0 + log(32.0) / log(4096.0)), 1e-12);
    CHECK_NEAR(c.rope.long_factor[47], 1.0 + 0.5 * 47, 1e-5);
    CHECK(c.names && c.names->qkv && c.names->gate_up && !c.attention_bias && c.layers[31].sliding_window == 262144);
    CHECK(!c.tie_word_embeddings && c.rms_norm_eps == 1e-5);

    /* GLM-4: partial_rotary_factor 0.5 and attention_bias true by default, interleaved RoPE, sandwich */
    CHECK_OK(hf_config_parse("{\"architectures\": [\"Glm4ForCausalLM\"], \"hidden_size\": 4096,"
                             " \"intermediate_size\": 13696, \"num_hidden_layers\": 40, \"num_attention_heads\": 32,"
                             " \"vocab_size\": 151552}", NULL, "config.json", &c));
    CHECK(c.rope.partial_rotary_factor == 0.5 && c.attention_bias && !c.o_bias && c.rope_interleaved);
    CHECK(c.num_kv_heads == 2 && c.head_dim == 128 && c.norm_layout == NORM_LAYOUT_SANDWICH);

    /* OPT: ffn_dim, LayerNorm, learned positions, no RoPE; the post-LN OPT-350m refused */
    const char *opt = "{\"architectures\": [\"OPTForCausalLM\"], \"hidden_size\": 768, \"ffn_dim\": 3072,"
                      " \"num_hidden_layers\": 12, \"num_attention_heads\": 12, \"vocab_size\": 50272%s}";
    snprintf(buf, sizeof buf, opt, "");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.intermediate_size == 3072 && c.norm == NORM_STYLE_LAYER && c.rope.type == ROPE_NONE &&
          c.pos_embed_offset == 2 && c.tie_word_embeddings && c.act == BE_ACT_RELU && c.mlp_bias &&
          c.layers[0].mlp == MLP_DENSE_PLAIN && !strcmp(c.weight_prefix, "model.decoder."));
    snprintf(buf, sizeof buf, opt, ", \"do_layer_norm_before\": false, \"word_embed_proj_dim\": 512");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "do_layer_norm_before", "");
    snprintf(buf, sizeof buf, opt, ", \"word_embed_proj_dim\": 512");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "word_embed_proj_dim 512", "");
    snprintf(buf, sizeof buf, opt, ", \"activation_function\": \"tanh\"");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "activation_function", "tanh");
}

/* YaRN: Qwen3's recommended long-context setting (4.x rope_scaling) and DeepSeek's mscale pair (5.x) */
static void test_yarn_config(void) {
    model_config c;
    char buf[2048];
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.rope.type == ROPE_YARN && c.rope.factor == 4.0 && c.rope.original_max_position == 32768 && c.rope.truncate);
    CHECK(c.rope.beta_fast == 32.0 && c.rope.beta_slow == 1.0);
    CHECK_NEAR(c.rope.attention_factor, 0.1 * log(4.0) + 1.0, 1e-12);
    snprintf(buf, sizeof buf, MINI_FMT,
             ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000, \"factor\": 40,"
             " \"original_max_position_embeddings\": 4096, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,"
             " \"beta_fast\": 32, \"beta_slow\": 1, \"truncate\": false}");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.rope.type == ROPE_YARN && c.rope.factor == 40.0 && !c.rope.truncate);
    CHECK_NEAR(c.rope.attention_factor, 1.0, 1e-12); /* get_mscale(40, 1) / get_mscale(40, 1) */
}

/* Qwen/Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B, Mixtral-8x7B shapes */
static void test_moe(void) {
    model_config c;
    char buf[4096];
    const char *q3 = "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"hidden_size\": 2048, \"intermediate_size\": 6144,"
                     " \"num_hidden_layers\": 48, \"num_attention_heads\": 32, \"num_key_value_heads\": 4,"
                     " \"head_dim\": 128, \"vocab_size\": 151936, \"moe_intermediate_size\": 768,"
                     " \"num_experts\": 128, \"num_experts_per_tok\": 8, \"norm_topk_prob\": true%s}";
    snprintf(buf, sizeof buf, q3, ", \"decoder_sparse_step\": 1, \"mlp_only_layers\": []");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 128 && c.moe.top_k == 8 && c.moe.intermediate_size == 768 && c.moe.renormalize &&
          c.moe.shared_intermediate_size == 0 && c.qk_norm && c.layers[0].mlp == MLP_MOE && c.layers[47].mlp == MLP_MOE);
    snprintf(buf, sizeof buf, q3, ", \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3]");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.layers[0].mlp == MLP_DENSE && c.layers[1].mlp == MLP_MOE && c.layers[3].mlp == MLP_DENSE &&
          c.layers[5].mlp == MLP_MOE);
    snprintf(buf, sizeof buf, q3, ", \"mlp_only_layers\": [48]");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "mlp_only_layers[0]", "below 48");
    snprintf(buf, sizeof buf, q3, ", \"num_experts_per_tok\": 129");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "num_experts_per_tok 129", "");
    snprintf(buf, sizeof buf, q3, ", \"num_local_experts\": 128"); /* transformers 5 saves this name */
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 128);
    snprintf(buf, sizeof buf, q3, ", \"num_local_experts\": 16");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "num_experts 128 and num_local_experts 16",
               "");
    CHECK_OK(hf_config_parse("{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"hidden_size\": 64,"
                             " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                             " \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 512,"
                             " \"moe_intermediate_size\": 32, \"num_local_experts\": 16, \"num_experts_per_tok\": 4}",
                             NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 16 && c.moe.top_k == 4);
    snprintf(buf, sizeof buf, q3, ", \"use_sliding_window\": true");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "use_sliding_window", "");

    CHECK_OK(hf_config_parse("{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"hidden_size\": 2048,"
                             " \"intermediate_size\": 5632, \"num_hidden_layers\": 24, \"num_attention_heads\": 16,"
                             " \"vocab_size\": 151936}", NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 60 && c.moe.top_k == 4 && c.moe.intermediate_size == 1408 && !c.moe.renormalize &&
          c.moe.shared_intermediate_size == 5632 && c.attention_bias && !c.o_bias && c.num_kv_heads == 16);

    CHECK_OK(hf_config_parse("{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 4096,"
                             " \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
                             " \"num_key_value_heads\": 8, \"vocab_size\": 32000, \"num_local_experts\": 8,"
                             " \"num_experts_per_tok\": 2, \"rope_theta\": 1e6, \"sliding_window\": null}",
                             NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 8 && c.moe.top_k == 2 && c.moe.intermediate_size == 14336 && c.moe.renormalize &&
          c.layers[31].mlp == MLP_MOE && c.layers[0].sliding_window == 0 && c.rms_norm_eps == 1e-5);
}

/* openai/gpt-oss-20b's config.json (MXFP4 experts), its transformers 5 spelling, defaults and refusals */
static void test_gptoss(void) {
    model_config c;
    char buf[8192], lt[1024] = "";
    for (int i = 0; i < 24; i++)
        snprintf(lt + strlen(lt), sizeof lt - strlen(lt), "%s\"%s\"", i ? ", " : "",
                 i % 2 ? "full_attention" : "sliding_attention");
    const char *fmt =
        "{\"architectures\": [\"GptOssForCausalLM\"], \"attention_bias\": true, \"attention_dropout\": 0.0,"
        " \"eos_token_id\": 200002, \"experts_per_token\": 4, \"head_dim\": 64, \"hidden_act\": \"silu\","
        " \"hidden_size\": 2880, \"initial_context_length\": 4096, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 2880, \"layer_types\": [%s], \"max_position_embeddings\": 131072,"
        " \"model_type\": \"gpt_oss\", \"num_attention_heads\": 64, \"num_experts_per_tok\": 4,"
        " \"num_hidden_layers\": 24, \"num_key_value_heads\": 8, \"num_local_experts\": 32,"
        " \"output_router_logits\": false, \"pad_token_id\": 199999,"
        " \"quantization_config\": {\"modules_to_not_convert\": [\"model.layers.*.self_attn\","
        " \"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"], \"quant_method\": \"%s\"},"
        " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 32.0,"
        " \"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", \"truncate\": false},"
        " \"rope_theta\": 150000, \"router_aux_loss_coef\": 0.9, \"sliding_window\": 128, \"swiglu_limit\": 7.0,"
        " \"tie_word_embeddings\": false, \"use_cache\": true, \"vocab_size\": 201088%s}";
    snprintf(buf, sizeof buf, fmt, lt, "mxfp4", "");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.moe.num_experts == 32 && c.moe.top_k == 4 && c.moe.intermediate_size == 2880 && c.moe.renormalize &&
          c.moe.router_bias && c.moe.expert_bias && c.moe.layout == MOE_LAYOUT_GPTOSS && c.moe.swiglu_limit == 7.0 &&
          c.moe.swiglu_alpha == 1.702 && c.act == BE_ACT_SWIGLU_OAI && c.attn_sinks);
    CHECK(c.attention_bias && c.o_bias && c.head_dim == 64 && c.num_kv_heads == 8 && c.rms_norm_eps == 1e-5 &&
          !c.tie_word_embeddings && c.eos_token_ids[0] == 200002 && c.pad_token_id == 199999);
    CHECK(c.layers[0].sliding_window == 128 && c.layers[1].sliding_window == 0 && c.layers[22].sliding_window == 128 &&
          c.layers[23].sliding_window == 0 && c.layers[5].mlp == MLP_MOE && c.layers[0].rope == 0);
    CHECK(c.rope.type == ROPE_YARN && c.rope.theta == 150000.0 && c.rope.factor == 32.0 && !c.rope.truncate &&
          c.rope.original_max_position == 4096 && c.rope.beta_fast == 32.0 && c.rope.beta_slow == 1.0 &&
          c.ropes[0].type == ROPE_YARN && c.num_ropes == 1);
    CHECK_NEAR(c.rope.attention_factor, 0.1 * log(32.0) + 1.0, 1e-12);
    CHECK(!strcmp(c.names->sinks, "self_attn.sinks") && !strcmp(c.names->router, "mlp.router"));

    /* another quantization, an unknown layer type, top k past the experts, swiglu_alpha given, a null window */
    snprintf(buf, sizeof buf, fmt, lt, "bitsandbytes", "");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "quant_method 'bitsandbytes'", "");
    char lt2[1024];
    snprintf(lt2, sizeof lt2, "%s", lt);
    memcpy(strstr(lt2, "full_attention"), "chunk", 5);
    snprintf(buf, sizeof buf, fmt, lt2, "mxfp4", "");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_UNSUPPORTED, "layer_types[1] 'chunkattention'",
               "");
    snprintf(buf, sizeof buf, fmt, lt, "mxfp4", ", \"num_local_experts\": 3");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "num_experts_per_tok 4",
               "num_local_experts 3");
    snprintf(buf, sizeof buf, fmt, lt, "mxfp4", ", \"swiglu_alpha\": 1.5, \"swiglu_limit\": 5");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.moe.swiglu_alpha == 1.5 && c.moe.swiglu_limit == 5.0);
    snprintf(buf, sizeof buf, fmt, lt, "mxfp4", ", \"swiglu_limit\": -1");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "swiglu_limit", "");
    snprintf(buf, sizeof buf, fmt, lt, "mxfp4", ", \"sliding_window\": null");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    CHECK(c.layers[0].sliding_window == 0 && c.layers[1].sliding_window == 0);
    /* MXFP4 is gpt-oss's only: Mixtral with it is refused */
    EXPECT_ERR(hf_config_parse("{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 64,"
                               " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                               " \"num_key_value_heads\": 4, \"vocab_size\": 100,"
                               " \"quantization_config\": {\"quant_method\": \"mxfp4\"}}",
                               NULL, "config.json", &c),
               VLLM_ERR_UNSUPPORTED, "quant_method 'mxfp4'", "");

    /* transformers 5's spelling: GptOssConfig's defaults (no layer_types, rope_parameters, no head_dim) */
    CHECK_OK(hf_config_parse("{\"architectures\": [\"GptOssForCausalLM\"], \"hidden_size\": 64,"
                             " \"intermediate_size\": 32, \"num_hidden_layers\": 3, \"num_attention_heads\": 8,"
                             " \"vocab_size\": 100, \"num_local_experts\": 4, \"num_experts_per_tok\": 2,"
                             " \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 150000.0, \"factor\": 32.0,"
                             " \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"truncate\": false,"
                             " \"original_max_position_embeddings\": 4096}}", NULL, "config.json", &c));
    CHECK(c.head_dim == 64 && c.num_kv_heads == 8 && c.layers[0].sliding_window == 128 &&
          c.layers[1].sliding_window == 0 && c.layers[2].sliding_window == 128 && c.rope.type == ROPE_YARN &&
          c.rope.theta == 150000.0 && !c.rope.truncate && c.max_position_embeddings == 131072);
    /* nothing about rope at all: GptOssConfig's default rope_parameters and theta */
    CHECK_OK(hf_config_parse("{\"architectures\": [\"GptOssForCausalLM\"], \"hidden_size\": 64,"
                             " \"intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                             " \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 100}",
                             NULL, "config.json", &c));
    CHECK(c.rope.type == ROPE_YARN && c.rope.theta == 150000.0 && c.rope.factor == 32.0 && !c.rope.truncate &&
          c.rope.original_max_position == 4096 && c.ropes[0].type == ROPE_YARN && c.moe.num_experts == 128 &&
          c.moe.top_k == 4);
}

/* Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: linear-attention layers with full attention every fourth,
 * Qwen2-MoE's sparse block with a shared expert, the gated attention output, (1 + w) norms, partial rotary */
static void test_qwen3_next(void) {
    model_config c;
    char buf[4096];
    const char *q = "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"attention_bias\": false, \"bos_token_id\": 151643,"
                    " \"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"full_attention_interval\": 4,"
                    " \"head_dim\": 256, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"intermediate_size\": 5120,"
                    " \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,"
                    " \"linear_num_value_heads\": 32, \"linear_value_head_dim\": 128, \"max_position_embeddings\": 262144,"
                    " \"mlp_only_layers\": [], \"model_type\": \"qwen3_next\", \"moe_intermediate_size\": 512,"
                    " \"norm_topk_prob\": true, \"num_attention_heads\": 16, \"num_experts\": 512,"
                    " \"num_experts_per_tok\": 10, \"num_hidden_layers\": 48, \"num_key_value_heads\": 2,"
                    " \"partial_rotary_factor\": 0.25, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null,"
                    " \"rope_theta\": 10000000, \"shared_expert_intermediate_size\": 512, \"tie_word_embeddings\": false,"
                    " \"torch_dtype\": \"bfloat16\", \"use_sliding_window\": false, \"vocab_size\": 151936%s}";
    snprintf(buf, sizeof buf, q, "");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    int linear = 0;
    for (int l = 0; l < 48; l++) {
        linear += c.layers[l].kind == LAYER_LINEAR_ATTENTION;
        CHECK(c.layers[l].kind == ((l + 1) % 4 ? LAYER_LINEAR_ATTENTION : LAYER_ATTENTION) && c.layers[l].mlp == MLP_MOE);
    }
    CHECK(linear == 36);
    CHECK(c.linear_attn.num_k_heads == 16 && c.linear_attn.num_v_heads == 32 && c.linear_attn.k_head_dim == 128 &&
          c.linear_attn.v_head_dim == 128 && c.linear_attn.conv_kernel == 4);
    CHECK(c.moe.num_experts == 512 && c.moe.top_k == 10 && c.moe.intermediate_size == 512 &&
          c.moe.shared_intermediate_size == 512 && c.moe.renormalize);
    CHECK(c.head_dim == 256 && c.num_kv_heads == 2 && c.qk_norm && c.attn_output_gate && !c.attention_bias &&
          c.norm == NORM_STYLE_RMS_OFFSET);
    CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
    CHECK_NEAR(c.rope.theta, 1e7, 0);
    /* the v5 spelling: layer_types listed, num_local_experts */
    CHECK_OK(hf_config_parse("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96,"
                             " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                             " \"head_dim\": 16, \"vocab_size\": 512, \"num_local_experts\": 8, \"num_experts_per_tok\": 2,"
                             " \"layer_types\": [\"full_attention\", \"linear_attention\", \"full_attention\"],"
                             " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 16,"
                             " \"linear_value_head_dim\": 16}",
                             NULL, "config.json", &c));
    CHECK(c.layers[0].kind == LAYER_ATTENTION && c.layers[1].kind == LAYER_LINEAR_ATTENTION &&
          c.layers[2].kind == LAYER_ATTENTION && c.moe.num_experts == 8 && c.linear_attn.conv_kernel == 4);
    CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0); /* the family's default */
    snprintf(buf, sizeof buf, q, ", \"linear_num_value_heads\": 24");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "linear_num_value_heads 24", "");
    snprintf(buf, sizeof buf, q, ", \"layer_types\": [\"mamba\"]");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "layer_types", "48 layers");
}

/* Qwen/Qwen3.5-35B-A3B's config.json shape (Qwen3_5MoeForConditionalGeneration: text_config, a vision
 * tower, the multimodal RoPE's sections), Qwen3.5 dense as a text model, and the refusals */
static void test_qwen3_5(void) {
    model_config c;
    char buf[4096];
    const char *q = "{\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], \"model_type\": \"qwen3_5_moe\","
                    " \"image_token_id\": 248056, \"tie_word_embeddings\": false, \"text_config\": {"
                    " \"attention_bias\": false, \"bos_token_id\": 248044, \"eos_token_id\": 248044, \"dtype\": \"bfloat16\","
                    " \"full_attention_interval\": 4, \"head_dim\": 256, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
                    " \"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,"
                    " \"linear_num_value_heads\": 32, \"linear_value_head_dim\": 128, \"max_position_embeddings\": 262144,"
                    " \"model_type\": \"qwen3_5_moe_text\", \"moe_intermediate_size\": 512, \"num_attention_heads\": 16,"
                    " \"num_experts\": 256, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 40, \"num_key_value_heads\": 2,"
                    " \"rms_norm_eps\": 1e-06, \"shared_expert_intermediate_size\": 512, \"vocab_size\": 248320,"
                    " \"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": [11, 11, 10%s],"
                    " \"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25}%s},"
                    " \"vision_config\": {\"depth\": 27, \"hidden_size\": 1152}}";
    snprintf(buf, sizeof buf, q, "", "");
    CHECK_OK(hf_config_parse(buf, NULL, "config.json", &c));
    for (int l = 0; l < 40; l++)
        CHECK(c.layers[l].kind == ((l + 1) % 4 ? LAYER_LINEAR_ATTENTION : LAYER_ATTENTION) && c.layers[l].mlp == MLP_MOE);
    CHECK(c.linear_attn.split_proj && c.linear_attn.num_k_heads == 16 && c.linear_attn.num_v_heads == 32);
    CHECK(c.moe.num_experts == 256 && c.moe.top_k == 8 && c.moe.intermediate_size == 512 &&
          c.moe.shared_intermediate_size == 512 && c.moe.renormalize);
    CHECK(c.vocab_size == 248320 && c.hidden_size == 2048 && c.qk_norm && c.attn_output_gate &&
          c.norm == NORM_STYLE_RMS_OFFSET && c.eos_token_ids[0] == 248044);
    CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
    CHECK_NEAR(c.rope.theta, 1e7, 0);
    /* the sections must cover the 32 frequencies of the 64 rotary dimensions */
    snprintf(buf, sizeof buf, q, ", 4", "");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "mrope_section sums to 36", "");
    snprintf(buf, sizeof buf, q, "", ", \"layer_types\": [\"sliding_attention\"]");
    EXPECT_ERR(hf_config_parse(buf, NULL, "config.json", &c), VLLM_ERR_FORMAT, "layer_types", "40 layers");
    /* Qwen3.5 dense, the text model on its own: dense MLPs of intermediate_size */
    CHECK_OK(hf_config_parse("{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96,"
                             " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"head_dim\": 32, \"vocab_size\": 512,"
                             " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 16,"
                             " \"linear_value_head_dim\": 16, \"num_experts\": 8}",
                             NULL, "config.json", &c));
    for (int l = 0; l < 4; l++)
        CHECK(c.layers[l].kind == (l == 3 ? LAYER_ATTENTION : LAYER_LINEAR_ATTENTION) && c.layers[l].mlp == MLP_DENSE);
    CHECK(c.intermediate_size == 96 && c.linear_attn.split_proj && c.num_kv_heads == 2);
    /* ConditionalGeneration without its text_config */
    EXPECT_ERR(hf_config_parse("{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"hidden_size\": 64}", NULL,
                               "config.json", &c),
               VLLM_ERR_FORMAT, "text_config missing", "");
}

int main(void) {
    test_gptoss();
    test_qwen3_5();
    test_llama();
    test_gemma();
    test_phi3_glm4_opt();
    test_moe();
    test_qwen3_next();
    test_yarn_config();
    test_qwen();
    test_mistral_v5();
    test_family_defaults();
    test_quant();
    test_errors();
    test_load();
    TEST_END();
}
