#!/usr/bin/env bash
# Installs the pinned, static gVisor runsc that Zygo's sandboxes run on, at $PREFIX/bin/runsc
# (default /usr/local/bin/runsc). Idempotent: does nothing when the binary there is already
# that build. Needs Go (go install through the module proxy); ~1-2 minutes on 2 cores.
#
# The version is recorded in the binary itself; check it with:
#   go version -m /usr/local/bin/runsc | grep 'mod.*gvisor.dev/gvisor'
# and in $PREFIX/share/zygo/runsc.version.
#
# The build must be static (CGO_ENABLED=0): a cgo-linked runsc fails inside its own chroot
# with "fork/exec /proc/self/exe: no such file or directory".
set -euo pipefail

RUNSC_VERSION="v0.0.0-20260905035102-160fafc42237"
PREFIX="${PREFIX:-/usr/local}"
dest="$PREFIX/bin/runsc"
stamp="$PREFIX/share/zygo/runsc.version"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

have_version() {
	[ -x "$dest" ] || return 1
	"$GO" version -m "$dest" 2>/dev/null | awk '$1 == "mod" && $2 == "gvisor.dev/gvisor" {print $3}'
}

if [ "$(have_version || true)" = "$RUNSC_VERSION" ]; then
	echo "runsc $RUNSC_VERSION already at $dest"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "building runsc $RUNSC_VERSION (static) ..."
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod "$GO" install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
if ! file "$tmp/runsc" 2>/dev/null | grep -q 'statically linked' && command -v file >/dev/null; then
	echo "runsc is not statically linked" >&2
	exit 1
fi
mkdir -p "$(dirname "$dest")" "$(dirname "$stamp")"
install -m 0755 "$tmp/runsc" "$dest.new"
mv -f "$dest.new" "$dest"
echo "$RUNSC_VERSION" > "$stamp"
echo "installed runsc $RUNSC_VERSION at $dest"
