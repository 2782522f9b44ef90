/*
 * so_grammar.h: the grammar IR of structured outputs (issue 17) and its EBNF reader and printer.
 *
 * A grammar is rules of expressions over Unicode text matched as UTF-8 bytes, xgrammar's (0.1.29, which vLLM
 * pins; cpp/grammar_parser.cc, docs/tutorials/ebnf_guided_generation.md): byte strings, character classes over
 * code points (ranges, negated), rule references, sequences, choices and bounded repeats; a rule may carry a
 * lookahead assertion `(= expr)` that must match after it. so_ebnf_parse reads the GBNF dialect xgrammar takes
 * for vLLM's `grammar` constraint; the JSON-schema and regex converters build the same IR.
 */
#ifndef VLLM_SO_GRAMMAR_H
#define VLLM_SO_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

typedef enum so_kind {
    SO_BYTES,  /* bytes[0 .. n_bytes) (empty: matches nothing, i.e. the empty string) */
    SO_CLASS,  /* one code point in ranges (pairs lo, hi inclusive), or not in them when negated */
    SO_REF,    /* rule `rule` */
    SO_SEQ,    /* kids in order (none: the empty string) */
    SO_CHOICE, /* one of kids (at least one) */
    SO_REPEAT, /* kids[0] min .. max times (max -1: unbounded) */
} so_kind;

typedef struct so_expr so_expr;
struct so_expr {
    so_kind kind;
    uint8_t *bytes;   /* SO_BYTES */
    size_t n_bytes;
    uint32_t *ranges; /* SO_CLASS: 2 n_ranges code points */
    int n_ranges;
    bool negated;
    int rule;         /* SO_REF */
    so_expr **kids;   /* SO_SEQ, SO_CHOICE, SO_REPEAT (one) */
    int n_kids;
    int min, max;     /* SO_REPEAT */
};

typedef struct so_rule {
    char *name;
    so_expr *body;
    so_expr *lookahead; /* or NULL */
} so_rule;

typedef struct so_grammar {
    so_rule *rules;
    int n_rules;
    int root;
} so_grammar;

/* text (len bytes) -> a grammar whose root is the rule root_name ("root" when NULL). Errors (VLLM_ERR_INVALID_ARG)
 * read as xgrammar's: "EBNF parser error at line L, column C: ..." (an undefined or doubly defined rule, a bad
 * escape, an unterminated literal or class, a repeat without its lower bound, ...), or "The root rule with name
 * \"root\" is not found". */
vllm_status so_ebnf_parse(const char *text, size_t len, const char *root_name, so_grammar **out);
void so_grammar_free(so_grammar *g);
void so_expr_free(so_expr *e); /* e and its kids */

/* the grammar as EBNF, rules in order, one per line; malloc'd, NULL when out of memory. A grammar read by
 * so_ebnf_parse prints to text that reads back to the same print (a fixed point; an empty sequence prints as "",
 * nested choices flattened); bytes that are not UTF-8 print as \xHH, which the dialect reads as the code point
 * U+00HH (it has no raw bytes) */
char *so_grammar_print(const so_grammar *g);

#endif
