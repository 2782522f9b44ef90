/* struct_sizes.c: prints sizeof / offsetof of vllm.h's public structs, for test_vllmc.py to compare with ctypes. */
#include <stddef.h>
#include <stdio.h>

#include "vllm.h"

#define S(T) printf("%s %zu\n", #T, sizeof(T))
#define F(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
    S(vllm_engine_options);
    F(vllm_engine_options, device), F(vllm_engine_options, num_threads), F(vllm_engine_options, block_size);
    F(vllm_engine_options, num_kv_blocks), F(vllm_engine_options, kv_cache_memory);
    F(vllm_engine_options, enforce_eager), F(vllm_engine_options, gpu_memory_utilization);
    F(vllm_engine_options, max_model_len), F(vllm_engine_options, max_num_seqs);
    F(vllm_engine_options, max_num_batched_tokens), F(vllm_engine_options, enable_prefix_caching);
    F(vllm_engine_options, load_format), F(vllm_engine_options, seed), F(vllm_engine_options, tokenizer);
    F(vllm_engine_options, mamba_cache_dtype), F(vllm_engine_options, mamba_ssm_cache_dtype);
    F(vllm_engine_options, kv_cache_dtype), F(vllm_engine_options, runner), F(vllm_engine_options, pooling_type);
    F(vllm_engine_options, pooler_normalize), F(vllm_engine_options, revision);
    F(vllm_engine_options, tokenizer_revision);
    F(vllm_engine_options, tensor_parallel_size), F(vllm_engine_options, data_parallel_size),
        F(vllm_engine_options, nnodes), F(vllm_engine_options, node_rank), F(vllm_engine_options, master_addr),
        F(vllm_engine_options, master_port);

    S(vllm_engine_info);
    F(vllm_engine_info, architecture), F(vllm_engine_info, vocab_size), F(vllm_engine_info, max_model_len);
    F(vllm_engine_info, block_size), F(vllm_engine_info, num_kv_blocks), F(vllm_engine_info, max_num_seqs);
    F(vllm_engine_info, max_num_batched_tokens), F(vllm_engine_info, runner), F(vllm_engine_info, embedding_size);
    F(vllm_engine_info, pooling_type), F(vllm_engine_info, pooling_normalize), F(vllm_engine_info, is_matryoshka);
    F(vllm_engine_info, matryoshka_dimensions), F(vllm_engine_info, num_matryoshka_dimensions);

    S(vllm_engine_stats);
    F(vllm_engine_stats, num_running), F(vllm_engine_stats, num_waiting), F(vllm_engine_stats, num_free_kv_blocks);
    F(vllm_engine_stats, kv_cache_usage), F(vllm_engine_stats, prefix_cache_queries);
    F(vllm_engine_stats, prefix_cache_hits), F(vllm_engine_stats, num_preemptions);
    F(vllm_engine_stats, prompt_tokens), F(vllm_engine_stats, generation_tokens), F(vllm_engine_stats, steps);

    S(vllm_structured_outputs);
    F(vllm_structured_outputs, json), F(vllm_structured_outputs, json_object), F(vllm_structured_outputs, regex);
    F(vllm_structured_outputs, choice), F(vllm_structured_outputs, num_choice), F(vllm_structured_outputs, grammar);
    F(vllm_structured_outputs, disable_any_whitespace), F(vllm_structured_outputs, reasoning_start);
    F(vllm_structured_outputs, reasoning_end);

    S(vllm_sampling_params);
    F(vllm_sampling_params, max_tokens), F(vllm_sampling_params, temperature), F(vllm_sampling_params, top_k);
    F(vllm_sampling_params, top_p), F(vllm_sampling_params, min_p), F(vllm_sampling_params, has_seed);
    F(vllm_sampling_params, seed), F(vllm_sampling_params, ignore_eos), F(vllm_sampling_params, min_tokens);
    F(vllm_sampling_params, skip_special_tokens), F(vllm_sampling_params, n);
    F(vllm_sampling_params, presence_penalty), F(vllm_sampling_params, frequency_penalty);
    F(vllm_sampling_params, repetition_penalty), F(vllm_sampling_params, logit_bias_ids);
    F(vllm_sampling_params, logit_bias_values), F(vllm_sampling_params, num_logit_bias);
    F(vllm_sampling_params, allowed_token_ids), F(vllm_sampling_params, num_allowed_token_ids);
    F(vllm_sampling_params, bad_words), F(vllm_sampling_params, num_bad_words), F(vllm_sampling_params, stop);
    F(vllm_sampling_params, num_stop), F(vllm_sampling_params, include_stop_str_in_output);
    F(vllm_sampling_params, stop_token_ids), F(vllm_sampling_params, num_stop_token_ids);
    F(vllm_sampling_params, logprobs), F(vllm_sampling_params, prompt_logprobs);
    F(vllm_sampling_params, structured_outputs);

    S(vllm_prompt);
    F(vllm_prompt, text), F(vllm_prompt, token_ids), F(vllm_prompt, num_token_ids);

    S(vllm_completion);
    F(vllm_completion, prompt_token_ids), F(vllm_completion, num_prompt_tokens), F(vllm_completion, token_ids);
    F(vllm_completion, logprobs), F(vllm_completion, num_tokens), F(vllm_completion, top_logprob_ids);
    F(vllm_completion, top_logprobs), F(vllm_completion, num_top_logprobs), F(vllm_completion, text);
    F(vllm_completion, stop_reason), F(vllm_completion, finish_reason), F(vllm_completion, prompt_logprobs);
    F(vllm_completion, prompt_top_logprob_ids), F(vllm_completion, prompt_top_logprobs);
    F(vllm_completion, num_prompt_top_logprobs), F(vllm_completion, index), F(vllm_completion, siblings);
    F(vllm_completion, num_siblings);

    S(vllm_generate_stats);
    F(vllm_generate_stats, prompt_tokens), F(vllm_generate_stats, generated_tokens);
    F(vllm_generate_stats, prefill_seconds), F(vllm_generate_stats, decode_seconds), F(vllm_generate_stats, steps);
    F(vllm_generate_stats, preemptions), F(vllm_generate_stats, structured_masks);
    F(vllm_generate_stats, structured_mask_seconds), F(vllm_generate_stats, structured_mask_p50_us);
    F(vllm_generate_stats, structured_mask_p99_us), F(vllm_generate_stats, structured_advance_seconds);

    S(vllm_pooling_params);
    F(vllm_pooling_params, dimensions), F(vllm_pooling_params, normalize);

    S(vllm_embedding);
    F(vllm_embedding, data), F(vllm_embedding, dim), F(vllm_embedding, num_prompt_tokens);

    S(vllm_request_output);
    F(vllm_request_output, request_id), F(vllm_request_output, index), F(vllm_request_output, new_token_ids);
    F(vllm_request_output, new_logprobs), F(vllm_request_output, top_logprob_ids);
    F(vllm_request_output, top_logprobs), F(vllm_request_output, num_top_logprobs);
    F(vllm_request_output, num_new_tokens), F(vllm_request_output, new_text), F(vllm_request_output, new_text_len);
    F(vllm_request_output, finish_reason), F(vllm_request_output, stop_reason);
    F(vllm_request_output, prompt_tokens), F(vllm_request_output, completion_tokens);
    F(vllm_request_output, cached_prompt_tokens), F(vllm_request_output, prompt_logprobs);
    F(vllm_request_output, prompt_top_logprob_ids), F(vllm_request_output, prompt_top_logprobs);
    F(vllm_request_output, num_prompt_top_logprobs), F(vllm_request_output, embedding);
    F(vllm_request_output, embedding_dim);

    S(vllm_chat_template_options);
    F(vllm_chat_template_options, chat_template), F(vllm_chat_template_options, add_generation_prompt);
    F(vllm_chat_template_options, continue_final_message), F(vllm_chat_template_options, tools_json);
    F(vllm_chat_template_options, chat_template_kwargs_json);
    return 0;
}
