#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1, crash consistency of nelssad (UCX over TCP unless said), in TAP:
#
#  (a) 50 clients killed (SIGKILL) at seeded points of their own progress --
#      mid-offload ("offload N" printed by e2e_client busy), mid-step ("step
#      N"), or with a step certainly held on the daemon (e2e_client held,
#      NELSSAD_TEST_HOLD_TENANT=77), in sessions of packed or adjacent K
#      and V blocks -- while another client keeps stepping
#      and checking every output against float64; afterwards the daemon's
#      sessions (STATS, as nelssactl stats shows them) and the device memory
#      it has left (its own figure: e2e_client probe) equal the baseline
#      exactly, it holds no open fd (/proc/PID/fd, by number and socket or
#      pipe inode) the baseline lacks, and its VmRSS -- less the
#      emulated devices' memory, whose pages stay resident once written, as
#      a card's DRAM -- stays within RSS_BOUND_KB of the baseline.  The
#      baseline is taken after WARMUP kills and a bystander run, once the
#      daemon is idle, so that what the allocators keep cached from the
#      first clients is in it; under ASan the quarantine of freed memory is
#      off for this daemon.
#  (b) SIGTERM with clients stepping and offloading, three times: the daemon
#      exits 0 without a sanitizer report, and every client call returns an
#      error before its timeout (3 s) plus 2 s of slack -- e2e_client load
#      checks that and prints the slowest; the worst is a TAP diagnostic --
#      none hanging (timeout(1) around each).
#  (c) 300 UCX endpoints from one client: the daemon takes the 2 a
#      connection may have (ND_EPS_PER_CONN), each answered, and rejects
#      the other 298 connection requests before it makes an endpoint; held
#      open through three of the daemon's keepalive rounds, then the client
#      exits without closing them: the daemon must live through ten more
#      rounds, give back the fds and serve a new client.  (Before the
#      cap, 300 endpoints of the daemon's -- more than the 128 a keepalive
#      round visits -- tripped UCX's keepalive assertion, ucp_worker.c:3241.)
#      UCX_KEEPALIVE_INTERVAL is 20 s by default in UCX 1.13 (ucp_context.c);
#      1 s here, so ten rounds take 10 s.
#  (d) 20 clients, over TCP and then shared memory, that kill themselves
#      during the UCX wire-up (crash_peer wireup STAGE die MS: right after
#      creating the endpoint, after posting the first message, after a step,
#      or once acknowledged, then MS ms of progress): the daemon must live,
#      with no UCX assertion, and serve.
#
# Kill points come from the clients' own progress, never from a delay.
# Every wait is bounded (a client's calls by its timeouts, a client that
# hangs anyway by a 120 s watchdog, part (a) by 480 s, each settling by
# 60 s): a daemon that stops answering fails the subtest naming where its
# threads are (gdb), rather than the whole test timing out.
# NELSSA_CRASH_SEED replays the seeded choices (the run prints its seed);
# NELSSA_CRASH_PARTS (default "a b c d") runs some parts only.
#
#   check-crash.sh NELSSAD E2E_CLIENT CRASH_PEER
set -u

nd=${1:?usage: check-crash.sh NELSSAD E2E_CLIENT CRASH_PEER}
cli=${2:?}
peer=${3:?}
seed=${NELSSA_CRASH_SEED:-$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')}
KILLS=50
WARMUP=5
# VmRSS growth allowed over 50 kills, after the warm-up: 16 MiB, a fifth of
# what a leak of the size once seen (90 MB over 50 kills) would add.
RSS_BOUND_KB=16384
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# NELSSA_CRASH_KEEP=DIR keeps the daemons' logs and the clients' outputs there.
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; [ -n "${NELSSA_CRASH_KEEP:-}" ] && cp -r "$out" "$NELSSA_CRASH_KEEP"; rm -rf "$out"' EXIT

export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1"
# Clients are killed mid-way on purpose: their leak reports are noise.
cli_asan="$ASAN_OPTIONS:detect_leaks=0"

ok() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
	fi
}

