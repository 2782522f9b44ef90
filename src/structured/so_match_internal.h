/*
 * so_match_internal.h: the structured-output automata and Earley matcher's insides, shared by so_match.c (the
 * matcher) and so_mask.c (token masks and their cache); nothing else includes it.
 */
#ifndef VLLM_SO_MATCH_INTERNAL_H
#define VLLM_SO_MATCH_INTERNAL_H

#include "structured/so_match.h"

enum { SO_EDGE_BYTE = -1, SO_EDGE_EPS = -2 }; /* so_edge.call; >= 0: calls that rule */

typedef struct so_edge {
    int32_t to, call;
    uint8_t lo, hi;
} so_edge;

struct so_compiled {
    int n_rules, root;
    int32_t *start, *final; /* per rule, then per lookahead (n_rules + n_looks entries; a rule's states are
                               contiguous from its start, in this order) */
    int32_t *look;          /* per rule: its lookahead's index in start / final, or -1 */
    int n_looks;
    int32_t n_states;
    int32_t *off;           /* (n_states + 1): state s's edges are edges[off[s] .. off[s + 1]) */
    so_edge *edges;
};

typedef struct so_item {
    int32_t rule, state, origin;
} so_item;

struct so_matcher {
    const so_compiled *c;
    so_item *items;
    size_t n_items, cap;
    size_t *set;     /* set k: items[set[k] .. set[k + 1]); sets 0 .. n_sets - 1, set[n_sets] == n_items */
    size_t n_sets, set_cap;
    int32_t *hash;   /* the set being built: item indices from its base (open addressing), a slot in use where */
    uint32_t *hgen;  /* its generation is gen (a new set: gen + 1, no clearing) */
    uint32_t gen;
    size_t hcap;
    uint8_t *done;   /* the set being built: rules completed with it as origin */
    uint8_t *end_seen; /* (set_cap) a local matcher's: its item's rule completed in set k */
    bool terminated;
    bool failed;     /* out of memory: every later read refused */
};

/* reads one byte: the next set from the last one's byte edges; false (nothing added) when it is refused */
bool so_match_step(so_matcher *m, uint8_t byte);
/* the matcher restarted as a local one: set 0 holds (rule, state) with origin -1 and its closure; when that item's
 * rule completes in set k, end_seen[k] is set (the rule may end there, and what follows is its parent's) */
bool so_match_reset_local(so_matcher *m, int32_t rule, int32_t state);

#endif
