#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The nelssa Python package's pytest suite in TAP, one line per test
# (conftest.py writes them; pytest's own output becomes comments when
# something fails).  Tests start their own nelssad with sim devices.
#
#   check-python.sh PYTHON PKGDIR NELSSAD TESTDIR [B_SANITIZE]
#
# PKGDIR holds the built package (PKGDIR/nelssa/).  With a sanitizer
# build the extension needs the ASan/UBSan runtimes that Debian's
# python3 lacks: they are preloaded, as the extension's own ldd names
# them, and leak checking is off (CPython keeps its allocations at exit).
set -u

py=${1:?usage: check-python.sh PYTHON PKGDIR NELSSAD TESTDIR [B_SANITIZE]}
pkg=${2:?}
nd=${3:?}
dir=${4:?}
san=${5:-none}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if ! "$py" -c 'import numpy, pytest' >"$out/imp" 2>&1; then
	echo "1..0 # SKIP $py cannot import numpy and pytest (python3-numpy, python3-pytest)"
	exit 0
fi

case "$san" in
*address* | *undefined*)
	ext=$(ls "$pkg"/nelssa/_nelssa*.so 2>/dev/null | head -n 1)
	pre=$(ldd "$ext" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ { print $3 }' | tr '\n' ' ')
	export LD_PRELOAD="${pre% }"
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	export NELSSA_PY_SANITIZE="$san"
	;;
esac

export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
export NELSSAD="$nd" NELSSA_TAP="$out/tap"
# As tests/daemon/check-daemon.sh: quiet UCX, TCP on loopback.
export UCX_LOG_LEVEL=fatal UCX_TCP_CM_REUSEADDR=y UCX_TLS=tcp

: >"$out/tap"
"$py" -m pytest -q -p no:cacheprovider --rootdir "$dir" "$dir" >"$out/log" 2>&1
rc=$?

n=$(wc -l <"$out/tap")
if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$out/tap"; then
	# A crash, a collection error or a hang cut short: say so.
	n=$((n + 1))
	echo "not ok $n - pytest exited with status $rc" >>"$out/tap"
fi
if [ "$rc" -ne 0 ]; then
	sed 's/^/# /' "$out/log" | tail -n 150
fi
echo "1..$n"
cat "$out/tap"
