#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench, serving path: the decode-step round trip at 128K context, 4 %
# selection, 4 sim devices, batch 1 and 8, against a bare UCX ping-pong of
# the same message sizes in the same run -- once with the real SPARSE_ATTN
# kernel and once with the daemon's NOP kernel (the serving path alone).
#
#   scripts/bench-daemon.sh BUILDDIR [nelssa-step-bench options]
set -u

build=${1:-build}
shift
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
export UCX_TLS="${UCX_TLS:-tcp}"

for mode in sparse_attn nop; do
	flag=
	[ $mode = nop ] && flag=--nop-kernel
	rm -f "$dir/port"
	# spin_us=0: idle device threads sleep, leaving the 2 cores to the rest.
	"$build/daemon/nelssad" $flag --devices sim:4 --sim-opts mem=1G,cores=1,spin_us=0 \
		--listen 127.0.0.1:0 --port-file "$dir/port" >"$dir/daemon.log" 2>&1 &
	pid=$!
	i=0
	while [ ! -s "$dir/port" ] && kill -0 $pid 2>/dev/null && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	if [ ! -s "$dir/port" ]; then
		cat "$dir/daemon.log" >&2
		exit 1
	fi
	"$build/tools/step-bench/nelssa-step-bench" --port "$(cat "$dir/port")" --label $mode "$@" ||
		exit 1
	kill -TERM $pid
	wait $pid
	pid=
done
