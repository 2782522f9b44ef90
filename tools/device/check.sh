#!/usr/bin/env bash
# tools/device/check.sh: issue 6's correctness checks on the GPU machine, in one device call.
#
# Builds vllm.c with the CUDA backend (Release), then runs
#   - tests/cuda/test_cuda_ops.c: every CUDA op against the CPU backend on random inputs;
#   - tests/cuda/test_cuda_parity.c: the model fixtures (tests/fixtures/models/*) generated on
#     CUDA against their expected.json (transformers), under three engine layouts;
#   - the same on a random-init model with Qwen3-0.6B's shapes, whose transformers reference
#     tools/make_fixtures.py makes here (teacher-forced, bounds from transformers' bf16 drift);
#   - tests/cuda/test_cuda_perf.c: decode / prefill timings of synthetic Qwen3-0.6B / 8B shapes
#     through the ops (eager, graphs, per op, sampling): informational rows;
#   - vllmc generate --device cuda on the bundled stories260K (greedy, against --device cpu);
#   - compute-sanitizer --tool memcheck on a short sampled generation;
# and prints a pass/fail table last. Logs go to ${OUT:-/tmp/vllmc-check}/.
#
#   tools/device/check.sh [--no-sanitizer] [--quick] [--prebuilt DIR]   (COMMIT=hash names the commit)
#     --quick: no sanitizer and no transformers bf16 drift (saves device time);
#     --prebuilt DIR: use DIR/{vllmc,cuda_test_cuda_ops,cuda_test_cuda_parity,cuda_test_cuda_perf}
#       built elsewhere (-DVLLM_NATIVE=OFF) instead of building here.
# Device call (DEVICE.md): run with carry [".devdeps"] (and DIR when prebuilt).
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp/vllmc-check}
mkdir -p "$LOG"
SAN=1
HF=1
PREBUILT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-sanitizer) SAN=0 ;;
    --quick) SAN=0; HF=0 ;;
    --prebuilt) PREBUILT="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

source tools/device/env.sh

