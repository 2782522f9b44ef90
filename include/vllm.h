/*
 * vllm.h: the public C API of libvllmc.
 *
 * Opaque handles with create/free pairs, option structs filled by
 * *_default_*() functions, and a status code from every fallible call.
 * On failure, vllm_last_error() gives a one-line message (thread-local)
 * naming the file, field or request concerned.
 *
 * Compiles as C11 and as C++.
 */
#ifndef VLLM_H
#define VLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VLLM_VERSION "0.1.0"

/* Status codes: 0 is success, every error is negative. */
typedef enum vllm_status {
    VLLM_STREAM_TIMEOUT = 1,    /* not an error: vllm_stream_next's timeout passed without a chunk */
    VLLM_OK = 0,
    VLLM_ERR_INVALID_ARG = -1,  /* a bad parameter or option value */
    VLLM_ERR_IO = -2,           /* a file could not be opened, read or mapped */
    VLLM_ERR_FORMAT = -3,       /* a file is malformed (bad JSON, bad header, wrong shape) */
    VLLM_ERR_UNSUPPORTED = -4,  /* valid but not supported (architecture, dtype, feature) */
    VLLM_ERR_NO_MEMORY = -5,    /* an allocation failed (host or device) */
    VLLM_ERR_BACKEND = -6,      /* the compute backend failed */
    VLLM_ERR_TOO_LONG = -7,     /* a prompt or sequence exceeds the model's limits */
    VLLM_ERR_NOT_FOUND = -8,    /* a named thing (tensor, request, token) does not exist */
    VLLM_ERR_INTERNAL = -9,     /* a bug: an invariant did not hold */
} vllm_status;

/* Message of the calling thread's last failure ("" if none). */
const char *vllm_last_error(void);
/* Short constant name of a status ("ok", "invalid argument", ...). */
const char *vllm_status_str(vllm_status status);

/* ------------------------------------------------------------------ */
/* Engine                                                              */
/* ------------------------------------------------------------------ */

typedef struct vllm_engine vllm_engine;

typedef enum vllm_load_format {
    VLLM_LOAD_AUTO = 0,   /* safetensors from the model folder */
    VLLM_LOAD_DUMMY = 1,  /* random weights from config.json alone (benchmarks) */
} vllm_load_format;

/* What the engine runs the model for (vLLM's --runner). */
typedef enum vllm_runner {
    VLLM_RUNNER_AUTO = 0,        /* pooling when the folder has a sentence-transformers modules.json with a
                                    Pooling module, or when architectures[0] is a *Model (no LM head:
                                    Qwen3Model, MistralModel, ...) that names a supported *ForCausalLM;
                                    else generate (vLLM's _get_default_runner_type) */
    VLLM_RUNNER_GENERATE = 1,    /* text generation: vllm_generate, add_request */
    VLLM_RUNNER_POOLING = 2,     /* embeddings (vLLM's --runner pooling, a causal LM converted with
                                    --convert embed): vllm_embed, add_pooling_request; the LM head is not
                                    loaded and generation is refused */
} vllm_runner;

/* How a pooling engine pools the final-normed hidden states of a prompt (vLLM's seq_pooling_type). */
typedef enum vllm_pooling_type {
    VLLM_POOLING_AUTO = 0,       /* the sentence-transformers 1_Pooling config, else LAST */
    VLLM_POOLING_LAST = 1,       /* the last prompt token's row (vLLM's default for causal LMs) */
    VLLM_POOLING_MEAN = 2,       /* the mean over every prompt token's row */
    VLLM_POOLING_CLS = 3,        /* the first token's row */
} vllm_pooling_type;

