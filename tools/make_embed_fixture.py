#!/usr/bin/env python3
"""
make_embed_fixture.py: a tiny random Qwen3 embedding model plus its reference
embeddings from transformers, the parity fixture of vllm.c's pooling runner
(tests/engine/test_pooling.c reads it when it exists).

Usage:  python3 tools/make_embed_fixture.py --out tests/fixtures/embed/qwen3_embed [--device cpu|cuda]

It writes OUT/{config.json, model.safetensors, generation_config.json,
modules.json, 1_Pooling/config.json, expected_embed.json}: a
Qwen3-Embedding-shaped folder (architectures Qwen3ForCausalLM, a
sentence-transformers last-token Pooling module and a Normalize module, so
vLLM and vllm.c pick the pooling runner on their own), weights saved in bf16
and reloaded, then run in float32 with eager attention so the reference sees
exactly the weights vllm.c loads.

expected_embed.json:
  {"transformers", "torch", "dtype": "float32",
   "prompts": [{"prompt_token_ids",
                "last":  the last token's final-normed hidden state,
                "mean":  the mean over every token's final-normed hidden state,
                "last_normalized", "mean_normalized": the same divided by its L2 norm
                (torch.nn.functional.normalize, eps 1e-12)}, ...]}
The hidden states are Qwen3Model's last_hidden_state (after model.norm): what
vLLM's pooler reads (LastPool / MeanPool over the converted model's hidden
states). The C test compares vllm_embed with normalize off and on, LAST with
the folder's config and MEAN through --pooler-config, tolerance 1e-4 (f32).

Needs: python3, torch, transformers (>= 4.51 for Qwen3), safetensors. Not run
on the development machine (no Python ML packages there): run it where they
are (the GPU machine), commit the folder, and the C test picks it up.
"""
import argparse
import json
import os
import random

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

SEED = 4321


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/embed/qwen3_embed")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    random.seed(SEED)
    os.makedirs(args.out, exist_ok=True)

    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, attn_implementation="eager")
    cfg.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # larger than the default init, so the layers matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    # bf16 on disk, reloaded in float32: the reference sees the weights vllm.c loads
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}  # tied
    save_file(state, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    cfg.torch_dtype = "bfloat16"
    cfg.save_pretrained(args.out)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
    # sentence-transformers modules, as Qwen/Qwen3-Embedding-0.6B ships them
    with open(os.path.join(args.out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  f, indent=2)
    os.makedirs(os.path.join(args.out, "1_Pooling"), exist_ok=True)  # (2_Normalize has no files: not made)
    with open(os.path.join(args.out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 64, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
                   "pooling_mode_lasttoken": True, "include_prompt": True}, f, indent=2)

    ref = Qwen3ForCausalLM.from_pretrained(args.out, torch_dtype=torch.float32, attn_implementation="eager")
    ref.load_state_dict({k: v.float() for k, v in load_file(os.path.join(args.out, "model.safetensors")).items()},
                        strict=False)
    ref.tie_weights()
    ref.to(args.device).eval()
    prompts = []
    for n in (1, 5, 17, 40, 100):
        ids = [random.randrange(3, 512) for _ in range(n)]
        with torch.no_grad():
            h = ref.model(torch.tensor([ids], device=args.device)).last_hidden_state[0].float().cpu()
        last, mean = h[-1], h.mean(dim=0)
        norm = torch.nn.functional.normalize
        prompts.append({"prompt_token_ids": ids, "last": last.tolist(), "mean": mean.tolist(),
                        "last_normalized": norm(last, p=2, dim=-1).tolist(),
                        "mean_normalized": norm(mean, p=2, dim=-1).tolist()})
    with open(os.path.join(args.out, "expected_embed.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "dtype": "float32",
                   "prompts": prompts}, f)
    print(f"wrote {args.out}: {len(prompts)} prompts")


if __name__ == "__main__":
    main()
