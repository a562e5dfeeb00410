#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Installs the Debian packages a make target needs, when they are missing.
#
#   scripts/deps.sh GROUP...      groups: build test demo
#
# Idempotent and fast when everything is present (one dpkg-query call).
# As root it runs apt-get; otherwise it prints the exact command to run and
# fails, because a build without its dependencies would only fail later
# with a less useful message.
set -eu

arch=$(dpkg --print-architecture 2>/dev/null || echo unknown)

pkgs_build="make gcc libc6-dev pkgconf meson ninja-build libcmocka-dev libjson-c-dev libcurl4-openssl-dev liburing-dev libucx-dev libopenblas-dev python3 python3-dev"
# nelssactl topology reads the CXL hierarchy through ndctl's libcxl and the
# dax devices through libdaxctl (optional: without them the command says so).
pkgs_build="$pkgs_build libcxl-dev libdaxctl-dev"
# ABI test under -m32/C++, kernel-side header checks (Kbuild, sparse,
# checkpatch and kernel-doc from Debian's linux-source), docutils for the
# documentation check and the man page; on x86-64 clang/lld with the arm64
# cross libc and qemu-user to test the NEON kernel (gcc-aarch64-linux-gnu
# would conflict with gcc-multilib).
pkgs_test="g++ perl xz-utils sparse linux-headers-$arch linux-source-6.1 python3-docutils kmod dkms"
# The QEMU rig: the guest kernel is extracted from linux-image, never installed.
pkgs_test="$pkgs_test qemu-system-x86 busybox-static cpio gzip"
# Tier T2-debug builds its kernel from linux-source-6.1 (objtool needs libelf).
pkgs_test="$pkgs_test flex bison bc libelf-dev"
# Tier T2-CXL: 'cxl list' and 'ndctl create-namespace' (ndctl) and 'daxctl
# list' (daxctl) run in the CXL guest, copied from the host.
pkgs_test="$pkgs_test ndctl daxctl"
# Tier T3 and the install tests in that guest: Soft-RoCE tools, perftest,
# and the users a package's sysusers.d entry makes.
pkgs_test="$pkgs_test iproute2 ibverbs-providers perftest"
# The cluster registry's tests run a real etcd (tests/python/test_cluster.py).
pkgs_test="$pkgs_test etcd-server etcd-client"
# The nelssa Python package's pytest suite (tests/python/).
pkgs_test="$pkgs_test python3-numpy python3-pytest python3-torch python3-matplotlib"
# make demo: the serving engine (nelssa.serve) in PyTorch, its plot.
pkgs_demo="python3-numpy python3-torch python3-matplotlib"
command -v systemd-sysusers >/dev/null 2>&1 || pkgs_test="$pkgs_test systemd-standalone-sysusers"
case "$arch" in
amd64) pkgs_test="$pkgs_test gcc-multilib g++-multilib clang libclang-rt-14-dev lld libc6-dev-arm64-cross libgcc-12-dev-arm64-cross qemu-user" ;;
esac

want=""
for group in "$@"; do
	case "$group" in
	build) want="$want $pkgs_build" ;;
	test) want="$want $pkgs_build $pkgs_test" ;;
	demo) want="$want $pkgs_build $pkgs_demo" ;;
	*) echo "deps.sh: unknown group '$group' (build, test, demo)" >&2; exit 2 ;;
	esac
done
[ -n "$want" ] || { echo "usage: deps.sh GROUP..." >&2; exit 2; }

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps.sh: not a Debian system; make sure these are installed:$want" >&2
	exit 0
fi

missing=""
for p in $want; do
	case " $missing " in *" $p "*) continue ;; esac
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$status" in
	*" installed") ;;
	*) missing="$missing $p" ;;
	esac
done
[ -n "$missing" ] || exit 0

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing Debian packages:$missing" >&2
	echo "deps.sh: install them with: sudo $cmd" >&2
	exit 1
fi

echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has empty package lists; refresh them once if the
# install cannot find a package.
if ! apt-get install -y -q --no-install-recommends $missing >/tmp/nelssa-deps.log 2>&1; then
	apt-get update -q >>/tmp/nelssa-deps.log 2>&1 || true
	if ! apt-get install -y -q --no-install-recommends $missing >>/tmp/nelssa-deps.log 2>&1; then
		tail -20 /tmp/nelssa-deps.log >&2
		echo "deps.sh: '$cmd' failed (log: /tmp/nelssa-deps.log)" >&2
		exit 1
	fi
fi
echo "deps.sh: done"