typedef struct vllm_engine_options {
    const char *device;          /* "cpu" (default) or "cuda" */
    int num_threads;             /* CPU worker threads; 0 = all cores */
    int block_size;              /* tokens per KV cache block (default 16) */
    int num_kv_blocks;           /* KV cache blocks; 0 = sized from kv_cache_memory */
    size_t kv_cache_memory;      /* bytes for the KV cache when num_kv_blocks is 0; 0 = auto:
                                    2 GiB on the CPU, gpu_memory_utilization on a GPU */
    bool enforce_eager;          /* GPU: run decode steps op by op instead of replaying recorded
                                    CUDA graphs (default false) */
    float gpu_memory_utilization; /* GPU: fraction of the device's memory this engine may use for
                                     weights, activations and KV cache (default 0.9, as vLLM) */
    int max_model_len;           /* 0 = the model's max_position_embeddings */
    int max_num_seqs;            /* sequences running at once (default 256) */
    int max_num_batched_tokens;  /* tokens per step (default 8192) */
    bool enable_prefix_caching;  /* share KV blocks of common prompt prefixes (default true) */
    vllm_load_format load_format;
    uint64_t seed;               /* seed for dummy weights and unseeded sampling */
    const char *tokenizer;       /* a folder (tokenizer.json) or a GGUF file whose vocabulary and chat template
                                  * replace the model's own (vLLM's --tokenizer); NULL: the model's */
    const char *mamba_cache_dtype;     /* hybrid (linear-attention) models' conv and recurrent state pools:
                                          "auto" (NULL: the activation dtype, BF16 on a GPU, F32 on the CPU),
                                          "float32", "bfloat16" or "float16" (vLLM's --mamba-cache-dtype) */
    const char *mamba_ssm_cache_dtype; /* the recurrent state's alone: "auto" (NULL: mamba_cache_dtype's) or
                                          as above (vLLM's --mamba-ssm-cache-dtype) */
    const char *kv_cache_dtype;  /* the KV cache's: "auto" (NULL: the backend's, F32 on the CPU, BF16 on a GPU),
                                    "fp8" or "fp8_e4m3" (E4M3 bytes, each layer's k_scale / v_scale from the
                                    checkpoint, 1 where it has none: vLLM's --kv-cache-dtype) */
    vllm_runner runner;          /* generate or pooling (default auto, as vLLM's --runner auto) */
    vllm_pooling_type pooling_type; /* pooling runner: vLLM's --pooler-config pooling_type (default auto) */
    int pooler_normalize;        /* pooling runner: L2-normalise embeddings by default (vLLM's --pooler-config
                                    use_activation / normalize): 0 (default) = as the sentence-transformers
                                    config says (a Normalize module), else yes; > 0 yes; < 0 no */
    const char *revision;        /* a Hugging Face model id's branch, tag or commit (vLLM's --revision; NULL:
                                    "main"); ignored for a local folder or file */
    const char *tokenizer_revision; /* the same for a `tokenizer` given as a Hugging Face id (NULL: revision's
                                       when the tokenizer is the model's repository, else "main") */
    int tensor_parallel_size;    /* ranks the model is split over (vLLM's --tensor-parallel-size; 0 or 1: none).
                                    Each rank is a thread with its own backend of `device`, its shard of the
                                    weights (heads, KV heads, the MLP width) and of the KV cache; one scheduler
                                    and sampler. The CPU runs it (num_threads each rank; 0: the cores / the
                                    ranks of this host), CUDA over NCCL (GPU device_id + the rank's index on its
                                    host; not yet run on GPUs); over several hosts with nnodes below; attention
                                    and MoE families of float checkpoints so far, others refused naming why */
    int data_parallel_size;      /* engine replicas behind the thread-safe front (vLLM's --data-parallel-size;
                                    0 or 1: one). vllm_async_engine_create loads N replicas, each with its own
                                    engine thread, scheduler and KV cache: on a GPU replica r takes ordinals
                                    r * tp .. (r + 1) * tp - 1; on the CPU each gets the cores / N (num_threads
                                    0). A request goes to the replica holding the fewest (ties: in turn);
                                    vllm_stream_engine says which. vllm_engine_create refuses N > 1 */
    int nnodes;                  /* hosts the tensor_parallel_size ranks are spread over (vLLM's / torchrun's
                                    --nnodes; 0 or 1: this one), each taking tensor_parallel_size / nnodes
                                    consecutive ranks (a whole multiple is required). Node 0 runs the engine
                                    (scheduler, sampler, rank 0: vllm_engine_create / vllm_async_engine_create);
                                    every other node runs vllm_node_run with the same options but its node_rank.
                                    The CPU's collectives travel over TCP (node 0 sums in rank order: the tokens of
                                    one host); GPU ranks bootstrap NCCL over it. data_parallel_size must be 1 */
    int node_rank;               /* this host's node, 0 .. nnodes - 1 (vLLM's --node-rank) */
    const char *master_addr;     /* node 0's address, which the other nodes connect to (vLLM's --master-addr;
                                    NULL: "127.0.0.1") */
    int master_port;             /* the TCP port node 0 listens on (vLLM's --master-port; 0: 29501). Node 0 waits
                                    for the others (and they for it) up to $VLLM_DIST_TIMEOUT seconds (600) */
} vllm_engine_options;

vllm_engine_options vllm_engine_default_options(void);

