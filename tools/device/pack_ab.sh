#!/usr/bin/env bash
# tools/device/pack_ab.sh: the development machine's half of tools/device/ab_decode.sh: builds vllmc at each
# revision (a git worktree and build directory under /tmp each, sm_90a machine code only, -DVLLM_NATIVE=OFF, no
# libcurl), the GPU test binaries (cuda_test_cuda_ops, _mla, _parity) at the first, strips them and packs one xz'd
# tar small enough to carry to a device call.
#
#   tools/device/pack_ab.sh OUT.tar.xz REV [REV ...]
#
# The tar holds vllmc_<REV as given> for each revision (REV "." is the working tree as it is, uncommitted edits
# included, named vllmc) and the first revision's tests (PERF=1: cuda_test_cuda_perf as well). A device call then
# unpacks it and runs, for instance,
#   tools/device/ab_decode.sh DIR base=vllmc_37c192a new=vllmc
# Build directories stay under /tmp/pack_ab (incremental on the next run of the same revision). About 5 minutes
# for a revision's first build on 2 cores, a minute or two after a change to one .cu file.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?output .tar.xz}; shift
[ $# -ge 1 ] || { echo "pack_ab.sh: name at least one revision" >&2; exit 2; }
W=/tmp/pack_ab; P=$W/pack; rm -rf "$P"; mkdir -p "$P"
first=1
for rev in "$@"; do
  if [ "$rev" = . ]; then src=$PWD; name=vllmc; bdir=$W/build_wt
  else
    short=$(git rev-parse --short "$rev"); src=$W/src_$short; name=vllmc_$rev; bdir=$W/build_$short
    if [ ! -d "$src" ]; then
      git worktree add -f --detach "$src" "$short" >/dev/null
      # sm_90a only in revisions before VLLM_CUDA_PTX (the worktree is this tool's own)
      sed -i '/-gencode=arch=compute_80,code=compute_80$/d' "$src/cmake/cuda.cmake"
    fi
  fi
  targets=(vllmc_cli)
  tests=(cuda_test_cuda_ops cuda_test_cuda_mla cuda_test_cuda_parity)
  [ "${PERF:-0}" = 1 ] && tests+=(cuda_test_cuda_perf) # PERF=1: test_cuda_perf too (its per-op and sampling rows)
  [ $first = 1 ] && targets+=("${tests[@]}")
  echo "pack_ab: $rev -> $name (${targets[*]})"
  # sm_90a only (VLLM_CUDA_PTX=OFF): the compute_80 PTX fallback doubles nvcc's time and the device is a Hopper
  cmake -S "$src" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON -DVLLM_CUDA_PTX=OFF -DVLLM_CURL=OFF \
    -DVLLM_NATIVE=OFF > "$bdir.cfg.log" 2>&1 || { tail -20 "$bdir.cfg.log"; exit 1; }
  cmake --build "$bdir" -j "$(nproc)" --target "${targets[@]}" > "$bdir.log" 2>&1 ||
    { grep -m20 -E "error" "$bdir.log"; exit 1; }
  strip -o "$P/$name" "$bdir/vllmc"
  if [ $first = 1 ]; then
    for t in "${tests[@]}"; do strip -o "$P/$t" "$bdir/$t"; done
  fi
  first=0
done
tar cf - -C "$P" . | xz -9e -T"$(nproc)" > "$OUT"
ls -la "$OUT"
