#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Kernel-side checks of everything we build as kernel code, in TAP:
#   1. the Kbuild tree builds against KDIR (Debian's 6.1 headers) with W=1
#   2. sparse (make C=2) reports nothing
#   3. checkpatch.pl --strict is clean on every kernel C file and the uapi
#   4. kernel-doc finds every struct member and function of the uapi and of
#      the headers the driver shares with userspace documented
#   5. the driver builds as DKMS builds it on a machine without linux-source:
#      without the device-dax export, W=1 clean
# The tree is copied to OUTDIR first: out-of-tree kbuild writes objects
# next to the sources, and the source tree stays clean.
#
#   check-kernel.sh SRCDIR OUTDIR
set -u

src=${1:?usage: check-kernel.sh SRCDIR OUTDIR}
out=${2:?usage: check-kernel.sh SRCDIR OUTDIR}
ksrc="$out/linux-source"
tree="$out/tree"

echo "1..5"
kdir=$("$src/scripts/kdir.sh" 2>/dev/null) || kdir=""

# Kernel C sources and headers we own; the uapi header is kernel code too.
# Generated kbuild files (*.mod.c) are not ours to style-check, nor is the
# kernel's own drivers/dax/bus.h the probes copy into driver/kdax.
kfiles=$(cd "$src" && find uapi driver tests/kabi tests/kselftest -path driver/kdax -prune -o \
	-type f \( -name '*.c' -o -name '*.h' \) ! -name '*.mod.c' ! -name compat_generated.h \
	-print 2>/dev/null | sort)

report() { # n, name, status, log
	if [ "$3" = 0 ]; then
		echo "ok $1 - $2"
	else
		sed 's/^/# /' "$4" | tail -40
		echo "not ok $1 - $2"
	fi
}

if [ -z "$kdir" ]; then
	echo "ok 1 - kbuild W=1 # SKIP no kernel headers (apt-get install linux-headers-amd64)"
	echo "ok 2 - sparse C=2 # SKIP no kernel headers"
else
	rm -rf "$tree"
	mkdir -p "$tree"
	(cd "$src" && cp -r Kbuild uapi "$tree/" && mkdir -p "$tree/tests" &&
		cp -r tests/kabi "$tree/tests/" && { [ ! -d driver ] || cp -r driver "$tree/"; })
	[ ! -d "$tree/driver/probes" ] ||
		"$src/scripts/kernel-probe.sh" "$kdir" "$tree" "$tree/driver/compat_generated.h" \
			>"$out/probe.log" 2>&1
	make -s -C "$kdir" M="$tree" W=1 modules >"$out/kbuild.log" 2>&1
	st=$?
	# Any compiler warning is a failure even though the build succeeded.
	grep -E 'warning:|error:' "$out/kbuild.log" >/dev/null && st=1
	report 1 "kbuild W=1 against $kdir" $st "$out/kbuild.log"

	if command -v sparse >/dev/null 2>&1; then
		make -s -C "$kdir" M="$tree" C=2 CHECK=sparse modules >"$out/sparse.log" 2>&1
		st=$?
		grep -E 'warning:|error:' "$out/sparse.log" >/dev/null && st=1
		report 2 "sparse C=2" $st "$out/sparse.log"
	else
		echo "ok 2 - sparse C=2 # SKIP sparse not installed"
	fi
fi

if ! "$src/scripts/linux-source.sh" "$ksrc" 2>"$out/linux-source.log"; then
	echo "ok 3 - checkpatch --strict # SKIP $(tail -n 1 "$out/linux-source.log")"
	echo "ok 4 - kernel-doc uapi # SKIP no linux-source"
else
	(cd "$src" && perl "$ksrc/scripts/checkpatch.pl" --strict --no-tree --terse --show-types \
		-f $kfiles) >"$out/checkpatch.log" 2>&1
	st=$?
	report 3 "checkpatch --strict ($(echo $kfiles | wc -w) files)" $st "$out/checkpatch.log"

	# The uapi, and the headers compiled by both the kernel and userspace.
	kdocs="uapi/linux/nelssa_pnm.h driver/npnm_rules.h driver/npnm_kv_apply.h driver/cxl_range.h"
	(cd "$src" && perl "$ksrc/scripts/kernel-doc" -none $kdocs) >"$out/kernel-doc.log" 2>&1
	st=$?
	[ -s "$out/kernel-doc.log" ] && st=1
	report 4 "kernel-doc $kdocs" $st "$out/kernel-doc.log"
fi

if [ -z "$kdir" ]; then
	echo "ok 5 - DKMS-style build without linux-source # SKIP no kernel headers"
elif [ ! -d "$src/driver/probes" ]; then
	echo "ok 5 - DKMS-style build without linux-source # SKIP no driver"
else
	# dkms.conf's recipe, with no linux-source to take drivers/dax/bus.h from.
	bare="$out/tree-nosource"
	rm -rf "$bare"
	mkdir -p "$bare/scripts"
	(cd "$src" && cp -r uapi driver "$bare/" && rm -rf "$bare/driver/kdax" &&
		cp scripts/kernel-probe.sh "$bare/scripts/")
	{
		NELSSA_LINUX_SOURCE=none sh "$bare/scripts/kernel-probe.sh" "$kdir" "$bare" &&
			grep -q "NPNM_HAVE_DAX_BUS 0" "$bare/driver/compat_generated.h" &&
			make -s -C "$kdir" M="$bare/driver" KCFLAGS="-I$bare/uapi" W=1 modules
	} >"$out/nosource.log" 2>&1
	st=$?
	grep -E 'warning:|error:' "$out/nosource.log" >/dev/null && st=1
	report 5 "DKMS-style build without linux-source: no device-dax export, W=1" $st \
		"$out/nosource.log"
fi
