#!/usr/bin/env bash
# tools/device/bench.sh: issue 6's benchmarks on the GPU machine, in one device call.
#
# Builds vllm.c with CUDA, makes random-init models with real shapes (Qwen3-0.6B saved with
# transformers save_pretrained in bf16; Qwen3-8B as config.json only, run with
# --load-format dummy), runs vllmc bench latency / throughput, runs transformers on the same
# shapes in the same call as the peer (generate with a static cache + torch.compile), and
# prints a table with the memory-bandwidth floor (weight bytes / 4.25 TB/s, the measured
# device copy bandwidth, DEVICE.md).
#
#   tools/device/bench.sh [--quick] [--skip-peer | --peer-only] [--only 0.6b|8b]
# (--skip-peer and --peer-only split one run over two device calls of at most 10 minutes each;
# the models of the first stay in BENCH_WORK while the machine is warm)
# VLLMC_BIN=path uses a prebuilt vllmc instead of building; COMMIT names the commit measured;
# PEER_MODELS=qwen3-8b limits the transformers peer to those models.
# Results go to stdout and, as JSON lines, to ${OUT:-/tmp}/bench.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
QUICK=0; PEER=1; VLLMC_RUNS=1; ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --skip-peer) PEER=0 ;;
    --peer-only) VLLMC_RUNS=0 ;;
    --only) ONLY="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
OUTDIR=${OUT:-/tmp}
RES="$OUTDIR/bench.jsonl"; : > "$RES"
WORK=${BENCH_WORK:-/tmp/vllmc-bench}; mkdir -p "$WORK"

source tools/device/env.sh
echo "== commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if [ $VLLMC_RUNS = 0 ]; then
  VLLMC=none
elif [ -n "${VLLMC_BIN:-}" ] && [ -x "$VLLMC_BIN" ]; then
  VLLMC=$VLLMC_BIN            # prebuilt (carried) binary: no build on the device
else
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON >/dev/null
  cmake --build build-cuda -j "$(nproc)" --target vllmc_cli 2>&1 | grep -E "error|warning" || true
  VLLMC=build-cuda/vllmc
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

echo "== models"
python3 - "$WORK" "$ONLY" <<'PY'
import json, os, sys
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
work, only = sys.argv[1], sys.argv[2]
shapes = {
  "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
  "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
}
for name, kw in shapes.items():
    if only and not name.endswith(only): continue
    d = os.path.join(work, name)
    if os.path.exists(os.path.join(d, "config.json")): continue
    cfg = Qwen3Config(architectures=["Qwen3ForCausalLM"], max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      torch_dtype="bfloat16", bos_token_id=151643, eos_token_id=151645, **kw)
    if name == "qwen3-0.6b":
        torch.manual_seed(0)
        m = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
        m.save_pretrained(d)
    else:
        os.makedirs(d, exist_ok=True)
        cfg.save_pretrained(d)
    print("made", d, flush=True)
PY

