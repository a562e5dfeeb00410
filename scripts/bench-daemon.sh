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
# shellcheck source=nelssad-lib.sh
. "$(dirname "$0")/nelssad-lib.sh"

for mode in sparse_attn nop; do
	flag=
	[ $mode = nop ] && flag=--nop-kernel
	# spin_us=0: idle device threads sleep, leaving the 2 cores to the rest.
	# shellcheck disable=SC2086 # $flag is empty or one word
	if ! nelssad_start "$build/daemon/nelssad" "$dir/daemon.log" "$dir/port" $flag \
		--devices sim:4 --sim-opts mem=1G,cores=1,spin_us=0; then
		cat "$dir/daemon.log" >&2
		exit 1
	fi
	"$build/tools/step-bench/nelssa-step-bench" --port "$port" --label $mode "$@" || exit 1
	kill -TERM $pid
	wait $pid
	pid=
done
