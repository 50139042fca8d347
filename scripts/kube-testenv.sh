#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the Kubernetes tests run, once, from the Go module
# proxy (tools/kube: k8s.io/kubernetes and go.etcd.io/etcd/server/v3, pinned in tools/kube/go.mod,
# in one executable linked under both names), and prints the directory that holds them: the
# directory controller-runtime's envtest wants in KUBEBUILDER_ASSETS.
#
#   scripts/kube-testenv.sh          build if missing, then print the directory
#   scripts/kube-testenv.sh --find   print the directory if built; exit 1 saying how to build if not
#
# The directory is bin/tools/kube/k8s-<version>-etcd-<version>-<hash>/, the hash taken over
# everything the build reads (tools/kube's go.mod, go.sum and Go files, and this script's build
# flags), so a changed pin or source never finds an old build; builds of other keys are removed
# once a new one is in place. A build is written to a temporary directory and renamed into place,
# under a lock: concurrent callers wait for one build instead of racing. No kubectl: envtest
# runs none (it only names a path for its own deprecated KubeCtl helper).
#
# Cost, measured on this project's 2-core machine: docs/kubernetes-testing.md.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/tools/kube"
cache="$root/bin/tools/kube"
export PATH="$PATH:/usr/local/go/bin"

mode=build
case "${1:-}" in
"") ;;
--find) mode=find ;;
*)
	echo "usage: $0 [--find]" >&2
	exit 2
	;;
esac

# version MODULE: the version tools/kube/go.mod requires of MODULE.
version() {
	awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$src/go.mod"
}
kube_version="$(version k8s.io/kubernetes)"
etcd_version="$(version go.etcd.io/etcd/server/v3)"
if [ -z "$kube_version" ] || [ -z "$etcd_version" ]; then
	echo "kube-testenv: $src/go.mod does not require k8s.io/kubernetes and go.etcd.io/etcd/server/v3" >&2
	exit 1
fi

# The kube-apiserver reports the version it was built as (its /version, and the binary version its
# feature gates and emulation derive from); upstream's build sets these, so this one does too.
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
build_flags="CGO_ENABLED=0 -trimpath -ldflags=$ldflags"

hash="$(
	cd "$src"
	{
		cat go.mod go.sum ./*.go
		echo "$build_flags"
	} | sha256sum | cut -c1-12
)"
dir="$cache/k8s-$kube_version-etcd-$etcd_version-$hash"

built() {
	[ -x "$dir/kube-testenv" ] && [ -L "$dir/kube-apiserver" ] && [ -L "$dir/etcd" ]
}

if built; then
	echo "$dir"
	exit 0
fi
if [ "$mode" = find ]; then
	echo "kube-testenv: no kube-apiserver and etcd built for tools/kube as it is now (looked for $dir): run 'make kube-testenv' (builds them from the Go module proxy, once; minutes on a small machine)" >&2
	exit 1
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if built; then # another caller built it while this one waited for the lock
	echo "$dir"
	exit 0
fi

tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "kube-testenv: building kube-apiserver $kube_version and etcd $etcd_version (one executable) into $dir; load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$(date +%s)
(
	cd "$src"
	CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$tmp/kube-testenv" .
)
ln -s kube-testenv "$tmp/kube-apiserver"
ln -s kube-testenv "$tmp/etcd"

# Each name must start the program it says, or envtest's error would be far from the cause.
said="$("$tmp/kube-apiserver" --version)"
if [ "$said" != "Kubernetes $kube_version" ]; then
	echo "kube-testenv: kube-apiserver --version said \"$said\", want \"Kubernetes $kube_version\"" >&2
	exit 1
fi
said="$("$tmp/etcd" --version | sed -n 1p)"
if [ "$said" != "etcd Version: ${etcd_version#v}" ]; then
	echo "kube-testenv: etcd --version said \"$said\", want \"etcd Version: ${etcd_version#v}\"" >&2
	exit 1
fi

for old in "$cache"/k8s-*; do
	if [ -e "$old" ] && [ "$old" != "$dir" ]; then
		rm -rf "$old"
	fi
done
mv "$tmp" "$dir"
trap - EXIT
echo "kube-testenv: built in $(($(date +%s) - start)) s, $(du -sh "$dir/kube-testenv" | cut -f1); load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "$dir"