/* Loads the model: a folder (config.json, *.safetensors, tokenizer files), a GGUF file, or a Hugging Face
 * model id ("org/name", "org/name:Q4_K_M" for one GGUF file of the repository) resolved from the Hugging
 * Face cache ($HF_HUB_CACHE, else $HF_HOME/hub) and downloaded into it when files are missing (HF_TOKEN,
 * HF_ENDPOINT, HF_HUB_OFFLINE=1 as huggingface_hub). options->tokenizer may be an id too. */
vllm_status vllm_engine_create(const char *model_dir, const vllm_engine_options *options,
                               vllm_engine **out);
/* Several hosts (options->nnodes > 1, node_rank > 0): joins node 0 at master_addr:master_port, loads this node's
 * ranks of the model (options as node 0's: tensor_parallel_size, nnodes, device, load_format, seed, max_model_len,
 * kv_cache_dtype, runner must match, else node 0 refuses the node naming both) and runs the steps node 0's engine
 * sends until that engine is freed (VLLM_OK) or node 0 is lost (VLLM_ERR_BACKEND, naming why). vLLM's headless
 * nodes; `vllmc serve --node-rank N` (N > 0) calls it. */
vllm_status vllm_node_run(const char *model_dir, const vllm_engine_options *options);
/* VLLM_OK while the engine can run steps; VLLM_ERR_BACKEND naming why when it cannot any more (a tensor-parallel
 * group over several hosts that lost a node: every later step fails; restart the nodes). Any thread (vLLM's
 * check_health: `vllmc serve`'s GET /health answers 503 then). */
vllm_status vllm_engine_check_health(const vllm_engine *engine);
void vllm_engine_free(vllm_engine *engine);

/* True when the model folder had a tokenizer. */
bool vllm_engine_has_tokenizer(const vllm_engine *engine);

/* What the engine was built with (after defaults and KV sizing). */
typedef struct vllm_engine_info {
    const char *architecture;    /* config.json architectures[0] (owned by the engine) */
    int vocab_size;              /* logits per token */
    int max_model_len;           /* longest prompt + output, tokens */
    int block_size;              /* tokens per KV block */
    int num_kv_blocks;           /* blocks in the KV pool */
    int max_num_seqs;
    int max_num_batched_tokens;
    vllm_runner runner;          /* what the engine runs (auto resolved) */
    /* pooling runner (zero otherwise): the embedding's size (hidden_size), how prompts are pooled,
     * whether embeddings are L2-normalised by default, and Matryoshka support (config.json is_matryoshka,
     * or matryoshka_dimensions: then only those sizes may be asked for) */
    int embedding_size;
    vllm_pooling_type pooling_type;
    bool pooling_normalize;
    bool is_matryoshka;
    const int *matryoshka_dimensions; /* (num_matryoshka_dimensions), owned by the engine; NULL = any */
    size_t num_matryoshka_dimensions;
} vllm_engine_info;

void vllm_engine_get_info(const vllm_engine *engine, vllm_engine_info *out);

/* A snapshot of the engine's load and lifetime counters (vLLM's
 * SchedulerStats plus running totals), for metrics. */
typedef struct vllm_engine_stats {
    int num_running;             /* samples being run (scheduled with KV blocks) */
    int num_waiting;             /* samples queued, including preempted ones */
    int num_free_kv_blocks;      /* free blocks, cached-but-evictable ones included */
    double kv_cache_usage;       /* 1 - free / num_kv_blocks, in [0, 1] (vLLM's usage) */
    uint64_t prefix_cache_queries; /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_cache_hits;    /* of which served from it */
    uint64_t num_preemptions;    /* samples preempted for lack of KV blocks */
    uint64_t prompt_tokens;      /* prompt tokens computed by forward passes */
    uint64_t generation_tokens;  /* tokens sampled */
    uint64_t steps;              /* engine steps run */
} vllm_engine_stats;

void vllm_engine_get_stats(const vllm_engine *engine, vllm_engine_stats *out);

/* ------------------------------------------------------------------ */
/* Sampling                                                            */
/* ------------------------------------------------------------------ */

/* Structured outputs (vLLM's StructuredOutputsParams, with xgrammar's semantics): the output is constrained to
 * the language of at most one of these; all unset (the default) = unconstrained. The engine masks, at every
 * step, the tokens the constraint cannot take next (before logprobs and every other processor) and allows an
 * EOS only where the constraint is complete. Strings are copied by add_request. */
