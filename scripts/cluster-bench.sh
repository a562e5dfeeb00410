#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make bench, scale-out: placement decisions per second, the cluster
# layer's step overhead against a direct connection, and a surviving
# node's step latency while another is killed (scripts/cluster-bench.py;
# Documentation/cluster.rst, "Benchmark").  Starts an etcd of its own on
# free loopback ports.  About 2 minutes on 2 cores.
#
#   scripts/cluster-bench.sh BUILDDIR
set -u

build=${1:?usage: cluster-bench.sh BUILDDIR}
dir=$(mktemp -d) || exit 1
epid=
trap '[ -n "$epid" ] && kill $epid 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
py=/usr/bin/python3
[ -x "$py" ] || py=python3
command -v etcd >/dev/null || { echo "cluster-bench: no etcd (etcd-server)" >&2; exit 1; }

free_port() {
	"$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cport=$(free_port) pport=$(free_port)
url=http://127.0.0.1:$cport
etcd --name bench --data-dir "$dir/etcd" --listen-client-urls "$url" \
	--advertise-client-urls "$url" --listen-peer-urls "http://127.0.0.1:$pport" \
	--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
	--initial-cluster "bench=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
epid=$!
i=0
until ETCDCTL_API=3 etcdctl --endpoints "$url" endpoint health >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 300 ] || { echo "cluster-bench: etcd did not start" >&2; cat "$dir/etcd.log" >&2; exit 1; }
	sleep 0.1
done

export UCX_TLS="${UCX_TLS:-tcp}" UCX_LOG_LEVEL="${UCX_LOG_LEVEL:-fatal}"
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 \
	MALLOC_TOP_PAD_=268435456
PYTHONPATH="$build/python" "$py" "$(dirname "$0")/cluster-bench.py" "$build" "$url"
