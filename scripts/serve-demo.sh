#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make demo: the split-batch serving engine (python3 -m nelssa.serve) on a
# small mixed workload -- 24 short requests and 4 long ones, Poisson
# arrivals -- in GPU-only and NELSSA mode, against nelssad with four
# embedded sim devices on loopback.  Prints the modes side by side and
# where the plot and the CSV files are (BUILDDIR/serve-demo/).
#
#   scripts/serve-demo.sh BUILDDIR [nelssa.serve options]
set -u

build=${1:-build}
shift
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM

# shellcheck source=nelssad-lib.sh
. "$(dirname "$0")/nelssad-lib.sh"

py=/usr/bin/python3
[ -x "$py" ] || py=python3
if [ ! -d "$build/python/nelssa" ]; then
	echo "make demo: $build/python/nelssa is missing: the Python package was not built" \
	     "(python3-dev, meson option python)" >&2
	exit 1
fi
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
	echo "make demo: $py cannot import torch and numpy (python3-torch, python3-numpy)" >&2
	exit 1
fi

export UCX_TLS="${UCX_TLS:-tcp}" UCX_LOG_LEVEL="${UCX_LOG_LEVEL:-fatal}"
if ! nelssad_start "$build/daemon/nelssad" "$dir/daemon.log" "$dir/port" --devices sim:4; then
	echo "make demo: nelssad did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
fi
echo "== nelssad: 4 sim devices, UCX over $UCX_TLS, control port $port =="
# PyTorch's large temporaries would each be mmap'd and unmapped by glibc
# (half the run in page faults on this model); keep them on the heap.
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 \
	MALLOC_TOP_PAD_=268435456
# The threshold: the tiny model's crossover on the built-in profile is far
# beyond what a 2-core machine prefills (Documentation/serve.rst), so the
# demo routes prompts of 2,048 tokens and more to NELSSA, as a calibrated
# node would its long requests; the pool holds 8,192 tokens.
PYTHONPATH="$build/python" "$py" -m nelssa.serve --port "$port" --threshold 2048 \
	--pool-tokens 8192 --rate 2 --out "$build/serve-demo" "$@"
rc=$?
kill -TERM $pid
wait $pid
echo "== nelssad stopped (exit $?) =="
exit $rc
