#!/usr/bin/env bash
# tools/device/check_gguf_converter.sh: the GGUF mapping against llama.cpp's own converter. Each parity fixture whose
# config llama.cpp can represent is converted by convert_hf_to_gguf.py (tools/gguf_convert_fixture.py: BF16, no
# vocabulary) and run by test_gguf_families(_more) in place of the test's own writing of it (VLLM_TEST_GGUF_CONVERTED):
# the same tokens and logprobs as the safetensors folder (the CPU engine; exact). Needs torch + transformers (the GPU
# machine) and llama.cpp's python tree at .peer/llama.cpp (git archive of e8e6c7af = b10095: convert_hf_to_gguf.py,
# conversion/, gguf-py/; carry [".peer"]).
# Left out: qwen3_5 / qwen3_5_moe (their layer_types are not every 4th layer full: the converter writes only
# full_attention_interval, so llama.cpp could not load them either), gemma3_local (every 2nd layer global: the
# converter writes no sliding_window_pattern and llama.cpp then runs period 6).
# deepseek_v3: its transformers-5 config leaves scoring_func to the class default (sigmoid); the copy states it,
# as the released V3 configs do, so that the converter writes expert_gating_func.
# Usage: tools/device/check_gguf_converter.sh BUILD_DIR
set -uo pipefail
B=$(cd "${1:?build dir}" && pwd)
cd "$(dirname "$0")/../.."
L=.peer/llama.cpp
W=${WORK:-/tmp/gconv}
rm -rf "$W"; mkdir -p "$W/src"
for f in llama3_mqa_tied mixtral_moe qwen2_moe_shared gptoss_moe olmo2_postnorm granite_mult glm4_partial \
         deepseek_v2_lite deepseek_v2_yarn deepseek_v3 qwen3_next gemma2_softcap phi3_longrope; do
  ( cp -r "tests/fixtures/models/$f" "$W/src/$f"
    if [ "$f" = deepseek_v3 ]; then
      python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['scoring_func']='sigmoid'; json.dump(c,open(p,'w'),indent=1)" "$W/src/$f/config.json"
    fi
    python3 tools/gguf_convert_fixture.py "$L" "$W/src/$f" "$W/$f.gguf" > "$W/$f.log" 2>&1 \
      && echo "converted $f ($(stat -c %s "$W/$f.gguf") bytes)" || { echo "convert $f failed:"; tail -5 "$W/$f.log"; } ) &
done
wait # (each conversion is a python start with torch: ~10 s; in parallel)
rc=0
for t in model_test_gguf_families model_test_gguf_families_more; do
  echo "== $t with llama.cpp's files"
  VLLM_TEST_GGUF_CONVERTED="$W" "$B/$t" > "$W/$t.log" 2>&1
  r=$?
  grep -E "^GGUF|^   \(the file|CHECK|checks" "$W/$t.log" | tail -60
  [ "$r" = 0 ] || { echo "$t: exit $r"; rc=1; }
done
exit $rc
