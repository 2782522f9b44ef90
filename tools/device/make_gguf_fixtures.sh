#!/usr/bin/env bash
# tools/device/make_gguf_fixtures.sh: issue 15's GGUF fixtures made by llama.cpp on the GPU machine
# (tools/make_gguf_fixtures.py says what they are). llama.cpp's tree at .peer/llama.cpp (DEVICE.md:
# git archive of e8e6c7af = b10095, trimmed; carry [".peer", ".devdeps"]). Builds llama-quantize
# (CPU only) outside the carried tree, then writes ${OUT}/gguf_fixtures.tgz.
set -euo pipefail
cd "$(dirname "$0")/../.."
L=.peer/llama.cpp
W=${WORK:-/tmp/ggfix}; rm -rf "$W"; mkdir -p "$W"
if [ ! -x /tmp/lbuild-cpu/bin/llama-quantize ]; then
  cmake -S $L -B /tmp/lbuild-cpu -DGGML_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$W/cmake.log" 2>&1 || { tail -20 "$W/cmake.log"; exit 1; }
  cmake --build /tmp/lbuild-cpu -j "$(nproc)" --target llama-quantize > "$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
fi
PYTHONPATH=$L/gguf-py python3 tools/make_gguf_fixtures.py --llama-cpp $L --quantize /tmp/lbuild-cpu/bin/llama-quantize \
  --out "$W/out" 2>&1 | grep -vE "^INFO|^DEBUG" | tail -40
rm -rf "$W/out/hf"
tar -czf "${OUT:-/tmp}/gguf_fixtures.tgz" -C "$W/out" .
ls -la "$W/out"