clean_log() {
	! grep -qE "Sanitizer|runtime error|Assertion .* failed" "$1"
}

show_log() {
	grep -v '^nelssad\[' "$1" | head -30 | sed 's/^/# /'
	tail -5 "$1" | sed 's/^/# /'
}

alive() {
	kill -0 "$pid" 2>/dev/null && clean_log "$1"
}

rss_kb() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null
}

# Resident kB of the emulated devices' memory: the sim devices' mappings of
# exactly their size (mem=256M, sim_dev.c), which keep every page a session
# ever wrote resident, as a card keeps its DRAM.
dev_rss_kb() {
	awk '/^Size:/ { sz = $2 } /^Rss:/ { if (sz == 262144) r += $2 } END { print r + 0 }' \
		"/proc/$pid/smaps" 2>/dev/null
}

# VmRSS less the devices' memory: the daemon's own.
host_rss_kb() {
	_r=$(rss_kb)
	[ -n "$_r" ] && echo $((_r - $(dev_rss_kb)))
}

nfds() {
	ls "/proc/$pid/fd" 2>/dev/null | wc -l
}

# The daemon's open fds, "FD TARGET" a line: a socket or pipe opened again
# under a reused number reads as new, by its inode.
fdlist() {
	for _f in "/proc/$pid/fd/"*; do
		echo "${_f##*/} $(readlink "$_f" 2>/dev/null)"
	done | sort
}

# The fds open now that the baseline FILE (a fdlist) did not have.  A
# baseline may hold an fd of the client before that was still closing; a
# leak is an fd the baseline does not have, whatever the count.
new_fds() {
	fdlist | comm -23 - "$1"
}

# Whether the daemon holds no fd the baseline FILE lacks; sets $extra to
# how many it does, and lists them as TAP diagnostics.
fds_back() {
	extra=$(new_fds "$1" | wc -l)
	[ "$extra" = 0 ] && return 0
	echo "# not in the baseline:"
	new_fds "$1" | sed 's/^/#   /'
	return 1
}

# The daemon's sessions and free device memory, "SESSIONS FREE_MIB" ("- -":
# no answer in 10 s, where an idle daemon answers in milliseconds).
probe() {
	ASAN_OPTIONS=$cli_asan timeout 10 "$cli" 127.0.0.1 "$port" probe >"$out/probe" 2>&1 &&
		awk '/^sessions / { s = $2 } /^free_mib / { f = $2 } END { print s, f }' \
			"$out/probe" || echo "- -"
}

# Waits (60 s at most, in all) until the daemon is idle: SESSIONS sessions
# and FREE MiB free.
settle() {
	_end=$(($(date +%s) + 60))
	while [ "$(probe)" != "$1 $2" ] && [ "$(date +%s)" -lt $_end ] &&
		kill -0 "$pid" 2>/dev/null; do
		sleep 0.5
	done
}

# Waits (30 s at most) until the daemon holds no fd the baseline FILE lacks.
settle_fds() {
	_end=$(($(date +%s) + 30))
	while [ -n "$(new_fds "$1")" ] && [ "$(date +%s)" -lt $_end ] &&
		kill -0 "$pid" 2>/dev/null; do
		sleep 0.5
	done
}

# Where each of the daemon's threads is, when it stopped answering: TAP
# diagnostics (gdb's backtraces) in $out/bt.tap, and on stdout one line naming the
# innermost of the project's own frames per thread, for the subtest's
# description (a summary may show nothing else).
stuck_report() {
	if ! command -v gdb >/dev/null 2>&1; then
		echo "no gdb to say where"
		return
	fi
	timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt 20' >"$out/bt" 2>&1
	sed 's/^/# /' "$out/bt" | grep '^# \(Thread\|#\)' | head -120 >"$out/bt.tap"
	awk '/^Thread / { if (f != "") l = l " " f; f = "" }
	     /^#[0-9]+ / && f == "" && /(daemon|runtime|firmware)\// {
		for (i = 1; i <= NF; i++) if ($i == "in") { f = $(i + 1); break } }
	     END { if (f != "") l = l " " f; print "threads in:" (l == "" ? " ?" : l) }' "$out/bt"
}

