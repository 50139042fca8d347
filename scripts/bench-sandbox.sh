#!/usr/bin/env bash
# Measures Zygo's sandbox checkpoint, restore, fork of 11 and rollback beside the raw runsc
# commands doing the same engine work, in one run, and prints medians and ratios.
# Needs root and runsc (scripts/install-runsc.sh). ZYGO_BENCH_REPS sets repetitions (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test ./internal/sandbox/gvisor/ -run '^$' -bench BenchmarkSandboxVsRunsc -benchtime 1x -count 1 -timeout 20m "$@"
