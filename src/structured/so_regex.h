/*
 * so_regex.h: regular expressions to the structured-output EBNF dialect (issue 17).
 *
 * vLLM's `regex` constraint and JSON Schema's string `pattern` / `format` (xgrammar 0.1.29 cpp/regex_converter.cc,
 * RegexToEBNF; ECMAScript / Python syntax): the whole output (or the whole JSON string body) must match the
 * expression, as if anchored at both ends.
 */
#ifndef VLLM_SO_REGEX_H
#define VLLM_SO_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

/* re (len bytes of UTF-8; a NUL byte is refused) -> *out, a malloc'd EBNF expression (no rule name, usable as a rule
 * body or inside parentheses) matching the same strings. json_string: the strings are the body of a JSON string
 * (between its quotes): a literal character JSON must escape is written as its escape, `.` and negated classes
 * never produce `"`, `\` or a control character. VLLM_ERR_INVALID_ARG with a message naming the problem and its
 * offset ("regex: ... at offset N") for what it cannot read or does not support (backreferences, lookaround). */
vllm_status so_regex_to_ebnf(const char *re, size_t len, bool json_string, char **out);

#endif
