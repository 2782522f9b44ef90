/*
 * so_match.h: matching text against a structured-output grammar, byte by byte and token by token (issue 17).
 *
 * so_compile turns a grammar (so_grammar.h) into one byte-level NFA per rule whose edges read a byte range or
 * call a rule (classes become their UTF-8 byte sequences, repeats their copies). A matcher runs an Earley
 * parser over those automata (items: rule, state, origin), one item set per byte read, so any context-free
 * grammar (left recursion, ambiguity, empty rules) is matched exactly; rolling back is dropping sets. The
 * token mask (so_match_fill_mask) walks the vocabulary sorted by bytes (so_vocab.h), reusing the sets of the
 * prefix a token shares with the previous one and skipping every token that shares a rejected prefix: the
 * bits of the tokens whose bytes the grammar can read next, the stop tokens where it may end, never a special
 * one (xgrammar's rules, vLLM's structured outputs); so_mask_cache makes masks cheap. Lookahead assertions are read but not yet enforced (for
 * xgrammar's JSON rules they only repeat what the parent rules require).
 */
#ifndef VLLM_SO_MATCH_H
#define VLLM_SO_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "structured/so_grammar.h"
#include "structured/so_vocab.h"
#include "vllm.h"

typedef struct so_compiled so_compiled;
typedef struct so_matcher so_matcher;

/* VLLM_ERR_INVALID_ARG when the automata would exceed SO_MAX_STATES states or edges (a repeat's copies) */
#define SO_MAX_STATES (1 << 22)
vllm_status so_compile(const so_grammar *g, so_compiled **out);
void so_compiled_free(so_compiled *c);
int64_t so_compiled_states(const so_compiled *c);

/* a matcher at the start of the root rule; it borrows c */
vllm_status so_matcher_create(const so_compiled *c, so_matcher **out);
void so_matcher_free(so_matcher *m);

/* reads n bytes: all of them, or none (false, the matcher unchanged) when the grammar cannot */
bool so_match_bytes(so_matcher *m, const uint8_t *b, size_t n);
/* whether the text read so far is a whole sentence of the grammar (the root rule complete) */
bool so_match_can_end(const so_matcher *m);
/* bytes read so far; drops the last n of them (n <= so_match_pos) and a stop token taken after them */
size_t so_match_pos(const so_matcher *m);
void so_match_rollback(so_matcher *m, size_t n);

/* token id: a stop token ends the match where the grammar may end (then every later token is refused); a special
 * one is refused; another is its bytes. False (the matcher unchanged) when the grammar cannot take it. */
bool so_match_token(so_matcher *m, const so_vocab *v, int32_t id);
bool so_match_terminated(const so_matcher *m);
/* mask ((vocab size + 31) / 32 words): bit id set where so_match_token would take id. This one walks the whole
 * vocabulary (its trie); so_match_fill_mask_cached gives the same bits from a cache (so_mask.c). */
void so_match_fill_mask(so_matcher *m, const so_vocab *v, uint32_t *mask);

/* The adaptive token-mask cache of one compiled grammar over one vocabulary (both borrowed): per automaton state,
 * the tokens accepted or rejected there whatever the context, filled on first use (or ahead by
 * so_mask_cache_classify). A mask then walks only the tokens whose fate depends on the context. Threads: masks of
 * different matchers may be filled at once with so_match_fill_mask_scratch, each thread with its own scratch;
 * so_match_fill_mask_cached uses the cache's own scratch (one thread at a time); so_mask_cache_classify may run on
 * any thread alongside them. */
typedef struct so_mask_cache so_mask_cache;
vllm_status so_mask_cache_create(const so_compiled *c, const so_vocab *v, so_mask_cache **out);
void so_mask_cache_free(so_mask_cache *mc);
int64_t so_mask_cache_entries(const so_mask_cache *mc); /* states classified so far */
int64_t so_mask_cache_bytes(const so_mask_cache *mc);   /* their memory */
int32_t so_mask_cache_last_walked(const so_mask_cache *mc); /* context-dependent tokens the last fill walked */
/* masks filled, context-dependent tokens walked in them, seconds spent classifying states */
void so_mask_cache_stats(const so_mask_cache *mc, int64_t *fills, int64_t *walked, double *entry_seconds);
/* so_match_fill_mask's bits for m (a matcher of mc's grammar); VLLM_ERR_NO_MEMORY when an entry cannot be made */
vllm_status so_match_fill_mask_cached(so_matcher *m, so_mask_cache *mc, uint32_t *mask);
/* One thread's working memory for fills (any grammar, any vocabulary: it grows to fit). */
typedef struct so_mask_scratch so_mask_scratch;
vllm_status so_mask_scratch_create(so_mask_scratch **out);
void so_mask_scratch_free(so_mask_scratch *sc);
/* so_match_fill_mask_cached with sc: safe to call from several threads at once on one cache (other matchers) */
vllm_status so_match_fill_mask_scratch(so_matcher *m, so_mask_cache *mc, so_mask_scratch *sc, uint32_t *mask);
/* Classifies state s now unless done (states no fill reads are skipped): the grammar's states can be classified
 * ahead, on other threads, before the first masks need them. NO_MEMORY on failure. */
vllm_status so_mask_cache_classify(so_mask_cache *mc, so_mask_scratch *sc, int32_t s);
int32_t so_mask_cache_num_states(const so_mask_cache *mc);

#endif
