#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make demo-attn: start nelssad with four embedded sim devices on loopback, run
# nelssa-demo against it (prefill, decode through the PNM path, latency
# breakdown, tokens/s, accuracy against dense attention), stop the daemon.
#
#   scripts/demo.sh BUILDDIR [nelssa-demo options]
set -u

build=${1:-build}
shift
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM

# shellcheck source=nelssad-lib.sh
. "$(dirname "$0")/nelssad-lib.sh"

# Loopback TCP unless the user chose otherwise (shared memory: UCX_TLS=shm,tcp;
# UCX sets the connection up over TCP either way).
export UCX_TLS="${UCX_TLS:-tcp}"
if ! nelssad_start "$build/daemon/nelssad" "$dir/daemon.log" "$dir/port" --devices sim:4; then
	echo "make demo-attn: nelssad did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
fi
echo "== nelssad: 4 sim devices, UCX over $UCX_TLS, control port $port =="
"$build/tools/demo/nelssa-demo" --port "$port" "$@"
rc=$?
kill -TERM $pid
wait $pid
echo "== nelssad stopped (exit $?); its log: =="
sed 's/^/  /' "$dir/daemon.log"
exit $rc