# One kill of plan line "KIND K LAYOUT": runs the client, its sessions of
# that KV layout, and kills it at its K-th offload or step, or once its
# step is held; returns 0 when the kill came at that point.
kill_one() {
	_kind=$1 _k=$2 _want=
	_sfx=
	[ "$3" = adjacent ] && _sfx=-adjacent
	rm -f "$out/fifo"
	mkfifo "$out/fifo"
	case $_kind in
	held)
		ASAN_OPTIONS=$cli_asan "$cli" 127.0.0.1 "$port" "held$_sfx" >"$out/fifo" 2>&1 &
		_want=held ;;
	*)
		ASAN_OPTIONS=$cli_asan "$cli" 127.0.0.1 "$port" "busy$_sfx" >"$out/fifo" 2>&1 &
		_want="$_kind $_k" ;;
	esac
	# The client itself, not a timeout(1) around it, is what is killed; a
	# watchdog bounds a client that hangs without a word (its calls have
	# timeouts of their own, so it should not).
	_c=$! _hit=1
	(
		sleep 120 </dev/null >/dev/null 2>&1
		kill -9 $_c 2>/dev/null && echo "# $_kind $_k: the client hung 120 s; killed"
	) &
	_dog=$!
	while read -r _line; do
		if [ "$_line" = "$_want" ]; then
			_hit=0
			break
		fi
		case $_line in
		offload*|step*) ;;
		*) echo "# $_kind $_k: $_line" ;;
		esac
	done <"$out/fifo"
	kill -9 $_c 2>/dev/null
	wait $_c 2>/dev/null
	kill $_dog 2>/dev/null
	wait $_dog 2>/dev/null
	return $_hit
}

# The seeded plan: KIND K LAYOUT per kill (offload 1..24, step 1..12, or
# held; sessions of packed or of adjacent K and V blocks).
awk -v seed="$seed" -v n=$((WARMUP + KILLS)) 'BEGIN {
	srand(seed % 2147483647)
	for (i = 0; i < n; i++) {
		r = int(rand() * 3)
		if (r == 0) printf "offload %d", 1 + int(rand() * 24)
		else if (r == 1) printf "step %d", 1 + int(rand() * 12)
		else printf "held 0"
		print (rand() < 0.5 ? " packed" : " adjacent")
	}
}' >"$out/plan"

# The transports of the kills: (a) runs on the first, (d) on each.  "shm"
# is shared memory with TCP for the connection setup (UCX's client/server
# flow needs a socket transport; Documentation/daemon.rst, The data path).
# Over tcp these once aborted the daemon inside UCX 1.13.1 (ucp_request.c:684,
# the worker-address flow's wire-up), which the listener flow has not.
kill_tls=${NELSSA_CRASH_KILL_TLS:-tcp shm}
ucx_tls() {
	case $1 in shm) echo shm,tcp ;; *) echo "$1" ;; esac
}
parts=${NELSSA_CRASH_PARTS:-a b c d}
plan=0
for p in $parts; do
	case $p in
	a) plan=$((plan + 8)) ;;
	b) plan=$((plan + 9)) ;;
	c) plan=$((plan + 5)) ;;
	d) for t in $kill_tls; do plan=$((plan + 3)); done ;;
	*) echo "check-crash.sh: no part '$p' (a, b, c, d)" >&2; exit 2 ;;
	esac
done
want() {
	case " $parts " in *" $1 "*) return 0 ;; esac
	return 1
}
echo "1..$plan"
echo "# seed $seed (replay: NELSSA_CRASH_SEED=$seed)"

