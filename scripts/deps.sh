#!/usr/bin/env bash
# Installs what Zygo's build, tests and demo need, idempotently: Debian's
# bubblewrap, iproute2 (the network tests' test hosts), systemd (systemd-analyze, for the unit test), python3, python3-numpy and python3-grpcio (for /usr/bin/python3), nodejs, gcc; and
# gVisor's runsc (scripts/install-runsc.sh) unless ZYGO_SKIP_RUNSC=1.
# Safe to run again: it installs only what is missing.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need+=(python3-numpy)
/usr/bin/python3 -c 'import grpc' >/dev/null 2>&1 || need+=(python3-grpcio)
[ -x /usr/bin/node ] || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm) # test/e2b installs E2B's SDKs with npm ci (TestE2BSDK)
command -v gcc >/dev/null 2>&1 || need+=(gcc) # bin/zygo_rand.so, and the native test libraries
command -v ip >/dev/null 2>&1 || need+=(iproute2) # network tests' test hosts (internal/network/nettest)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd) # TestMakeInstall verifies packaging/zygo.service
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv) # venvs: TestDependencies, the Python client's install test
command -v openssl >/dev/null 2>&1 || need+=(openssl) # the clients' TLS tests make their certificates with it

if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { echo "deps: need root (or sudo) to install: ${need[*]}" >&2; exit 1; }
		sudo="sudo"
	fi
	echo "deps: installing ${need[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "${ZYGO_SKIP_RUNSC:-0}" != 1 ] && [ -x "$(dirname "$0")/install-runsc.sh" ]; then
	"$(dirname "$0")/install-runsc.sh"
fi
echo "deps: bubblewrap $(bwrap --version | awk '{print $2}'), $(/usr/bin/python3 --version), numpy $(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)')"
