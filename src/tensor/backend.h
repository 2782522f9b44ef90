/*
 * backend.h: the compute backend interface, a table of function pointers.
 *
 * The model forward and the engine call every op through this table, so a
 * backend (src/cpu/, src/cuda/) is chosen at run time and no model or engine
 * code knows which device it runs on. Tensors passed to ops live in the
 * backend's memory (be_alloc / be_import); host arrays cross with
 * be_upload / be_download.
 *
 * Conventions for every op:
 *  - activations are in be->act_dtype (F32 on the CPU), KV caches in
 *    be->kv_dtype; weights keep the checkpoint dtype (F32, F16 or BF16);
 *  - inputs may be strided on dim 0 (tensor.row_stride, a column slice of a
 *    wider buffer); outputs are contiguous unless the op works in place;
 *  - accumulation is in f32 or wider.
 */
#ifndef VLLM_TENSOR_BACKEND_H
#define VLLM_TENSOR_BACKEND_H

#include "sample/sample.h"
#include "tensor/tensor.h"
#include "vllm.h"

typedef struct backend backend;

/* A linear layer's weights, prepared once by the backend: one or more
 * (out_i, in) weight matrices that share the input, concatenated along
 * the output (q|k|v, gate|up), each with an optional bias. */
typedef struct be_linear be_linear;

/* A recorded sequence of ops that can be replayed (a CUDA graph). */
typedef struct be_graph be_graph;

/* A mixture-of-experts layer's experts, prepared once by the backend (like
 * be_linear, so quantized formats can later hide behind it): E gated MLPs,
 * expert e: down_e(act(gate_e x) * up_e x), gate_e / up_e (I, D), down_e (D, I). */
typedef struct be_experts be_experts;

/* Paged attention metadata for one flattened batch of T tokens from S
 * sequences (vLLM v1 layout). Sequence s owns query tokens
 * [query_start_loc[s], query_start_loc[s+1]); they are the last q_len
 * tokens of its seq_lens[s]-token context, so query j attends to keys
 * 0 .. seq_lens[s] - q_len + j (causal).
 * max_query_len and max_seq_len are upper bounds (a recorded graph keeps
 * the values it was recorded with and is replayed with shorter contexts):
 * kernels size their grids from them and read the exact lengths from the
 * tensors. A slot_mapping entry < 0 is a padding token: kv_write skips it. */
typedef struct attn_meta {
    int num_seqs;              /* S */
    int num_tokens;            /* T */
    int max_query_len;         /* max over s of q_len */
    int max_seq_len;           /* max over s of seq_lens[s] */
    int block_size;            /* tokens per KV block */
    int max_blocks_per_seq;    /* columns of block_tables */
    tensor query_start_loc;    /* (S + 1) I32 */
    tensor seq_lens;           /* (S) I32 */
    tensor block_tables;       /* (S, max_blocks_per_seq) I32, physical block ids */
    tensor slot_mapping;       /* (T) I64: block * block_size + offset of each new token */
} attn_meta;

/* Per-layer attention options. Zero-initialised fields are off. */
typedef struct attn_params {
    float scale;               /* softmax scale, usually 1/sqrt(head_dim) */
    int sliding_window;        /* keys older than this many positions are masked; 0 = off */
    int num_heads;             /* query heads */
    int num_kv_heads;          /* key/value heads (GQA: num_heads % num_kv_heads == 0) */
    int head_dim;
    float softcap;             /* > 0: scores s = q.k * scale become tanh(s / softcap) * softcap
                                  before the mask and the softmax (Gemma 2's attn_logit_softcapping,
                                  transformers' eager_attention_forward); 0 = off */
    const tensor *sinks;       /* (num_heads) F32, F16 or BF16 attention sinks, or NULL for none: a learned
                                  logit per head that joins each query's softmax denominator only
                                  (gpt-oss, transformers' GptOssAttention.sinks):
                                  m = max(sink_h, the scores); p_j = exp(s_j - m) / (sum_i exp(s_i - m)
                                  + exp(sink_h - m)); out = sum_j p_j v_j (no value of its own) */
} attn_params;

/* Multi-head latent attention's shapes (attention_mla). */
typedef struct mla_params {
    int num_heads;             /* H */
    int kv_lora_rank;          /* L: the latent c per token (and the absorbed q / the output per head) */
    int rope_dim;              /* R: the rotary part k_rope shared by the heads (qk_rope_head_dim) */
    float scale;               /* softmax scale: 1 / sqrt(qk_nope_head_dim + R) [* yarn's mscale^2] */
} mla_params;

/* Activations, as transformers' ACT2FN names them (activations.py), in f32. */
typedef enum be_act {
    BE_ACT_SILU = 0,   /* "silu":              x / (1 + exp(-x)) */
    BE_ACT_GELU_TANH,  /* "gelu_pytorch_tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    BE_ACT_GELU,       /* "gelu" (exact):      0.5 x (1 + erf(x / sqrt(2))) */
    BE_ACT_RELU,       /* "relu":              max(x, 0) (NaN stays NaN) */
    BE_ACT_SWIGLU_OAI, /* "swigluoai" (gated only: act_mul, linear_fused's gated product, moe_experts; not
                          activation): gpt-oss's clamped SwiGLU of a gate g and an up u,
                          g' = min(g, limit), u' = clamp(u, -limit, limit),
                          out = g' * sigmoid(alpha * g') * (u' + 1)
                          (transformers' GptOssExperts._apply_gate, vLLM's swigluoai); alpha and limit
                          from moe_params (moe_experts), else BE_SWIGLU_OAI_ALPHA / _LIMIT */
    BE_ACT_COUNT
} be_act;

/* BE_ACT_SWIGLU_OAI's constants where no moe_params gives them (gpt-oss's: transformers' GptOssExperts
 * alpha 1.702, GptOssConfig.swiglu_limit 7.0) */
#define BE_SWIGLU_OAI_ALPHA 1.702f
#define BE_SWIGLU_OAI_LIMIT 7.0f

/* Row normalisations, over groups of G = len(w) elements along each row
 * (G = the whole row when w is NULL), in f32: */
