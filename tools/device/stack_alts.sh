#!/usr/bin/env bash
# tools/device/stack_alts.sh: builds alternatives of src/cuda/ops_stack.cu into one binary for a same-call A/B
# (ab_stack.sh ALTS="tree name ..."). Run it in a scratch worktree, never in the one you commit from: it adds
# src/cuda/ops_stack_alt_<name>.cu (each version with its kernel, types and entry points renamed, and its own
# "kernel ready" cache) and makes the tree's cu_dense_stack_decode hand the step to cu_dense_stack_decode_<name>
# when VLLM_CUDA_STACK_ALT=<name>. One binary instead of several keeps the device call's carry small.
#   tools/device/stack_alts.sh ws:/tmp/ops_stack_ws.cu static:<(git show REV:src/cuda/ops_stack.cu)
set -euo pipefail
cd "$(dirname "$0")/../.."
git checkout -q src/cuda/ops_stack.cu
rm -f src/cuda/ops_stack_alt_*.cu
decl=""; disp=""; res=""
for nf in "$@"; do
  n=${nf%%:*}; f=${nf#*:}
  sed -E -e "s/\bk_dense_stack\b/k_dense_stack_$n/g; s/\bmk\b/mk_$n/g; s/\bmk_(args|layer|seg)\b/mk_\1_$n/g" \
      -e "s/\b(cu_dense_stack_supports|cu_stack_reserve|cu_dense_stack_decode)\b/\1_$n/g" \
      -e "s/cu->stack_ready/alt_stack_ready/g" \
      -e 's|^#include "cuda/cuda_internal.h"|#include "cuda/cuda_internal.h"\nstatic int alt_stack_ready[3];|' \
      "$f" > src/cuda/ops_stack_alt_$n.cu
  decl+="be_support cu_dense_stack_supports_$n(cu_state *cu, const be_dense_stack *st);
vllm_status cu_stack_reserve_$n(cu_state *cu);
void cu_dense_stack_decode_$n(backend *be, const be_dense_stack *st, tensor *x, const tensor *positions,
                              const attn_meta *m, tensor *qkv, tensor *attn, tensor *act);
"
  disp+="        if (alt && !strcmp(alt, \"$n\")) {
            (void)cu_dense_stack_supports_$n(cu_of(be), st);
            cu_dense_stack_decode_$n(be, st, x, positions, m, qkv, attn, act);
            return;
        }
"
  res+="    if (st == VLLM_OK) st = cu_stack_reserve_$n(cu);
"
done
python3 - src/cuda/ops_stack.cu "$decl" "$disp" "$res" <<'PY'
import sys
p, decl, disp, res = sys.argv[1:5]
s = open(p).read()
inc = '#include "cuda/cuda_internal.h"\n'
assert s.count(inc) == 1
s = s.replace(inc, inc + '#include <string.h>\n' + decl, 1)
a = '''    cu_state *cu = cu_of(be);
    const char *op = "dense_stack_decode";'''
assert s.count(a) == 1
s = s.replace(a, '''    {
        const char *alt = getenv("VLLM_CUDA_STACK_ALT");
''' + disp + '''    }
''' + a)
a = '''    if (st == VLLM_OK && cudaMemsetAsync(cu->stack_cnt.p'''
assert s.count(a) == 1
s = s.replace(a, res + a)
open(p, 'w').write(s)
PY
echo "src/cuda/ops_stack.cu now dispatches to: $*"
