#!/usr/bin/env python3
"""
make_quant_fixtures.py: tiny quantized Hugging Face checkpoints plus greedy references from transformers,
the parity fixtures of vllm.c's quantized weight formats (issue 16).

Usage:  python3 tools/make_quant_fixtures.py --out tests/fixtures/models [--device cuda] [--only NAME]

Case qwen3_fp8_block: a random Qwen3 (hidden 128, MLP 256, 3 layers, 4 heads of 32, 2 KV heads) whose
decoder projections are stored as block-scaled FP8, the format of Qwen/Qwen3-*-FP8 and DeepSeek-V3
(config.json quantization_config {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
"weight_block_size": [128, 128]}; transformers' FineGrainedFP8Config, vLLM's Fp8Config):

  - for every weight W (N, K) of q/k/v/o_proj and gate/up/down_proj, per block of 128 x 128 (the last block
    row partial when N % 128): s = max|W_block| / 448 (F32), q = e4m3(clamp(W_block / s, -448, 448)) (torch's
    cast: round to nearest even); saved as `<name>.weight` F8_E4M3 (N, K) and `<name>.weight_scale_inv` F32
    (ceil(N / 128), K / 128), W = q * s (the name is DeepSeek's: the scale multiplies). The packer is checked
    by a round trip: the saved bytes reloaded and multiplied out equal the quantized weights exactly;
  - embeddings, norms and lm_head stay BF16 (as in those checkpoints);
  - the reference: Qwen3ForCausalLM in float32 with the dequantized weights, every quantized projection's
    input quantized and dequantized on the way in as vLLM's per_token_group_quant_fp8 does (per token, per
    group of 128: s = max(max|x|, 1e-10) / 448, x' = e4m3(clamp(x / s)) * s), since vLLM's block FP8 linear
    multiplies those FP8 activations (w8a8_block_fp8_matmul): sum over groups of s_x s_w (q_x . q_w) equals
    x' . W up to float rounding.

Cases qwen3_fp8_channel and qwen3_fp8_tensor: the same shape (other random weights) in the FP8 layouts without
blocks: compressed-tensors' float-quantized W8A8 as llm-compressor's FP8_DYNAMIC preset writes it (the format of
RedHatAI/*-FP8-dynamic: `<name>.weight` F8_E4M3 with `<name>.weight_scale` (N, 1) BF16, s = max|row| / 448
rounded to BF16 before dividing; config_groups with channel weights and dynamic per-token activations; lm_head
ignored), and AutoFP8's per-tensor static scheme (quant_method fp8 without weight_block_size, activation_scheme
static: `<name>.weight_scale` () F32 per matrix, `<name>.input_scale` () F32). Both reloaded and multiplied out
as the round trip. vLLM quantizes those activations per token (channel) or per tensor (static scale); vllm.c
quantizes every FP8 layer's input dynamically per token and group of 128 (exact per-row scales need no
requantization), so the references apply that quantization, as for the block case.

Case qwen3_nvfp4: the same shape as compressed-tensors' nvfp4-pack-quantized W4A16 (llm-compressor's NVFP4A16
preset: see quant_nvfp4), round trip checked; reference on the dequantized weights (weight-only).

Case qwen3_kv_fp8: the FP8 KV cache (--kv-cache-dtype fp8): a BF16 model of the same shape with calibrated
per-layer k_scale / v_scale tensors; "kv_fp8" holds the reference with the cache's E4M3 rounding (see
case_qwen3_kv_fp8).

expected.json as tools/make_fixtures.py writes it (12 greedy tokens per prompt, their logprobs and the
top-1 / top-2 gaps) from the dequantized weights alone ("prompts": what VLLM_FP8_DEQUANTIZE=1 must match in
every engine layout), plus "quantization" (the scheme) and "fp8_activations": {"prompts": the reference with
the activation quantization, "tolerance" / "tolerance_bf16": its teacher-forced bounds (tf_max, tf_mean) for
an F32 / a BF16-activation engine, from the drift measured below}.

Cases qwen3_awq and qwen3_gptq_actorder: the same model shape with its projections in 4 bits, group 64,
quantized by min / max per group (AutoAWQ's pseudo_quantize_tensor with zero points; scales float16) and
packed as AutoAWQ's GEMM format (qweight (K, N / 8), nibble p of each int32 the feature 8 c + [0, 2, 4, 6,
1, 3, 5, 7][p]; qzeros likewise; scales (K / G, N)) and as GPTQ's with act-order (qweight (K / 8, N), 8 input
features per int32 in order; qzeros (groups, N / 8) stored less 1 (checkpoint_format "gptq"); g_idx from a
random permutation), each packing unpacked again and compared. References: transformers on the dequantized
weights (4-bit weight-only: activations as they are).

Case qwen3_ct_w4a16: the same shape as compressed-tensors' pack-quantized W4A16 (llm-compressor's W4A16
preset with group 32: symmetric, s = max|w| / 7.5 per group in BF16, q = clamp(round(w / s), -8, 7) stored
as q + 8 nibbles, weight_packed (N, K / 8) I32 with feature 8 c + i in nibble i, weight_scale (N, K / 32),
weight_shape; config_groups as llm-compressor writes them, lm_head ignored), round trip checked; reference
on the dequantized weights.

Needs: python3, torch (float8_e4m3fn), transformers 5.x, safetensors.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (randomise, greedy, make_prompts, constants)

FP8_MAX = 448.0
ACT_EPS = 1e-10
GROUP = 128
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_block_fp8(w, bn, bk):
    """W (N, K) float32 -> q (N, K) float8_e4m3fn, s (ceil(N / bn), K / bk) float32 with W ~ q * s per block."""
    N, K = w.shape
    assert K % bk == 0
    nb = (N + bn - 1) // bn
    s = torch.empty(nb, K // bk, dtype=torch.float32)
    q = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    for i in range(nb):
        for j in range(K // bk):
            blk = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            amax = float(blk.abs().max())
            sc = amax / FP8_MAX if amax > 0 else 1.0
            s[i, j] = sc
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = (blk / s[i, j]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, s


def dequantize_block_fp8(q, s, bn, bk):
    scale = s.repeat_interleave(bn, dim=0)[:q.shape[0]].repeat_interleave(bk, dim=1)
    return q.float() * scale


def act_quant_dequant(x):
    """vLLM's per_token_group_quant_fp8 (group 128) then back to float: x' = q * s."""
    shape = x.shape
    g = x.float().reshape(-1, shape[-1] // GROUP, GROUP)
    s = g.abs().amax(dim=-1, keepdim=True).clamp(min=ACT_EPS) / FP8_MAX
    q = (g / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * s).reshape(shape).to(x.dtype)


def tf_deviations(ref, results, device):
    """|logprob - recorded| of every recorded token, teacher-forced through ref (prompt + continuation in one
    forward)"""
    out = []
    for r in results:
        P = len(r["prompt_token_ids"])
        x = torch.tensor([r["prompt_token_ids"] + r["token_ids"]], dtype=torch.long, device=device)
        lp = torch.log_softmax(ref(input_ids=x, use_cache=False).logits[0].float(), dim=-1)
        out += [abs(float(lp[P - 1 + j, t]) - r["logprobs"][j]) for j, t in enumerate(r["token_ids"])]
    return out


def noise_drift(label, ref, results, device, noise, rel):
    """How far rel-sized noise moves the recorded logprobs: noise (a dict with "rel" and "gen", read by the
    reference's hooks) set to rel with 8 seeds in turn; twice the worst and the mean are the bounds a test gets"""
    d = []
    for seed in range(8):
        noise["rel"], noise["gen"] = rel, torch.Generator().manual_seed(seed)
        d += tf_deviations(ref, results, device)
    noise["rel"] = 0.0
    worst, mean = max(d), sum(d) / len(d)
    print(f"  [{label}] logprob drift under {rel:g} noise: max {worst:.4f}, mean {mean:.4f}")
    return dict(drift_max=worst, drift_mean=mean, tf_max=max(1e-3, 2 * worst), tf_mean=max(1e-3, 2 * mean))


def tiny_qwen3(seed):
    """The cases' model: a random Qwen3 (hidden 128, MLP 256, 3 layers, 4 heads of 32, 2 KV heads) in float32,
    its lm_head scaled to logits of std about 3 (make_fixtures' 11 makes every last-bit change a big jump)."""
    cfg = Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=mf.BOS, eos_token_id=mf.EOS,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    torch.manual_seed(mf.SEED + seed)
    model = Qwen3ForCausalLM(cfg).float().eval()
    mf.randomise(model)
    with torch.no_grad():
        model.lm_head.weight.mul_(0.25)
    return cfg, model


def write_folder(out_dir, cfg, tensors, quantization_config):
    """out_dir (stale files removed): model.safetensors, config.json with the quantization_config,
    generation_config.json; returns the safetensors path."""
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.endswith((".safetensors", ".json")):
            os.remove(os.path.join(out_dir, f))
    path = os.path.join(out_dir, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_json = cfg.to_dict()
    cfg_json["architectures"] = ["Qwen3ForCausalLM"]
    cfg_json["dtype"] = "bfloat16"
    if quantization_config is not None:
        cfg_json["quantization_config"] = quantization_config
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2, sort_keys=True)
        f.write("\n")
    GenerationConfig(bos_token_id=mf.BOS, eos_token_id=mf.EOS).save_pretrained(out_dir)
    return path


def reference_model(cfg, deq):
    """Qwen3ForCausalLM in float32 (eager attention) holding the dequantized weights"""
    cfg._attn_implementation = "eager"
    ref = Qwen3ForCausalLM(cfg).float().eval()
    missing, unexpected = ref.load_state_dict(deq, strict=False)
    assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
    return ref


def quantize_rows_fp8(w, s_dtype):
    """W (N, K) -> q (N, K) e4m3, s (N, 1) in s_dtype: s = max|row| / 448 (1 for a zero row) rounded to s_dtype
    first, q = e4m3(clamp(W / s)) (llm-compressor's channel-wise FP8 weights)."""
    amax = w.abs().amax(dim=1, keepdim=True)
    s = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)).to(s_dtype)
    q = (w / s.float()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, s


def quantize_tensor_fp8(w):
    """W -> q e4m3, s () float32: one scale per matrix (AutoFP8's per-tensor weights)"""
    amax = float(w.abs().max())
    s = torch.tensor(amax / FP8_MAX if amax > 0 else 1.0, dtype=torch.float32)
    return (w / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), s


# the FP8 schemes: config.json's quantization_config, the scale tensor's suffix, the quantizer
# (W -> {suffix: tensor}, W'), and the dequantizer of the saved tensors (round trip)
FP8_SCHEMES = {
    "block": dict(
        config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
        text="fp8 block [128, 128]",
        quant=lambda w: (lambda q, s: ({"": q, "_scale_inv": s}, dequantize_block_fp8(q, s, 128, 128)))(
            *quantize_block_fp8(w, 128, 128)),
        deq=lambda t: dequantize_block_fp8(t[""], t["_scale_inv"], 128, 128)),
    # llm-compressor's FP8_DYNAMIC preset (RedHatAI/*-FP8-dynamic): channel weights, BF16 scales (N, 1), dynamic
    # per-token activations, lm_head ignored
    "channel": dict(
        config={"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {},
                "config_groups": {"group_0": {
                    "targets": ["Linear"], "output_activations": None,
                    "weights": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
                                "strategy": "channel", "group_size": None, "block_structure": None,
                                "actorder": None, "observer": "minmax"},
                    "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True,
                                          "strategy": "token", "observer": None}}}},
        text="compressed-tensors float-quantized FP8 W8A8, channel weights (BF16 scales), dynamic token activations",
        quant=lambda w: (lambda q, s: ({"": q, "_scale": s}, q.float() * s.float()))(
            *quantize_rows_fp8(w, torch.bfloat16)),
        deq=lambda t: t[""].float() * t["_scale"].float()),
    # AutoFP8's static scheme: one F32 weight_scale () per matrix, a static input_scale () per layer
    "tensor": dict(
        config={"activation_scheme": "static", "quant_method": "fp8", "ignored_layers": ["lm_head"]},
        text="fp8 per-tensor weights, static activation scheme",
        quant=lambda w: (lambda q, s: ({"": q, "_scale": s}, q.float() * s))(*quantize_tensor_fp8(w)),
        deq=lambda t: t[""].float() * t["_scale"]),
}


