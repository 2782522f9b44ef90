#!/usr/bin/env bash
# tools/device/ab_stack.sh: issue 19 item 1 in one device call: the whole-stack decode kernel (VLLM_CUDA_STACK=1,
# src/cuda/ops_stack.cu) against the per-layer ops on Qwen3-0.6B / Qwen3-8B shapes (dummy weights):
#   1. tests/cuda/test_cuda_stack.c (the kernel against the per-layer ops, eager and in a graph);
#   2. greedy generation (48 tokens) both ways on each shape: tokens equal up to the first difference, and the
#      largest logprob difference over them;
#   3. batch-1 decode, step = (t(128 in, 129 out) - t(128 in, 1 out)) / 128 of `vllmc bench latency` (2 warm-up + 5
#      iterations), the per-layer ops and the stack under each VARIANT "stack,dbg" (VLLM_CUDA_STACK_DBG bits skip
#      parts of the kernel, for timing only: 2 the GEMV math, 4 the attention, 8 the grid barriers, 16 the weight
#      stream, 32 the attention prefetch (this one correct)).
#
#   TRACE=1: VLLM_CUDA_STACK_TRACE's report of one eager step on each shape (before 3); a VARIANT may add a third
#   field, the ring slots in use (VLLM_CUDA_STACK_NSLOT), and a fourth, the percent of each GEMV phase's units
#   split statically (VLLM_CUDA_STACK_STATIC; the rest are taken from a pool), and a fifth, the units prefetched
#   into L2 ahead of the ring (VLLM_CUDA_STACK_AHEAD), and a sixth, the attention's keys a split at least
#   (VLLM_CUDA_STACK_MINK): the knobs of the work-stealing version (commit 707ddda, measured slower and not kept;
#   the kernel now ignores them).
#   4. PARITY=1: the Qwen3-0.6B-shaped model against transformers (tools/make_fixtures.py, as check.sh) with the
#      stack on, every layout of test_cuda_parity ("one sequence at a time" decodes every step through it).
#
#   tools/device/ab_stack.sh            (VARIANTS="0,0 1,0 1,32 1,2 1,4 1,8 1,16" by default)
#   PREBUILT=DIR: DIR/vllmc, DIR/cuda_test_cuda_stack (and DIR/cuda_test_cuda_parity) instead of building in
#   /tmp/bstack.
#   ALTS="tree name ...": kernels compared in the same call, for a build that carries alternatives of ops_stack.cu
#   (VLLM_CUDA_STACK_ALT=name picks one; "tree" sets none): each runs 1, 2 (against the per-layer ops), the trace
#   and every VARIANT.
# Device call: carry [".devdeps"] (and DIR). Logs under ${OUT:-/tmp/ab_stack}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source tools/device/env.sh
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
O=${OUT:-/tmp/ab_stack}; mkdir -p "$O"
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
B=${PREBUILT:-/tmp/bstack}
if [ -z "${PREBUILT:-}" ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DVLLM_CURL=OFF >/dev/null
  targets=(vllmc_cli cuda_test_cuda_stack)
  [ "${PARITY:-0}" = 1 ] && targets+=(cuda_test_cuda_parity)
  cmake --build $B -j "$(nproc)" --target "${targets[@]}" 2>&1 | grep -E "error|warning" | head -20
fi
V=$B/vllmc
echo "== ready in $(( $(date +%s) - t0 )) s (commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
ALTS=${ALTS:-tree}
alt() { [ "$1" = tree ] && echo "" || echo "$1"; }
for k in $ALTS; do
  VLLM_CUDA_STACK_ALT=$(alt $k) timeout 120 $B/cuda_test_cuda_stack > "$O/stack_$k.log" 2>&1
  echo "test_cuda_stack ($k) rc $?: $(grep -E 'checks, [0-9]+ failures' "$O/stack_$k.log" | sed 's/.*: //')"
  grep -E "CHECK" "$O/stack_$k.log" | head -10
done
python3 - <<'PY'
import json, os
base = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", max_position_embeddings=40960,
            rope_theta=1000000.0, rms_norm_eps=1e-6, torch_dtype="bfloat16", bos_token_id=151643,
            eos_token_id=151645, head_dim=128, vocab_size=151936, hidden_act="silu", attention_bias=False)
for d, extra in (("/tmp/ab-q06", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True)),
                 ("/tmp/ab-q3", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False))):
    os.makedirs(d, exist_ok=True)
    json.dump(dict(base, **extra), open(d + "/config.json", "w"))
