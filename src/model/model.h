/*
 * model.h: a loaded model and its forward pass over one flattened batch.
 *
 * The forward takes vLLM v1's batch layout: T tokens from S sequences
 * (prefill chunks and decodes mixed), their positions, per-sequence query
 * offsets and context lengths, block tables and a slot mapping into the
 * paged KV cache. Logits are computed only for the rows the caller asks for
 * (or, for the pooling runner, their final-normed hidden states).
 */
#ifndef VLLM_MODEL_MODEL_H
#define VLLM_MODEL_MODEL_H

#include "model/config.h"
#include "model/kv_cache_groups.h"
#include "tensor/backend.h"
#include "vllm.h"

typedef struct model model;

/* Host-side description of one step's batch (the engine's input builder,
 * engine/input_builder.h, makes it). All arrays are host memory; the
 * forward uploads them, padded for a recorded graph. Block tables and slot mappings come once per KV
 * cache group (model_get_cache_groups), group after group. */
typedef struct fwd_batch {
    int num_tokens;                 /* T */
    int num_seqs;                   /* S */
    const int32_t *token_ids;       /* (T) */
    const int32_t *positions;       /* (T) */
    const int32_t *query_start_loc; /* (S + 1) */
    const int32_t *seq_lens;        /* (S) context length after this step */
    int num_kv_groups;              /* G: the model's groups (0 is read as 1) */
    const int32_t *block_tables;    /* (G, S, max_blocks_per_seq) */
    int max_blocks_per_seq;
    const int64_t *slot_mapping;    /* (G, T) */
    const int32_t *state_slots;     /* (S) each sequence's recurrent-state slot (hybrid models; 0: the null
                                       slot), or NULL; a sequence whose first token this step is at
                                       position 0 starts from a zero state, others continue theirs */
    int num_logits;                 /* rows whose logits are wanted */
    const int32_t *logits_indices;  /* (num_logits) indices into [0, T) */
    bool hidden_out;                /* the pooling runner: those rows' final-normed hidden states instead of
                                       their logits (no LM head; never a recorded graph) */
} fwd_batch;

/* The per-request state of every layer: paged K/V blocks for attention
 * layers, a conv and a recurrent state per slot for linear-attention layers. The
 * layers of different KV cache groups at the same slot share one tensor
 * (kv_cache_groups.h): k[l] and v[l] are views of layer l's slot. */
typedef struct model_cache {
    int num_blocks;
    int block_size;
    int num_layers;
    tensor *k;   /* per layer: (num_blocks, block_size, nkv, head_dim), or data NULL; an MLA layer's latent
                    [c ; k_rope] (num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim) */
    tensor *v;   /* per layer, as k; data NULL for MLA layers (no V plane) */
    int num_slots;
    tensor *slot_k, *slot_v;  /* (num_slots) the tensors owning the memory */
    size_t bytes;  /* total device bytes of the K/V blocks */
    /* linear-attention (gated delta-net) layers: state pools indexed by the request's state slot
     * (vLLM's mamba cache; slot 0 the null slot, never written: padding maps to -1) */
    int num_state_slots;      /* max_num_seqs + 1; 0 when no layer keeps a recurrent state */
    tensor *conv_state;       /* per layer: (num_state_slots, conv_dim, K - 1) in the conv state dtype, or data NULL */
    tensor *ssm_state;        /* per layer: (num_state_slots, H_v, d_k, d_v) in the ssm state dtype, or data NULL */
    size_t state_bytes;       /* device bytes of the state pools */
    /* checkpoints of those states at block boundaries (prefix caching of hybrid models, vLLM's
     * mamba_cache_mode "align"): pools of the same per-layer shapes, indexed by checkpoint slot
     * (engine/state_cache.h says which prefix each holds); copied from and to the state pools by
     * model_state_save / model_state_restore */
    int num_ckpt_slots;       /* 0: none */
    tensor *ckpt_conv;        /* per layer: (num_ckpt_slots, conv_dim, K - 1), the conv state dtype, or data NULL */
    tensor *ckpt_ssm;         /* per layer: (num_ckpt_slots, H_v, d_k, d_v), the ssm state dtype, or data NULL */
    size_t ckpt_bytes;        /* device bytes of the checkpoint pools */
} model_cache;

typedef struct model_load_options {
    bool dummy;        /* random weights from config.json alone */
    uint64_t seed;     /* seed for dummy weights */
    int max_model_len; /* positions the RoPE table covers, 0..max_model_len-1 (0 = the config's max) */
    bool no_lm_head;   /* the pooling runner: the LM head is not loaded (a *Model checkpoint has none);
                          every forward must then be hidden_out */
    int tp_size;       /* tensor parallelism (issue 18): this model is rank tp_rank of tp_size (0 or 1: none), its
                          backend made with that group (backend_options.tp_group); it loads its shard of the
                          weights as vLLM's parallel layers split them: q / k / v and gate / up by output rows
                          (column-parallel), o and down by input columns (row-parallel, all-reduced after), KV
                          heads split; embeddings and the LM head whole on every rank. Dense attention + MLP
                          families only so far; others are refused naming the reason */
    int tp_rank;
    /* the driver (rank 0, tp_device set): model_load also loads ranks 1 .. tp_size - 1 on backends of tp_device
       made with *tp_backend_options in tp_group (the group rank 0's backend was made with), each run by a thread
       of its own; model_forward, model_cache_create / _free and model_reserve then run on every rank
       (model_tp.c) and rank 0's logits are the model's */
    const char *tp_device;
    const backend_options *tp_backend_options;
    struct tpg_group *tp_group;
} model_load_options;