typedef enum be_norm_kind {
    BE_NORM_RMS = 0,     /* x / sqrt(mean(x^2) + eps) * w                        (Llama's RMSNorm) */
    BE_NORM_RMS_OFFSET,  /* x / sqrt(mean(x^2) + eps) * (1 + w)                  (Gemma's RMSNorm: the
                            f32 product with 1 + w.float(), then the cast) */
    BE_NORM_LAYER,       /* (x - mean(x)) / sqrt(var(x) + eps) * w + b, var biased (OPT's nn.LayerNorm) */
    BE_NORM_COUNT
} be_norm_kind;

typedef struct be_norm {
    be_norm_kind kind;
    const tensor *w;     /* (G) any float dtype, or NULL: w = 1 (BE_NORM_RMS_OFFSET: w = 0) */
    const tensor *b;     /* (G) BE_NORM_LAYER's bias, any float dtype, or NULL (b = 0) */
    float eps;
} be_norm;

/* What linear_fused does around the layer, in order:
 *   x   = res ? (res_out = x + res_norm(res)) : x              (T, in)
 *         (a pending residual add, as norm then add round it: the sandwich
 *         layout's block output folded into the next layer's linear)
 *   in  = norm_w ? rms_norm(x) * norm_w : x                    (T, in)
 *         (norm_kind != BE_NORM_RMS: that norm of be_norm, with norm_w, norm_b)
 *   mid = in @ W^T + b                                          (T, out)
 *   r   = silu_mul ? act(mid[:, :out/2]) * mid[:, out/2:] : mid   (act: SiLU unless set)
 *   y   = accumulate ? y + r : r        (the residual add: y is the stream)
 * With the norm, h (T, in) is required and receives `in` (every backend writes
 * it, as the norm op would: a caller may read it afterwards, e.g. the MoE
 * block's experts after the router's linear_fused); h must not overlap x.
 * mid (T, out) is scratch a backend may write (required with silu_mul or
 * accumulate). silu_mul and accumulate do not combine. y must not overlap
 * x, h, mid or res; res_out must not overlap x, res, h, mid or y. Zero-initialised
 * fields keep the Llama meaning. */
typedef struct linear_fuse {
    const tensor *norm_w;  /* (in) RMSNorm weight, or NULL for none (see norm_kind) */
    float eps;             /* the norm's epsilon */
    bool silu_mul;         /* the gated product of the two output halves, act(gate) * up */
    bool accumulate;       /* y += the result instead of y = */
    tensor *h, *mid;       /* scratch, see above */
    be_act act;            /* the gated product's activation; 0 = BE_ACT_SILU */
    be_norm_kind norm_kind;/* 0 = BE_NORM_RMS; another kind runs the norm stage even without norm_w */
    const tensor *norm_b;  /* (in) BE_NORM_LAYER's bias, or NULL */
    const tensor *res;     /* (T, in) a block output to add to x first (left as it is), or NULL */
    const be_norm *res_norm; /* its norm (required with res) */
    tensor *res_out;       /* (T, in) receives x + res_norm(res) (required with res) */
} linear_fuse;

/* How a mixture-of-experts layer routes its tokens (transformers' MoE blocks). */
typedef enum be_moe_scoring {
    BE_MOE_SOFTMAX = 0,    /* p = softmax(logits) over all E in f32, then the top k of p
                              (Qwen2-MoE, Qwen3-MoE, Mixtral); no groups, no score_bias */
    BE_MOE_SOFTMAX_GROUPED,/* DeepSeek-V2 (transformers' DeepseekV2Moe.route_tokens_to_experts, topk_method
                              "group_limited_greedy"; "greedy" is this with num_groups 0 / 1):
                              p = softmax(logits) in f32; with groups: a group's score = the max of its p,
                              the topk_groups best groups kept, the p of the other groups' experts set to 0
                              (transformers' masked_fill(0.0)); the top k of that; weights = those values */
    BE_MOE_SIGMOID_NOAUX_TC,/* DeepSeek-V3 / Kimi-K2 (transformers' DeepseekV3TopkRouter, "noaux_tc"):
                              s = sigmoid(logits) in f32, c = s + score_bias (the choice scores); with
                              groups: a group's score = the sum of its two largest c, the topk_groups best
                              groups kept, the c of the other groups' experts set to 0; the top k of c;
                              weights = s of the chosen experts (not c) */
    BE_MOE_SCORING_COUNT
} be_moe_scoring;

/* Zero-initialised fields are "off": no groups, no score bias, a routed scaling of 1. The grouped
 * scorings renormalise as transformers' DeepSeek routers do, w / (sum + 1e-20); every scoring multiplies
 * the final weights by routed_scaling (after the renormalisation). Ranking everywhere (groups and
 * experts): the larger score first, equal scores the lower id first, a NaN never preferred
 * (torch.topk leaves the order of equal values unspecified). */
typedef struct moe_params {
    int num_experts;       /* E */
    int top_k;             /* k experts per token, 1 <= k <= E */
    be_moe_scoring scoring;
    bool renormalize;      /* the k weights divided by their sum (Qwen's norm_topk_prob; Mixtral: always) */
    be_act act;            /* the experts' gate activation */
    float swiglu_alpha;    /* act BE_ACT_SWIGLU_OAI: its alpha and limit; 0 = BE_SWIGLU_OAI_ALPHA / _LIMIT */
    float swiglu_limit;
    bool bias;             /* the experts carry biases (experts_create's bias; asked of supports()) */
    int num_groups;        /* the grouped scorings: E in num_groups equal groups of consecutive ids (n_group;
                              E % num_groups == 0; BE_MOE_SIGMOID_NOAUX_TC: at least 2 experts a group);
                              0 or 1 = no groups (BE_MOE_SOFTMAX: must be) */
    int topk_groups;       /* with groups: the groups kept per token (topk_group), 1 <= topk_groups <=
                              num_groups and topk_groups * E / num_groups >= top_k; ignored without groups */
    float routed_scaling;  /* the weights multiplied by it last (routed_scaling_factor); 0 = 1 */
    const tensor *score_bias; /* BE_MOE_SIGMOID_NOAUX_TC only: (E) F32 (F16 / BF16 taken too) on the
                              backend's device, added to s for the choice (e_score_correction_bias);
                              NULL = none. Not asked of supports() */
    int num_shared;        /* experts E .. E + num_shared - 1 follow the top k of every token with weight
                              exactly 1 (DeepSeek's plain shared experts, transformers' DeepseekV2MoE:
                              moe(...) + shared_experts(x), split over their intermediate dimension into
                              num_shared experts of the routed ones' size): moe_route writes ids / w of
                              (T, top_k + num_shared), the routed k first as without them, and moe_experts
                              takes experts of E + num_shared (be_experts made with that many) and ids / w
                              of that width. 0 = none */
    bool shared_gate;      /* with num_shared: their weight is sigmoid(logits[t, E]) in f32 instead of 1, the
                              logits then (T, E + 1) (Qwen2-MoE / Qwen3.5-MoE's shared expert, transformers'
                              sigmoid(shared_expert_gate(x)) * shared_expert(x), its gate's logit after the
                              router's); routing reads only the first E columns */
} moe_params;

