#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The shared libraries as a user meets them, in TAP: what each exports
# (only the project's prefixes, every function the installed headers
# declare), where the firmware is (libnelssa-sim only, loaded on the first
# sim: device, a clear error without it), and one log hook for all.
#
#   check-libs.sh BUILDDIR LIBDIR SIM_USER SIM_LINKED LOG_USER
set -u

build=${1:?usage: check-libs.sh BUILDDIR LIBDIR SIM_USER SIM_LINKED LOG_USER}
libdir=$2
sim_user=$3
sim_linked=$4
log_user=$5
work=$build/tests/libs/work
out=$work
rm -rf "$work"
mkdir -p "$work"
n=0

# shellcheck source=../tools/tap-lib.sh
. "$(dirname "$0")/../tools/tap-lib.sh"

libs="libnelssa libnelssa-sim libnelssa-client"
echo "1..15"

# 1-3: nothing without the prefix leaves a library (version nodes aside).
for l in $libs; do
	nm -D --defined-only "$libdir/$l.so.0" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' \
		>"$work/$l.exports"
	bad=$(grep -v -E '^(nelssa|npnm)_' "$work/$l.exports" | head -5)
	if [ -s "$work/$l.exports" ] && [ -z "$bad" ]; then
		echo "ok $((n += 1)) - $l.so exports only nelssa_/npnm_ names ($(wc -l <"$work/$l.exports"))"
	else
		echo "$bad" | sed 's/^/# exported: /'
		echo "not ok $((n += 1)) - $l.so exports only nelssa_/npnm_ names"
	fi
done

# 4: every function an installed header declares is exported by some
# library (a name missing from a .map would fail to link only at a user's).
# The CUDA twins (<nelssa/sparse_cuda.h>, where nvcc is) ship as a static
# archive only: Documentation/libraries.rst.
meson introspect "$build" --installed | python3 -c '
import json, sys
for src, dst in json.load(sys.stdin).items():
    if "/include/nelssa/" in dst and dst.endswith(".h") and not dst.endswith("_cuda.h"):
        print(src)' >"$work/headers"
# shellcheck disable=SC2046 # the headers are words
grep -h -E '^[a-z].*\b(nelssa|npnm)_[a-z0-9_]+\(' $(cat "$work/headers") | grep -v '^static' |
	grep -o -E '\b(nelssa|npnm)_[a-z0-9_]+\(' | tr -d '(' | sort -u >"$work/declared"
cat "$work"/*.exports | sort -u >"$work/exported"
missing=$(comm -23 "$work/declared" "$work/exported" | head -10)
if [ "$(wc -l <"$work/headers")" -ge 10 ] && [ "$(wc -l <"$work/declared")" -ge 80 ] &&
	[ -z "$missing" ]; then
	echo "ok $((n += 1)) - all $(wc -l <"$work/declared") functions of $(wc -l <"$work/headers") installed headers are exported"
else
	echo "$missing" | sed 's/^/# not exported: /'
	echo "not ok $((n += 1)) - every function the installed headers declare is exported"
fi

# 5: the sim backend's library has one way in.
if [ "$(cat "$work/libnelssa-sim.exports")" = npnm_sim_backend ]; then
	echo "ok $((n += 1)) - libnelssa-sim.so exports its entry point and nothing else"
else
	echo "not ok $((n += 1)) - libnelssa-sim.so exports its entry point and nothing else"
fi

# 6-7: the firmware is in libnelssa-sim, not even hidden in the others.
for l in libnelssa libnelssa-client; do
	fw=$(nm "$libdir/$l.so.0" 2>/dev/null | grep -c -E ' (nfw_|sim_dev|pnm_sim_ops)')
	t "$l.so holds no firmware or sim backend (nm, local symbols too)" 0 test "$fw" = 0
done

# 8: a GPU-node program on libnelssa-client does not load the firmware.
ldd "$log_user" >"$work/ldd" 2>&1
if grep -q 'libnelssa-client.so.0 => ' "$work/ldd" && ! grep -q 'libnelssa-sim' "$work/ldd"; then
	echo "ok $((n += 1)) - a program on libnelssa-client needs libnelssa, never libnelssa-sim (ldd)"
else
	sed 's/^/# /' "$work/ldd"
	echo "not ok $((n += 1)) - a program on libnelssa-client does not need libnelssa-sim (ldd)"
fi

# 9-10: libnelssa loads the sim backend on the first sim: device.
LD_DEBUG=files "$sim_user" sim:0,mem=1M >"$work/ondemand.out" 2>"$work/ondemand.debug"
rc=$?
if [ $rc = 0 ] && grep -q '^backend sim$' "$work/ondemand.out"; then
	echo "ok $((n += 1)) - a program on libnelssa alone opens sim:0"
else
	sed 's/^/# /' "$work/ondemand.out"
	echo "not ok $((n += 1)) - a program on libnelssa alone opens sim:0 (exit $rc)"
fi
# (dlopen's caller is libnelssa, or the sanitizer's interceptor under ASan.)
if grep -q 'file=.*/libnelssa-sim.so.0 .*dynamically loaded by ' "$work/ondemand.debug"; then
	echo "ok $((n += 1)) - ... by loading libnelssa-sim.so.0 then, from libnelssa's directory"
