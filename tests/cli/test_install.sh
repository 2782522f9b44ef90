#!/bin/sh
# test_install.sh: cmake --install into a temporary prefix, then build and run a libvllmc program against it (libvllmc.so, then libvllmc.a, both through pkg-config)
#
#   tests/cli/test_install.sh BUILD_DIR VERSION     (from the source root; ctest runs it so: exit 77 is a skip)
set -eu
build=$1
version=$2
model=models/stories260K
prompt="Once upon a time"

for tool in cc pkg-config nm ldd; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "skip: $tool is not installed"
    exit 77
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vllmc-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
pc=$(find "$prefix" -name vllmc.pc)
[ -n "$pc" ] || fail "no vllmc.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")  # lib, or lib/<multiarch> (GNUInstallDirs)
for f in bin/vllmc include/vllm.h; do
  [ -f "$prefix/$f" ] || fail "$f not installed"
done
for f in libvllmc.a libvllmc.so libvllmc.so.0 "libvllmc.so.$version"; do
  [ -e "$libdir/$f" ] || fail "$libdir/$f not installed"
done
[ -L "$libdir/libvllmc.so.0" ] || fail "libvllmc.so.0 is not a symbolic link"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
got=$(pkg-config --modversion vllmc) || fail "pkg-config does not find vllmc"
[ "$got" = "$version" ] || fail "pkg-config --modversion vllmc: $got, expected $version"

# only the public API is exported
others=$(nm -D --defined-only "$libdir/libvllmc.so.0" | awk 'NF >= 3 { print $3 }' | grep -v '^vllm_' || true)
[ -z "$others" ] || fail "libvllmc.so exports symbols outside the API: $(echo $others | head -c 400)"
nm -D --defined-only "$libdir/libvllmc.so.0" | grep -q ' vllm_engine_create$' || fail "vllm_engine_create is not exported"

cat >"$tmp/greedy.c" <<'EOF'
/* greedy.c: a few greedy tokens through the installed libvllmc */
#include <stdio.h>

#include <vllm.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    vllm_engine_options opts = vllm_engine_default_options();
    opts.num_threads = 1;
    vllm_engine *engine = NULL;
    if (vllm_engine_create(argv[1], &opts, &engine) != VLLM_OK) {
        fprintf(stderr, "vllm_engine_create: %s\n", vllm_last_error());
        return 1;
    }
    vllm_sampling_params params = vllm_sampling_default_params();
    params.temperature = 0.0f;
    params.max_tokens = 16;
    vllm_prompt prompt = {.text = argv[2]};
    vllm_completion *out = NULL;
    if (vllm_generate(engine, &prompt, 1, &params, false, &out, NULL) != VLLM_OK) {
        fprintf(stderr, "vllm_generate: %s\n", vllm_last_error());
        vllm_engine_free(engine);
        return 1;
    }
    printf("%s\n", out[0].text ? out[0].text : "");
    vllm_completions_free(out, 1);
    vllm_engine_free(engine);
    return 0;
}
EOF

# the reference: the installed vllmc, greedy; and it continues the model card's story
"$prefix/bin/vllmc" generate --model "$model" --prompt "$prompt" --max-tokens 16 --temperature 0 \
  >"$tmp/expected.txt" 2>"$tmp/cli.log" || { cat "$tmp/cli.log"; fail "installed vllmc generate"; }
story=$(head -c 4096 tests/fixtures/stories260K_greedy.txt)
case "$story" in
  "$prompt$(cat "$tmp/expected.txt")"*) ;;
  *) fail "installed vllmc generate: '$(cat "$tmp/expected.txt")' does not continue tests/fixtures/stories260K_greedy.txt" ;;
esac

# shared: cc $(pkg-config --cflags --libs vllmc), run from the prefix
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/greedy_shared" "$tmp/greedy.c" $(pkg-config --cflags --libs vllmc) \
  || fail "cc against libvllmc.so"
resolved=$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/greedy_shared" | awk '$1 == "libvllmc.so.0" { print $3 }')
[ "$resolved" = "$libdir/libvllmc.so.0" ] || fail "ldd: libvllmc.so.0 resolves to '$resolved', not $libdir/libvllmc.so.0"
LD_LIBRARY_PATH="$libdir" "$tmp/greedy_shared" "$model" "$prompt" >"$tmp/shared.txt" 2>"$tmp/shared.log" \
  || { cat "$tmp/shared.log"; fail "greedy_shared"; }
cmp -s "$tmp/expected.txt" "$tmp/shared.txt" \
  || fail "libvllmc.so: '$(cat "$tmp/shared.txt")', vllmc generate: '$(cat "$tmp/expected.txt")'"

# static: pkg-config --static adds libvllmc.a's dependencies; -l:libvllmc.a picks the archive over the .so
static_libs=""
for w in $(pkg-config --static --libs vllmc); do
  case "$w" in
    -lvllmc) w=-l:libvllmc.a ;;
    -lvllmc_cuda) w=-l:libvllmc_cuda.a ;;
  esac
  static_libs="$static_libs $w"
done
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/greedy_static" "$tmp/greedy.c" $(pkg-config --cflags vllmc) $static_libs \
  || fail "cc against libvllmc.a: $static_libs"
if ldd "$tmp/greedy_static" | grep -q libvllmc; then fail "greedy_static links libvllmc.so"; fi
"$tmp/greedy_static" "$model" "$prompt" >"$tmp/static.txt" 2>"$tmp/static.log" || { cat "$tmp/static.log"; fail "greedy_static"; }
cmp -s "$tmp/expected.txt" "$tmp/static.txt" \
  || fail "libvllmc.a: '$(cat "$tmp/static.txt")', vllmc generate: '$(cat "$tmp/expected.txt")'"

# the Python package, found where python3 looks under this prefix (lib/python3.X/dist-packages), loads the
# installed library by itself (no VLLMC_LIBRARY) and generates the same text
if command -v python3 >/dev/null 2>&1; then
  pkgdir=$(find "$prefix/lib" -type d -name vllmc -path '*dist-packages*' | head -1)
  [ -n "$pkgdir" ] || fail "the Python package is not installed under $prefix/lib"
  site=$(dirname "$pkgdir")
  pyver=$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
  case "$site" in
    "$prefix/lib/$pyver/dist-packages") ;;
    *) fail "the Python package is in $site, not $prefix/lib/$pyver/dist-packages" ;;
  esac
  env -u VLLMC_LIBRARY PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 python3 -c '
import sys
from vllmc import LLM, SamplingParams
llm = LLM(model=sys.argv[1])
out = llm.generate([sys.argv[2]], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)
print(out[0].outputs[0].text)
' "$model" "$prompt" >"$tmp/python.txt" 2>"$tmp/python.log" || { cat "$tmp/python.log"; fail "python3 -c 'from vllmc import LLM' from the prefix"; }
  cmp -s "$tmp/expected.txt" "$tmp/python.txt" \
    || fail "installed Python package: '$(cat "$tmp/python.txt")', vllmc generate: '$(cat "$tmp/expected.txt")'"
  grep -q "$prefix" "$tmp/python.log" 2>/dev/null || true
fi

echo "ok: installed under a prefix ($libdir); libvllmc.so and libvllmc.a programs generate '$(cat "$tmp/expected.txt")'"