/* The ids / weights per token of moe_route and moe_experts: top_k, then the shared experts. */
static inline int be_moe_width(const moe_params *p) { return p->top_k + p->num_shared; }

/* NULL when moe_params' routing fields (scoring, num_groups, topk_groups, routed_scaling, score_bias,
 * num_shared) are consistent, else why not (the backends' moe_route / moe_experts / supports share it). */
static inline const char *be_moe_routing_check(const moe_params *p) {
    if ((unsigned)p->scoring >= BE_MOE_SCORING_COUNT) return "scoring out of range";
    if (!(p->routed_scaling >= 0.0f && p->routed_scaling < 3.4e38f))
        return "routed_scaling must be 0 (none) or positive and finite";
    if (p->num_groups < 0 || p->topk_groups < 0) return "num_groups and topk_groups must not be negative";
    if (p->num_shared < 0 || (int64_t)p->num_experts + p->num_shared > INT32_MAX / 2 ||
        (int64_t)p->top_k + p->num_shared > INT32_MAX / 2)
        return "num_shared must not be negative (nor E + num_shared or top_k + num_shared huge)";
    if (p->shared_gate && p->num_shared < 1) return "shared_gate needs shared experts (num_shared >= 1)";
    if (p->num_groups > 1) {
        if (p->scoring == BE_MOE_SOFTMAX) return "BE_MOE_SOFTMAX takes no groups (BE_MOE_SOFTMAX_GROUPED does)";
        if (p->num_experts % p->num_groups) return "num_groups must divide num_experts";
        const int per = p->num_experts / p->num_groups;
        if (p->scoring == BE_MOE_SIGMOID_NOAUX_TC && per < 2)
            return "BE_MOE_SIGMOID_NOAUX_TC's groups need 2 experts or more (a group scores its top 2)";
        if (p->topk_groups < 1 || p->topk_groups > p->num_groups)
            return "topk_groups must be 1 .. num_groups";
        if ((int64_t)p->topk_groups * per < p->top_k) return "the kept groups hold fewer than top_k experts";
    }
    if (p->score_bias) {
        const tensor *b = p->score_bias;
        if (p->scoring != BE_MOE_SIGMOID_NOAUX_TC) return "score_bias is BE_MOE_SIGMOID_NOAUX_TC's only";
        if (!b->data || b->ndim != 1 || b->shape[0] != p->num_experts ||
            (b->dtype != DTYPE_F32 && b->dtype != DTYPE_F16 && b->dtype != DTYPE_BF16))
            return "score_bias must be an (num_experts) F32 / F16 / BF16 vector";
    }
    return NULL;
}

/* Optional per-expert biases of experts_create: arrays of E host tensors (any float dtype),
 * gate[e], up[e] (I) added to the gate and up projections before the activation, down[e] (D)
 * to the expert's output (gpt-oss: gate_up_proj_bias, down_proj_bias). A NULL array or entry is
 * a zero bias. */
typedef struct be_expert_bias {
    const tensor *const *gate, *const *up, *const *down;
} be_expert_bias;

/* Per-sequence state metadata of the linear-attention ops (causal_conv1d, gated_delta_rule) for one
 * flattened batch of T tokens from S sequences, as vLLM's mamba / GDN attention metadata: sequence s owns
 * tokens [query_start_loc[s], query_start_loc[s+1]) (the same array as attn_meta's) and the state slot
 * state_slots[s] of every state pool the ops are given (a pool holds one state per slot; the engine gives
 * a request a slot for its lifetime). has_initial_state[s] != 0 continues from the state in the slot (a
 * later chunk of a prompt, a decode step); 0 starts from zeros (a new prompt: the slot's old contents
 * are neither read nor kept). Either way the slot holds the state after the sequence's last token when
 * the op returns. A slot < 0 is a padding sequence (a recorded graph's spare rows): no state is read or
 * written and its output rows are 0. A sequence with no tokens leaves its slot as it was. Sequences of
 * one batch have distinct slots; slots not in the batch are untouched. Decode is the same call with one
 * token per sequence. */
typedef struct linear_attn_meta {
    int num_seqs;              /* S */
    int num_tokens;            /* T */
    int max_query_len;         /* an upper bound of the tokens of one sequence (grid sizing) */
    tensor query_start_loc;    /* (S + 1) I32, from 0 to T, non-decreasing */
    tensor state_slots;        /* (S) I32: the slot of each sequence, or < 0 for padding */
    tensor has_initial_state;  /* (S) I32: != 0 continue from the slot's state, 0 start from zeros */
} linear_attn_meta;

/* A gated delta-net layer's shapes and options (transformers' Qwen3NextGatedDeltaNet; vLLM's GDN
 * attention): H_k query/key heads of d_k, H_v value heads of d_v, H_v a multiple of H_k; v-head h reads
 * q/k head h / (H_v / H_k) (transformers' repeat_interleave of q and k over dim 2). */
