#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1: tenant isolation on nelssad's data and control paths, once with
# UCX over TCP and once over shared memory (UCX_TLS=shm,tcp: TCP sets the
# connections up), in TAP.  The checks are isolation.c's (a victim and an
# attacker guessing at its session); here: a daemon per transport, each of
# the program's subtests counted even when it dies early, the daemon's log
# saying its endpoints were of that transport's kind, and the daemon alive
# afterwards, exiting cleanly on SIGTERM without a sanitizer report.
#
#   check-isolation.sh NELSSAD ISOLATION
set -u

nd=${1:?usage: check-isolation.sh NELSSAD ISOLATION}
iso=${2:?}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1"

k=$("$iso" --count) || exit 1
per=$((k + 3))
echo "1..$((2 * per))"
# --emulated-rma: zero-copy sessions over TCP and shared memory, whose
# protocol (RKEY_GET, commits) must isolate tenants too.  UCX's emulated
# RMA itself isolates nothing (nelssad --help), hence off by default.
for tls in tcp shm,tcp; do
	first=$((n + 1))
	if ! UCX_TLS=$tls nelssad_start "$nd" "$out/daemon.log" "$out/port" \
		--sim-opts mem=256M,cores=1 --verbose --emulated-rma; then
		sed 's/^/# /' "$out/daemon.log" | tail -20
		i=0
		while [ $i -lt $per ]; do
			echo "not ok $((n += 1)) - $tls: daemon listening"
			i=$((i + 1))
		done
		continue
	fi
	echo "ok $((n += 1)) - $tls: daemon listening on port $port"
	UCX_TLS=$tls timeout 300 "$iso" 127.0.0.1 "$port" "$pid" $((first + 1)) >"$out/iso" 2>&1
	st=$?
	cat "$out/iso"
	got=$(grep -cE '^(not )?ok ' "$out/iso")
	n=$((n + got))
	while [ "$got" -lt "$k" ]; do
		echo "not ok $((n += 1)) - $tls: isolation ended early (exit $st)"
		got=$((got + 1))
	done
	case $tls in
	shm*) kind="shared memory, no error handling" ;;
	*) kind="peer error handling" ;;
	esac
	if grep -q "data endpoint open ($kind)" "$out/daemon.log" &&
		! grep "data endpoint open" "$out/daemon.log" | grep -qv "($kind)"; then
		echo "ok $((n += 1)) - $tls: every data endpoint the daemon took: $kind"
	else
		grep "data endpoint open" "$out/daemon.log" | sed 's/^/# /' | tail -5
		echo "not ok $((n += 1)) - $tls: every data endpoint the daemon took: $kind"
	fi
	kill -TERM $pid
	if wait $pid && ! grep -q "Sanitizer" "$out/daemon.log"; then
		echo "ok $((n += 1)) - $tls: the daemon alive to the end, clean exit, no sanitizer report"
	else
		sed 's/^/# /' "$out/daemon.log" | tail -30
		echo "not ok $((n += 1)) - $tls: the daemon alive to the end, clean exit"
	fi
	pid=
done
