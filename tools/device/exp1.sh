source tools/device/env.sh
P=build-devbin/cuda_test_cuda_perf
for mk in 0 16 8; do
  echo "== ATTN_MIN_KEYS=$mk"
  VLLM_CUDA_ATTN_MIN_KEYS=$mk $P 2>&1 | grep -E "== qwen|decode batch  1|^    [a-z]" 
done
