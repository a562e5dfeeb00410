#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Builds the sanitizer tree (ASan + UBSan, any UB aborts) and runs every
# test tier through meson, then prints one summary line:
# "N passed, N failed[, N skipped]".  Exit status 1 on any failure.
#
#   scripts/run-tests.sh BUILDDIR
set -u

build=${1:-build-san}
cd "$(dirname "$0")/.." || exit 1

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" --buildtype=debugoptimized \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-fno-sanitize-recover=all >"$build.setup.log" 2>&1 || {
		cat "$build.setup.log"
		echo "0 passed, 1 failed"
		exit 1
	}
	rm -f "$build.setup.log"
fi
if ! ninja -C "$build"; then
	echo "build failed"
	echo "0 passed, 1 failed"
	exit 1
fi

# Sanitizers: fail loudly, and keep leak checking on.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

rm -f "$build/meson-logs/testlog.json"
meson test -C "$build" --print-errorlogs --num-processes "$(nproc)" >"$build/meson-test.out" 2>&1
status=$?
# The per-test lines meson prints are the progress a user wants to see.
grep -E '^ *[0-9]+/[0-9]+ ' "$build/meson-test.out"
[ $status -eq 0 ] || grep -vE '^ *[0-9]+/[0-9]+ ' "$build/meson-test.out" | tail -60
exec scripts/test-summary "$build/meson-logs/testlog.json"
