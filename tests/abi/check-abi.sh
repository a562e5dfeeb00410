#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Builds abi_layout.c -- which includes the uapi header first and alone,
# then pins every size, offset and ioctl number -- as C11 and C++17 for
# 64-bit and 32-bit x86, runs each binary, and prints TAP.  The pins are
# static assertions: compiling is the test.  A kernel without 32-bit
# program support (IA32 emulation off, as on some VMs) cannot run the -m32
# binaries; they are then compiled only, and the TAP line says so.
#
#   check-abi.sh SRCDIR OUTDIR
set -u

src=${1:?usage: check-abi.sh SRCDIR OUTDIR}
out=${2:?usage: check-abi.sh SRCDIR OUTDIR}
mkdir -p "$out"

variants="c11-m64:cc:-std=c11:-m64 c11-m32:cc:-std=c11:-m32 cxx17-m64:c++:-std=c++17:-m64 cxx17-m32:c++:-std=c++17:-m32"
n=0
echo "1..4"
for v in $variants; do
	n=$((n + 1))
	name=${v%%:*}
	rest=${v#*:}
	compiler=${rest%%:*}
	rest=${rest#*:}
	std=${rest%%:*}
	bits=${rest#*:}
	lang=c
	[ "$compiler" = c++ ] && lang=c++
	if ! command -v "$compiler" >/dev/null 2>&1; then
		echo "ok $n - $name # SKIP no $compiler"
		continue
	fi
	# A 32-bit build needs multilib; without it, say so instead of failing.
	if [ "$bits" = -m32 ] && ! echo 'int main(void){return 0;}' |
		"$compiler" -m32 -x "$lang" - -o "$out/probe32" 2>/dev/null; then
		echo "ok $n - $name # SKIP no 32-bit toolchain (gcc-multilib/g++-multilib)"
		continue
	fi
	log="$out/$name.log"
	run=yes
	note=
	if [ "$bits" = -m32 ] && ! "$out/probe32" 2>/dev/null; then
		run=no
		note=" (compiled only: this kernel cannot run 32-bit programs)"
	fi
	if "$compiler" "$std" "$bits" -Wall -Wextra -Werror -pedantic -I"$src/uapi" -I"$src/driver" \
		-x "$lang" "$src/tests/abi/abi_layout.c" -o "$out/abi-$name" >"$log" 2>&1 &&
		{ [ $run = no ] || "$out/abi-$name" "$name" >>"$log" 2>&1; }; then
		echo "ok $n - uapi layout $name$note"
	else
		sed 's/^/# /' "$log"
		echo "not ok $n - uapi layout $name"
	fi
done