else
	grep 'libnelssa' "$work/ondemand.debug" | head -5 | sed 's/^/# /'
	echo "not ok $((n += 1)) - ... by loading libnelssa-sim.so.0 then"
fi

# 11-12: without libnelssa-sim, sim: fails with words, kdev is unaffected.
mkdir -p "$work/nosim"
cp "$libdir/libnelssa.so.0" "$work/nosim/"
LD_LIBRARY_PATH=$work/nosim "$sim_user" sim:0 >"$work/nosim.out" 2>&1
rc=$?
if [ $rc = 3 ] && grep -q "error -19: sim devices need libnelssa-sim.so.0" "$work/nosim.out" &&
	grep -q "install it or link -lnelssa-sim" "$work/nosim.out"; then
	echo "ok $((n += 1)) - without libnelssa-sim: -ENODEV, and the words say what to install"
else
	sed 's/^/# /' "$work/nosim.out"
	echo "not ok $((n += 1)) - without libnelssa-sim: -ENODEV, and the words say what to install"
fi
LD_LIBRARY_PATH=$work/nosim "$sim_user" /dev/nelssa_pnm_none >"$work/nokdev.out" 2>&1
if grep -q '^error -2: ' "$work/nokdev.out" && ! grep -q 'libnelssa-sim' "$work/nokdev.out"; then
	echo "ok $((n += 1)) - ... while a /dev/nelssa_pnm* name goes to the kernel backend as before"
else
	sed 's/^/# /' "$work/nokdev.out"
	echo "not ok $((n += 1)) - ... while a /dev/nelssa_pnm* name goes to the kernel backend"
fi

# 13-14: a program linked with libnelssa-sim uses that copy: nothing is
# loaded later, even where the loader would not find it by name.
LD_DEBUG=files "$sim_linked" sim:0,mem=1M >"$work/linked.out" 2>"$work/linked.debug"
rc=$?
t "a program linked with libnelssa-sim opens sim:0" 0 test $rc = 0
if grep -q 'file=.*libnelssa-sim.so.0 .*needed by ' "$work/linked.debug" &&
	! grep -q 'libnelssa-sim.so.0 .*dynamically loaded' "$work/linked.debug"; then
	echo "ok $((n += 1)) - ... with the copy it was linked with, not a loaded one"
else
	grep 'libnelssa' "$work/linked.debug" | head -5 | sed 's/^/# /'
	echo "not ok $((n += 1)) - ... with the copy it was linked with, not a loaded one"
fi

# 15: libnelssa and libnelssa-client report through one hook.
"$log_user" >"$work/log.out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^logged pnm$' "$work/log.out" && grep -q '^logged client$' "$work/log.out"; then
	echo "ok $((n += 1)) - one nelssa_set_log_fn() hook hears libnelssa and libnelssa-client"
else
	sed 's/^/# /' "$work/log.out"
	echo "not ok $((n += 1)) - one nelssa_set_log_fn() hook hears both libraries (exit $rc)"
fi
