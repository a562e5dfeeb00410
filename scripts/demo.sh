#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make demo: start nelssad with four embedded sim devices on loopback, run
# nelssa-demo against it (prefill, decode through the PNM path, latency
# breakdown, tokens/s, accuracy against dense attention), stop the daemon.
#
#   scripts/demo.sh BUILDDIR [nelssa-demo options]
set -u

build=${1:-build}
shift
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM

# Loopback TCP unless the user chose otherwise (shm works too: UCX_TLS=shm).
export UCX_TLS="${UCX_TLS:-tcp}"
"$build/daemon/nelssad" --devices sim:4 --listen 127.0.0.1:0 --port-file "$dir/port" \
	>"$dir/daemon.log" 2>&1 &
pid=$!
i=0
while [ ! -s "$dir/port" ] && kill -0 $pid 2>/dev/null && [ $i -lt 200 ]; do
	sleep 0.05
	i=$((i + 1))
done
if [ ! -s "$dir/port" ]; then
	echo "make demo: nelssad did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
fi
echo "== nelssad: 4 sim devices, UCX over $UCX_TLS, control port $(cat "$dir/port") =="
"$build/tools/demo/nelssa-demo" --port "$(cat "$dir/port")" "$@"
rc=$?
kill -TERM $pid
wait $pid
echo "== nelssad stopped (exit $?); its log: =="
sed 's/^/  /' "$dir/daemon.log"
exit $rc
