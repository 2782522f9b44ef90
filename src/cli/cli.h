/* cli.h: the vllmc subcommands and the small argument helpers they share (cli_util.c). */
#ifndef VLLM_CLI_CLI_H
#define VLLM_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "vllm.h"

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv); /* chat.c: `vllmc chat` */

/* Parses "1,2,3" into a malloc'd array; false on a malformed list. */
bool cli_parse_ids(const char *s, int32_t **ids, size_t *n);
/* Strict number parsing; false when s is not entirely a number in range. */
bool cli_parse_int(const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *s, double *out);

/* Option loops `for (int i = 1; i < argc; i++)` with argv[i] the option:
 * true when a value follows it, else prints "CMD: OPTION needs a value". */
bool cli_has_value(int argc, char **argv, int i, const char *cmd);

/* The same inside such a loop in a function whose `bad:` label is its usage-error exit. */
#define CLI_NEED_VALUE(cmd)                                 \
    do {                                                    \
        if (!cli_has_value(argc, argv, i, (cmd))) goto bad; \
    } while (0)

/* The engine flags of generate, serve and bench (--enforce-eager, --enable-prefix-caching,
 * --no-enable-prefix-caching): true when arg is one of them, applied to eo. */
bool cli_engine_flag(const char *arg, vllm_engine_options *eo);

/* --load-format VAL: auto (alias safetensors) or dummy; else prints "CMD: --load-format must be
 * auto or dummy, got 'VAL'" and returns false. */
bool cli_load_format(const char *cmd, const char *val, vllm_load_format *out);
/* --mamba-cache-dtype / --mamba-ssm-cache-dtype / --kv-cache-dtype (vLLM's): whether arg is one;
 * cli_state_dtype stores val (auto, float32, bfloat16, float16; for the KV cache auto, fp8, fp8_e4m3) into eo,
 * or prints an error naming cmd and returns false. */
bool cli_is_state_dtype(const char *arg);
bool cli_state_dtype(const char *cmd, const char *arg, const char *val, vllm_engine_options *eo);

/* --runner auto|generate|pooling, --convert auto|none|embed, --pooler-config JSON (pooling_type LAST / MEAN /
 * CLS, use_activation or normalize): vLLM's pooling options. cli_is_pooling_arg: whether arg is one;
 * cli_pooling_arg applies val to eo, or prints an error naming cmd and returns false. */
bool cli_is_pooling_arg(const char *arg);
bool cli_pooling_arg(const char *cmd, const char *arg, const char *val, vllm_engine_options *eo);

/* The sampling and engine options of `vllmc generate`, shared with `vllmc chat`: cli_gen_opt parses
 * them, cli_gen_sampling applies the sampling ones over a model's defaults (the result points into o). */
typedef struct cli_gen_opts {
    vllm_engine_options eo;
    bool engine_given;            /* an engine option (--threads, --device, ...) was given */
    long long max_tokens, top_k, min_tokens, seed, logprobs_k, n_samples; /* 256, -, 0, -1, -1, 1 */
    double temperature, top_p, min_p, presence, frequency, repetition;
    bool set_temperature, set_top_p, set_min_p, set_top_k;
    bool ignore_eos, keep_special, include_stop;
    const char **stops, **bad_words;
    size_t num_stops, num_bad;
    int32_t *stop_ids, *allowed, *bias_ids;
    float *bias_vals;
    size_t num_stop_ids, num_allowed, num_bias;
} cli_gen_opts;

void cli_gen_opts_init(cli_gen_opts *o);
void cli_gen_opts_free(cli_gen_opts *o);
/* Inside an option loop: when argv[*i] is one of the options, consumes it (and its value: *i moves on)
 * and returns 1; 0 when it is not one; -1 on a bad value (the message, prefixed with cmd, printed);
 * -2 out of memory. */
int cli_gen_opt(const char *cmd, int argc, char **argv, int *i, cli_gen_opts *o);
vllm_sampling_params cli_gen_sampling(const cli_gen_opts *o, vllm_sampling_params base);

/* Monotonic clock, seconds. */
double cli_now(void);

#endif
