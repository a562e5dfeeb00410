#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Cross-compiles the firmware, the numeric core and neon_check.c for
# AArch64 and runs it under qemu-user, so the NEON kernel is tested on
# x86-64 machines.  The compiler is clang with lld, on Debian's arm64 cross
# libc and libgcc: Debian's gcc-aarch64-linux-gnu conflicts with
# gcc-multilib, which the -m32 ABI test needs.  It also keeps the kernels
# honest about building with a second compiler.  Skips, saying why, when
# a piece is missing.
#
#   check-neon.sh SRCDIR OUTDIR
set -u

src=${1:?usage: check-neon.sh SRCDIR OUTDIR}
out=${2:?usage: check-neon.sh SRCDIR OUTDIR}
cc="clang --target=aarch64-linux-gnu"
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)

if ! command -v clang >/dev/null 2>&1 || ! command -v ld.lld >/dev/null 2>&1 ||
	[ ! -d /usr/aarch64-linux-gnu/include ] || [ -z "$qemu" ]; then
	echo "1..1"
	echo "ok 1 - NEON kernel under qemu-user # SKIP needs clang, lld, libc6-dev-arm64-cross," \
		"libgcc-12-dev-arm64-cross and qemu-user"
	exit 0
fi
mkdir -p "$out"
# driver/ for npnm_rules.h, the command rules the firmware shares with the driver.
flags="-std=c11 -O2 -Wall -Wextra -Werror -DNFW_HAVE_NEON -DNFW_HAVE_NEON_BF16 -I$src/uapi -I$src/driver \
-I$src/firmware/include -I$src/runtime/include"
objs=""
for f in "$src"/firmware/*.c "$src"/firmware/kernels/attn_peak.c "$src"/runtime/numeric/*.c \
	"$src"/runtime/util/*.c \
	"$src"/tests/unit/testutil.c \
	"$src"/tests/unit/fwfixture.c "$src"/tests/cross/neon_check.c; do
	o="$out/$(basename "$f" .c).o"
	$cc $flags -DNELSSA_VERSION_STRING='"cross"' -c "$f" -o "$o" 2>>"$out/build.log" || { cat "$out/build.log"; echo "1..1"; echo "not ok 1 - cross build"; exit 1; }
	objs="$objs $o"
done
for k in attn_neon attn_neon_bf16; do
	march=""
	[ "$k" = attn_neon_bf16 ] && march="-march=armv8.2-a+bf16"
	$cc $flags $march -ffp-contract=fast -c "$src/firmware/kernels/$k.c" -o "$out/$k.o" \
		2>>"$out/build.log" ||
		{ cat "$out/build.log"; echo "1..1"; echo "not ok 1 - cross build"; exit 1; }
done
$cc -fuse-ld=lld -static -o "$out/neon_check" $objs "$out/attn_neon.o" "$out/attn_neon_bf16.o" \
	-lm -lpthread 2>>"$out/build.log" ||
	{ cat "$out/build.log"; echo "1..1"; echo "not ok 1 - cross link"; exit 1; }
# Twice: on qemu's "max" CPU, which has BF16 (BFDOT), and on a Neoverse N1,
# which has not, where NPNM_ATTN_F_BF16_DOTS must take the plain NEON kernel.
# One TAP stream: the second run numbers on from the first, the plan last.
"$qemu" "$out/neon_check" --no-plan >"$out/with-bf16.tap" 2>&1
rc=$?
n=$(grep -cE '^(not )?ok ' "$out/with-bf16.tap")
"$qemu" -cpu neoverse-n1 "$out/neon_check" --no-plan --without-bf16 --first $((n + 1)) \
	>"$out/without-bf16.tap" 2>&1 || rc=1
m=$(grep -cE '^(not )?ok ' "$out/without-bf16.tap")
cat "$out/with-bf16.tap" "$out/without-bf16.tap"
echo "1..$((n + m))"
exit $rc
