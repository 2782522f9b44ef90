#!/usr/bin/env bash
# tools/device/ncu_step.sh: where a batch-1 decode step's kernel time goes, per kernel, from Nsight Compute (ncu is
# in the device's CUDA toolkit): `vllmc generate --enforce-eager` (every kernel launched on its own) under
#   ncu --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none
# then tools/ncu_step.py's table of the last STEPS complete decode steps. ncu runs the kernels one at a time (no
# PDL overlap), so the sum is longer than a graph step; the shares say where the time goes. About 40 s for a
# 48-layer model with 5 generated tokens. (`--set full` instead of the one metric costs ~40 replays a kernel:
# over 200 s for 16 kernels of Gemma-3-12B; take 2-3 kernels at once with --launch-skip / --launch-count.)
#
#   tools/device/ncu_step.sh MODEL_DIR [STEPS]      (VLLMC_BIN=path: a prebuilt vllmc; dummy weights)
# BATCH=N: a decode step of N sequences instead (`vllmc bench latency --enforce-eager --batch-size N`, 128-token
# prompts prefilled in chunks of 8,192 tokens, STEPS + 8 outputs; the table skips the final steps, in which the
# first chunks' sequences have finished, so every step it averages decodes all N; --list prints each step's kernel
# count and time first, to check that).
# Device call: carry [".devdeps"] (and the prebuilt binary). Logs under ${OUT:-/tmp/ncu_step}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source tools/device/env.sh
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
M=${1:?model directory}
STEPS=${2:-2}
O=${OUT:-/tmp/ncu_step}; mkdir -p "$O"
V=${VLLMC_BIN:-}
if [ -z "$V" ]; then
  cmake -S . -B /tmp/bncu -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DVLLM_CURL=OFF >/dev/null
  cmake --build /tmp/bncu -j "$(nproc)" --target vllmc_cli 2>&1 | grep -E "error|warning" | head -20
  V=/tmp/bncu/vllmc
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
IDS=$(python3 -c "print(','.join(str(7 + 13 * i) for i in range(100)))")
name=$(basename "$M")
N=${BATCH:-1}
if [ "$N" -gt 1 ]; then
  chunks=$(( (N * 128 + 8191) / 8192 ))
  timeout 600 "$NCU" --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \
    "$V" bench latency --model "$M" --load-format dummy --device cuda --enforce-eager --num-iters-warmup 0 \
    --num-iters 1 --batch-size "$N" --input-len 128 --output-len $((STEPS + 8)) --max-num-batched-tokens 8192 \
    --max-num-seqs "$N" --max-model-len 1024 > "$O/ncu_$name.csv" 2> "$O/ncu_$name.err"
  echo "ncu rc $? ($(grep -c '^"' "$O/ncu_$name.csv") kernels profiled)"
  python3 tools/ncu_step.py "$O/ncu_$name.csv" --steps "$STEPS" --skip-last $((chunks > 1 ? chunks - 1 : 0)) --list
  exit
fi
timeout 300 "$NCU" --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \
  "$V" generate --model "$M" --load-format dummy --device cuda --enforce-eager --prompt-token-ids "$IDS" \
  --max-tokens $((STEPS + 3)) --ignore-eos --temperature 0 --max-model-len 2048 > "$O/ncu_$name.csv" 2> "$O/ncu_$name.err"
echo "ncu rc $? ($(grep -c '^"' "$O/ncu_$name.csv") kernels profiled)"
python3 tools/ncu_step.py "$O/ncu_$name.csv" --steps "$STEPS"
