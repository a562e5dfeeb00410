#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench, KV ingest: nelssa-ingest-bench against nelssad on 4 sim
# devices, over tcp and over shared memory (UCX_TLS), each run printing
# its same-run baseline (bare ucp_put_nbx of the same sizes) and ratios.
#
#   scripts/bench-ingest.sh BUILDDIR [nelssa-ingest-bench options]
set -u

build=${1:-build}
shift
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
# shellcheck source=nelssad-lib.sh
. "$(dirname "$0")/nelssad-lib.sh"

for tls in tcp shm,tcp; do
	export UCX_TLS=$tls
	if ! nelssad_start "$build/daemon/nelssad" "$dir/daemon.log" "$dir/port" \
		--devices sim:4 --sim-opts mem=1G,cores=1,spin_us=0 --emulated-rma; then
		cat "$dir/daemon.log" >&2
		exit 1
	fi
	"$build/tools/ingest-bench/nelssa-ingest-bench" --port "$port" --daemon-pid "$pid" "$@" ||
		exit 1
	kill -TERM $pid
	wait $pid
	pid=
done