export UCX_TLS=tcp
# (a) crash consistency over 50 kills.
if want a; then
	UCX_TLS=$(ucx_tls "${kill_tls%% *}")
	export UCX_TLS
	# ASan's quarantine keeps up to 256 MiB of freed memory by design, which
	# would read as growth: off for this daemon (a plain build ignores it).
	if ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
		NELSSAD_TEST_HOLD_TENANT=77 nelssad_start "$nd" "$out/a.log" "$out/port" \
		--sim-opts mem=256M,cores=1; then
		ok 0 "(a) daemon listening on port $port"
	else
		show_log "$out/a.log"
		ok 1 "(a) daemon listening"
	fi
	full=$(probe | cut -d' ' -f2)
	head -n $WARMUP "$out/plan" | while read -r kind k layout; do
		kill_one "$kind" "$k" "$layout"
	done
	ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" check >"$out/warm" 2>&1
	settle 0 "$full"
	base=$(probe)
	rss0=$(host_rss_kb)
	fd0=$(nfds)
	fdlist >"$out/fd0"
	echo "# baseline after $WARMUP kills and one bystander run: sessions and MiB free: $base;" \
		"VmRSS $(rss_kb) kB, $(dev_rss_kb) kB of it the devices' memory, $fd0 fds"
	# The bystander: e2e_client check, again and again, until told to stop.
	(
		runs=0 bad=0
		while [ ! -e "$out/stop" ]; do
			runs=$((runs + 1))
			if ! ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" check \
				>"$out/by" 2>&1; then
				bad=$((bad + 1))
				sed 's/^/# bystander: /' "$out/by" | tail -10
			fi
		done
		echo "$runs $bad" >"$out/bystander"
	) &
	by=$!
	tail -n +$((WARMUP + 1)) "$out/plan" | {
		hit=0 offload=0 step=0 held=0 adj=0
		# A bound on the whole, for a failure to end in: 50 kills take
		# seconds each, even under ASan on a loaded machine.
		end=$(($(date +%s) + 480))
		while read -r kind k layout && kill -0 "$pid" 2>/dev/null; do
			if [ "$(date +%s)" -ge $end ]; then
				echo "# 480 s and $hit kills: the rest not tried"
				break
			fi
			if kill_one "$kind" "$k" "$layout"; then
				hit=$((hit + 1))
				eval "$kind=\$((\$$kind + 1))"
				[ "$layout" = adjacent ] && adj=$((adj + 1))
			elif [ "$(probe)" = "- -" ]; then
				# Not a kill's worth of waiting per plan line: stop here.
				echo "# $kind $k: missed, and the daemon answers no probe"
				break
			fi
		done
		echo "$hit $offload $step $held $adj" >"$out/hits"
	}
	touch "$out/stop"
	wait $by
	read -r hit n_off n_step n_held n_adj <"$out/hits"
	echo "# (a) killed where planned: $n_off mid-offload, $n_step mid-step, $n_held with a step held" \
		"($n_adj in sessions of adjacent K and V blocks)"
	why=
	if [ "$(probe)" = "- -" ] && kill -0 "$pid" 2>/dev/null; then
		echo "# (a) the daemon is alive and answers no probe:"
		why=": the daemon stopped answering, $(stuck_report)"
		cat "$out/bt.tap" 2>/dev/null
	fi
	[ "$hit" = $KILLS ]
	ok $? "(a) $KILLS clients killed where planned ($hit)$why"
	settle 0 "$full"
	after=$(probe)
	settle_fds "$out/fd0"
	rss1=$(host_rss_kb)
	fd1=$(nfds)
	echo "# after: sessions and MiB free: $after; VmRSS $(rss_kb) kB, $(dev_rss_kb) kB of it the" \
		"devices' memory, $fd1 fds"
	[ "${after% *}" = "${base% *}" ]
	ok $? "(a) ... the daemon's sessions back to the baseline (${base% *} -> ${after% *})$why"
	[ "${after#* }" = "${base#* }" ]
	ok $? "(a) ... its free device memory back to the baseline (${base#* } -> ${after#* } MiB)"
	fds_back "$out/fd0"
	ok $? "(a) ... its open fds back to the baseline ($fd0 -> $fd1, $extra not in it)"
	[ -n "$rss1" ] && [ "$((rss1 - rss0))" -le $RSS_BOUND_KB ]
	ok $? "(a) ... its VmRSS less the devices' memory within $RSS_BOUND_KB kB ($rss0 -> $rss1 kB)"
	read -r runs bad <"$out/bystander"
	[ "$runs" -ge 1 ] && [ "$bad" = 0 ]
	ok $? \
		"(a) ... the other client's steps all exact throughout ($runs runs, $bad failed)"
	alive "$out/a.log" && rc=0 || rc=1
	[ $rc = 0 ] || show_log "$out/a.log"
	ok $rc "(a) ... the daemon alive, no sanitizer report or UCX assertion"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