PY
IDS=$(python3 -c "print(','.join(str(7 + 13 * i) for i in range(40)))")
for d in /tmp/ab-q06 /tmp/ab-q3; do
  n=$(basename $d)
  for s in 0 $ALTS; do
    st=1; [ "$s" = 0 ] && st=0
    VLLM_CUDA_STACK_ALT=$(alt $s) VLLM_CUDA_STACK=$st timeout 120 $V generate --model $d --load-format dummy --device cuda --prompt-token-ids "$IDS" \
      --max-tokens 48 --ignore-eos --temperature 0 --logprobs 1 --json --max-model-len 1024 \
      > "$O/gen_${n}_$s.json" 2>> "$O/gen.log"
  done
  for s in $ALTS; do
  python3 - "$O/gen_${n}_0.json" "$O/gen_${n}_$s.json" "$n $s" <<'PY'
import json, sys
try:
    a, b = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3])
except Exception as e:
    print("%s: no output to compare (%s)" % (sys.argv[3], e)); sys.exit(0)
ta, tb = a["token_ids"], b["token_ids"]
n = 0
while n < min(len(ta), len(tb)) and ta[n] == tb[n]: n += 1
d = max((abs(a["logprobs"][i] - b["logprobs"][i]) for i in range(n)), default=float("nan"))
print("%s greedy: tokens equal for %d of %d; max |dlogprob| over them %.4f" % (sys.argv[3], n, len(ta), d))
PY
  done
done
grep -iE "error|one kernel" "$O/gen.log" | sort | uniq -c | head
if [ "${TRACE:-0}" = 1 ]; then # where a step's time goes inside the kernel (the 40th launch, eager)
  for d in /tmp/ab-q06 /tmp/ab-q3; do for k in $ALTS; do
    echo "== trace $(basename $d) $k"
    VLLM_CUDA_STACK_ALT=$(alt $k) VLLM_CUDA_STACK=1 VLLM_CUDA_STACK_TRACE=40 timeout 120 $V generate --model $d --load-format dummy --device cuda \
      --prompt-token-ids "$IDS" --max-tokens 48 --ignore-eos --temperature 0 --max-model-len 1024 --enforce-eager \
      2>&1 >/dev/null | grep -A20 "dense stack trace"
  done; done
fi
lat() { # dir stack dbg out [nslot [static [ahead [mink]]]] -> seconds (kernel $K of ALTS)
  env VLLM_CUDA_STACK_ALT=$(alt ${K:-tree}) VLLM_CUDA_STACK=$2 VLLM_CUDA_STACK_DBG=$3 VLLM_CUDA_STACK_NSLOT=${5:-5} VLLM_CUDA_STACK_STATIC=${6:-50} \
    VLLM_CUDA_STACK_AHEAD=${7:-4} VLLM_CUDA_STACK_MINK=${8:-16} timeout 120 $V bench latency --model "$1" --load-format dummy \
    --device cuda --num-iters-warmup 2 --num-iters 5 --batch-size 1 --input-len 128 --output-len "$4" \
    --max-model-len 1024 2>> "$O/lat.log" | awk '/^Avg latency/ {print $3}'
}
for d in /tmp/ab-q06 /tmp/ab-q3; do
  p=$(K=tree lat $d 0 0 1)
  for v in ${VARIANTS:-0,0 1,0 1,32 1,2 1,4 1,8 1,16}; do for K in $ALTS; do
    set -- ${v//,/ }
    [ "$1" = 0 ] && [ "$K" != "${ALTS%% *}" ] && continue
    f=$(lat $d "$1" "$2" 129 "${3:-5}" "${4:-50}" "${5:-4}" "${6:-16}")
    echo "$(basename $d) $K stack=$1 dbg=$2 nslot=${3:-5} static=${4:-50}% ahead=${5:-4} mink=${6:-16}: $(awk -v f="$f" -v p="$p" 'BEGIN { if (f == "" || p == "") print "failed";
      else printf "%.1f tok/s (%.3f ms a step)", 128 / (f - p), (f - p) / 128 * 1000 }')"
  done; done
done
grep -iE "error" "$O/lat.log" | sort | uniq -c | head
if [ "${PARITY:-0}" = 1 ]; then
  if PYTHONUNBUFFERED=1 timeout 240 python3 tools/make_fixtures.py --out /tmp/ab-hf06 --device cuda \
       --only qwen3_0.6b_shape > "$O/hf06_make.log" 2>&1; then
    VLLM_CUDA_STACK=1 timeout 240 $B/cuda_test_cuda_parity /tmp/ab-hf06 > "$O/parity06.log" 2>&1
    echo "parity (0.6B shape, stack on) rc $?"
    grep -E "^PARITY|checks" "$O/parity06.log" | cut -c1-200
  else
    tail -5 "$O/hf06_make.log"
  fi
fi
echo "== total $(( $(date +%s) - t0 )) s"
