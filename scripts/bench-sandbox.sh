#!/usr/bin/env bash
# Measures Zygo's sandbox checkpoint, restore, fork of 11 and rollback beside the raw runsc
# commands doing the same engine work, in one run, and prints medians and ratios; then what
# reseal adds to a fork of 11.
# Needs root and runsc (scripts/install-runsc.sh). ZYGO_BENCH_REPS sets repetitions (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
# BenchmarkResealCost: what reseal adds to a fork of 11, against forks that skip it (test-only).
exec go test ./internal/sandbox/gvisor/ -run '^$' -bench 'BenchmarkSandboxVsRunsc|BenchmarkResealCost|BenchmarkSandboxNetworkCost' -benchtime 1x -count 1 -timeout 20m "$@"