fi

export UCX_TLS=tcp
# (b) SIGTERM under load, three times.
if want b; then
	worst_all=0
	for r in 1 2 3; do
		if ! nelssad_start "$nd" "$out/b$r.log" "$out/port" --sim-opts mem=256M,cores=1; then
			show_log "$out/b$r.log"
			ok 1 "(b) run $r: daemon listening"
			ok 1 "(b) run $r: ..."
			ok 1 "(b) run $r: ..."
			continue
		fi
		for k in 1 2 3 4; do
			mode=step
			[ $((k % 2)) = 0 ] && mode=offload
			ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" load $mode \
				>"$out/load$k" 2>&1 &
			eval "l$k=\$!"
		done
		i=0
		while [ "$(cat "$out"/load? | grep -c '^running$')" -lt 4 ] && [ $i -lt 600 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		t0=$(date +%s%N)
		kill -TERM "$pid"
		# Bounded: a daemon that hangs in shutdown is caught here, then killed.
		timeout 60 sh -c "while kill -0 $pid 2>/dev/null; do sleep 0.01; done"
		echo "# (b) run $r: the daemon was gone $((($(date +%s%N) - t0) / 1000000)) ms after SIGTERM"
		kill -9 "$pid" 2>/dev/null
		wait "$pid"
		drc=$?
		pid=
		crc=0
		for k in 1 2 3 4; do
			eval "wait \$l$k" || crc=1
		done
		worst=$(cat "$out"/load? | awk '/^worst_ms / { if ($2 > w) w = $2 } END { print w + 0 }')
		[ "$worst" -gt $worst_all ] && worst_all=$worst
		echo "# (b) run $r: the slowest failing client call took $worst ms (timeout 3000 ms)"
		ok $drc "(b) run $r: SIGTERM with 4 clients stepping and offloading: exit 0 (exit $drc)"
		clean_log "$out/b$r.log" && rc=0 || rc=1
		[ $rc = 0 ] || show_log "$out/b$r.log"
		ok $rc "(b) run $r: ... no sanitizer report or UCX assertion"
		[ $crc = 0 ] || cat "$out"/load? | grep -v '^running$' | sed 's/^/# /' | tail -20
		ok $crc "(b) run $r: ... every client call failed before its timeout + slack, none hung"
	done
	echo "# (b) the slowest failing client call over the three runs: $worst_all ms"
fi

# (c) 300 endpoints from one client, which exits; ten keepalive rounds.
if want c; then
	if UCX_KEEPALIVE_INTERVAL=1s nelssad_start "$nd" "$out/c.log" "$out/port" \
		--sim-opts mem=256M,cores=1; then
		ok 0 "(c) daemon listening, UCX_KEEPALIVE_INTERVAL=1s"
	else
		show_log "$out/c.log"
		ok 1 "(c) daemon listening"
	fi
	# UCX opens some fds at a worker's first endpoints (its keepalive timer): one client first.
	ASAN_OPTIONS=$cli_asan timeout 120 "$peer" 127.0.0.1 "$port" eps 1 close >/dev/null 2>&1
	fd0=$(nfds)
	fdlist >"$out/fd0"
	# Held open 3 s -- three rounds, each of which visits 128 endpoints (UCX_KEEPALIVE_NUM_EPS)
	# and stops in the middle of the list -- then the client exits without closing them.
	ASAN_OPTIONS=$cli_asan timeout 120 "$peer" 127.0.0.1 "$port" eps 300 exit 3000 >"$out/eps" 2>&1
	rc=$?
	sed 's/^/# /' "$out/eps"
	[ $rc = 0 ] && grep -q "^answered 2 of 300, rejected 298 " "$out/eps"
	ok $? "(c) 300 endpoints from one client: 2 taken and answered, 298 rejected, held through 3 keepalive rounds"
	# Not a synchronisation: the observation window of ten keepalive rounds.
	i=0
	while [ $i -lt 20 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 0.5
		i=$((i + 1))
	done
	alive "$out/c.log" && rc=0 || rc=1
	[ $rc = 0 ] || show_log "$out/c.log"
	ok $rc "(c) ... the daemon alive ten keepalive rounds after the client exited, no assertion"
	settle_fds "$out/fd0"
	fd1=$(nfds)
	fds_back "$out/fd0"
	ok $? "(c) ... its open fds back to the baseline ($fd0 -> $fd1, $extra not in it)"
	ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" check >"$out/c-check" 2>&1
	rc=$?
	[ $rc = 0 ] || sed 's/^/# /' "$out/c-check" | tail -10
	ok $rc "(c) ... and serves a new client exactly"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
fi

# (d) 20 clients dying during the wire-up, per transport.
if want d; then
	for tls in $kill_tls; do
		UCX_TLS=$(ucx_tls "$tls")
		export UCX_TLS
		if ! nelssad_start "$nd" "$out/d.log" "$out/port" --sim-opts mem=256M,cores=1; then
			show_log "$out/d.log"
			ok 1 "(d) $tls: daemon listening"
			ok 1 "(d) $tls: ..."
			ok 1 "(d) $tls: ..."
			continue
		fi
		awk -v seed="$seed" -v tls=$tls 'BEGIN {
			srand((seed + (tls == "shm")) % 2147483647)
			split("created sent step acked", st, " ")
			for (i = 0; i < 20; i++)
				print st[1 + int(rand() * 4)], int(rand() * 10)
		}' >"$out/dplan"
		died=0
		while read -r stage ms && kill -0 "$pid" 2>/dev/null; do
			ASAN_OPTIONS=$cli_asan timeout 60 "$peer" 127.0.0.1 "$port" wireup "$stage" die "$ms" \
				>"$out/wire" 2>&1
			rc=$?
			if [ $rc = 137 ]; then
				died=$((died + 1))
			else
				echo "# $stage $ms: exit $rc"
				sed 's/^/# /' "$out/wire"
			fi
		done <"$out/dplan"
		echo "# (d) $tls: stages:" $(cut -d' ' -f1 "$out/dplan" | sort | uniq -c)
		[ $died = 20 ]
		ok $? "(d) $tls: 20 clients killed themselves during the wire-up ($died)"
		alive "$out/d.log" && rc=0 || rc=1
		[ $rc = 0 ] || show_log "$out/d.log"
		ok $rc "(d) $tls: ... the daemon alive, no UCX assertion or sanitizer report"
		ASAN_OPTIONS=$cli_asan timeout 120 "$cli" 127.0.0.1 "$port" check >"$out/d-check" 2>&1
		rc=$?
		[ $rc = 0 ] || sed 's/^/# /' "$out/d-check" | tail -10
		ok $rc "(d) $tls: ... and serves a new client exactly"
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		pid=
	done
fi
