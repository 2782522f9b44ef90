/*
 * jinja.h: a Jinja2 interpreter (the subset chat templates use), with the environment
 * transformers renders chat templates in: trim_blocks, lstrip_blocks, loop controls,
 * raise_exception(), strftime_now(), tojson. Variables come in as a JSON object.
 *
 * All values of one render live in one arena freed at the end, and errors unwind with
 * longjmp to jt_render, so a bad template can fail anywhere without leaking.
 */
#ifndef VLLM_TEMPLATE_JINJA_H
#define VLLM_TEMPLATE_JINJA_H

#include <jansson.h>

#include "vllm.h"

/* Limits: exceeding any is a clean VLLM_ERR_INVALID_ARG. */
#define JT_MAX_OUTPUT (64u << 20)      /* bytes of rendered text */
#define JT_MAX_MEMORY (512u << 20)     /* bytes of arena per render */
#define JT_MAX_STEPS 20000000LL        /* loop iterations + macro calls per render */
#define JT_MAX_DEPTH 256               /* nesting of macro calls / expressions */

/*
 * Renders template src with the variables of vars (a JSON object, may be NULL).
 * strftime_now() uses the current local time, or SOURCE_DATE_EPOCH (UTC) when set.
 * Errors: VLLM_ERR_FORMAT for a syntax error, VLLM_ERR_INVALID_ARG for a runtime error
 * ("chat template: line 3: unknown filter 'foo'"). *out is malloc'd on success.
 */
vllm_status jt_render(const char *src, const json_t *vars, char **out);

#endif
