#!/bin/sh
# setup.sh: installs the pinned openai npm client (package.json + package-lock.json) into
# tests/server/node/node_modules (gitignored) once, with npm's download cache in
# .cache/npm-server/, for the node tests of `vllmc serve` (tests/server/test_server_*.c).
# One install at a time (ctest runs the wrappers in parallel): flock on .cache/server-node.lock.
# Exit 0 when ready; 77 (ctest's skip) when node or npm is missing or the npm registry cannot
# be reached; 1 on any other failure.
#   sh tests/server/node/setup.sh      (from anywhere)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "skipped: node/npm not installed (the server tests use the openai npm client)"
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 18 ]; then
    echo "skipped: node $(node --version) is too old (need 18 or newer for fetch)"
    exit 77
fi
mkdir -p "$root/.cache/npm-server"
if command -v flock >/dev/null 2>&1 && [ -z "${VLLMC_SERVER_NODE_LOCKED:-}" ]; then
    export VLLMC_SERVER_NODE_LOCKED=1
    exec flock "$root/.cache/server-node.lock" sh "$0" "$@"
fi
if [ -f "$here/node_modules/openai/package.json" ]; then
    exit 0
fi
log="$root/.cache/npm-server/npm-ci.log"
if (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
        --cache "$root/.cache/npm-server" >"$log" 2>&1); then
    exit 0
fi
tail -n 8 "$log" >&2
if grep -Eq 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH|network' "$log"; then
    echo "skipped: npm cannot reach the registry to fetch the openai client (no network?)"
    exit 77
fi
echo "npm ci in tests/server/node failed (see $log)" >&2
exit 1
