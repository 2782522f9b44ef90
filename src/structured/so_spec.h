/*
 * so_spec.h: a request's structured-output constraint (vllm_structured_outputs) to EBNF and to a compiled grammar.
 *
 * vLLM's StructuredOutputsParams with its xgrammar backend (vllm/sampling_params.py,
 * vllm/v1/structured_output/backend_xgrammar.py): at most one kind; json (a JSON Schema) and json_object ({"type":
 * "object"}) through so_json_schema, regex through so_regex, choice as `root ::= "a" | "b"` (vLLM's
 * choice_as_grammar), grammar as xgrammar's EBNF. Errors are vLLM's messages, for a 400.
 */
#ifndef VLLM_SO_SPEC_H
#define VLLM_SO_SPEC_H

#include <stdbool.h>

#include "structured/so_match.h"
#include "vllm.h"

/* how many kinds s sets (0: unconstrained) */
int so_spec_count(const vllm_structured_outputs *s);
/* at most one kind, each well-formed as far as it can be told without converting (an empty choice list, a NUL in a
 * regex); VLLM_ERR_INVALID_ARG with vLLM's message */
vllm_status so_spec_validate(const vllm_structured_outputs *s);
/* the constraint as an EBNF grammar with root rule "root" (malloc'd) */
vllm_status so_spec_to_ebnf(const vllm_structured_outputs *s, char **out);
/* the constraint compiled (so_ebnf_parse + so_compile) */
vllm_status so_spec_compile(const vllm_structured_outputs *s, so_compiled **out);
/* a key naming the constraint exactly (for a cache of compiled grammars); malloc'd, NULL when out of memory */
char *so_spec_key(const vllm_structured_outputs *s);

#endif