typedef struct vllm_structured_outputs {
    const char *json;             /* a JSON Schema (JSON text) */
    bool json_object;             /* any JSON object ({"type": "object"}) */
    const char *regex;            /* a regular expression the whole output matches */
    const char *const *choice;    /* (num_choice) the output is one of these strings */
    size_t num_choice;
    const char *grammar;          /* an EBNF grammar (xgrammar's GBNF dialect, root rule "root") */
    bool disable_any_whitespace;  /* json / json_object: no whitespace beyond ", " and ": " */
    /* Reasoning models (vLLM's structured outputs with a --reasoning-parser): the constraint starts after the
     * reasoning ends. Both are single tokens of the vocabulary (e.g. "<think>", "</think>"); the reasoning has
     * ended when the last of them in the prompt is the end, or once the end token is generated (that token
     * itself unconstrained). NULL: constrained from the first token. */
    const char *reasoning_start;
    const char *reasoning_end;
} vllm_structured_outputs;

typedef struct vllm_sampling_params {
    int max_tokens;        /* tokens to generate at most (default 16) */
    float temperature;     /* 0 = greedy (default 1.0) */
    int top_k;             /* 0 or -1 = off */
    float top_p;           /* 1.0 = off */
    float min_p;           /* 0 = off */
    bool has_seed;         /* use seed for this request */
    uint64_t seed;
    bool ignore_eos;       /* keep going past EOS */
    int min_tokens;        /* EOS and stop_token_ids suppressed before this many tokens */
    bool skip_special_tokens; /* drop special tokens from text (default true) */
    int n;                 /* completions per prompt (default 1): n independent samples of the same
                              prompt (the prompt's KV is shared through the prefix cache); with a
                              seed, sample i uses seed + i */
    float presence_penalty;   /* [-2, 2]: subtract from logits of tokens already generated */
    float frequency_penalty;  /* [-2, 2]: subtract count * this from logits of generated tokens */
    float repetition_penalty; /* > 0 (1 = off): divide positive / multiply negative logits of
                                 tokens in the prompt or the output */
    const int32_t *logit_bias_ids;   /* (num_logit_bias) token ids */
    const float *logit_bias_values;  /* (num_logit_bias) added to their logits, in [-100, 100] */
    size_t num_logit_bias;
    const int32_t *allowed_token_ids; /* (num_allowed_token_ids) only these may be sampled; NULL = all */
    size_t num_allowed_token_ids;
    const char *const *bad_words;    /* (num_bad_words) words never generated (as token sequences) */
    size_t num_bad_words;
    const char *const *stop;         /* (num_stop) stop strings, matched across token boundaries */
    size_t num_stop;
    bool include_stop_str_in_output; /* keep the matched stop string in the text */
    const int32_t *stop_token_ids;   /* (num_stop_token_ids) extra ids that end generation */
    size_t num_stop_token_ids;
    int logprobs;          /* -1 = none; k >= 0: the sampled token's plus the top k per generated token */
    int prompt_logprobs;   /* -1 = none; k >= 0: per prompt token (from the second), its raw logprob
                              given the tokens before it, plus the top k; such a request does not
                              read the prefix cache (every prompt position is computed) */
    vllm_structured_outputs structured_outputs; /* none by default */
} vllm_sampling_params;

vllm_sampling_params vllm_sampling_default_params(void);
/* The defaults with the model's generation_config.json (temperature, top_p,
 * top_k) applied, as vLLM does. */
vllm_sampling_params vllm_engine_default_sampling(const vllm_engine *engine);
/* Checks ranges; VLLM_ERR_INVALID_ARG with a message naming the field. */
vllm_status vllm_sampling_params_validate(const vllm_sampling_params *params);

/* ------------------------------------------------------------------ */
/* Offline generation                                                  */
/* ------------------------------------------------------------------ */

typedef enum vllm_finish_reason {
    VLLM_FINISH_NONE = 0,    /* still running */
    VLLM_FINISH_STOP = 1,    /* EOS or a stop token */
    VLLM_FINISH_LENGTH = 2,  /* max_tokens or max_model_len */
    VLLM_FINISH_ABORT = 3,   /* aborted */
} vllm_finish_reason;

const char *vllm_finish_reason_str(vllm_finish_reason reason);

/* A prompt: text (tokenized with special tokens) or token ids. */
typedef struct vllm_prompt {
    const char *text;            /* NULL when token_ids is given */
    const int32_t *token_ids;
    size_t num_token_ids;
} vllm_prompt;

/* One finished request. Arrays are owned by the completion.
 * With n > 1, the entry of a prompt is its sample 0 and `siblings` holds
 * samples 1 .. n-1 (each a full completion with its own copy of the prompt
 * ids, index i in siblings[i - 1]); vllm_completions_free frees them too. */