ROWS=()
FAILS=0
row() { # name status detail
  ROWS+=("$(printf '%-58s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && FAILS=$((FAILS + 1))
  return 0
}
table() {
  echo
  echo "== check.sh results (${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  printf '%s\n' "${ROWS[@]}"
  echo "== $FAILS failed"
}

t0=$(date +%s)
B=build-cuda
if [ -n "$PREBUILT" ]; then
  B=$PREBUILT
  row "build" skip "prebuilt binaries in $B"
elif cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON > "$LOG/cmake.log" 2>&1 &&
   cmake --build build-cuda -j "$(nproc)" --target vllmc_cli cuda_test_cuda_ops cuda_test_cuda_parity \
     cuda_test_cuda_perf > "$LOG/build.log" 2>&1; then
  row "build (cmake -DVLLM_CUDA=ON, Release)" pass "$(($(date +%s) - t0)) s"
else
  tail -n 40 "$LOG/cmake.log" "$LOG/build.log"
  row "build (cmake -DVLLM_CUDA=ON, Release)" FAIL "see build.log"
  table
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

# a test binary: pass (0), skip (77) or FAIL; the first failures are shown
run_test() { # name binary [args] (killed after 300 s: a hung kernel must not eat the device call)
  local t=$(date +%s) rc
  timeout 300 "${@:2}" > "$LOG/$1.log" 2>&1
  rc=$?
  local summary
  summary=$(grep -E "checks, [0-9]+ failures" "$LOG/$1.log" | tail -1 | sed 's/.*: //')
  if [ $rc = 0 ]; then row "$1" pass "$summary, $(($(date +%s) - t))s"
  elif [ $rc = 77 ]; then row "$1" skip "$(head -1 "$LOG/$1.log")"
  else
    echo "== $1 failures (rc $rc)"
    grep -E "CHECK|failed|error" "$LOG/$1.log" | head -40
    row "$1" FAIL "rc $rc, ${summary:-crashed}"
  fi
}

echo "== test_cuda_ops"
run_test cuda_test_cuda_ops $B/cuda_test_cuda_ops
parity_rows() { # log: one row per PARITY line
  while read -r _ name layout_and_rest; do
    status=$(echo "$layout_and_rest" | grep -oE ' (pass|FAIL) ' | tr -d ' ')
    layout=${layout_and_rest%% pass *}; layout=${layout%% FAIL *}
    detail=${layout_and_rest#*"$status"}
    ROWS+=("$(printf '  parity %-49s %-5s %s' "$name: $(echo $layout)" "$status" "$(echo $detail)")")
  done < <(grep '^PARITY' "$1" 2>/dev/null)
}
echo "== test_cuda_parity"
run_test cuda_test_cuda_parity $B/cuda_test_cuda_parity
parity_rows "$LOG/cuda_test_cuda_parity.log"

# a random-init model with Qwen3-0.6B's real shapes (transformers' own init), made here by
# tools/make_fixtures.py (f32 reference, and transformers' bf16 drift setting the bounds),
# through the same teacher-forced and greedy checks
echo "== Qwen3-0.6B-shaped model against transformers"
t=$(date +%s)
if PYTHONUNBUFFERED=1 python3 tools/make_fixtures.py --out "$LOG/hf06" --device cuda --only qwen3_0.6b_shape \
     > "$LOG/hf06_make.log" 2>&1; then
  row "transformers reference for the Qwen3-0.6B shape" pass "$(grep -o 'bf16 vs f32.*' "$LOG/hf06_make.log" | head -1), $(($(date +%s) - t)) s"
  run_test cuda_test_cuda_parity_qwen3_0.6b $B/cuda_test_cuda_parity "$LOG/hf06"
  parity_rows "$LOG/cuda_test_cuda_parity_qwen3_0.6b.log"
else
  tail -n 20 "$LOG/hf06_make.log"
  row "transformers reference for the Qwen3-0.6B shape" FAIL "see hf06_make.log"
fi
cp "$LOG/hf06/qwen3_0.6b_shape/expected.json" "$LOG/hf06_expected.json" 2>/dev/null
rm -rf "$LOG/hf06" # 1.2 GB of weights: not brought back

# decode / prefill timings through the ops (synthetic Qwen3 shapes; the table is in the log)
echo "== test_cuda_perf"
run_test cuda_test_cuda_perf $B/cuda_test_cuda_perf
grep -vE "^ *$|^PERF|checks, " "$LOG/cuda_test_cuda_perf.log" | head -80
while read -r _ name rest; do
  ROWS+=("$(printf '  perf (ops, synthetic): %-34s %-5s %s' "$name" info "$rest")")
done < <(grep '^PERF' "$LOG/cuda_test_cuda_perf.log")

# the yardstick for the parity tolerances: transformers itself in bf16 (teacher-forced on the
# recorded continuations) against the fixtures' f32 reference
[ $HF = 1 ] && echo "== transformers bf16 drift"
[ $HF = 1 ] && PYTHONUNBUFFERED=1 python3 - > "$LOG/hf_bf16.log" 2>&1 <<'PY'
import json, os, torch
from transformers import AutoModelForCausalLM
root = "tests/fixtures/models"
for name in sorted(os.listdir(root)):
    d = os.path.join(root, name)
    exp = json.load(open(os.path.join(d, "expected.json")))
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
    worst, tot, n, flips = 0.0, 0.0, 0, 0
    for p in exp["prompts"]:
        P = len(p["prompt_token_ids"])
        x = torch.tensor([p["prompt_token_ids"] + p["token_ids"]], device="cuda")
        with torch.no_grad():
            lp = torch.log_softmax(m(x).logits[0].float(), -1)
        for j, t in enumerate(p["token_ids"]):
            dv = abs(lp[P - 1 + j, t].item() - p["logprobs"][j])
            worst, tot, n = max(worst, dv), tot + dv, n + 1
            flips += int(lp[P - 1 + j].argmax().item() != t)
    print(f"HFBF16 {name} max|d| {worst:.4f} mean|d| {tot / n:.4f} argmax flips {flips}/{n}", flush=True)
PY
while read -r _ name rest; do
  ROWS+=("$(printf '  transformers bf16 vs f32: %-31s %-5s %s' "$name" info "$rest")")
done < <(grep '^HFBF16' "$LOG/hf_bf16.log" 2>/dev/null)
if [ $HF = 1 ]; then
  grep -q '^HFBF16' "$LOG/hf_bf16.log" || { tail -n 5 "$LOG/hf_bf16.log"; row "transformers bf16 drift" FAIL "see hf_bf16.log"; }
fi

# the bundled model, greedy: CUDA against the CPU (BF16 may part from f32 at a near-tie)
echo "== vllmc generate stories260K"
V=$B/vllmc
if $V generate --model models/stories260K --prompt-token-ids 1 --max-tokens 200 --temperature 0 --json \
     --device cuda > "$LOG/stories_cuda.json" 2> "$LOG/stories_cuda.err" &&
   $V generate --model models/stories260K --prompt-token-ids 1 --max-tokens 200 --temperature 0 --json \
     --device cpu > "$LOG/stories_cpu.json" 2> "$LOG/stories_cpu.err"; then
  detail=$(python3 - "$LOG/stories_cuda.json" "$LOG/stories_cpu.json" <<'PY'
import json, sys
g, c = (json.loads(open(p).readline()) for p in sys.argv[1:3])
a, b = g["token_ids"], c["token_ids"]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(f"{len(a)} tokens, first {n} equal to the CPU's; max |dlogprob| over them "
      f"{max([abs(x - y) for x, y in zip(g['logprobs'][:n], c['logprobs'][:n])] or [0]):.4f}")
PY
)
  ntok=$(echo "$detail" | awk '{print $1}')
  if [ "$ntok" = 200 ]; then row "vllmc generate --device cuda (stories260K, greedy)" pass "$detail"
  else row "vllmc generate --device cuda (stories260K, greedy)" FAIL "$detail"; fi
  head -c 300 "$LOG/stories_cuda.json"; echo
else
  tail -n 5 "$LOG/stories_cuda.err" "$LOG/stories_cpu.err"
  row "vllmc generate --device cuda (stories260K, greedy)" FAIL "see stories_cuda.err"
fi

# sampled generation with penalties and logprobs under compute-sanitizer memcheck
if [ $SAN = 1 ]; then
  echo "== compute-sanitizer"
  if command -v compute-sanitizer > /dev/null; then
    compute-sanitizer --tool memcheck --error-exitcode 3 $V generate --model tests/fixtures/models/mistral_swa \
      --prompt-token-ids 1,5,9,200,31,7,7,8,100,3,4,5,6,7,8,9,10,11,12,13,14,15 --max-tokens 24 --n 2 \
      --temperature 0.8 --top-p 0.9 --top-k 40 --repetition-penalty 1.2 --logprobs 3 --seed 7 --json \
      --block-size 7 --device cuda > "$LOG/sanitizer.log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY" "$LOG/sanitizer.log" | tail -1)
    if [ $rc = 0 ]; then row "compute-sanitizer memcheck (generate, mistral_swa)" pass "$summary"
    else
      tail -n 30 "$LOG/sanitizer.log"
      row "compute-sanitizer memcheck (generate, mistral_swa)" FAIL "rc $rc, $summary"
    fi
  else
    row "compute-sanitizer memcheck" skip "not installed"
  fi
fi

table
[ $FAILS = 0 ]
