#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The out-of-process fuzzer (fuzz_live.c) against a live nelssad -- the
# sanitizer build, aborting on its first report -- once over UCX tcp and
# once over shared memory (UCX_TLS=shm,tcp for daemon and fuzzer alike:
# the listener's connections are set up over tcp, the data then goes over
# shm where granted), in TAP: per transport, a seeded run of SECONDS/2 that
# must find no protocol violation, hang or death; then the daemon must be
# alive with no sanitizer or UCX assertion report in its log, serve
# e2e_client's basic scenario exactly, and exit 0 on SIGTERM.  Then each
# minimised regression sequence (fuzz_live --sequence) against a fresh
# daemon.  tests/fuzz/README.md says how to run it longer.
#
#   check-fuzz-live.sh NELSSAD FUZZ_LIVE E2E_CLIENT [SECONDS]
#
# NELSSA_FUZZ_SEED replays a run (each run prints its seed);
# NELSSA_FUZZ_SECONDS or SECONDS (default 30) is the time for both runs.
set -u
# UCX 1.13's own small leaks per endpoint pair (tests/fuzz/fuzz_daemon.lsan
# says which): only allocations made inside libucs/libuct are suppressed.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/fuzz_daemon.lsan:print_suppressions=0}"

nd=${1:?usage: check-fuzz-live.sh NELSSAD FUZZ_LIVE E2E_CLIENT [SECONDS]}
fz=${2:?}
cli=${3:?}
secs=${4:-${NELSSA_FUZZ_SECONDS:-30}}
seed=${NELSSA_FUZZ_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
out=$(mktemp -d)
pid=
n=0
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$out"' EXIT

# shellcheck source=../../scripts/nelssad-lib.sh
. "$(dirname "$0")/../../scripts/nelssad-lib.sh"

export ASAN_OPTIONS="${ASAN_OPTIONS:-}:abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export UCX_LOG_LEVEL=fatal UCX_TCP_CM_REUSEADDR=y
# The fuzzer and its clients leave on purpose mid-way; their leaks are noise.
cli_asan="$ASAN_OPTIONS:detect_leaks=0"
# The minimised sequences (fuzz_live.c, run_sequence()), NAME@UCX_TLS, each
# on both transports: a client's worker gone just after its wire-up, a
# client killed in it, messages sent after the control connection closed
# (which aborted the daemon over shared memory in UCX 1.13.1,
# ucp_worker.inl:92, until it set UCX_PROTO_INDIRECT_ID=on:
# Documentation/daemon.rst, UCX's assertions), a step reply's rendezvous
# left unfetched (which aborted it over shared memory, ucp_ep.c:437, until
# it sent to such clients eagerly).
#
# A client whose worker goes *during* its wire-up to the listener has
# aborted the daemon's UCX 1.13.1 now and then under load (tcp_ep.c:478,
# wireup-vanish-early; tcp_sockcm_ep.c:416 in a fuzzing run), which the
# daemon cannot step around: the fuzzing runs are --gentle (no endpoint,
# worker or connection goes while a wire-up runs) and that sequence runs
# only with NELSSA_FUZZ_UCX_FIXED=1, which also lifts --gentle
# (tests/fuzz/README.md).
sequences=
for name in wireup-vanish wireup-kill send-after-close wireup-close reply-unfetched; do
	sequences="$sequences $name@tcp $name@shm,tcp"
done
gentle=--gentle
if [ "${NELSSA_FUZZ_UCX_FIXED:-0}" = 1 ]; then
	sequences="$sequences wireup-vanish-early@tcp wireup-vanish-early@shm,tcp"
	gentle=
fi

# The sessions the daemon holds, once none is left or 60 s have passed
# ("-": it did not answer a probe).
settle_sessions() {
	_end=$(($(date +%s) + 60))
	while :; do
		_s=$(ASAN_OPTIONS=$cli_asan timeout 10 "$cli" 127.0.0.1 "$port" probe 2>/dev/null |
			awk '/^sessions / { print $2 }')
		[ -n "$_s" ] || _s=-
		if [ "$_s" = 0 ] || [ "$(date +%s)" -ge $_end ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "$_s"
			return
		fi
		sleep 0.5
	done
}

ok() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
	fi
}

# What the daemon's log must not hold.
clean_log() {
	! grep -qE "Sanitizer|runtime error|Assertion .* failed|==ABORTING" "$1"
}

show_log() {
	grep -v '^nelssad\[' "$1" | head -40 | sed 's/^/# /'
	tail -5 "$1" | sed 's/^/# /'
}

nseq=0
for s in $sequences; do
	nseq=$((nseq + 1))
done
echo "1..$((2 * 5 + nseq))"
echo "# seed $seed (replay: NELSSA_FUZZ_SEED=$seed), $secs s in all"
for tls in tcp shm,tcp; do
	export UCX_TLS=$tls
	if nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1; then
		ok 0 "$tls: daemon (sanitizer build) listening on port $port"
	else
		show_log "$out/daemon.log"
		for i in 1 2 3 4 5; do
			ok 1 "$tls: daemon listening"
		done
		continue
	fi
	ASAN_OPTIONS=$cli_asan timeout $((secs / 2 + 120)) "$fz" 127.0.0.1 "$port" \
		--seed "$seed" --seconds $((secs / 2)) --pid "$pid" $gentle >"$out/fuzz" 2>&1
	rc=$?
	grep -v '^#   \[' "$out/fuzz" | grep '^#' | tail -3
	[ $rc = 0 ] || { grep -v '^# fuzz_live' "$out/fuzz" | tail -60 | sed 's/^\([^#]\)/# \1/'; }
	ok $rc "$tls: $((secs / 2)) s of fuzzing: no protocol violation, hang or death (exit $rc)"
	kill -0 "$pid" 2>/dev/null && nc=$? || nc=1
	clean_log "$out/daemon.log" || nc=1
	[ $nc = 0 ] || show_log "$out/daemon.log"
	ok $nc "$tls: ... the daemon alive, no sanitizer report or UCX assertion in its log"
	# The fuzzer's connections are closed when it exits, but the daemon
	# reclaims their sessions as its loops get to them (draining their
	# device work first), which on a loaded machine takes a while: wait
	# for the state -- no session left -- not for a time; the bound only
	# catches a daemon that never gets there.
	left=$(settle_sessions)
	[ "$left" = 0 ] || echo "# $left session(s) still held 60 s after the fuzzer exited"
	ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" check >"$out/check" 2>&1
	rc=$?
	[ $rc = 0 ] || sed 's/^/# /' "$out/check" | tail -20
	ok $rc "$tls: ... a well-behaved client served exactly afterwards"
	kill -TERM "$pid" 2>/dev/null
	# A hang here is caught by timeout(1) on a waiter, not by the daemon's own word.
	timeout 60 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.1; done"
	wait "$pid"
	rc=$?
	pid=
	clean_log "$out/daemon.log" || { [ $rc = 0 ] && rc=99; }
	[ $rc = 0 ] || show_log "$out/daemon.log"
	ok $rc "$tls: ... SIGTERM: exit 0, no report (exit $rc)"
done
unset UCX_TLS
for s in $sequences; do
	tls=${s#*@}
	name=${s%@*}
	export UCX_TLS=$tls
	if ! nelssad_start "$nd" "$out/seq.log" "$out/port" --sim-opts mem=256M,cores=1; then
		show_log "$out/seq.log"
		ok 1 "regression $name ($tls): daemon listening"
		continue
	fi
	ASAN_OPTIONS=$cli_asan timeout 120 "$fz" 127.0.0.1 "$port" --sequence "$name" \
		--pid "$pid" >"$out/seqout" 2>&1
	rc=$?
	clean_log "$out/seq.log" || rc=98
	# What a sequence says of itself ("# NAME: ..."), pass or fail.
	grep "^# $name: " "$out/seqout" | head -3
	[ $rc = 0 ] || { sed 's/^/# /' "$out/seqout" | tail -20; show_log "$out/seq.log"; }
	ok $rc "regression $name ($tls): the daemon lives through it and serves (exit $rc)"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
done
