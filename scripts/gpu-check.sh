#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The CUDA twins' checks in one go: build them (nvcc, sm_90 + PTX), run
# their tests against the CPU versions, and time the Top-K, local-window
# and k-means kernels with their same-run baselines.
#
#   scripts/gpu-check.sh [all]   build here, then run if a GPU is visible
#   scripts/gpu-check.sh build   build and bundle only (no GPU needed)
#   scripts/gpu-check.sh run     run a bundle built earlier (GPU needed)
#
# The bundle (build-cuda/gpu-bundle: the two programs and the libraries
# they need beyond the C library and the CUDA driver) lets a bare GPU
# machine without meson, cmocka or the toolkit run the checks.  Results:
# TAP on stdout, build-cuda/gpu-bundle/cuda-bench.{json,txt}.  Exit status
# 0 when every test passed on a GPU, 1 on any failure, 3 without a GPU.
set -eu

mode=${1:-all}
cd "$(dirname "$0")/.."
build=${BUILD_CUDA:-build-cuda}
bundle=$build/gpu-bundle

do_build() {
	command -v nvcc >/dev/null 2>&1 || PATH=$PATH:/usr/local/cuda/bin
	if ! command -v nvcc >/dev/null 2>&1; then
		echo "gpu-check: nvcc not found (install the CUDA toolkit, or put it on PATH)" >&2
		exit 1
	fi
	scripts/deps.sh build test
	[ -f "$build/build.ninja" ] ||
		meson setup "$build" --buildtype=release -Dcuda=enabled >/dev/null
	ninja -C "$build" tests/unit/test_client_cuda tools/client-bench/nelssa-cuda-bench
	rm -rf "$bundle"
	mkdir -p "$bundle/lib"
	cp "$build/tests/unit/test_client_cuda" "$build/tools/client-bench/nelssa-cuda-bench" \
		"$bundle/"
	for exe in "$bundle/test_client_cuda" "$bundle/nelssa-cuda-bench"; do
		ldd "$exe" | awk '/cmocka|cudart|json-c/ { print $3 }'
	done | sort -u | while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
	echo "gpu-check: bundle in $bundle"
}

do_run() {
	if [ ! -x "$bundle/test_client_cuda" ]; then
		echo "gpu-check: no bundle in $bundle; run 'scripts/gpu-check.sh build' first" >&2
		exit 1
	fi
	export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	status=0
	CMOCKA_MESSAGE_OUTPUT=TAP "$bundle/test_client_cuda" >"$bundle/test.tap" 2>&1 || status=1
	cat "$bundle/test.tap"
	if grep -q '# SKIP' "$bundle/test.tap"; then
		echo "gpu-check: the tests saw no GPU" >&2
		exit 3
	fi
	"$bundle/nelssa-cuda-bench" | tee "$bundle/cuda-bench.txt" || status=1
	"$bundle/nelssa-cuda-bench" --json >"$bundle/cuda-bench.json" || status=1
	[ $status -eq 0 ] && echo "gpu-check: all CUDA checks passed" ||
		echo "gpu-check: FAILED" >&2
	exit $status
}

case $mode in
build) do_build ;;
run) do_run ;;
all)
	do_build
	do_run
	;;
*)
	echo "usage: scripts/gpu-check.sh [all|build|run]" >&2
	exit 2
	;;
esac
