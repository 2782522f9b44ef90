/*
 * so_json_schema.h: JSON Schema to the structured-output EBNF dialect (issue 17), with the semantics of xgrammar
 * 0.1.29 (cpp/json_schema_converter.cc), which vLLM pins: the grammar's sentences are the JSON texts the schema
 * accepts, written as xgrammar writes them (properties in schema order, whitespace per the options).
 */
#ifndef VLLM_SO_JSON_SCHEMA_H
#define VLLM_SO_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "vllm.h"

typedef struct so_json_options {
    bool any_whitespace; /* true (vLLM's default): [ \n\t]* where JSON allows; false: ", " and ": " only */
    bool strict;         /* true (xgrammar's and vLLM's default): no properties / items the schema does not name */
} so_json_options;

so_json_options so_json_default_options(void);

/* schema -> *out, a malloc'd EBNF grammar whose root rule is "root". VLLM_ERR_INVALID_ARG with xgrammar's message
 * for a schema it cannot convert ("minItems is greater than maxItems: 5 > 3", "Schema 'false' cannot accept any
 * value", an unresolvable $ref, ...); bounded work for any input (nesting depth, rule count). */
vllm_status so_json_schema_to_ebnf(const json_t *schema, const so_json_options *o, char **out);
/* the same from text (len bytes): "Invalid JSON grammar specification." when it is not JSON */
vllm_status so_json_schema_text_to_ebnf(const char *text, size_t len, const so_json_options *o, char **out);

#endif
