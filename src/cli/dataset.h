/*
 * dataset.h: the CLI's JSONL input files. cli_jsonl_foreach walks the JSON
 * object of every line (tokenize / detokenize --input); cli_dataset_read_jsonl
 * reads prompt files on top of it (generate --prompts-file, bench throughput
 * --dataset, bench serve --dataset-path), one object a line:
 *   {"prompt": "text" | "prompt_token_ids": [1, 2, 3], "output_len" | "output_tokens": N}
 * Every error is one stderr line "CMD: FILE:LINE: what is wrong" (CMD names
 * the command, e.g. "vllmc bench serve").
 */
#ifndef VLLM_CLI_DATASET_H
#define VLLM_CLI_DATASET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

/* What a line callback tells cli_jsonl_foreach. */
typedef enum cli_jsonl_step {
    CLI_JSONL_NEXT,   /* go on with the next line */
    CLI_JSONL_STOP,   /* done: read no further (not an error) */
    CLI_JSONL_FAIL,   /* the callback printed an error */
} cli_jsonl_step;

/* line: the line's object (borrowed); where: "FILE:LINE" for messages. */
typedef cli_jsonl_step (*cli_jsonl_fn)(json_t *line, const char *where, void *ctx);

/* Calls fn on the JSON object of every non-blank line of path ("-": stdin).
 * json_flags are jansson's decoding flags (e.g. JSON_ALLOW_NUL). Prints the
 * error itself (cannot open or read the file, a line that is not a JSON
 * object); false on any error, fn's included. */
bool cli_jsonl_foreach(const char *cmd, const char *path, size_t json_flags, cli_jsonl_fn fn, void *ctx);

/* One prompt of a dataset. */
typedef struct cli_prompt {
    char *text;          /* text prompt (owned), or NULL */
    int32_t *ids;        /* token-id prompt (num_ids, owned), or NULL */
    size_t num_ids;      /* <= INT32_MAX */
    int output_len;      /* tokens to generate; 0 when not known */
} cli_prompt;

typedef struct cli_dataset {
    cli_prompt *items;   /* (n) */
    size_t n, cap;
} cli_dataset;

/* Appends p and takes its strings; false (p untouched, still the caller's) when out of memory. */
bool cli_dataset_push(cli_dataset *d, cli_prompt p);

/* Frees the prompts and their strings; d is empty afterwards. */
void cli_dataset_free(cli_dataset *d);

/* A vllm_prompt view of d's prompts (n, malloc'd, pointing into d); NULL when out of memory. */
vllm_prompt *cli_dataset_prompts(const cli_dataset *d);

/* output_len of cli_dataset_read_jsonl: */
#define CLI_OUTPUT_LEN_IGNORE (-1)  /* the lines' output lengths are not read (output_len 0) */
#define CLI_OUTPUT_LEN_FROM_FILE 0   /* every line gives "output_len" or "output_tokens" */

/* Appends the prompts of the JSONL file path to d, at most max_prompts (the
 * first lines; SIZE_MAX: all). output_len > 0 is every prompt's output
 * length, the lines' own not read. Prints one error line and returns false
 * on a bad file, on a bad line, and when the file holds no prompt. */
bool cli_dataset_read_jsonl(const char *cmd, const char *path, size_t max_prompts, int output_len, cli_dataset *d);

#endif
