#!/usr/bin/env bash
# The main job end to end: start a daemon on a temporary state dir, deploy
# examples/hello, examples/stats (NumPy at module level), examples/hello-node
# and stats-cold (examples/stats in spawn mode), invoke each repeatedly, show
# that draws differ per request, print warm (fork) and cold (spawn: a fresh
# interpreter per request) latency side by side, show the logs of the last
# stats request, and stop the daemon cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
ZYGO=${ZYGO:-./bin/zygo}
STATE=$(mktemp -d /tmp/zygo-demo.XXXXXX)
export ZYGO_STATE_DIR=$STATE
LOG=$STATE.log
N=${DEMO_N:-50}

cleanup() {
	status=$?
	if [ -n "${DAEMON:-}" ] && kill -0 "$DAEMON" 2>/dev/null; then
		kill -TERM "$DAEMON"; wait "$DAEMON" || true
	fi
	rm -rf "$STATE" "$STATE.cold"
	if [ "$status" -eq 0 ]; then
		rm -f "$LOG"
	else
		echo "demo failed; the daemon's log is $LOG" >&2
	fi
}
trap cleanup EXIT

echo "== starting the daemon (state dir $STATE)"
$ZYGO serve >"$LOG" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do $ZYGO status >/dev/null 2>&1 && break; sleep 0.1; done
$ZYGO status

echo; echo "== deploying"
$ZYGO up examples/hello
$ZYGO up examples/stats
$ZYGO up examples/hello-node
mkdir -p "$STATE.cold"; cp examples/stats/main.py "$STATE.cold/"
sed -e 's/^name = .*/name = "stats-cold"/' -e 's/^mode = .*/mode = "spawn"/' examples/stats/zygo.toml >"$STATE.cold/zygo.toml"
$ZYGO up "$STATE.cold"
$ZYGO ls

echo; echo "== hello, three requests: each has its own random draw, uuid and temp folder"
for i in 1 2 3; do $ZYGO invoke hello --data "{\"name\": \"request $i\"}"; done

echo; echo "== hello-node, three requests: each served by a fresh Node worker made ready ahead of time"
for i in 1 2 3; do $ZYGO invoke hello-node --data "{\"name\": \"node $i\"}"; done

echo; echo "== stats (NumPy imported once, in the zygote), five requests: every draw differs"
$ZYGO invoke stats --data '{"n": 500}' --repeat 5 2>/dev/null

NCOLD=$((N / 5)) NNODE=$((N / 2))
echo; echo "== latency, measured side by side in this run (concurrency 1; $N requests each warm, $NCOLD cold, $NNODE Node)"
warm=$($ZYGO invoke stats --data '{"n": 100}' --repeat "$N" 2>&1 >/dev/null | tail -1)
cold=$($ZYGO invoke stats-cold --data '{"n": 100}' --repeat "$NCOLD" 2>&1 >/dev/null | tail -1)
hello=$($ZYGO invoke hello --repeat "$N" 2>&1 >/dev/null | tail -1)
node=$($ZYGO invoke hello-node --repeat "$NNODE" 2>&1 >/dev/null | tail -1)
printf '  %-28s %s\n' "hello, warm (fork):" "$hello" "stats, warm (fork):" "$warm" "stats, cold (spawn):" "$cold" "hello-node (workers):" "$node"
p50() { sed -E 's/.*p50 ([0-9.]+) ms.*/\1/' <<<"$1"; }
awk -v w="$(p50 "$warm")" -v c="$(p50 "$cold")" 'BEGIN { printf "  cold p50 / warm p50 = %.1fx\n", c / w }'

# The request column (the second) of the newest line of a request.
last=$($ZYGO logs stats | awk '$2 != "-" { id = $2 } END { print id }')
echo; echo "== logs of the last stats request ($last)"
$ZYGO logs stats --request "$last"

echo; echo "== stopping the daemon"
kill -TERM "$DAEMON"; wait "$DAEMON"; DAEMON=""
echo "demo done"
