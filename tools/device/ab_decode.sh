#!/usr/bin/env bash
# tools/device/ab_decode.sh: prebuilt binaries' GPU tests, then their batch-1 decode steps side by side, in one
# device call (the A/B of session 28: every comparison from one machine, rounds interleaved).
#
#   tools/device/ab_decode.sh DIR [VARIANT ...]
#
# DIR holds the binaries built elsewhere (-DVLLM_NATIVE=OFF, `strip`ped): any of cuda_test_cuda_ops,
# cuda_test_cuda_parity, cuda_test_cuda_mla (run first, unless TESTS=0) and the vllmc binaries the variants name.
# A VARIANT is TAG=BINARY[:VAR=VALUE[,VAR=VALUE...]]: a vllmc binary in DIR, run under those environment variables,
# e.g.  base=vllmc_old  new=vllmc  new-rows=vllmc:VLLM_CUDA_GEMV=rows
# SHAPES (default "g12 q8 q06 q35_27b q35_a3b"): config.json-only model shapes written here, dummy weights:
#   g12 Gemma-3-12B, q8 Qwen3-8B, q06 Qwen3-0.6B, q30_a3b Qwen3-30B-A3B, q35_27b Qwen3.5-27B,
#   q35_a3b Qwen3.5-35B-A3B, dsv2l DeepSeek-V2-Lite, goss gpt-oss-20b (BF16 experts).
# ROUNDS (default 2): each shape's variants run in this many interleaved rounds.
# step ms = (t(128 in, 129 out) - t(128 in, 1 out)) / 128, `vllmc bench latency` with 2 warm-up + ITERS (default 4)
# iterations, --max-num-seqs 32. Device call: carry DIR and .devdeps (DEVICE.md); logs under $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 1
source tools/device/env.sh
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
B=${1:?directory of prebuilt binaries}; shift
O=${OUT:-/tmp/ab_decode}; mkdir -p "$O"
M=${AB_WORK:-/tmp/ab_models}; mkdir -p "$M"
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 )) s"; }
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1

if [ "${TESTS:-1}" = 1 ]; then
  for t in cuda_test_cuda_ops cuda_test_cuda_mla; do
    [ -x "$B/$t" ] || continue
    timeout 400 "$B/$t" > "$O/$t.log" 2>&1
    echo "$t rc $? ($(el)): $(tail -1 "$O/$t.log")"; grep -m5 -i "fail" "$O/$t.log"
  done
  if [ -x "$B/cuda_test_cuda_parity" ]; then
    timeout 400 "$B/cuda_test_cuda_parity" "$PWD/tests/fixtures/models" > "$O/parity.log" 2>&1
    echo "cuda_test_cuda_parity rc $? ($(el)): $(tail -1 "$O/parity.log")"; grep -m5 -i "fail" "$O/parity.log"
  fi
fi

python3 - "$M" <<'PY'
import json, os, sys
w = sys.argv[1]
gemma = dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=262208, head_dim=256,
             query_pre_attn_scalar=256, sliding_window=1024, rope_theta=1000000.0, rope_local_base_freq=10000.0,
             rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
             tie_word_embeddings=True, torch_dtype="bfloat16", bos_token_id=2, eos_token_id=1, pad_token_id=0,
             hidden_size=3840, intermediate_size=15360, num_hidden_layers=48, num_attention_heads=16,
             num_key_value_heads=8, rope_scaling={"rope_type": "linear", "factor": 8.0},
             layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(48)])
qwen3 = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936, head_dim=128,
             rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=40960, rope_theta=1000000.0,
             torch_dtype="bfloat16", bos_token_id=151643, eos_token_id=151645, attention_bias=False)
q8 = dict(qwen3, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
          num_key_value_heads=8, tie_word_embeddings=False)
q06 = dict(qwen3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
           num_key_value_heads=8, tie_word_embeddings=True)
q30 = dict(qwen3, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048,
           intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
           num_key_value_heads=4, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
           decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)
rope = {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}
q35 = dict(head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
           full_attention_interval=4, vocab_size=248320, tie_word_embeddings=False, max_position_embeddings=262144,
           rms_norm_eps=1e-6, hidden_act="silu", dtype="bfloat16", rope_parameters=rope, bos_token_id=248044,
           eos_token_id=248044)
q35_27b = dict(q35, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text", hidden_size=5120,
               intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24, num_key_value_heads=4,
               linear_num_key_heads=16, linear_num_value_heads=48)
q35_a3b = dict(q35, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", hidden_size=2048,
               num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2, linear_num_key_heads=16,
               linear_num_value_heads=32, moe_intermediate_size=512, shared_expert_intermediate_size=512,
               num_experts=256, num_experts_per_tok=8)
dsv2l = json.load(open("tools/deepseek_v2_lite_config.json"))
# openai/gpt-oss-20b with BF16 experts (its MXFP4 ones dequantized: no quantization_config), as bench_moe.sh
goss = dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", hidden_size=2880, intermediate_size=2880,
            num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
            num_experts_per_tok=4, experts_per_token=4, sliding_window=128,
            layer_types=["sliding_attention", "full_attention"] * 12, vocab_size=201088, tie_word_embeddings=False,
            max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_limit=7.0, attention_bias=True,
            hidden_act="silu", torch_dtype="bfloat16", rope_theta=150000.0,
            rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                          "original_max_position_embeddings": 4096, "truncate": False},
            bos_token_id=199998, eos_token_id=200002, pad_token_id=199999)
for n, c in dict(g12=gemma, q8=q8, q06=q06, q30_a3b=q30, q35_27b=q35_27b, q35_a3b=q35_a3b, dsv2l=dsv2l,
                 goss=goss).items():
    os.makedirs(os.path.join(w, n), exist_ok=True)
    json.dump(c, open(os.path.join(w, n, "config.json"), "w"), indent=1)
PY

lat() { # binary shape out -> average seconds
  timeout 200 "$1" bench latency --model "$M/$2" --device cuda --load-format dummy --num-iters-warmup 2 \
    --num-iters "${ITERS:-4}" --batch-size 1 --input-len 128 --output-len "$3" --max-model-len 4096 \
    --max-num-seqs 32 2>> "$O/latency.log" | awk '/^Avg latency/ {print $3}'
}
env_lat() { # "VAR=VALUE,..." binary shape out: lat in a subshell with those variables exported
  (
    for kv in ${1//,/ }; do export "${kv?}"; done
    lat "$2" "$3" "$4"
  )
}
for shape in ${SHAPES:-g12 q8 q06 q35_27b q35_a3b}; do
  for r in $(seq "${ROUNDS:-2}"); do
    for v in "$@"; do
      tag=${v%%=*}; rest=${v#*=}; bin=${rest%%:*}; envs=""; [ "$rest" != "$bin" ] && envs=${rest#*:}
      f=$(env_lat "$envs" "$B/$bin" "$shape" 129); p=$(env_lat "$envs" "$B/$bin" "$shape" 1)
      echo "$shape $tag round $r: $(awk -v f="$f" -v p="$p" 'BEGIN { if (f == "" || p == "") print "failed";
        else printf "%.3f ms a step", (f - p) / 128 * 1000 }') ($(el))"
    done
  done
done
