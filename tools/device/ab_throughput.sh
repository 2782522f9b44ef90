#!/usr/bin/env bash
# tools/device/ab_throughput.sh: issue 19 item 2 in one device call: the Qwen3-8B-shape throughput run (256 x
# 128/128, dummy weights) under several environment settings, interleaved, with the engine's time split, and the
# batch-256 decode step broken down per op (test_cuda_perf), each setting in the same call.
#
#   tools/device/ab_throughput.sh [SETTING ...]      SETTING: "VAR=value[ VAR2=value2]" or "default"
#   e.g. tools/device/ab_throughput.sh default VLLM_CUDA_NO_DTC_ATTN=1 "VLLM_CUDA_NO_DTC_ATTN=1 VLLM_GRAPH_CAPTURE=lazy"
#
# ROUNDS=N (default 2) runs each setting's throughput N times, interleaved; PERF=0 skips test_cuda_perf
# (PERF_BATCHES, default "1 64 256", the batches timed; 256 is broken down per op); PARITY=1 also runs
# test_cuda_parity under each setting (its summary lines). Builds in /tmp/bab (kept while the machine is warm);
# PREBUILT=DIR takes DIR/vllmc (and DIR/cuda_test_cuda_perf, DIR/cuda_test_cuda_parity) instead.
# Device call: carry [".devdeps"]. Logs under ${OUT:-/tmp/ab}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source tools/device/env.sh
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
O=${OUT:-/tmp/ab}; mkdir -p "$O"
B=${PREBUILT:-/tmp/bab}
[ $# -gt 0 ] || set -- default
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
targets=(vllmc_cli)
[ "${PERF:-1}" = 1 ] && targets+=(cuda_test_cuda_perf)
[ "${PARITY:-0}" = 1 ] && targets+=(cuda_test_cuda_parity)
if [ -z "${PREBUILT:-}" ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DVLLM_CURL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build $B -j "$(nproc)" --target "${targets[@]}" 2>&1 | grep -E "error|warning" | head -20
fi
echo "== built in $(( $(date +%s) - t0 )) s (commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
python3 - <<'PY'
import json, os
os.makedirs("/tmp/ab-q3", exist_ok=True)
json.dump(dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", max_position_embeddings=40960,
               rope_theta=1000000.0, rms_norm_eps=1e-6, torch_dtype="bfloat16", bos_token_id=151643,
               eos_token_id=151645, head_dim=128, vocab_size=151936, hidden_act="silu", attention_bias=False,
               hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=False), open("/tmp/ab-q3/config.json", "w"))
PY
envs() { [ "$1" = default ] && echo "VLLM_AB_DEFAULT=1" || echo "$1"; }
if [ "${PERF:-1}" = 1 ]; then
  for s in "$@"; do
    # shellcheck disable=SC2046
    env $(envs "$s") VLLM_PERF_SHAPES=8b VLLM_PERF_BATCHES="${PERF_BATCHES:-1 64 256}" VLLM_PERF_OP_BATCHES=256 \
      timeout 300 $B/cuda_test_cuda_perf > "$O/perf.log" 2>&1
    echo "-- perf [$s] rc $?"
    grep -E "decode batch|^    [a-z]|checks" "$O/perf.log" | grep -v "sample:"
  done
fi
for r in $(seq "${ROUNDS:-2}"); do
  for s in "$@"; do
    # shellcheck disable=SC2046
    env $(envs "$s") VLLM_LOG_LEVEL=debug timeout 200 $B/vllmc bench throughput --model /tmp/ab-q3 \
      --load-format dummy --device cuda --num-prompts 256 --input-len 128 --output-len 128 --max-num-seqs 256 \
      > "$O/thr.log" 2>&1
    echo "round $r [$s]: $(grep -oE 'Throughput: .*' "$O/thr.log" | head -1) |" \
      "$(grep -oE 'engine: [0-9]+ steps, [0-9.]+ s prefill \+ [0-9.]+ s decode; host time in the forward [0-9.]+ s' \
         "$O/thr.log" | head -1)"
  done
done
if [ "${PARITY:-0}" = 1 ]; then
  for s in "$@"; do
    # shellcheck disable=SC2046
    env $(envs "$s") timeout 300 $B/cuda_test_cuda_parity > "$O/parity.log" 2>&1
    echo "-- parity [$s] rc $?"
    grep -E "checks|FAIL" "$O/parity.log" | grep -v "^vllmc " | cut -c1-220 | head -12
  done
fi
echo "== total $(( $(date +%s) - t0 )) s"