record() { echo "$1" >> "$RES"; }
# bench latency: prints "Avg latency: X seconds"
lat() { # model extra-args...
  local m=$1; shift
  "$VLLMC" bench latency --model "$m" --device cuda --num-iters-warmup 2 --num-iters $([ $QUICK = 1 ] && echo 3 || echo 10) "$@" 2>&1 |
    tee -a "$OUTDIR/vllmc.log" | awk '/^Avg latency/ {print $3}'
}
for name in qwen3-0.6b qwen3-8b; do
  [ $VLLMC_RUNS = 1 ] || continue
  [ -n "$ONLY" ] && [[ $name != *"$ONLY" ]] && continue
  d="$WORK/$name"; fmt=(); [ "$name" = qwen3-8b ] && fmt=(--load-format dummy)
  echo "== vllmc $name"
  full=$(lat "$d" "${fmt[@]}" --batch-size 1 --input-len 128 --output-len 128)
  pre=$(lat "$d" "${fmt[@]}" --batch-size 1 --input-len 128 --output-len 1)
  p512=$(lat "$d" "${fmt[@]}" --batch-size 1 --input-len 512 --output-len 1)
  # the engine's start-up line "host memory after load: X MiB resident (peak Y MiB)" of the last run
  read -r rss_now rss_peak < <(grep -o 'host memory after load: [0-9.]* MiB resident (peak [0-9.]* MiB)' \
    "$OUTDIR/vllmc.log" | tail -1 | grep -oE '[0-9.]+' | tr '\n' ' '; echo) || true
  python3 -c "import json;f,p,q=$full,$pre,$p512;print(json.dumps({'engine':'vllmc','model':'$name','decode_tok_s':127/(f-p),'prefill512_tok_s':512/q,'latency_128_128_s':f,'host_rss_mib':${rss_now:-0},'host_peak_rss_mib':${rss_peak:-0}}))" | tee -a "$RES"
  if [ "$name" = qwen3-8b ] && [ $QUICK = 0 ]; then
    "$VLLMC" bench throughput --model "$d" "${fmt[@]}" --device cuda --num-prompts 256 --input-len 128 \
      --output-len 128 --max-num-seqs 256 2>&1 | tee -a "$OUTDIR/vllmc.log" | grep -E "Throughput|tokens/s" || true
  fi
done

if [ $PEER = 1 ]; then
  echo "== transformers peer (static cache + torch.compile)"
  python3 - "$WORK" "$ONLY" "$RES" <<'PY'
import json, os, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM
work, only, res = sys.argv[1:4]
peer_models = os.environ.get("PEER_MODELS", "qwen3-0.6b,qwen3-8b").split(",")
for name in ["qwen3-0.6b", "qwen3-8b"]:
    if (only and not name.endswith(only)) or name not in peer_models: continue
    d = os.path.join(work, name)
    cfg = AutoConfig.from_pretrained(d)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    m.eval()
    # generate() compiles the decode step itself when the cache is static (transformers'
    # auto-compile, GenerationMixin._valid_auto_compile_criteria); wrapping m.forward in
    # torch.compile(mode="reduce-overhead") by hand fails in 5.17 ("accessing tensor output of
    # CUDAGraphs that has been overwritten"), seen on 2026-11-30
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
    def gen(n):
        torch.cuda.synchronize(); t = time.perf_counter()
        m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
        torch.cuda.synchronize(); return time.perf_counter() - t
    for _ in range(3): gen(128)  # compile + warm up
    full = min(gen(128) for _ in range(3)); pre = min(gen(1) for _ in range(3))
    with torch.no_grad():
        x = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda")
        for _ in range(2): m(x)
        torch.cuda.synchronize(); t = time.perf_counter(); m(x); torch.cuda.synchronize(); p512 = time.perf_counter() - t
    r = {"engine": "transformers-static-compile", "model": name, "decode_tok_s": 127 / (full - pre),
         "prefill512_tok_s": 512 / p512}
    print(json.dumps(r), flush=True)
    open(res, "a").write(json.dumps(r) + "\n")
    del m; torch.cuda.empty_cache()
PY
fi

echo "== table"
python3 - "$RES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
weights = {"qwen3-0.6b": 2 * (151936 * 1024 + 28 * (1024 * 4096 + 2048 * 1024 + 3 * 1024 * 3072)),
           "qwen3-8b": 2 * (2 * 151936 * 4096 + 36 * (4096 * (4096 + 2048) + 4096 * 4096 + 3 * 4096 * 12288))}
print(f"{'model':<12} {'engine':<30} {'decode tok/s':>13} {'floor':>7} {'prefill512 tok/s':>17} {'host MiB after load':>20}")
for r in rows:
    floor = 4.25e12 / weights[r["model"]]
    rss = f"{r['host_rss_mib']:.0f} (peak {r['host_peak_rss_mib']:.0f})" if "host_rss_mib" in r else "-"
    print(f"{r['model']:<12} {r['engine']:<30} {r['decode_tok_s']:>13.0f} {floor:>7.0f} {r['prefill512_tok_s']:>17.0f} {rss:>20}")
PY