typedef struct vllm_completion {
    int32_t *prompt_token_ids;
    size_t num_prompt_tokens;
    int32_t *token_ids;          /* generated ids */
    float *logprobs;             /* log p(token_ids[i]) under the model's raw distribution */
    size_t num_tokens;
    int32_t *top_logprob_ids;    /* (num_tokens, num_top_logprobs) when logprobs >= 0, else NULL */
    float *top_logprobs;
    int num_top_logprobs;
    char *text;                  /* decoded generated text; NULL without a tokenizer */
    char *stop_reason;           /* the stop string that ended it, or NULL */
    vllm_finish_reason finish_reason;
    /* prompt_logprobs >= 0 (sample 0 only, else NULL): prompt_logprobs[i] =
     * log p(prompt_token_ids[i] | prompt_token_ids[< i]) under the raw
     * distribution; [0] is NaN (the first token has none, None in vLLM) */
    float *prompt_logprobs;          /* (num_prompt_tokens) */
    int32_t *prompt_top_logprob_ids; /* (num_prompt_tokens, num_prompt_top_logprobs) when
                                        prompt_logprobs > 0, else NULL; row 0 is -1 */
    float *prompt_top_logprobs;      /* same shape; row 0 is NaN */
    int num_prompt_top_logprobs;
    size_t index;                    /* which of the prompt's n samples (vLLM's CompletionOutput.index) */
    struct vllm_completion *siblings; /* n > 1: samples 1 .. n-1 of the same prompt, else NULL */
    size_t num_siblings;             /* n - 1 */
} vllm_completion;

/* Timing of the last vllm_generate call. */
typedef struct vllm_generate_stats {
    size_t prompt_tokens;        /* tokens prefilled */
    size_t generated_tokens;     /* tokens sampled */
    double prefill_seconds;      /* time in steps that held prompt tokens */
    double decode_seconds;       /* time in decode-only steps */
    size_t steps;                /* engine steps (forward passes) */
    size_t preemptions;          /* requests preempted for lack of KV blocks */
    size_t structured_masks;     /* structured outputs: token masks computed (one per constrained row per step) */
    double structured_mask_seconds;  /* their time on the engine thread */
    double structured_mask_p50_us;   /* their median and 99th percentile, microseconds (a histogram's: within 10%) */
    double structured_mask_p99_us;
    double structured_advance_seconds; /* the grammars fed the sampled tokens, on the engine thread */
} vllm_generate_stats;

/* Runs all prompts together (continuous batching) until each finishes.
 * params is one struct for all prompts, or an array of num_prompts when
 * per_prompt_params is true. *out receives num_prompts completions in
 * input order (with n > 1, the other samples in each one's siblings);
 * free them with vllm_completions_free(*out, num_prompts). */
vllm_status vllm_generate(vllm_engine *engine, const vllm_prompt *prompts, size_t num_prompts,
                          const vllm_sampling_params *params, bool per_prompt_params,
                          vllm_completion **out, vllm_generate_stats *stats);
void vllm_completions_free(vllm_completion *completions, size_t num);

/* ------------------------------------------------------------------ */
/* Embeddings (vLLM's pooling runner: LLM.embed, PoolingParams)         */
/* ------------------------------------------------------------------ */

/* Per-request pooling parameters (vLLM's PoolingParams for the embed task). */
typedef struct vllm_pooling_params {
    int dimensions;              /* 0 (default): the whole embedding; else keep the first `dimensions`
                                    values, then normalise (Matryoshka models only, as vLLM: others refuse
                                    it; with matryoshka_dimensions, one of them; more than the embedding
                                    size keeps it whole) */
    int normalize;               /* 0 (default): the engine's (vllm_engine_info.pooling_normalize); > 0 / < 0:
                                    L2-normalise or not (vLLM's use_activation / normalize) */
} vllm_pooling_params;

vllm_pooling_params vllm_pooling_default_params(void);

/* One prompt's embedding. */
typedef struct vllm_embedding {
    float *data;                 /* (dim) float32 */
    size_t dim;
    size_t num_prompt_tokens;
} vllm_embedding;

/* Embeds every prompt (continuous batching, chunked prefill) on a pooling engine: the model's
 * final-normed hidden states pooled per the engine's pooling type, truncated to params->dimensions,
 * then L2-normalised (x / max(||x||, 1e-12), vLLM's F.normalize) when asked. params NULL = defaults.
 * A prompt may take max_model_len tokens (vLLM's embedding limit). *out receives num_prompts
 * embeddings in input order; free them with vllm_embeddings_free(*out, num_prompts). */