typedef struct gdn_params {
    int num_k_heads;           /* H_k (linear_num_key_heads) */
    int num_v_heads;           /* H_v (linear_num_value_heads) */
    int head_k_dim;            /* d_k (linear_key_head_dim) */
    int head_v_dim;            /* d_v (linear_value_head_dim) */
    float scale;               /* q's scale; 0 = 1 / sqrt(d_k) (transformers' scale = 1 / sqrt(d_k)) */
    bool qk_l2norm;            /* q and k L2-normalised in the op, x / sqrt(sum(x^2) + 1e-6), before the
                                  scale (transformers' use_qk_l2norm_in_kernel=True, its l2norm eps 1e-6) */
    int conv_kernel;           /* K of the layer's causal_conv1d (asked of supports() only; 0 = not asked) */
    dtype state_dtype;         /* the recurrent state pool's dtype (asked of supports() only; 0 = F32) */
} gdn_params;

/* The ops whose support depends on their parameters (backend_ops.supports). */
typedef enum be_op {
    BE_OP_ATTENTION = 0,   /* params: const attn_params * */
    BE_OP_LINEAR_FUSED,    /* params: const linear_fuse * */
    BE_OP_ACT_MUL,         /* params: const be_act * */
    BE_OP_ACTIVATION,      /* params: const be_act * */
    BE_OP_NORM,            /* params: const be_norm * */
    BE_OP_ADD_NORM,        /* params: const be_norm * */
    BE_OP_QK_NORM_ROPE_KV, /* params: const be_norm * (qk_norm_rope_kv_ex's q/k norm), or NULL for none */
    BE_OP_SOFTCAP,         /* params: NULL */
    BE_OP_MOE,             /* params: const moe_params * (moe_route and moe_experts) */
    BE_OP_GATED_DELTA_NET, /* params: const gdn_params * (causal_conv1d, gated_delta_rule, rms_norm_gated,
                              gdn_gating, sigmoid_mul) */
    BE_OP_MLA,             /* params: const mla_params * (attention_mla over the backend's kv_dtype cache, and
                              head_linear's absorptions; the CUDA kernels' head and shared-memory limits) */
    BE_OP_DENSE_STACK,     /* params: const be_dense_stack * (dense_stack_decode takes this stack: BE_NATIVE) */
    BE_OP_COUNT
} be_op;

/* One layer of a dense stack (dense_stack_decode): the Llama layout's weights and the layer's paged caches. */
typedef struct be_dense_layer {
    const be_linear *qkv;      /* (nh hd + 2 nkv hd, D) [+ bias] */
    const be_linear *o;        /* (D, nh hd) [+ bias] */
    const be_linear *gate_up;  /* (2 I, D): gate rows, then up rows [+ bias] */
    const be_linear *down;     /* (D, I) [+ bias] */
    const tensor *in_norm;     /* (D) RMSNorm weight before qkv */
    const tensor *post_norm;   /* (D) RMSNorm weight before gate_up */
    const tensor *q_norm;      /* (hd) per-head RMSNorm weights of q and k (Qwen3), or NULL for none */
    const tensor *k_norm;
    tensor *k_cache, *v_cache; /* (num_blocks, block_size, nkv, hd) */
} be_dense_layer;

/* A stack of uniform pre-norm dense layers (Llama, Mistral, Qwen2, Qwen3): per layer
 *   x += o(attention(rope(qk_norm(q, k)), v))  with q, k, v = qkv(rms_norm(x) * in_norm)
 *   x += down(silu(gate) * up)                   with gate, up = gate_up(rms_norm(x) * post_norm)
 * one RoPE table and window for every layer, no softcap, no sinks. */
typedef struct be_dense_stack {
    const be_dense_layer *layers;
    int num_layers;
    int64_t hidden;            /* D */
    int64_t intermediate;      /* I */
    int num_heads, num_kv_heads, head_dim;
    int rot_dim;               /* RoPE's first rot_dim dims of each head (> 0) */
    bool neox;                 /* rotate halves (as rope()), else adjacent pairs */
    const tensor *cos_sin;     /* (max_pos, rot_dim) F32 */
    float eps;                 /* every RMSNorm's */
    float scale;               /* attention's softmax scale */
    int sliding_window;        /* 0: none */
} be_dense_stack;

/* What a backend does with an op and its parameters. */
typedef enum be_support {
    BE_UNSUPPORTED = 0,    /* refused (the op records an error): the model has to do without */
    BE_COMPOSITE,          /* runs as its composite of single ops (tensor/op_composite.h) */
    BE_NATIVE,             /* a kernel of its own (fused; for linear_fused: decode-sized batches) */
} be_support;

