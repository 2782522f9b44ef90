/*
 * so_vocab.h: a model's vocabulary as byte strings for grammar matching (structured outputs, issue 17).
 *
 * xgrammar's TokenizerInfo, which vLLM's structured outputs use (cpp/tokenizer_info.cc): every token id of the
 * model's vocabulary (its logits' width) has its decoded bytes (tok_token_bytes); ids whose bytes are empty, the
 * tokenizer's special tokens (which the reply drops: a grammar cannot count on their text; xgrammar would) and
 * ids past the tokenizer's vocabulary (padding up to the model's) are special: never allowed by a grammar; the
 * stop ids (EOS) are allowed only where the grammar may end (a stop id is never special, even without bytes). The rest, sorted by their bytes (memcmp, a shorter
 * prefix first), carry trie ranges: subtree_end(i) is the first sorted index after i whose bytes do not start
 * with token i's, so a matcher that rejects a token's first k bytes skips every token sharing them.
 */
#ifndef VLLM_SO_VOCAB_H
#define VLLM_SO_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "vllm.h"

typedef struct so_vocab so_vocab;

/* model_vocab_size: the logits' width (>= 1; ids at and past the tokenizer's size are padding); stop_ids: the ids
 * that end generation (n_stop of them, each in range). VLLM_ERR_INVALID_ARG for a bad size or stop id. */
vllm_status so_vocab_build(const tokenizer *tok, int32_t model_vocab_size, const int32_t *stop_ids, int n_stop,
                           so_vocab **out);
void so_vocab_free(so_vocab *v);

int32_t so_vocab_size(const so_vocab *v); /* the model's vocabulary size */
/* id's bytes (len may be 0: a special token's); NULL for an id out of range */
const uint8_t *so_vocab_bytes(const so_vocab *v, int32_t id, size_t *len);
bool so_vocab_is_special(const so_vocab *v, int32_t id);
bool so_vocab_is_stop(const so_vocab *v, int32_t id);
int so_vocab_n_stop(const so_vocab *v);
int32_t so_vocab_stop_id(const so_vocab *v, int i);

/* the sorted tokens (neither special nor stop): their count, the id at sorted index i, and its trie range end */
int32_t so_vocab_n_sorted(const so_vocab *v);
int32_t so_vocab_sorted_id(const so_vocab *v, int32_t i);
int32_t so_vocab_subtree_end(const so_vocab *v, int32_t i);
/* id's sorted index (so_vocab_sorted_id(v, i) == id), -1 for a special or stop id or one out of range */
int32_t so_vocab_sorted_index(const so_vocab *v, int32_t id);

#endif