vllm_status vllm_embed(vllm_engine *engine, const vllm_prompt *prompts, size_t num_prompts,
                       const vllm_pooling_params *params, vllm_embedding **out);
void vllm_embeddings_free(vllm_embedding *embeddings, size_t num);

/* ------------------------------------------------------------------ */
/* Request-level engine (vLLM's LLMEngine: add_request / step / abort)  */
/* ------------------------------------------------------------------ */

/* What one step produced for one request. Pointers stay valid until the
 * next vllm_engine_step / vllm_engine_free on the same engine.
 * A request with n > 1 runs as n samples (vLLM's child requests
 * "{index}_{request_id}"): each reports its own outputs, under the
 * request's id and its index, and finishes on its own. */
typedef struct vllm_request_output {
    const char *request_id;
    size_t index;                    /* which of the request's n samples (0 .. n-1) */
    const int32_t *new_token_ids;    /* tokens sampled this step (0 or 1) */
    const float *new_logprobs;       /* their raw logprobs */
    const int32_t *top_logprob_ids;  /* (num_new_tokens, num_top_logprobs) when logprobs >= 0 */
    const float *top_logprobs;       /* (num_new_tokens, num_top_logprobs) */
    int num_top_logprobs;
    size_t num_new_tokens;
    const char *new_text;            /* newly completed text (valid UTF-8, maybe ""); "" without a tokenizer */
    size_t new_text_len;
    vllm_finish_reason finish_reason; /* VLLM_FINISH_NONE while running */
    const char *stop_reason;         /* the matched stop string, or NULL */
    size_t prompt_tokens;            /* usage: prompt length */
    size_t completion_tokens;        /* usage: tokens generated so far */
    size_t cached_prompt_tokens;     /* usage: prompt tokens served from the prefix cache */
    /* prompt_logprobs >= 0: once, on the step that samples the first token
     * (sample 0 only), as vllm_completion's; NULL on every other output */
    const float *prompt_logprobs;          /* (prompt_tokens); [0] is NaN */
    const int32_t *prompt_top_logprob_ids; /* (prompt_tokens, num_prompt_top_logprobs) when prompt_logprobs > 0 */
    const float *prompt_top_logprobs;
    int num_prompt_top_logprobs;
    /* a pooling request: its embedding, on the output that finishes it (finish_reason stop); else NULL */
    const float *embedding;          /* (embedding_dim) */
    size_t embedding_dim;
} vllm_request_output;

/* Queues a request. request_id must be unique among unfinished requests.
 * Errors (bad parameters, prompt too long) leave the engine unchanged. */
vllm_status vllm_engine_add_request(vllm_engine *engine, const char *request_id, const vllm_prompt *prompt,
                                    const vllm_sampling_params *params);
/* Queues a pooling request on a pooling engine (params NULL = defaults): it computes the prompt and
 * finishes in the step that computes its last token, whose output carries the embedding. A generate
 * engine refuses it (VLLM_ERR_UNSUPPORTED), as a pooling engine refuses vllm_engine_add_request. */
vllm_status vllm_engine_add_pooling_request(vllm_engine *engine, const char *request_id, const vllm_prompt *prompt,
                                            const vllm_pooling_params *params);
/* Aborts an unfinished request (with n > 1, every unfinished sample): its
 * blocks are freed and the next step reports it with finish_reason
 * VLLM_FINISH_ABORT. VLLM_ERR_NOT_FOUND when no unfinished request has
 * this id. */
vllm_status vllm_engine_abort_request(vllm_engine *engine, const char *request_id);
/* Runs one step (one forward over the flattened batch) and returns one
 * output per request that produced something or finished. */
vllm_status vllm_engine_step(vllm_engine *engine, const vllm_request_output **outputs, size_t *num_outputs);
/* True while any request is queued or running. */
bool vllm_engine_has_unfinished(const vllm_engine *engine);

/* ------------------------------------------------------------------ */
/* Tokenizer access                                                    */
/* ------------------------------------------------------------------ */

/* Encodes text; *ids is malloc'd (free with free()). */
vllm_status vllm_tokenize(vllm_engine *engine, const char *text, bool add_special_tokens,
                          int32_t **ids, size_t *num_ids);
/* Decodes ids; *text is malloc'd (free with free()). */
vllm_status vllm_detokenize(vllm_engine *engine, const int32_t *ids, size_t num_ids,
                            bool skip_special_tokens, char **text);

/* ------------------------------------------------------------------ */
/* Chat templates (vLLM's LLM.chat; the server's /v1/chat/completions)  */
/* ------------------------------------------------------------------ */

