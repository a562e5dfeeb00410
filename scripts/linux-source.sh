#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Extracts the files we use from Debian's linux-source tarball (checkpatch,
# kernel-doc, the kselftest harness) into DEST, once.  Nothing extracted is
# ever committed; the tarball is the exact kernel we build against.
#
#   scripts/linux-source.sh DEST
set -eu

dest=${1:?usage: linux-source.sh DEST}
stamp="$dest/.extracted"
[ -f "$stamp" ] && exit 0

tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -n 1)
if [ -z "$tarball" ]; then
	echo "linux-source.sh: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source-6.1)" >&2
	exit 1
fi
top=$(basename "$tarball" .tar.xz)
tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
tar -xJf "$tarball" -C "$tmp" --strip-components=1 \
	"$top/scripts/checkpatch.pl" "$top/scripts/spelling.txt" \
	"$top/scripts/const_structs.checkpatch" "$top/scripts/kernel-doc" \
	"$top/tools/testing/selftests/kselftest.h" \
	"$top/tools/testing/selftests/kselftest_harness.h" \
	"$top/tools/testing/selftests/lib.mk"
echo "$tarball" >"$tmp/.extracted"
rm -rf "$dest"
mv "$tmp" "$dest"