typedef struct backend_ops {
    void (*destroy)(backend *be);

    /* ---- memory ---- */
    /* Allocates a contiguous tensor of the shape in *t (t->data is set). */
    vllm_status (*alloc)(backend *be, tensor *t);
    void (*release)(backend *be, tensor *t);
    /* Makes a host tensor (e.g. from a memory-mapped checkpoint) usable by
     * ops. The CPU returns a view of the same memory (no copy); a GPU
     * uploads. Release with release_import. */
    vllm_status (*import)(backend *be, const tensor *host, tensor *out);
    void (*release_import)(backend *be, tensor *t);
    /* Copies nbytes between host memory and the start of a backend tensor. */
    vllm_status (*upload)(backend *be, tensor *dst, const void *src, size_t nbytes);
    vllm_status (*download)(backend *be, void *dst, const tensor *src, size_t nbytes);
    /* Sets every byte of a backend tensor to 0. */
    vllm_status (*zero)(backend *be, tensor *t);
    /* dst = src, byte for byte: both contiguous, of one dtype and element count, not overlapping (the
     * recurrent-state checkpoints: rows of the state pools). An op: queued in order with the other ops
     * on the backend's stream (a device-to-device copy; records into a graph), failures reported by
     * synchronize / download. */
    void (*copy)(backend *be, const tensor *src, tensor *dst);
    /* Waits for queued work to finish. */
    vllm_status (*synchronize)(backend *be);
    /* Free and total bytes of the device's own memory; NULL for backends on
     * host memory (the CPU), whose KV cache is sized by kv_cache_memory. */
    vllm_status (*mem_info)(backend *be, size_t *free_bytes, size_t *total_bytes);

    /* ---- weights ---- */
    /* weights[i]: (out_i, in) host tensors of one dtype; biases: NULL, or an
     * array of n host tensors (out_i) (entries may be NULL). */
    vllm_status (*linear_create)(backend *be, const tensor *const *weights,
                                 const tensor *const *biases, int n, be_linear **out);
    void (*linear_free)(backend *be, be_linear *lin);

    /* ---- ops ---- */
    /* y (T, sum out_i) = x (T, in) @ W^T + b */
    void (*linear)(backend *be, const be_linear *lin, const tensor *x, tensor *y);
    /* The linear layer with its neighbours (linear_fuse, below) as one op: a
     * GPU runs decode-sized batches of it as one kernel; as
     * linear_fused_composite (tensor/op_composite.h) otherwise. */
    void (*linear_fused)(backend *be, const be_linear *lin, const tensor *x, const linear_fuse *f, tensor *y);
    /* out (T, D) = table[ids] ; table (V, D) any float dtype, ids (T) I32 */
    void (*embedding)(backend *be, const tensor *table, const tensor *ids, tensor *out);
    /* RMSNorm over groups of w's length along each row:
     * out = x / sqrt(mean(x^2) + eps) * w ; x (T, D) with D % len(w) == 0.
     * out may be x (in place, keeping x's stride). */
    void (*rms_norm)(backend *be, const tensor *x, const tensor *w, float eps, tensor *out);
    /* x (T, D) += y (T, D) */
    void (*add)(backend *be, tensor *x, const tensor *y);
    /* The residual add fused with the next norm:
     * x (T, D) += y (T, D); out (T, D) = rms_norm(x) * w  (as add then rms_norm) */
    void (*add_rms_norm)(backend *be, tensor *x, const tensor *y, const tensor *w, float eps, tensor *out);
    /* out (T, I) = silu(gate_up[:, :I]) * gate_up[:, I:] ; gate_up (T, 2I) */
    void (*silu_mul)(backend *be, const tensor *gate_up, tensor *out);
    /* out (T, I) = act(gate_up[:, :I]) * gate_up[:, I:] ; gate_up (T, 2I); act
     * BE_ACT_SILU is silu_mul (Gemma: BE_ACT_GELU_TANH; Phi-3, GLM-4: SiLU). */
    void (*act_mul)(backend *be, be_act act, const tensor *gate_up, tensor *out);
    /* x (T, I) = act(x) in place (OPT's fc1: BE_ACT_RELU). */
    void (*activation)(backend *be, be_act act, tensor *x);
    /* x (T, V) = tanh(x / cap) * cap in place, cap > 0 (Gemma 2's final_logit_softcapping). */
    void (*softcap)(backend *be, tensor *x, float cap);
    /* x (T, D) *= s in place, in f32 then rounded to x's dtype (Gemma's embedding
     * normaliser: the model passes s already rounded to the activation dtype). */
    void (*scale)(backend *be, tensor *x, float s);
    /* out (T, D) = the norm n of x (be_norm); x (T, D) with D % G == 0. out may be x
     * (in place, keeping x's stride). BE_NORM_RMS is rms_norm. */
    void (*norm)(backend *be, const tensor *x, const be_norm *n, tensor *out);
    /* x (T, D) += y (T, D); out (T, D) = norm(x) (as add then norm). */
    void (*add_norm)(backend *be, tensor *x, const tensor *y, const be_norm *n, tensor *out);
    /* The sandwich layout's residual (Gemma, GLM-4), as norm, add [, norm]: y (T, D) = ny(y) in place;
     * x (T, D) += y; then, when nx is given, out (T, D) = nx(x). Supported as BE_OP_ADD_NORM with ny
     * and with nx. */
    void (*norm_add_norm)(backend *be, tensor *x, tensor *y, const be_norm *ny, const be_norm *nx, tensor *out);
    /* Rotary embedding in place on q (T, nq*head_dim) and k (T, nk*head_dim).
     * cos_sin (max_pos, rot_dim) F32: [cos(p*f_0..f_{r/2-1}) | sin(...)].
     * neox: rotate halves (i, i + rot_dim/2) (HF Llama); else adjacent pairs. */
    void (*rope)(backend *be, tensor *q, tensor *k, const tensor *positions /* (T) I32 */,
                 const tensor *cos_sin, int head_dim, int rot_dim, bool neox);
    /* Writes k, v (T, nkv*head_dim) into the paged caches
     * (num_blocks, block_size, nkv, head_dim) at m->slot_mapping. */
    void (*kv_write)(backend *be, const tensor *k, const tensor *v, tensor *k_cache,
                     tensor *v_cache, const attn_meta *m);
    /* The attention prologue fused: per-head RMSNorm of q and k when
     * q_norm / k_norm (head_dim) are given (Qwen3; NULL = none), RoPE on q and
     * k, then k and v written to the paged caches; as rms_norm (x2), rope and
     * kv_write in that order. q is updated in place; k may be too. */
    void (*qk_norm_rope_kv)(backend *be, tensor *q, tensor *k, const tensor *v, const tensor *q_norm,
                            const tensor *k_norm, float eps, const tensor *positions, const tensor *cos_sin,
                            int head_dim, int rot_dim, bool neox, tensor *k_cache, tensor *v_cache,
                            const attn_meta *m);
    /* qk_norm_rope_kv with norms of any kind (be_norm over head_dim; NULL =
     * none): Gemma 3's (1 + w) q/k norms are BE_NORM_RMS_OFFSET. */
    void (*qk_norm_rope_kv_ex)(backend *be, tensor *q, tensor *k, const tensor *v, const be_norm *q_norm,
                               const be_norm *k_norm, const tensor *positions, const tensor *cos_sin, int head_dim,
                               int rot_dim, bool neox, tensor *k_cache, tensor *v_cache, const attn_meta *m);
    /* out (T, nh*hd) = causal softmax(q k^T * scale) v over the paged caches
     * (softcapped scores when p->softcap > 0; a sink per head in the denominator when p->sinks). */
    void (*attention)(backend *be, const tensor *q, const tensor *k_cache, const tensor *v_cache,
                      const attn_meta *m, const attn_params *p, tensor *out);

    /* ---- multi-head latent attention (DeepSeek-V2 / V3), vLLM's absorbed "MQA" form
     *      (vllm/v1/attention/backends/mla/common.py); NULL where the backend has none ---- */
    /* y (T, H*N) = per head h: W_h x_h, i.e. y[t, h*N + n] = sum_k w[h, n, k] x[t, h*K + k], f32
     * accumulation, rounded once. x (T, H*K) act dtype, may be strided; w (H, N, K) any float dtype,
     * contiguous (imported); y (T, H*N) act dtype, contiguous, not overlapping x. MLA's absorptions:
     * q_lat_h = W_UK_h^T q_nope_h and o_h = W_UV_h o_lat_h. */
    void (*head_linear)(backend *be, const tensor *x, const tensor *w, tensor *y);
    /* MLA over a paged latent cache (num_blocks, block_size, 1, L + R) of rows [c ; k_rope]: first kv
     * (T, L + R) (act dtype, may be strided; NULL: nothing written) is written into the cache at
     * m->slot_mapping (vLLM's concat_and_cache_mla; slots < 0 skipped), then per query token t of its
     * sequence (the causal / chunked-prefill / prefix-cache semantics of attention) and head h:
     *   s_j = (q_lat[t, h] . c_j + q_rope[t, h] . k_rope_j) * scale     over its keys j
     *   out[t, h] = sum_j softmax(s)_j c_j                              (L values: the latent output)
     * q_lat (T, H*L), q_rope (T, H*R) act dtype, may be strided; out (T, H*L) act dtype, contiguous.
     * The cache is the backend's kv_dtype (an FP8 one scaled by its qscale as attention's K). */
    void (*attention_mla)(backend *be, const tensor *q_lat, const tensor *q_rope, const tensor *kv, tensor *cache,
                          const attn_meta *m, const mla_params *p, tensor *out);
    /* MLA's new latents in one op (DeepSeek's kv_a_layernorm, rotary embedding and concat_and_cache_mla), in
     * place: c = rms_norm(kv[:, :L]) * norm_w (eps; L = kv's width - rope_dim), then rope (as rope(): pairs
     * neox or adjacent, cos_sin (max_pos, rope_dim)) on the shared key kv[:, L:] and on q_rope (T, H rope_dim)
     * at positions, then kv's rows into cache (num_blocks, block_size, 1, L + rope_dim) at m->slot_mapping as
     * attention_mla writes them (slots < 0 skipped). attention_mla then runs with kv NULL. Optional (NULL: norm,
     * rope and attention_mla's own write, which this equals). */
    void (*mla_prep)(backend *be, tensor *q_rope, tensor *kv, const tensor *norm_w, float eps,
                     const tensor *positions, const tensor *cos_sin, int rope_dim, bool neox, tensor *cache,
                     const attn_meta *m);
    /* One token of one sequence (m: num_tokens 1, num_seqs 1; a decode step, or a prompt's last token)
     * through every layer of st in one call: exactly the ops the decoder runs per layer (linear_fused with
     * the norm, qk_norm_rope_kv, attention, linear_fused accumulating into x, the gated MLP), their
     * roundings included, the new k and v written to each layer's caches at m->slot_mapping. x (1, D) in
     * place; qkv (1, nh hd + 2 nkv hd), attn (1, nh hd), act (1, I): scratch of x's dtype. Optional (NULL:
     * the per-layer ops); a backend takes the stacks supports(BE_OP_DENSE_STACK, st) answers BE_NATIVE. */
    void (*dense_stack_decode)(backend *be, const be_dense_stack *st, tensor *x, const tensor *positions,
                               const attn_meta *m, tensor *qkv, tensor *attn, tensor *act);
    /* out (N, D) = x[idx] ; idx (N) I32 */
    void (*gather_rows)(backend *be, const tensor *x, const tensor *idx, tensor *out);
    /* x (T, D) = the sum of x over the backend's tensor-parallel group (backend_options.tp_group), the same on
     * every rank (each rank calls it with the same shape, in the same order); without a group, nothing.
     * Optional: NULL where the backend has no tensor parallelism (a model then refuses tp_size > 1). */
    void (*all_reduce)(backend *be, tensor *x);
    /* out (N, C tp) = every rank's x (N, C) side by side, rank k's in columns [k C, (k + 1) C) (the
     * vocabulary-parallel LM head's logits); without a group, out = x. Optional as all_reduce. */
    void (*all_gather_cols)(backend *be, const tensor *x, tensor *out);
    /* out (T, D) = table[ids - row0] for ids in [row0, row0 + rows(table)), zeros for the others (a
     * vocabulary-parallel embedding's shard; all_reduce then sums the ranks'). Optional as all_reduce. */
    void (*embedding_range)(backend *be, const tensor *table, const tensor *ids, int64_t row0, tensor *out);
    /* Optional: makes the calling thread ready to issue this backend's ops (a GPU backend: its device current),
     * for a thread other than the one that created it (tensor-parallel worker ranks). */
    void (*bind_thread)(backend *be);

    /* ---- mixture of experts ---- */
    /* gate[e], up[e]: (I, D), down[e]: (D, I) host tensors of one dtype, e < E
     * (a checkpoint's per-expert tensors, or views of its fused ones); bias: NULL, or the
     * experts' biases (be_expert_bias): expert e is then
     * down_e(act(gate_e x + bg_e) * (up_e x + bu_e)) + bd_e. */
    vllm_status (*experts_create)(backend *be, const tensor *const *gate, const tensor *const *up,
                                  const tensor *const *down, const be_expert_bias *bias, int E,
                                  be_experts **out);
    void (*experts_free)(backend *be, be_experts *ex);
    /* Optional (NULL: nothing to size): readies the backend's scratch for moe_experts calls of up to
     * max_pairs (token, expert) pairs on experts shaped like ex, so that such calls record into
     * graphs (graph_moe_pairs rises to max_pairs) and never move memory a recording uses. */
    vllm_status (*experts_reserve)(backend *be, const be_experts *ex, int64_t max_pairs);
    /* The routing of router logits (T, E) (act dtype or F32; (T, E + 1) with p->shared_gate) as p's scoring:
     * ids (T, k) I32 the chosen experts (best first by the choice score; equal
     * scores: the lower id first), w (T, k) F32 their weights (renormalised
     * when p says so, times p's routed_scaling). With p->num_shared: ids / w
     * are (T, k + num_shared), columns k .. hold E, E + 1, .. with weight 1
     * (p->shared_gate: sigmoid(logits[t, E])).
     * On the device: no host round trip, so it records into a graph. */
    void (*moe_route)(backend *be, const tensor *logits, const moe_params *p, tensor *ids, tensor *w);
    /* y (T, D) = (or +=, accumulate) sum over j < k (+ p->num_shared) of w[t, j] * expert_{ids[t, j]}(x_t)
     * (ex holds p->num_experts + p->num_shared experts);
     * x (T, D); each expert's output rounded to the activation dtype, then
     * weighted and summed in f32 in increasing expert id (transformers: expert(x)
     * * w, index_add_ expert by expert); y must not overlap x. */
    void (*moe_experts)(backend *be, const be_experts *ex, const tensor *x, const tensor *ids, const tensor *w,
                        const moe_params *p, bool accumulate, tensor *y);
    /* x (T, D) *= sigmoid(g[t]) row by row; g (T, 1) (Qwen2-MoE's shared-expert gate). */
    void (*sigmoid_gate)(backend *be, tensor *x, const tensor *g);

    /* ---- linear attention (the gated delta-net mixer of Qwen3-Next / Qwen3.5; NULL where the backend
     *      has none: supports(BE_OP_GATED_DELTA_NET) says so) ---- */
    /* Depthwise causal conv1d over each sequence of the flattened batch m (linear_attn_meta), with the
     * last K - 1 inputs of each sequence kept in its conv state (vLLM's causal_conv1d_fn / _update,
     * transformers' torch_causal_conv1d_update and the mixer's nn.Conv1d(groups=C, padding=K - 1) with
     * the first T outputs kept):
     *   out[t, c] = act(bias[c] + sum_{j<K} w[c, j] * x'[t - (K - 1) + j, c])
     * where x' is the sequence's inputs preceded by its K - 1 state columns (zeros when it starts from
     * zeros), act = SiLU when silu, else the identity. Afterwards the slot holds the last K - 1 of x'
     * (fewer new tokens than K - 1 shift the old state left). Accumulated in f32 (bias and SiLU
     * included), rounded once to out's dtype.
     * x (T, C) act dtype (may be strided: a column slice of the input projection); w (C, K) any float
     * dtype (the checkpoint's conv1d.weight (C, 1, K) viewed as (C, K)), K >= 2; bias (C) any float
     * dtype or NULL; conv_state (num_slots, C, K - 1) F32 / F16 / BF16, contiguous: state[slot, c, i]
     * is the input i - (K - 1) steps before the next token (i = K - 2 the newest), stored rounded to
     * its dtype; out (T, C) act dtype, may be x (in place). */
    void (*causal_conv1d)(backend *be, const tensor *x, const tensor *w, const tensor *bias, bool silu,
                          tensor *conv_state, const linear_attn_meta *m, tensor *out);
    /* The gated delta rule, recurrent form, token by token in each sequence of m (sequences
     * independent); per token t and v-head h, with kh = h / (H_v / H_k) and S = the (d_k, d_v) state
     * of head h in the sequence's slot (transformers' torch_recurrent_gated_delta_rule, fla's
     * fused_recurrent_gated_delta_rule):
     *   q~ = l2norm(q[t, kh]) * scale, k~ = l2norm(k[t, kh])    (no l2norm unless p->qk_l2norm)
     *   S  = S * exp(g[t, h])                                    (g: the decay in log space, <= 0)
     *   u[j] = (v[t, h, j] - sum_i S[i, j] k~[i]) * beta[t, h]    (the delta rule)
     *   S  = S + k~ u^T                                          (S[i, j] += k~[i] u[j])
     *   o[t, h, j] = sum_i S[i, j] q~[i]
     * in f32 (the state widened from its dtype, stored back rounded to it after each sequence).
     * q, k (T, H_k * d_k), v (T, H_v * d_v) act dtype, head-major columns, may be strided; g, beta
     * (T, H_v) any float dtype, may be strided (the model computes g = -exp(A_log) * softplus(a +
     * dt_bias) and beta = sigmoid(b)); state (num_slots, H_v, d_k, d_v) F32 / F16 / BF16, contiguous
     * (transformers' and fla's recurrent state layout: d_k rows of d_v); out (T, H_v * d_v) act dtype,
     * contiguous, not overlapping the inputs (o rounded once). */
    void (*gated_delta_rule)(backend *be, const tensor *q, const tensor *k, const tensor *v, const tensor *g,
                             const tensor *beta, tensor *state, const linear_attn_meta *m, const gdn_params *p,
                             tensor *out);
    /* Reserves what gated_delta_rule needs for batches of up to max_tokens tokens of layers shaped like p
     * (a GPU's workspace for its chunked prefill), so that later calls never allocate (NULL: nothing to
     * reserve). */
    vllm_status (*gdn_reserve)(backend *be, const gdn_params *p, int64_t max_tokens);
    /* The gated RMSNorm of the mixer's output (transformers' Qwen3NextRMSNormGated, fla's
     * FusedRMSNormGated with norm_before_gate), over groups of G = len(w) elements (one v-head each):
     *   out = rms_norm(x) * w * silu(z)   (w itself, not 1 + w: the weight is initialised to ones)
     * transformers' dtypes: x -> f32, x * rsqrt(mean(x^2) + eps), rounded to the act dtype, times w (in
     * the promoted dtype of w and the activations), times silu(f32(z)) in f32, rounded to the act dtype;
     * a backend with f32 activations runs it all in f32. x, z (T, D) act dtype with D % G == 0, may be
     * strided; w (G) any float dtype; out (T, D) act dtype, may be x (in place). */
    void (*rms_norm_gated)(backend *be, const tensor *x, const tensor *z, const tensor *w, float eps, tensor *out);
    /* The mixer's decay and write strength from its in_proj_ba outputs (transformers' Qwen3NextGatedDeltaNet:
     * beta = b.sigmoid(); g = -A_log.float().exp() * F.softplus(a.float() + dt_bias), softplus(x) =
     * log(1 + exp(x)), torch's threshold 20 above which it is x), per token t and v-head h:
     *   g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]),  beta[t, h] = sigmoid(b[t, h])
     * in f32. a, b (T, H) act dtype, may be strided; A_log, dt_bias (H) any float dtype; g (T, H) F32
     * contiguous; beta (T, H) act dtype, contiguous. */
    void (*gdn_gating)(backend *be, const tensor *a, const tensor *b, const tensor *A_log, const tensor *dt_bias,
                       tensor *g, tensor *beta);
    /* x (T, D) *= sigmoid(gate) element by element (Qwen3-Next's gated attention output: attn_output *
     * torch.sigmoid(gate) before o_proj), in f32, rounded once to x's dtype. x act dtype, contiguous;
     * gate (T, D) act dtype, may be strided (a column slice of the q projection). Under
     * BE_OP_GATED_DELTA_NET with the ops above. */
    void (*sigmoid_mul)(backend *be, tensor *x, const tensor *gate);

    /* ---- sampling (sample/sample.h) ---- */
    /* Samples rows b->rows of logits (B, V) as sample_row_ref does, writing
     * only b's host outputs; may overwrite the sampled rows. Row failures
     * are reported in b->tokens (SAMPLE_* codes), not as a status. */
    vllm_status (*sample)(backend *be, tensor *logits, const sample_batch *b);
    /* Raw logprobs of b->targets and the top k of rows b->rows of logits
     * (B, V), as logprob_row_ref. Run before sample on the same tensor. */
    vllm_status (*logprobs)(backend *be, const tensor *logits, const logprob_batch *b);

    /* ---- capabilities ---- */
    /* How the backend runs op with these parameters (be_op lists what params
     * points to): BE_NATIVE, BE_COMPOSITE, or BE_UNSUPPORTED where the op
     * would fail (backend_require turns that into VLLM_ERR_UNSUPPORTED). */
    be_support (*supports)(backend *be, be_op op, const void *params);

    /* ---- graphs (NULL where the backend has none, e.g. the CPU) ---- */
    /* Records the ops issued until graph_end instead of running them. Ops
     * recorded must not allocate, synchronize or read device data on the
     * host; a replay runs them on the same tensors (whose contents, e.g. the
     * step's metadata uploaded before the launch, may change). */
    vllm_status (*graph_begin)(backend *be);
    /* Ends the recording; an op failure during it is returned here. */
    vllm_status (*graph_end)(backend *be, be_graph **out);
    vllm_status (*graph_launch)(backend *be, be_graph *g);
    void (*graph_free)(backend *be, be_graph *g);
} backend_ops;

