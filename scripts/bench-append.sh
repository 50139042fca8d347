#!/usr/bin/env bash
# Appends the sandbox benchmark (scripts/bench-sandbox.sh output, file $1) to
# docs/BENCHMARKS.md ($2), beside the seed's figures (seeds/000: checkpoint
# 24.7 s, three-way fork 11.8-15.1 s, rollback 5.3-5.4 s on another platform).
set -euo pipefail
in=$1 out=$2
ms() { # ms LABEL: the zygo column of a row of the zygo-vs-raw-runsc table (other tables, such as
	# the network's, have rows of the same label), in ms
	awk -v l="$1" '/raw runsc/ { t = 1; next } t && NF == 0 { t = 0 }
		t && index($0, l) == 1 { v = $(NF-2); if (v ~ /ms$/) { sub(/ms$/, "", v); print v } else { sub(/s$/, "", v); print v * 1000 }; exit }' "$in"
}
cp=$(ms "checkpoint (source paused)") fork=$(ms "fork 11, until all answer") rb=$(ms "rollback, until it answers")
if [ -z "$cp" ] || [ -z "$fork" ] || [ -z "$rb" ]; then
	echo "bench-append: $in has no sandbox table (did scripts/bench-sandbox.sh fail?)" >&2
	exit 1
fi
{
	echo
	echo "## Sandboxes (gVisor, runsc --platform=systrap)"
	echo
	echo "Measured by \`scripts/bench-sandbox.sh\` in the same \`make bench\` run: each Zygo operation beside"
	echo "the raw \`runsc\` commands doing the same engine work (ratio Zygo/raw), then what reseal adds."
	echo
	echo '```'
	grep -v -e '^goos' -e '^goarch' -e '^pkg' -e '^cpu' -e '^Benchmark' -e '^PASS' -e '^ok ' "$in"
	echo '```'
	echo
	echo "| beside the seed (another platform, seed 000) | the seed | Zygo here |"
	echo "|---|---|---|"
	printf '| checkpoint (pause of the source) | 24.7 s | %.0f ms (%.0fx less) |\n' "$cp" "$(awk -v c="$cp" 'BEGIN { print 24700 / c }')"
	printf '| fork (the seed: 3 copies; Zygo: 11, until all answer) | 11.8-15.1 s | %.0f ms |\n' "$fork"
	printf '| rollback | 5.3-5.4 s | %.0f ms |\n' "$rb"
} >>"$out"
