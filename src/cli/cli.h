/* cli.h: the vllmc subcommands and the small argument helpers they share. */
#ifndef VLLM_CLI_CLI_H
#define VLLM_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* Parses "1,2,3" into a malloc'd array; false on a malformed list. */
bool cli_parse_ids(const char *s, int32_t **ids, size_t *n);
/* Strict number parsing; false when s is not entirely a number in range. */
bool cli_parse_int(const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *s, double *out);

#endif
