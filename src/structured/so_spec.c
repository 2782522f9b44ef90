/* so_spec.c: a request's structured-output constraint to EBNF and to a compiled grammar (so_spec.h). */
#include "structured/so_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "structured/so_grammar.h"
#include "structured/so_json_schema.h"
#include "structured/so_regex.h"

int so_spec_count(const vllm_structured_outputs *s) {
    return (s->json != NULL) + (s->json_object ? 1 : 0) + (s->regex != NULL) + (s->choice != NULL) +
           (s->grammar != NULL);
}

/* the kinds set, as vLLM's message lists them */
static void kinds(const vllm_structured_outputs *s, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s%s%s", s->json ? "json " : "", s->json_object ? "json_object " : "",
             s->regex ? "regex " : "", s->choice ? "choice " : "", s->grammar ? "grammar " : "");
    size_t l = strlen(buf);
    if (l) buf[l - 1] = '\0';
}

vllm_status so_spec_validate(const vllm_structured_outputs *s) {
    char k[64];
    if (so_spec_count(s) > 1) {
        kinds(s, k, sizeof k);
        /* vllm/sampling_params.py StructuredOutputsParams.__post_init__ */
        return vt_error(VLLM_ERR_INVALID_ARG,
                        "structured_outputs: You can only use one kind of structured outputs constraint but multiple "
                        "are specified: %s",
                        k);
    }
    if (s->choice && s->num_choice == 0)
        return vt_error(VLLM_ERR_INVALID_ARG, "structured_outputs: Choice '[]' cannot be an empty list");
    for (size_t i = 0; s->choice && i < s->num_choice; i++)
        if (!s->choice[i]) return vt_error(VLLM_ERR_INVALID_ARG, "structured_outputs: choice %zu is not a string", i);
    return VLLM_OK;
}

/* appends s as the body of an EBNF literal: \" \\ and control characters escaped */
static void put_literal(char *out, size_t *n, const char *s) {
    out[(*n)++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            out[(*n)++] = '\\';
            out[(*n)++] = (char)*p;
        } else if (*p < 0x20 || *p == 0x7F) {
            *n += (size_t)sprintf(out + *n, "\\x%02X", *p);
        } else {
            out[(*n)++] = (char)*p;
        }
    }
    out[(*n)++] = '"';
}

/* vLLM's choice_as_grammar (vllm/v1/structured_output/utils.py): root ::= "a" | "b" */
static vllm_status choice_ebnf(const vllm_structured_outputs *s, char **out) {
    size_t cap = 16;
    for (size_t i = 0; i < s->num_choice; i++) {
        const size_t l = strlen(s->choice[i]);
        if (l > ((size_t)1 << 26) || cap > ((size_t)1 << 30))
            return vt_error(VLLM_ERR_INVALID_ARG, "structured_outputs: the choices are too long");
        cap += 4 * l + 8;
    }
    char *t = malloc(cap);
    if (!t) return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
    size_t n = (size_t)sprintf(t, "root ::= ");
    for (size_t i = 0; i < s->num_choice; i++) {
        if (i) n += (size_t)sprintf(t + n, " | ");
        put_literal(t, &n, s->choice[i]);
    }
    t[n++] = '\n';
    t[n] = '\0';
    *out = t;
    return VLLM_OK;
}

vllm_status so_spec_to_ebnf(const vllm_structured_outputs *s, char **out) {
    *out = NULL;
    vllm_status st = so_spec_validate(s);
    if (st != VLLM_OK) return st;
    so_json_options o = so_json_default_options();
    o.any_whitespace = !s->disable_any_whitespace;
    if (s->json) return so_json_schema_text_to_ebnf(s->json, strlen(s->json), &o, out);
    if (s->json_object) {
        static const char obj[] = "{\"type\": \"object\"}";
        return so_json_schema_text_to_ebnf(obj, sizeof obj - 1, &o, out);
    }
    if (s->choice) return choice_ebnf(s, out);
    if (s->grammar) {
        if (!(*out = strdup(s->grammar))) return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
        return VLLM_OK;
    }
    if (s->regex) {
        char *e = NULL;
        if ((st = so_regex_to_ebnf(s->regex, strlen(s->regex), false, &e))) {
            vt_error_prefix("Failed to transform regex into a grammar");
            return st;
        }
        char *t = malloc(strlen(e) + 16);
        if (!t) {
            free(e);
            return vt_error(VLLM_ERR_NO_MEMORY, "structured outputs: out of memory");
        }
        sprintf(t, "root ::= %s\n", e);
        free(e);
        *out = t;
        return VLLM_OK;
    }
    return vt_error(VLLM_ERR_INVALID_ARG, "structured_outputs: You must use one kind of structured outputs "
                                          "constraint but none are specified");
}

vllm_status so_spec_compile(const vllm_structured_outputs *s, so_compiled **out) {
    *out = NULL;
    char *text = NULL;
    vllm_status st = so_spec_to_ebnf(s, &text);
    if (st != VLLM_OK) return st;
    so_grammar *g = NULL;
    st = so_ebnf_parse(text, strlen(text), "root", &g);
    free(text);
    if (st != VLLM_OK) {
        if (s->grammar) vt_error_prefix("Invalid grammar specification");
        return st;
    }
    st = so_compile(g, out);
    so_grammar_free(g);
    return st;
}

char *so_spec_key(const vllm_structured_outputs *s) {
    const char *kind = s->json ? "json" : s->json_object ? "json_object" : s->regex ? "regex"
                     : s->choice ? "choice" : s->grammar ? "grammar" : "none";
    const char *body = s->json ? s->json : s->regex ? s->regex : s->grammar ? s->grammar : "";
    size_t n = strlen(kind) + strlen(body) + 8;
    for (size_t i = 0; s->choice && i < s->num_choice; i++) n += strlen(s->choice[i]) + 24;
    char *k = malloc(n);
    if (!k) return NULL;
    size_t w = (size_t)sprintf(k, "%s %c\n", kind, s->disable_any_whitespace ? 'c' : 'w');
    if (s->choice) /* each choice after its length: no separator to collide with */
        for (size_t i = 0; i < s->num_choice; i++) {
            w += (size_t)sprintf(k + w, "%zu:", strlen(s->choice[i]));
            memcpy(k + w, s->choice[i], strlen(s->choice[i]));
            w += strlen(s->choice[i]);
        }
    else {
        memcpy(k + w, body, strlen(body));
        w += strlen(body);
    }
    k[w] = '\0';
    return k;
}