typedef struct vllm_chat_template_options {
    const char *chat_template;   /* a template file, or the template text itself (vLLM's load_chat_template);
                                    NULL (default): the model's chat_template.jinja / tokenizer_config.json
                                    (of the engine's `tokenizer` option when set, else of the model) */
    bool add_generation_prompt;  /* end with the assistant's turn header (default true) */
    bool continue_final_message; /* end right after the final message's content, for the model to continue it
                                    (default false; not with add_generation_prompt, as transformers) */
    const char *tools_json;      /* NULL, or a JSON array of tools ({"type": "function", "function": {...}}) */
    const char *chat_template_kwargs_json; /* NULL, or a JSON object of extra template variables
                                              (enable_thinking, ...; they may override bos_token / eos_token) */
} vllm_chat_template_options;

vllm_chat_template_options vllm_chat_template_default_options(void);

/* Renders a conversation with the chat template, as the server's chat path does: messages_json is a JSON
 * array of {"role", "content", ...} objects (content a string, null for an assistant turn, or a list of text
 * parts joined with "\n"; an assistant's tool_calls arguments given as JSON text are parsed for the template);
 * the template sees bos_token / eos_token from tokenizer_config.json, the kwargs, messages,
 * add_generation_prompt and tools. *out_prompt (malloc'd; free with vllm_free or free()) is the prompt text:
 * tokenize it without special tokens (vllm_tokenize(..., false, ...)), as vLLM's LLM.chat, since the template
 * writes them. options NULL = defaults. VLLM_ERR_NOT_FOUND when the model has no chat template and none is given; VLLM_ERR_INVALID_ARG for
 * bad JSON or a template error (raise_exception included). */
vllm_status vllm_chat_apply_template(const vllm_engine *engine, const char *messages_json,
                                     const vllm_chat_template_options *options, char **out_prompt);

/* Frees memory this API handed to the caller to free with free() (strings, token ids): for callers
 * (foreign-function interfaces) that cannot reach the C library's free. NULL is a no-op. */
void vllm_free(void *ptr);

/* ------------------------------------------------------------------ */
/* Thread-safe front (vLLM's AsyncLLM): an engine thread and streams    */
/* ------------------------------------------------------------------ */

/* One engine thread owns a vllm_engine and steps it while there is work
 * (sleeping when idle). Any thread may add and abort requests; each
 * request's outputs arrive on its own vllm_stream, read by any one thread.
 * Every call is thread-safe except vllm_async_engine_free, which must not
 * overlap new calls on the same engine (consumers may keep reading and
 * freeing their streams during and after it). */
typedef struct vllm_async_engine vllm_async_engine;
typedef struct vllm_stream vllm_stream;

/* One piece of a request's output: a deep copy owned by the caller (free
 * with vllm_stream_chunk_clear). Each chunk belongs to one sample (index;
 * always 0 when n = 1); a sample's chunk with finish_reason !=
 * VLLM_FINISH_NONE is its last, and the stream's last chunk has `last` set
 * (with n = 1: the chunk that finishes the request). */
typedef struct vllm_stream_chunk {
    size_t index;                /* which of the request's n samples */
    bool last;                   /* the stream's last chunk: every sample has finished */
    int32_t *token_ids;          /* (num_tokens) new generated ids */
    float *logprobs;             /* (num_tokens) their raw logprobs */
    size_t num_tokens;
    int32_t *top_logprob_ids;    /* (num_tokens, num_top_logprobs) when logprobs > 0, else NULL */
    float *top_logprobs;
    int num_top_logprobs;
    char *text;                  /* new text, NUL-terminated ("" when none or without a tokenizer;
                                    NULL only if memory ran out) */
    size_t text_len;
    vllm_finish_reason finish_reason; /* VLLM_FINISH_NONE while running */
    char *stop_reason;           /* the matched stop string, or NULL */
    char *error;                 /* when the engine failed (finish_reason abort): why; else NULL */
    size_t prompt_tokens;        /* usage: prompt length */
    size_t completion_tokens;    /* usage: tokens generated so far */
    size_t cached_prompt_tokens; /* usage: prompt tokens served from the prefix cache */
    /* prompt_logprobs >= 0: once (sample 0's first token), as vllm_request_output's; else NULL */
    float *prompt_logprobs;          /* (prompt_tokens); [0] is NaN */
    int32_t *prompt_top_logprob_ids; /* (prompt_tokens, num_prompt_top_logprobs) */
    float *prompt_top_logprobs;
    int num_prompt_top_logprobs;
    float *embedding;            /* a pooling request's last chunk: its embedding (embedding_dim), else NULL */
    size_t embedding_dim;
} vllm_stream_chunk;