/* Reads config.json, finds the architecture in the registry and loads the
 * weights (memory-mapped safetensors, used in place on the CPU); dir may also name a GGUF file
 * (loader/gguf_config.h: its metadata as config.json, its tensors under their HF names). */
vllm_status model_load(const char *dir, backend *be, const model_load_options *opt, model **out);
/* Several hosts (opt->tp_group made by tpg_create_nodes, this process not node 0): loads this node's ranks
 * (threads on backends of opt->tp_device made with *opt->tp_backend_options), tells node 0 it is ready, then runs
 * node 0's commands (cache, reserve, forward: the other half of model_tp.c's calls on node 0) until node 0 ends
 * the group (VLLM_OK) or the link to it fails (the error). */
vllm_status model_tp_node_run(const char *dir, const model_load_options *opt);
/* VLLM_ERR_BACKEND naming why when the model's ranks can no longer run steps (a tensor-parallel group over
 * several hosts that lost a node); else VLLM_OK. Any thread. */
vllm_status model_check_health(const model *m);
void model_free(model *m);
const model_config *model_get_config(const model *m);

/* The model's KV cache groups (which layers share a block table). */
const kv_cache_groups *model_get_cache_groups(const model *m);
/* Some layer keeps a recurrent state per sequence (linear attention): the engine then gives every
 * running request a state slot (sched_config.num_state_slots). */
bool model_has_recurrent_state(const model *m);
/* Bytes of one block of the shared pool per token it holds: a block of
 * block_size tokens takes block_size times this in every group (one page
 * per physical slot; every layer's page with a single group). */
size_t model_cache_bytes_per_token(const model *m);
/* Device bytes of the recurrent-state pools for num_state_slots slots (0 when no layer keeps one); the
 * checkpoint pools of as many slots take the same. */
size_t model_state_bytes(const model *m, int num_state_slots);
/* The dtypes of the linear-attention layers' state pools (conv, recurrent) and their checkpoints: F32,
 * BF16 or F16 (vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype; F32 until set). Set before
 * model_cache_create; the ops widen the states to f32 and store them rounded. */
vllm_status model_set_state_dtypes(model *m, dtype conv, dtype ssm);
void model_get_state_dtypes(const model *m, dtype *conv, dtype *ssm);
/* Bytes of one linear-attention layer's states (conv and recurrent) for one slot; 0 when no layer keeps
 * one (the engine's checkpoint interval weighs it against one attention layer's KV bytes per token). */
size_t model_layer_state_bytes(const model *m);
/* The KV cache of num_blocks blocks and, for models with recurrent state, the state pools of
 * num_state_slots slots (the engine's max_num_seqs + 1: slot 0 is the null slot) and the checkpoint
 * pools of num_ckpt_slots slots (0: none). */
vllm_status model_cache_create(model *m, int num_blocks, int block_size, int num_state_slots, int num_ckpt_slots,
                               model_cache **out);
void model_cache_free(model *m, model_cache *c);
/* Copies every linear-attention layer's conv and recurrent states of state slot `slot` (1 ..
 * num_state_slots - 1) into checkpoint slot `ckpt` (0 .. num_ckpt_slots - 1): backend copies queued
 * after the ops issued before (the step's forward), so they copy the states it leaves. */
vllm_status model_state_save(model *m, model_cache *c, int slot, int ckpt);
/* The reverse: checkpoint `ckpt` into state slot `slot`, queued before the ops issued after (the forward
 * that resumes from it). */
vllm_status model_state_restore(model *m, model_cache *c, int ckpt, int slot);

/* Allocates every per-step buffer for the largest step (max_tokens tokens
 * from max_seqs sequences, one logits row per sequence) so that steps up to
 * that size allocate nothing (device backends; prompt-logprob steps with
 * more logits rows may still grow the logits buffer). */
vllm_status model_reserve(model *m, int max_tokens, int max_seqs, int max_blocks_per_seq);  /* every group's tables */

/* Replays decode-only steps of up to max_batch sequences as recorded graphs
 * (padded to 1, 2, 4, 8, 16, 24, ...), each recorded on first use (or all at once by model_capture_graphs,
 * the engine's default), with contexts up to max_seq_len tokens. No-op on backends without graphs. */
vllm_status model_enable_graphs(model *m, int max_batch, int max_seq_len);

/* Records every capture size's graph now (vLLM's capture at start-up, outside any request's time) instead of on
 * first use: a decode step of g dummy sequences (token 0 at position 0, their K/V written at slot 0 and read
 * back: block 0 holds no request's data before the first step) run eagerly then recorded, largest first; its
 * outputs are discarded. max_blocks_per_seq: the input builder's (the recorded metadata layout). Sets *count to
 * the graphs recorded (0 where graphs are off). */
vllm_status model_capture_graphs(model *m, model_cache *cache, int max_blocks_per_seq, int *count);

/* Runs the batch; *logits receives a backend tensor (num_logits, vocab) F32
 * owned by the model, valid until the next forward. With b->hidden_out it
 * receives (num_logits, hidden_size) in the backend's activation dtype: the
 * rows' hidden states after the final norm (what the LM head would read). */
vllm_status model_forward(model *m, model_cache *cache, const fwd_batch *b, const tensor **logits);

#endif
