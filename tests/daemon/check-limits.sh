#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1: nelssad's limits hold, in TAP (Documentation/tools/nelssad.rst,
# LIMITS).  Over UCX tcp on loopback, with control connections from many
# loopback source addresses (127.0.0.N) so that the per-address limit and
# --admin-addr can be exercised on one machine:
#
#  1. 505 connections at once: 300 that are served throughout, 100 that
#     never speak (the HELLO timeout closes them), 100 that create a
#     session and requests and vanish, 4 that never read their replies (the
#     daemon resets them once their replies pass --max-unread-kib, counted
#     with what its sockets hold; they send whole frames, all of them in
#     the daemon's receive window, so no frame of theirs is held half-way
#     by TCP), and a probe whose round trips must keep coming;
#     afterwards no session is left, the device memory is back (the largest
#     session that fits is what it was), the descriptors are back, and new
#     clients are served; SIGTERM with peers connected exits 0 at once.
#  2. Each per-connection limit refused with -EDQUOT or -EBUSY and a message
#     naming it, the connection and the others unaffected: sessions,
#     requests, device memory, connections per address and in all; the
#     frame size, a slowloris HELLO, an idle connection without a session;
#     a connection ended while replies wait untaken in its socket is reset.
#  3. Under `ulimit -n 1024`: 1,100 control connections, each served or
#     refused (-EMFILE) and none left hanging; 1,100 UCX endpoints from one
#     connection, 2 taken (ND_EPS_PER_CONN) and 1,098 rejected (ep_flood);
#     the daemon's descriptors all held by control connections, then 50
#     endpoints, each refused through the reserve with UCX's listener kept
#     (ep_flood starve); afterwards a new client is served, control and
#     data path.
#
# Waits are for events (a line in the log, a count in STATS), each bounded;
# no assertion is about time.
#
#   check-limits.sh NELSSAD LIMITS_CLIENT EP_FLOOD E2E_CLIENT NELSSACTL
set -u

nd=${1:?usage: check-limits.sh NELSSAD LIMITS_CLIENT EP_FLOOD E2E_CLIENT NELSSACTL}
lc=${2:?}
flood=${3:?}
cli=${4:?}
ctl=${5:?}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
bg=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; [ -n "$bg" ] && kill -9 $bg 2>/dev/null; rm -rf "$out"' EXIT

export UCX_TLS=tcp
# The test's own clients hold 500 sockets and more.
ulimit -S -n "$(ulimit -H -n)" 2>/dev/null

# ok NAME CONDITION: one subtest from a shell condition.
ok() {
	n=$((n + 1))
	if eval "$2"; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
	fi
}