struct backend {
    const backend_ops *ops;
    const char *name;     /* "cpu", "cuda" */
    dtype act_dtype;      /* dtype of activations */
    dtype kv_dtype;       /* dtype of the KV cache */
    bool async;           /* ops return before the device ran them (a GPU): host work between the forward and
                             the sampling, which waits for it, overlaps the device's */
    bool import_copies;   /* import / linear_create copy the host data (a GPU): the host
                             source (mmap, dummy buffers) may be freed after loading */
    bool dummy_fill;      /* import / linear_create / experts_create recognise dummy arenas
                             (tensor/dummy.h) and write their values on the device */
    uint32_t native_blocks; /* the block dtypes (tensor.h) linear_create, experts_create and embedding take
                             as they are: bit (dt - DTYPE_FIRST_BLOCK); a weight source gives the others
                             dequantized */
    int graph_moe_pairs;  /* moe_experts calls of at most this many (token, expert) pairs record
                             into graphs (experts_reserve may raise it); larger ones must run
                             eagerly (0: no limit) */
    void *impl;           /* backend private state */
};

typedef struct backend_options {
    int num_threads;      /* CPU worker threads; 0 = all cores */
    int device_id;        /* GPU ordinal */
    bool kv_cache_fp8;    /* KV caches of F8_E4M3 values (kv_dtype), each scaled by its tensor's qscale;
                             VLLM_ERR_UNSUPPORTED from a backend without it */
    struct tpg_group *tp_group; /* tensor parallelism: the in-process group this backend is rank tp_rank of
                                   (dist/tpg_group.h; all_reduce sums over it), or NULL */
    int tp_rank;
} backend_options;

/* be->ops->supports(be, op, params), BE_UNSUPPORTED for an op or a
 * backend without it. */
be_support backend_supports(backend *be, be_op op, const void *params);
/* VLLM_OK when be can run op with params (natively or as its composite),
 * else VLLM_ERR_UNSUPPORTED with a message naming the backend, the op and
 * what (the model's words for it, e.g. "Gemma2ForCausalLM attention"). */
vllm_status backend_require(backend *be, be_op op, const void *params, const char *what);
/* The op's name ("attention", "act_mul", ...). */
const char *be_op_name(be_op op);
/* The activation's transformers name ("silu", "gelu_pytorch_tanh", ...); NULL when out of range. */
const char *be_act_name(be_act act);
/* The activation of a transformers name (hidden_act, hidden_activation,
 * activation_function): "silu" / "swish", "gelu_pytorch_tanh", "gelu", "relu";
 * false when unknown. */
bool be_act_from_name(const char *name, be_act *out);

/* Creates a backend by name ("cpu", "cuda"). VLLM_ERR_UNSUPPORTED when
 * the name is unknown or the backend was not built. */
vllm_status backend_create(const char *name, const backend_options *opt, backend **out);
void backend_free(backend *be);

#endif