def case_fp8(name, scheme, seed, out_dir, device):
    sch = FP8_SCHEMES[scheme]
    cfg, model = tiny_qwen3(seed)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tensors, deq, parts = {}, {}, {}
    for k, v in sd.items():
        if k.endswith(".weight") and any(f".{p}." in k for p in PROJ):
            saved, deq[k] = sch["quant"](v.float())
            parts[k] = list(saved)
            for suffix, t in saved.items():
                tensors[k + suffix] = t.contiguous()
            if scheme == "tensor":  # the static activation scale AutoFP8 calibrates (vllm.c does not apply it)
                tensors[k[:-len("weight")] + "input_scale"] = torch.tensor(0.05, dtype=torch.float32)
        else:
            tensors[k] = v.to(torch.bfloat16).contiguous()
            deq[k] = tensors[k].float()
    path = write_folder(out_dir, cfg, tensors, sch["config"])
    # round trip: the file's bytes multiplied out are exactly the quantized weights
    back = load_file(path)
    for k in deq:
        if k in parts:
            assert back[k].dtype == torch.float8_e4m3fn
            assert torch.equal(sch["deq"]({sfx: back[k + sfx] for sfx in parts[k]}), deq[k]), k
        else:
            assert torch.equal(back[k].float(), deq[k]), k
    ref = reference_model(cfg, deq)
    perturb = {"rel": 0.0, "gen": None, "off": False}

    def hook(m, args):
        x = args[0]
        if perturb["off"]:
            return None
        if perturb["rel"]:  # float rounding noise before the quantizer (see drift below)
            r = torch.randint(0, 2, x.shape, generator=perturb["gen"], device="cpu").to(x.device, x.dtype) * 2 - 1
            x = x * (1 + perturb["rel"] * r)
        return (act_quant_dequant(x),)

    for mname, mod in ref.named_modules():
        if isinstance(mod, torch.nn.Linear) and mname.split(".")[-1] in PROJ:
            mod.register_forward_pre_hook(hook)
    ref.to(device)
    prompts = mf.make_prompts(seed, cfg.vocab_size)
    # the dequantized weights alone (activations as they are): what vllm.c's VLLM_FP8_DEQUANTIZE=1 runs
    perturb["off"] = True
    dq_results = []
    for p in prompts:
        toks, lps, gaps = mf.greedy(ref, p, device)
        dq_results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))
    perturb["off"] = False
    results = []
    for p in prompts:
        toks, lps, gaps = mf.greedy(ref, p, device)
        results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))
    # drift: FP8 activations make the result jump where an element of x / s sits at a rounding midpoint, so
    # an engine whose float arithmetic differs from this reference in the last bits lands on the other side
    # now and then. The recorded continuations teacher-forced through the reference with x scaled by
    # 1 +- rel (random signs, 8 draws) measure how far that moves a logprob: rel 2^-20 stands for an F32
    # engine (F32 rounding after a few operations), 2^-9 for BF16 activations (a GPU's); the bounds a test
    # should allow are twice the worst and twice the mean.
    tol, tol_bf16 = (noise_drift(name, ref, results, device, perturb, 2.0 ** -20),
                     noise_drift(name, ref, results, device, perturb, 2.0 ** -9))
    expected = {
        "case": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": "bfloat16",
        "quantization": sch["text"] + "; activations quantized as vllm.c does: dynamic FP8 per token and group of 128",
        "rope": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_window": None,
        "sliding_window_effective": None,
        "new_tokens": mf.NEW_TOKENS,
        "prompts": dq_results,
        "fp8_activations": {
            "prompts": results,
            "tolerance": tol,
            "tolerance_bf16": tol_bf16,
        },
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    gaps = [g for r in dq_results for g in r["top2_gap"]]
    print(f"  [{name}] {os.path.getsize(path)} bytes, min gap {min(gaps):.4f}, "
          f"{sum(g < 0.05 for g in gaps)} of {len(gaps)} gaps < 0.05")


# ---- 4-bit weight-only: AWQ (GEMM packing) and GPTQ (act-order, v1 zeros) ----

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ pack_intweight: nibble p holds feature 8 c + AWQ_ORDER[p]


def minmax_quant(w):
    """w (rows, G) float32 -> q (rows, G) ints 0..15, z (rows) ints, s (rows) float16 as AutoAWQ's
    pseudo_quantize_tensor with zero_point: s = (max - min) / 15, z = clamp(-round(min / s), 0, 15),
    q = clamp(round(w / s) + z, 0, 15); s rounded to float16 first (the checkpoint's dtype)."""
    mx, mn = w.amax(dim=1), w.amin(dim=1)
    s = ((mx - mn).clamp(min=1e-5) / 15).half()
    sf = s.float()
    z = (-torch.round(mn / sf)).clamp(0, 15)
    q = (torch.round(w / sf[:, None]) + z[:, None]).clamp(0, 15)
    return q.int(), z.int(), s


def to_i32(x):
    """int64 words of 32 bits -> int32 (two's complement)"""
    return (((x & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000).to(torch.int32)


def pack_awq(intw):
    """(R, N) ints 0..15 -> (R, N / 8) int32, AutoAWQ's order"""
    R, N = intw.shape
    out = torch.zeros(R, N // 8, dtype=torch.int64)
    for p, j in enumerate(AWQ_ORDER):
        out |= intw[:, j::8].long() << (4 * p)
    return to_i32(out)


def unpack_awq(packed, N):
    words = packed.long() & 0xFFFFFFFF
    out = torch.zeros(packed.shape[0], N, dtype=torch.int64)
    for p, j in enumerate(AWQ_ORDER):
        out[:, j::8] = (words >> (4 * p)) & 15
    return out.int()


def pack_rows8(intw):
    """(R, C) ints -> (R / 8, C) int32: nibble i of row r is row 8 r + i (GPTQ's qweight)"""
    R, C = intw.shape
    out = torch.zeros(R // 8, C, dtype=torch.int64)
    for i in range(8):
        out |= intw[i::8, :].long() << (4 * i)
    return to_i32(out)


def pack_cols8(intw):
    """(R, C) ints -> (R, C / 8) int32: nibble i of column c is column 8 c + i (GPTQ's qzeros)"""
    R, C = intw.shape
    out = torch.zeros(R, C // 8, dtype=torch.int64)
    for i in range(8):
        out |= intw[:, i::8].long() << (4 * i)
    return to_i32(out)


def i32(t):
    return t.long() & 0xFFFFFFFF


def quant_awq(w, G):
    """W (N, K) -> tensors, W' (dequantized)"""
    N, K = w.shape
    wt = w.t().contiguous()  # (K, N): AWQ stores input-major
    q = torch.zeros(K, N, dtype=torch.int32)
    z = torch.zeros(K // G, N, dtype=torch.int32)
    s = torch.zeros(K // G, N, dtype=torch.float16)
    for g in range(K // G):
        qg, zg, sg = minmax_quant(wt[g * G:(g + 1) * G].t().contiguous())  # rows = out features
        q[g * G:(g + 1) * G] = qg.t()
        z[g], s[g] = zg, sg
    qw, qz = pack_awq(q), pack_awq(z)
    assert torch.equal(unpack_awq(qw, N), q) and torch.equal(unpack_awq(qz, N), z)  # round trip
    deq = ((q - z.repeat_interleave(G, dim=0)).float() * s.float().repeat_interleave(G, dim=0)).t().contiguous()
    return {"qweight": qw, "qzeros": qz, "scales": s}, deq


def quant_gptq(w, G, gen):
    """W (N, K) -> act-order tensors (v1 zeros), W'"""
    N, K = w.shape
    perm = torch.randperm(K, generator=gen)
    g_idx = torch.empty(K, dtype=torch.int32)
    g_idx[perm] = torch.arange(K, dtype=torch.int32) // G  # feature perm[r] in group r // G
    groups = K // G
    q = torch.zeros(K, N, dtype=torch.int32)
    z = torch.zeros(groups, N, dtype=torch.int32)
    s = torch.zeros(groups, N, dtype=torch.float16)
    for g in range(groups):
        cols = (g_idx == g).nonzero().flatten()
        qg, zg, sg = minmax_quant(w[:, cols].contiguous())
        q[cols] = qg.t()
        z[g], s[g] = zg, sg
    qw, qz = pack_rows8(q), pack_cols8((z - 1) & 15)  # v1: zeros stored less 1
    for i in range(8):  # round trip
        assert torch.equal((i32(qw) >> (4 * i)) & 15, q[i::8].long())
        assert torch.equal((i32(qz) >> (4 * i)) & 15, ((z - 1) & 15)[:, i::8].long())
    zr = ((z - 1) & 15) + 1  # what a reader gets back (v1: stored + 1; a zero of 0 reads as 16)
    deq = ((q - zr[g_idx.long()]).float() * s.float()[g_idx.long()]).t().contiguous()
    return {"qweight": qw, "qzeros": qz, "scales": s, "g_idx": g_idx}, deq


def quant_ct(w, G):
    """W (N, K) -> compressed-tensors pack-quantized W4A16 tensors (symmetric, group G), W'. compressed-tensors'
    minmax observer, symmetric: s = max|w_group| / 7.5 (the range [-8, 7] halved), q = clamp(round(w / s), -8, 7),
    scales in the model's dtype (BF16); packing (pack_to_int32): q + 8 as a nibble, 8 input features per int32 of
    weight_packed (N, K / 8), feature 8 c + i in nibble i; weight_shape the dense shape (I64)."""
    N, K = w.shape
    wg = w.reshape(N, K // G, G)
    s = (wg.abs().amax(dim=2).clamp(min=1e-8) / 7.5).to(torch.bfloat16)
    q = torch.round(wg / s.float()[:, :, None]).clamp(-8, 7).int().reshape(N, K)
    packed = pack_cols8(q + 8)
    for i in range(8):  # round trip
        assert torch.equal(((i32(packed) >> (4 * i)) & 15) - 8, q[:, i::8].long())
    deq = (q.float().reshape(N, K // G, G) * s.float()[:, :, None]).reshape(N, K)
    return {"weight_packed": packed, "weight_scale": s, "weight_shape": torch.tensor([N, K], dtype=torch.int64)}, deq


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def quant_nvfp4(w):
    """W (N, K) -> compressed-tensors nvfp4-pack-quantized tensors, W' (compressed-tensors' NVFP4 procedure: a
    global scale gs = 448 * 6 / max|W| (F32), per 16 elements of a row the E4M3 scale e4m3(max|w| / 6 * gs), codes
    the nearest E2M1 of w / (scale / gs) (argmin: a tie to the smaller magnitude), sign in bit 3; element 2 i in
    the low nibble of byte i (pack_fp4_to_uint8); W' = code * (scale / gs), the order vllm.c multiplies in)"""
    N, K = w.shape
    assert K % 16 == 0
    gs = torch.tensor([448.0 * 6.0 / float(w.abs().max())], dtype=torch.float32)
    g = w.reshape(N, K // 16, 16)
    s8 = (g.abs().amax(dim=-1) / 6.0 * gs).to(torch.float8_e4m3fn)
    eff = (s8.float() / gs).unsqueeze(-1)
    table = torch.tensor(E2M1)
    x = torch.where(eff > 0, g / eff, torch.zeros_like(g))
    idx = (x.abs().unsqueeze(-1) - table).abs().argmin(dim=-1)
    codes = (idx | (torch.signbit(x).to(torch.long) << 3)).reshape(N, K)
    vals = (table[idx] * torch.where(torch.signbit(x), -1.0, 1.0)).reshape(N, K // 16, 16)
    deq = (vals * eff).reshape(N, K)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    # round trip: the bytes unpacked and multiplied out again
    lo, hi = packed.long() & 15, packed.long() >> 4
    back = torch.stack([lo, hi], dim=-1).reshape(N, K)
    bv = table[back & 7] * torch.where(back >= 8, -1.0, 1.0)
    assert torch.equal((bv.reshape(N, K // 16, 16) * eff).reshape(N, K), deq)
    return {"weight_packed": packed, "weight_scale": s8, "weight_global_scale": gs}, deq


def case_int4(name, method, out_dir, device):
    G = 32 if method == "ct" else 16 if method == "nvfp4" else 64
    seed = {"awq": 910, "gptq": 920, "ct": 930, "nvfp4": 940}[method]
    cfg, model = tiny_qwen3(seed)
    gen = torch.Generator().manual_seed(7)
    tensors, deq = {}, {}
    for k, v in model.state_dict().items():
        if k.endswith(".weight") and any(f".{p}." in k for p in PROJ):
            t, d = (quant_awq(v.float(), G) if method == "awq" else quant_ct(v.float(), G) if method == "ct"
                    else quant_nvfp4(v.float()) if method == "nvfp4" else quant_gptq(v.float(), G, gen))
            for suf, x in t.items():
                tensors[k[:-len("weight")] + suf] = x.contiguous()
            deq[k] = d
        else:
            tensors[k] = v.to(torch.bfloat16).contiguous()
            deq[k] = tensors[k].float()
    write_folder(out_dir, cfg, tensors, (
        {"quant_method": "awq", "bits": 4, "group_size": G, "zero_point": True, "version": "gemm",
         "modules_to_not_convert": None} if method == "awq" else
        {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
         "ignore": ["lm_head"], "kv_cache_scheme": None, "global_compression_ratio": None,
         "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                       "weights": {"num_bits": 4, "type": "int", "symmetric": True, "dynamic": False,
                                                   "strategy": "group", "group_size": G, "actorder": None,
                                                   "observer": "minmax", "block_structure": None}}}}
        if method == "ct" else
        {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "quantization_status": "compressed",
         "ignore": ["lm_head"], "kv_cache_scheme": None,
         "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                       "weights": {"num_bits": 4, "type": "float", "symmetric": True,
                                                   "dynamic": False, "strategy": "tensor_group", "group_size": 16,
                                                   "observer": "static_minmax", "block_structure": None}}}}
        if method == "nvfp4" else
        {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": True, "sym": False,
         "checkpoint_format": "gptq", "damp_percent": 0.01, "true_sequential": True}))
    ref = reference_model(cfg, deq)
    ref.to(device)
    results = []
    for p in mf.make_prompts(seed, cfg.vocab_size):
        toks, lps, gaps = mf.greedy(ref, p, device)
        results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))
    expected = {
        "case": name, "transformers": transformers.__version__, "torch": torch.__version__, "dtype": "bfloat16",
        "quantization": (f"awq 4-bit, group {G}, gemm packing" if method == "awq" else
                         f"compressed-tensors pack-quantized W4A16, symmetric, group {G}" if method == "ct" else
                         "compressed-tensors nvfp4-pack-quantized W4A16 (E2M1, E4M3 scale per 16, F32 global scale)"
                         if method == "nvfp4" else
                         f"gptq 4-bit, group {G}, act-order (g_idx), v1 zeros"),
        "rope": {"rope_type": "default", "rope_theta": 1000000.0}, "sliding_window": None,
        "sliding_window_effective": None, "new_tokens": mf.NEW_TOKENS, "prompts": results,
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    gaps = [g for r in results for g in r["top2_gap"]]
    print(f"  [{name}] min gap {min(gaps):.4f}, {sum(g < 0.05 for g in gaps)} of {len(gaps)} gaps < 0.05")


# ---- the FP8 KV cache (--kv-cache-dtype fp8) ----

KV = {"scales": None, "record": None, "rel": 0.0, "gen": None, "eager": None, "calls": 0}


def e4m3_round(x, s):
    """vLLM's cache write and read (csrc/quantization/fp8 scaled_fp8_conversion, then q * s): x / s rounded to E4M3
    (saturating at +-448, ties to even), times s"""
    return ((x.float() / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * s).to(x.dtype)


def kv_fp8_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' eager attention of Qwen3 (modeling_qwen3.eager_attention_forward, which this replaces while
    the case runs: the model stays "eager", so its causal masks are eager's) with the keys and values (after RoPE
    and the k-norm, what the cache holds) recorded (amax per layer) or stored as E4M3 with the layer's scales"""
    eager = KV["eager"]
    KV["calls"] += 1
    li = module.layer_idx
    if KV["record"] is not None:
        a = KV["record"].setdefault(li, [0.0, 0.0])
        a[0], a[1] = max(a[0], float(key.abs().max())), max(a[1], float(value.abs().max()))
    if KV["scales"] is not None:
        if KV["rel"]:
            r = lambda x: torch.randint(0, 2, x.shape, generator=KV["gen"]).to(x.device, x.dtype) * 2 - 1
            key, value = key * (1 + KV["rel"] * r(key)), value * (1 + KV["rel"] * r(value))
        ks, vs = KV["scales"][li]
        key, value = e4m3_round(key, ks), e4m3_round(value, vs)
    return eager(module, query, key, value, attention_mask, **kwargs)


def case_qwen3_kv_fp8(out_dir, device):
    """A BF16 Qwen3 of the cases' shape whose checkpoint carries per-layer KV-cache scales
    (`model.layers.<l>.self_attn.k_scale` / `v_scale`, F32 (), the names vLLM's Attention loads: llm-compressor's
    kv_cache_scheme and ModelOpt write them), calibrated as those tools do: max |k| (|v|) over the prompts
    through the float model / 448. "prompts": the float reference (the BF16 / F32 cache ignores the scales, as
    vLLM's auto cache dtype does); "kv_fp8": the reference with every layer's keys and values rounded as vLLM's
    FP8 cache stores them (e4m3(x / s) * s), its teacher-forced bounds from the drift under 2^-20 / 2^-9 noise
    on k and v before the rounding, as for the FP8 activations."""
    import transformers.models.qwen3.modeling_qwen3 as mq
    KV["eager"] = mq.eager_attention_forward
    mq.eager_attention_forward = kv_fp8_attention
    try:
        kv_fp8_case(out_dir, device)
    finally:
        mq.eager_attention_forward = KV["eager"]


def kv_fp8_case(out_dir, device):
    cfg, model = tiny_qwen3(930)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    deq = {k: v.float() for k, v in tensors.items()}
    ref = reference_model(cfg, deq)
    ref.to(device)
    prompts = mf.make_prompts(930, cfg.vocab_size)
    KV["record"], KV["scales"] = {}, None
    float_results = []
    for p in prompts:
        toks, lps, gaps = mf.greedy(ref, p, device)
        float_results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))
    amax, KV["record"] = KV["record"], None
    assert KV["calls"] > 0 and len(amax) == cfg.num_hidden_layers, "the attention hook did not run"
    scales = {li: (torch.tensor(a[0] / FP8_MAX, dtype=torch.float32), torch.tensor(a[1] / FP8_MAX, dtype=torch.float32))
              for li, a in amax.items()}
    for li, (ks, vs) in scales.items():
        tensors[f"model.layers.{li}.self_attn.k_scale"] = ks
        tensors[f"model.layers.{li}.self_attn.v_scale"] = vs
    path = write_folder(out_dir, cfg, tensors, None)
    back = load_file(path)
    for li, (ks, vs) in scales.items():
        assert torch.equal(back[f"model.layers.{li}.self_attn.k_scale"], ks)
    KV["scales"] = {li: (float(ks), float(vs)) for li, (ks, vs) in scales.items()}
    results = []
    for p in prompts:
        toks, lps, gaps = mf.greedy(ref, p, device)
        results.append(dict(prompt_token_ids=p, token_ids=toks, logprobs=lps, top2_gap=gaps))

    tol, tol_bf16 = (noise_drift("qwen3_kv_fp8", ref, results, device, KV, 2.0 ** -20),
                     noise_drift("qwen3_kv_fp8", ref, results, device, KV, 2.0 ** -9))
    # the scales matter: the FP8 reference with every scale 1 instead
    saved, KV["scales"] = KV["scales"], {li: (1.0, 1.0) for li in scales}
    unscaled = max(tf_deviations(ref, results, device))
    KV["scales"] = saved
    same = sum(a == b for r, f in zip(results, float_results) for a, b in zip(r["token_ids"], f["token_ids"]))
    print(f"  [qwen3_kv_fp8] scales k {[round(v[0], 5) for v in saved.values()]} v {[round(v[1], 5) for v in saved.values()]}; "
          f"{same} of 48 tokens as with the float cache; scales 1 instead: max|d| {unscaled:.4f}")
    expected = {
        "case": "qwen3_kv_fp8",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": "bfloat16",
        "rope": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_window": None,
        "sliding_window_effective": None,
        "new_tokens": mf.NEW_TOKENS,
        "prompts": float_results,
        "kv_fp8": {"prompts": results, "tolerance": tol, "tolerance_bf16": tol_bf16, "unscaled_max": unscaled,
                   "k_scale": [v[0] for v in saved.values()], "v_scale": [v[1] for v in saved.values()]},
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


CASES = {"qwen3_fp8_block": lambda d, dev: case_fp8("qwen3_fp8_block", "block", 900, d, dev),
         "qwen3_fp8_channel": lambda d, dev: case_fp8("qwen3_fp8_channel", "channel", 910, d, dev),
         "qwen3_fp8_tensor": lambda d, dev: case_fp8("qwen3_fp8_tensor", "tensor", 920, d, dev),
         "qwen3_kv_fp8": case_qwen3_kv_fp8,
         "qwen3_nvfp4": lambda d, dev: case_int4("qwen3_nvfp4", "nvfp4", d, dev),
         "qwen3_awq": lambda d, dev: case_int4("qwen3_awq", "awq", d, dev),
         "qwen3_gptq_actorder": lambda d, dev: case_int4("qwen3_gptq_actorder", "gptq", d, dev),
         "qwen3_ct_w4a16": lambda d, dev: case_int4("qwen3_ct_w4a16", "ct", d, dev)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    for name, fn in CASES.items():
        if args.only and name not in args.only.split(","):
            continue
        fn(os.path.join(args.out, name), args.device)


if __name__ == "__main__":
    main()
