#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1: zero-copy KV ingest (Documentation/daemon.rst, "Zero-copy
# ingest"), in TAP.  Over tcp and over shared memory: a head-wise session's
# KV is put by the client into the daemon's registered device memory, the
# daemon copies none of it (its counters, checked against the bytes the
# client counts from its indexes) and the steps equal float64 attention;
# a client that opts out, one in the default mode on an endpoint without
# a native RMA lane (UCX emulates RMA over tcp and shared memory), and a
# cluster-wise session are staged and copied instead -- the daemon says
# why.  The RMA cases force zero-copy (NELSSA_ZERO_COPY_FORCE), against a
# daemon run with --emulated-rma: without it and without RDMA a forced
# client is staged too.  Rows already in cluster order are put from the
# caller's memory (alone, and mixed with gathered chunks), and such puts
# stalled in flight at a timeout close the data path before the call
# returns.  --zero-copy=off stages every session; --zero-copy=require
# refuses KV messages and the sessions it cannot register, each with
# words.
#
#   check-zero-copy.sh NELSSAD E2E_CLIENT
set -u

nd=${1:?usage: check-zero-copy.sh NELSSAD E2E_CLIENT}
cli=${2:?}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1"

# grep_t NAME PATTERN FILE: a subtest that FILE holds PATTERN.
grep_t() {
	n=$((n + 1))
	if grep -q "$2" "$3"; then
		echo "ok $n - $1"
	else
		sed 's/^/# /' "$3" | tail -20
		echo "not ok $n - $1"
	fi
}

stop() {
	kill -TERM $pid
	wait $pid
	pid=
}

echo "1..48"
t "--zero-copy takes auto, off or require only" 2 "$nd" --zero-copy=sometimes
grep_t "... and says which" "need auto, off or require" "$out/stderr"

# Without RDMA, UCX only emulates RMA, which hands every client all of the
# daemon's memory: zero-copy needs --emulated-rma there (trusted clients).
for tls in tcp shm,tcp; do
	export UCX_TLS=$tls
	nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1
	t "$tls: without RDMA or --emulated-rma a client that forces zero-copy sends messages, received in place" \
		0 "$cli" 127.0.0.1 "$port" check forced-received
	grep_t "$tls: ... and the daemon's log says why" \
		"zero-copy ingest off: no RDMA transport, and UCX's emulated RMA" "$out/daemon.log"
	stop
	if nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1 \
		--emulated-rma; then
		echo "ok $((n += 1)) - $tls: daemon listening on port $port, --emulated-rma"
	else
		sed 's/^/# /' "$out/daemon.log"
		echo "not ok $((n += 1)) - $tls: daemon listening"
		continue
	fi
	t "$tls: KV put into registered device memory: every byte by RMA, none copied, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check rma
	t "$tls: ... rows already in cluster order put from the caller's memory, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check rma ordered
	t "$tls: ... half in order and half shuffled, in one offload, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check rma mixed
	t "$tls: 8-bit KV (int8, fp8): tiles quantised by the client and put by RMA, appends mid-tile, exact" \
		0 "$cli" 127.0.0.1 "$port" kv8 rma
	t "$tls: K and V blocks adjacent: whole blocks put by RMA, appends mid-block, none copied, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check-adjacent rma
	t "$tls: ... 8-bit tiles adjacent, quantised and put by RMA, exact" \
		0 "$cli" 127.0.0.1 "$port" kv8-adjacent rma
	t "$tls: ... blocks in KV_ROWS parts received in place, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check-staged-adjacent received
	t "$tls: ... cluster-wise and staged, copied block by block, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check-clusters-adjacent staged
	grep_t "$tls: ... and the daemon's log names the layout" \
		"KV written by the client (zero-copy), K and V blocks adjacent" "$out/daemon.log"
	t "$tls: by default, where UCX only emulates RMA (no native lane), KV goes in messages received in place, none copied" \
		0 "$cli" 127.0.0.1 "$port" check received
	t "$tls: a client that opts out of puts: the same, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check-staged received
	t "$tls: cluster-wise placement is staged: every byte copied, steps equal float64" \
		0 "$cli" 127.0.0.1 "$port" check-clusters staged
	grep_t "$tls: ... and the daemon's log says why" \
		"zero-copy ingest off for this session.*cluster-wise placement" "$out/daemon.log"
	stop
done
unset UCX_TLS

export UCX_TLS=tcp
nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1 --zero-copy=off
t "--zero-copy=off: a head-wise session's KV messages are staged, every byte copied, steps exact" \
	0 "$cli" 127.0.0.1 "$port" check staged
t "--zero-copy=off: ... and with K and V blocks adjacent, copied block by block, steps exact" \
	0 "$cli" 127.0.0.1 "$port" check-adjacent staged
stop

# The client's puts straight from the caller's rows, stalled: the daemon
# stopped for good (UCX 1.13 aborts a daemon whose emulated put handler
# meets the endpoint the client closed -- another reason emulation is
# opt-in -- so it is killed, not continued).
nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1 --emulated-rma
NELSSAD_PID=$pid t "tcp: puts of the caller's rows in flight at a timeout: the call returns, the data path closes" \
	0 timeout 60 "$cli" 127.0.0.1 "$port" stall-put
kill -KILL $pid
wait $pid 2>/dev/null
pid=

# The same with KV_ROWS parts of the caller's rows, and then the daemon
# continued: it meets rendezvous parts of an endpoint the client closed.
nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1
NELSSAD_PID=$pid t "tcp: KV_ROWS parts of the caller's rows in flight at a timeout: the call returns, the data path closes" \
	0 timeout 60 "$cli" 127.0.0.1 "$port" stall-put rows
kill -CONT $pid
t "... the daemon, continued, serves the next client: rows received in place, steps equal float64" \
	0 "$cli" 127.0.0.1 "$port" check received
kill -TERM $pid
wait $pid
st=$?
pid=
t "... and exits 0 on SIGTERM, no sanitizer report" 0 \
	sh -c "[ $st -eq 0 ] && ! grep -q Sanitizer '$out/daemon.log'"

nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1 --require-zero-copy \
	--emulated-rma
t "--require-zero-copy: KV by RMA is served, steps equal float64" \
	0 "$cli" 127.0.0.1 "$port" check rma
t "... KV sent in messages is refused" 1 "$cli" 127.0.0.1 "$port" check-staged staged
grep_t "... with -EOPNOTSUPP at the first offload" "request 0 offload: -95" "$out/stdout"
t "... a session it cannot register (cluster-wise) is refused" 1 \
	"$cli" 127.0.0.1 "$port" check-clusters staged
grep_t "... with -EOPNOTSUPP and the reason" \
	"session create: -95 (zero-copy ingest is required.*cluster-wise" "$out/stdout"
if kill -0 $pid 2>/dev/null && ! grep -q "Sanitizer" "$out/daemon.log"; then
	echo "ok $((n += 1)) - the daemon lives through the refusals, no sanitizer report"
else
	sed 's/^/# /' "$out/daemon.log" | tail -30
	echo "not ok $((n += 1)) - the daemon lives through the refusals"
fi
stop

# Devices as cards with firmware before 1.2, which have no kv_stride.
nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1,kv_stride=off
t "devices without kv_stride: a session of adjacent K and V blocks refused with words, a packed one served" \
	0 "$cli" 127.0.0.1 "$port" no-stride
grep_t "... and the daemon's log says why" "cannot keep K and V blocks adjacent" "$out/daemon.log"
stop