# result KEY: KEY's value in the last "result" line of $out/stdout.
result() {
	sed -n 's/^result //p' "$out/stdout" | tail -1 | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# run NAME MODE ARGS...: limits_client from $src; a subtest that it ran
# and said ok=1.
run() {
	name=$1
	shift
	timeout 300 "$lc" 127.0.0.1 "$port" "$src" "$@" >"$out/stdout" 2>&1
	if [ "$(result ok)" = 1 ]; then
		echo "ok $((n += 1)) - $name"
	else
		sed 's/^/# /' "$out/stdout" | tail -20
		echo "not ok $((n += 1)) - $name"
	fi
}

# wait_for COMMAND...: runs COMMAND every 0.1 s until it succeeds, 60 s at most.
wait_for() {
	i=0
	until "$@"; do
		[ $i -ge 600 ] && return 1
		sleep 0.1
		i=$((i + 1))
	done
}

fds() {
	ls /proc/"$pid"/fd 2>/dev/null | wc -l
}

rss() {
	sed -n 's/^VmRSS: *//p' /proc/"$pid"/status 2>/dev/null
}

daemon_sessions() {
	"$ctl" stats "127.0.0.1:$port" --json 2>/dev/null |
		python3 -c "import json,sys; print(json.load(sys.stdin)['sessions'])" 2>/dev/null
}

# stop NAME LOG: SIGTERM; a subtest that it exits 0 with no sanitizer report.
stop() {
	kill -TERM $pid
	if wait $pid && ! grep -q Sanitizer "$2"; then
		echo "ok $((n += 1)) - $1"
	else
		sed 's/^/# /' "$2" | tail -20
		echo "not ok $((n += 1)) - $1"
	fi
	pid=
}

# 127.0.0.1 (the admin address, for STATS of the whole daemon) and 20 others.
src=127.0.0.1$(i=2; while [ $i -le 21 ]; do printf ',127.0.0.%d' $i; i=$((i + 1)); done)

echo "1..38"

# 1. Load.
if nelssad_start "$nd" "$out/load.log" "$out/port" --sim-opts mem=256M,cores=1 \
	--max-conns 600 --max-sessions 200 --hello-timeout-ms 2000 --frame-timeout-ms 2000 \
	--max-unread-kib 16 --admin-addr 127.0.0.1; then
	echo "ok $((n += 1)) - load: daemon listening on port $port"
else
	sed 's/^/# /' "$out/load.log"
	echo "not ok $((n += 1)) - load: daemon listening"
fi
"$lc" 127.0.0.1 "$port" "$src" maxcap >"$out/stdout" 2>&1
cap0=$(result maxcap)
fd0=$(fds)
rss0=$(rss)
echo "# before: $fd0 descriptors, RSS $rss0, the largest session that fits: ${cap0:-?} tokens"
timeout 300 "$lc" 127.0.0.1 "$port" "$src" load 300 100 100 4 20 16 >"$out/stdout" 2>&1
sed 's/^/# /' "$out/stdout" | tail -8
ok "load: 300 well-behaved connections of 505 served to the end, none refused" \
	'[ "$(result served)" = 300 ] && [ "$(result refused)" = 0 ]'
ok "load: 100 that never speak closed by the HELLO timeout with -ETIMEDOUT" \
	'[ "$(result silent_closed)" = 100 ] && [ "$(result silent_etimedout)" = 100 ]'
ok "load: 100 created a session and requests and vanished" '[ "$(result vanished)" = 100 ]'
ok "load: 4 readers that never read closed by the daemon" '[ "$(result slow_closed)" = 4 ]'
ok "load: ... as their replies piled up (the log says so)" \
	'[ "$(grep -c "replies not read" "$out/load.log")" = 4 ]'
ok "load: ... with a reset, not a FIN queued behind replies no one reads" \
	'[ "$(result slow_reset)" = 4 ]'
ok "load: a probe's control round trips kept coming throughout ($(result probes), the slowest $(result probe_max_ms) ms)" \
	'[ "$(result probe_alive)" = 1 ] && [ "$(result probes)" -gt 0 ]'
if wait_for sh -c "[ \"\$(\"$ctl\" stats 127.0.0.1:$port --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"sessions\"])' 2>/dev/null)\" = 0 ]"; then
	echo "ok $((n += 1)) - load: every vanished session reclaimed (nelssactl stats: 0 sessions)"
else
	echo "# sessions: $(daemon_sessions)"
	echo "not ok $((n += 1)) - load: every vanished session reclaimed"
fi
"$lc" 127.0.0.1 "$port" "$src" maxcap >"$out/stdout" 2>&1
cap1=$(result maxcap)
ok "load: device memory back to baseline (the largest session that fits: ${cap0:-?} tokens before, ${cap1:-?} after)" \
	'[ -n "$cap0" ] && [ "$cap0" != 0 ] && [ "$cap0" = "$cap1" ]'
if wait_for sh -c "[ \$(ls /proc/$pid/fd | wc -l) -le $fd0 ]"; then
	echo "ok $((n += 1)) - load: descriptors back to baseline ($fd0 before, $(fds) after)"
else
	echo "not ok $((n += 1)) - load: descriptors back to baseline ($fd0 before, $(fds) after)"
fi
echo "# RSS before $rss0, after $(rss) (sim device memory touched by the sessions; ASan's quarantine)"
t "load: afterwards a new client is served, exact" 0 "$cli" 127.0.0.1 "$port" check
timeout 60 "$lc" 127.0.0.1 "$port" 127.0.0.9 stats >"$out/stdout" 2>&1
ok "load: a connection from a non-admin address sees its own counters: no session, no step" \
	'[ "$(result sessions)" = 0 ] && [ "$(result steps)" = 0 ]'
timeout 60 "$lc" 127.0.0.1 "$port" 127.0.0.1 stats >"$out/stdout" 2>&1
ok "load: one from the admin address sees the daemon's: the client's steps, device time" \
	'[ "$(result steps)" -gt 0 ] && [ "$(result t_device)" -gt 0 ]'
# SIGTERM with peers connected: silent ones, slow readers, busy ones.
timeout 300 "$lc" 127.0.0.1 "$port" "$src" load 20 20 0 2 100000 >"$out/bg" 2>&1 &
bg=$!
wait_for grep -q "connections open" "$out/bg"
stop "load: SIGTERM with peers connected: exit 0, no sanitizer report" "$out/load.log"
wait $bg 2>/dev/null
bg=

# 2. Each limit alone: a daemon with small ones.
if nelssad_start "$nd" "$out/caps.log" "$out/port" --sim-opts mem=256M,cores=1 \
	--max-sessions-per-conn 3 --max-requests-per-session 4 --max-memory-per-conn 50% \
	--max-conns-per-addr 4 --frame-timeout-ms 1000 --idle-timeout-ms 1500 \
	--admin-addr 127.0.0.1; then
	echo "ok $((n += 1)) - caps: daemon listening on port $port"
else
	sed 's/^/# /' "$out/caps.log"
	echo "not ok $((n += 1)) - caps: daemon listening"
fi
src=127.0.0.1,127.0.1.1,127.0.1.2
run "caps: a 4th session on a connection refused -EDQUOT (max-sessions-per-conn), others' served" \
	sessions 3
src=127.0.0.1,127.0.2.1
run "caps: a 5th request of a session refused -EDQUOT (max-requests-per-session), the session unaffected" \
	requests 4
src=127.0.0.1,127.0.3.1,127.0.3.2
run "caps: a session past 50 % of the memory on one connection refused -EDQUOT (max-memory-per-conn), another's served" \
	memory
src=127.0.0.1,127.0.4.1,127.0.4.2
run "caps: a 5th connection from one address refused -EBUSY (max-conns-per-addr), another address served" \
	per-addr 4
src=127.0.0.1,127.0.5.1
run "caps: a frame announcing 1 MiB refused -EMSGSIZE before its payload" frame-size
src=127.0.0.1,127.0.6.1
run "caps: a HELLO dribbled a byte at a time cut off -ETIMEDOUT (frame-timeout-ms)" slowloris
src=127.0.0.1,127.0.7.1,127.0.7.2
run "caps: idle without a session closed -ETIMEDOUT (idle-timeout-ms); with one, still served" idle
src=127.0.0.1,127.0.9.1,127.0.9.2
run "caps: a client ended with its replies untaken is reset, not sent a FIN queued behind them" \
	untaken
t "caps: afterwards a new client is served, exact" 0 "$cli" 127.0.0.1 "$port" check
stop "caps: SIGTERM: exit 0, no sanitizer report" "$out/caps.log"
if nelssad_start "$nd" "$out/conns.log" "$out/port" --sim-opts mem=64M,cores=1 --max-conns 6; then
	src=127.0.8.1,127.0.8.2,127.0.8.3
	run "caps: a 7th connection refused -EBUSY (max-conns)" conns 6
	stop "caps: ... SIGTERM: exit 0, no sanitizer report" "$out/conns.log"
else
	sed 's/^/# /' "$out/conns.log"
	echo "not ok $((n += 1)) - caps: max-conns daemon listening"
	echo "not ok $((n += 1)) - caps: ... SIGTERM"
fi

# 3. Out of descriptors: the daemon under ulimit -n 1024 (its own raise to
# the hard limit then finds nothing to raise).
(
	ulimit -n 1024 || exit 1
	exec "$nd" --listen 127.0.0.1:0 --port-file "$out/fport" --sim-opts mem=64M,cores=1 \
		--max-conns 2000 --max-conns-per-addr 2000
) >"$out/fd.log" 2>&1 &
pid=$!
if wait_for test -s "$out/fport"; then
	port=$(cat "$out/fport")
	echo "ok $((n += 1)) - fds: daemon listening under ulimit -n 1024 on port $port"
else
	sed 's/^/# /' "$out/fd.log"
	echo "not ok $((n += 1)) - fds: daemon listening under ulimit -n 1024"
fi
ok "fds: it warns that 1024 descriptors are below what --max-conns 2000 needs" \
	'grep -q "file descriptor limit (1024) is below" "$out/fd.log"'
fd0=$(fds)
src=127.0.0.1$(i=2; while [ $i -le 21 ]; do printf ',127.0.0.%d' $i; i=$((i + 1)); done)
timeout 300 "$lc" 127.0.0.1 "$port" "$src" fd-flood 1100 >"$out/stdout" 2>&1
sed 's/^/# /' "$out/stdout" | tail -3
ok "fds: 1,100 control connections: each served or refused -EMFILE, none left hanging" \
	'[ "$(result hung)" = 0 ] && [ "$(result other)" = 0 ] && [ "$(result emfile)" -gt 0 ]'
wait_for sh -c "[ \$(ls /proc/$pid/fd | wc -l) -le $fd0 ]"
t "fds: ... afterwards a new client is served, exact" 0 "$cli" 127.0.0.1 "$port" check
timeout 300 "$flood" 127.0.0.1 "$port" 1100 >"$out/stdout" 2>&1
got=$?
sed 's/^/# /' "$out/stdout" | tail -3
ok "fds: 1,100 UCX endpoints from one connection: 2 taken and answered, 1,098 rejected, the daemon alive" \
	'[ $got = 0 ] && kill -0 $pid'
timeout 300 "$flood" 127.0.0.1 "$port" 50 starve >"$out/stdout" 2>&1
got=$?
sed 's/^/# /' "$out/stdout" | tail -4
ok "fds: its descriptors all taken, 50 UCX endpoints each refused; then a new one answered" \
	'[ $got = 0 ] && kill -0 $pid'
ok "fds: ... those beyond its descriptors refused, UCX's listener kept (the log says so)" \
	'grep -q "a UCX connection refused" "$out/fd.log"'
wait_for sh -c "[ \$(ls /proc/$pid/fd | wc -l) -le $((fd0 + 8)) ]"
echo "# descriptors: $fd0 before the floods, $(fds) after"
t "fds: ... afterwards a new client is served over UCX, exact" 0 "$cli" 127.0.0.1 "$port" check
t "fds: ... and its control path answers (nelssactl stats)" 0 "$ctl" stats "127.0.0.1:$port"
stop "fds: SIGTERM: exit 0, no sanitizer report" "$out/fd.log"
