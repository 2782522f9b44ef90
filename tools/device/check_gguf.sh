#!/usr/bin/env bash
# tools/device/check_gguf.sh: the GGUF model tests with their engines on the GPU (VLLM_TEST_GGUF_DEVICE=cuda):
# llama.cpp's own quantized files against transformers (test_gguf_llamacpp) and every family's converted fixture
# against its safetensors folder on the same GPU (test_gguf_model, test_gguf_families, test_gguf_families_more).
# Usage: tools/device/check_gguf.sh BUILD_DIR   (a -DVLLM_CUDA=ON build of the model tests)
set -uo pipefail
B=$(cd "${1:?build dir}" && pwd)
cd "$(dirname "$0")/../.."
rc=0
for t in model_test_gguf_llamacpp model_test_gguf_model model_test_gguf_families model_test_gguf_families_more; do
  echo "== $t (cuda)"
  VLLM_TEST_GGUF_DEVICE=cuda "$B/$t" > "/tmp/$t.cuda.log" 2>&1
  r=$?
  grep -vE "^vllmc (info|debug)" "/tmp/$t.cuda.log" | tail -40
  [ "$r" = 0 ] || { echo "$t: exit $r"; rc=1; }
done
exit $rc
