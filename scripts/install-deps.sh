#!/bin/sh
# Install everything Mooncake needs to build and test, from Debian 12 packages only.
# Idempotent: packages already present are skipped by apt; the apt index is refreshed
# only when something is missing.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang-14 lld-14 libclang-rt-14-dev llvm-14
libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev libcmocka-dev libxxhash-dev libssl-dev
libpcre2-dev liburing-dev libibverbs-dev librdmacm-dev libhiredis-dev redis-server
python3 python3-dev python3-pytest python3-numpy python3-torch python3-mesonpy python3-pip python3-aiohttp python3-packaging patchelf
etcd-server etcd-client
iperf3 iproute2 procps psmisc curl"

for arg in "$@"; do
	case "$arg" in
	--with-servers) PKGS="$PKGS etcd-server etcd-client redis-server" ;;
	# what the bench/ programs add: fio (the SSD tier's reference) and matplotlib
	# (bench/replay_figures.py --png); the tests skip what needs them when absent
	--bench) PKGS="$PKGS fio python3-matplotlib" ;;
	*) echo "install-deps: unknown option $arg (--with-servers, --bench)" >&2; exit 2 ;;
	esac
done

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done

if [ -z "$missing" ]; then
	echo "install-deps: all packages present"
	exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
echo "install-deps: installing$missing"
# No prompts (CI has no stdin), wait for a dpkg lock held by another apt, retry downloads.
APT_OPTS="-o DPkg::Lock::Timeout=300 -o Acquire::Retries=3"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get $APT_OPTS update -q </dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get $APT_OPTS install -y -q \
	--no-install-recommends $missing </dev/null
