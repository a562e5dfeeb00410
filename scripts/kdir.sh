#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Prints the kernel build tree to build against: $KDIR if set, else the
# running kernel's, else the newest Debian linux-headers tree (our machines
# run a different host kernel than the bookworm kernel we target).
# Exits 1, printing nothing, when there is none.
set -eu

if [ -n "${KDIR:-}" ]; then
	[ -f "$KDIR/Makefile" ] || { echo "kdir.sh: KDIR=$KDIR has no Makefile" >&2; exit 1; }
	echo "$KDIR"
	exit 0
fi
running="/lib/modules/$(uname -r)/build"
if [ -f "$running/Makefile" ]; then
	echo "$running"
	exit 0
fi
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
newest=$(ls -d /usr/src/linux-headers-*-"$arch" 2>/dev/null | sort -V | tail -n 1)
[ -n "$newest" ] && [ -f "$newest/Makefile" ] || exit 1
echo "$newest"