void vllm_stream_chunk_clear(vllm_stream_chunk *chunk);

/* Loads the model (on the calling thread) and starts the engine thread. */
vllm_status vllm_async_engine_create(const char *model_dir, const vllm_engine_options *options,
                                     vllm_async_engine **out);
/* Its replicas (options' data_parallel_size, at least 1), and one's stats (as vllm_async_engine_get_stats,
 * which sums them: counts and tokens added, kv_cache_usage over all their blocks). */
int vllm_async_engine_num_engines(const vllm_async_engine *ae);
/* vllm_engine_check_health over every replica (the first failing one's error). */
vllm_status vllm_async_engine_check_health(const vllm_async_engine *ae);
/* One replica's vllm_engine_info (GPU replicas size their KV caches apart; vllm_async_engine_get_info is
 * replica 0's). */
void vllm_async_engine_get_engine_info(const vllm_async_engine *ae, int engine, vllm_engine_info *out);
void vllm_async_engine_get_engine_stats(vllm_async_engine *ae, int engine, vllm_engine_stats *out);
/* Stops the engine thread: every unfinished sample ends with a chunk of
 * finish_reason abort (error "the async engine was freed"). Streams stay
 * valid until their own vllm_stream_free. */
void vllm_async_engine_free(vllm_async_engine *ae);
/* vllm_engine_default_sampling / vllm_engine_has_tokenizer of the engine. */
vllm_sampling_params vllm_async_engine_default_sampling(const vllm_async_engine *ae);
bool vllm_async_engine_has_tokenizer(const vllm_async_engine *ae);
/* vllm_engine_get_info of the engine (fixed after create). */
void vllm_async_engine_get_info(const vllm_async_engine *ae, vllm_engine_info *out);
/* The engine's stats as of its last step (a copy taken by the engine thread). */
void vllm_async_engine_get_stats(vllm_async_engine *ae, vllm_engine_stats *out);
/* vllm_tokenize / vllm_detokenize from any thread, on that thread (the
 * tokenizer is immutable once loaded; the engine thread is not involved). */
vllm_status vllm_async_tokenize(vllm_async_engine *ae, const char *text, bool add_special_tokens,
                                int32_t **ids, size_t *num_ids);
vllm_status vllm_async_detokenize(vllm_async_engine *ae, const int32_t *ids, size_t num_ids,
                                  bool skip_special_tokens, char **text);

/* Queues a request (as vllm_engine_add_request, which runs on the engine
 * thread; this call waits for its verdict, so bad parameters, a too-long
 * prompt or an id in use fail here with the engine's message). A text
 * prompt is tokenized here, on the calling thread, never on the engine
 * thread. prompt and params are copied before it returns. On success *out
 * is the request's stream. */
vllm_status vllm_async_add_request(vllm_async_engine *ae, const char *request_id, const vllm_prompt *prompt,
                                   const vllm_sampling_params *params, vllm_stream **out);
/* vllm_engine_add_pooling_request through the engine thread (a text prompt is tokenized here, with
 * special tokens): the stream's one chunk carries the embedding. */
vllm_status vllm_async_add_pooling_request(vllm_async_engine *ae, const char *request_id, const vllm_prompt *prompt,
                                           const vllm_pooling_params *params, vllm_stream **out);
/* Aborts an unfinished request (every unfinished sample); its stream ends
 * with finish_reason abort (unless it finished first). VLLM_ERR_NOT_FOUND when no unfinished
 * request has this id. */
vllm_status vllm_async_abort(vllm_async_engine *ae, const char *request_id);
/* Waits for the next chunk (timeout_ms < 0: forever; 0: poll). VLLM_OK
 * fills *chunk; VLLM_STREAM_TIMEOUT leaves it empty; VLLM_ERR_NOT_FOUND
 * after the last chunk (chunk.last) was returned. One consumer thread per stream. */
vllm_status vllm_stream_next(vllm_stream *s, vllm_stream_chunk *chunk, int timeout_ms);
const char *vllm_stream_request_id(const vllm_stream *s);
/* The replica running the stream's request (0 .. vllm_async_engine_num_engines - 1). */
int vllm_stream_engine(const vllm_stream *s);
/* Frees the stream; an unfinished request is aborted. */
void vllm_stream_free(vllm_stream *s);

#ifdef __cplusplus
}
#endif
#endif /* VLLM_H */
