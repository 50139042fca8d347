#!/usr/bin/env bash
# The E2B rows of `make bench`: a private `zygo serve --e2b` (root, runsc), test/e2b's npm
# packages (npm ci), then test/e2b/bench.mjs, which prints a markdown table on stdout: create,
# commands.run("true"), a 10 MiB write and fork count 11 through E2B's SDK and through Zygo's
# own API (its Node SDK), side by side, with the ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
zygo=${ZYGO:-$root/bin/zygo}
[ "$(id -u)" = 0 ] || { echo "bench-e2b: needs root (gVisor sandboxes)" >&2; exit 1; }
(cd "$root/test/e2b" && npm ci --no-audit --no-fund >/dev/null)
state=$(mktemp -d /tmp/zbe-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$zygo" serve --state-dir "$state" --e2b "127.0.0.1:$port" --no-sandbox-network 2>"$state.log" &
pid=$!
cleanup() {
	ZYGO_STATE_DIR=$state "$zygo" sandbox ls -q 2>/dev/null | xargs -r -n1 env ZYGO_STATE_DIR="$state" "$zygo" sandbox rm >/dev/null 2>&1 || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$state" "$state.log"
}
trap cleanup EXIT
for _ in $(seq 600); do
	[ -s "$state/api.token" ] && ZYGO_STATE_DIR=$state "$zygo" status >/dev/null 2>&1 && break
	sleep 0.1
done
cd "$root/test/e2b"
E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=http://127.0.0.1:$port \
	E2B_API_KEY=e2b_$(cat "$state/api.token") ZYGO_STATE_DIR=$state node bench.mjs
