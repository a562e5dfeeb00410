#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1: nelssad with four sim devices and GPU-node clients over UCX on
# loopback, once over TCP and once over shared memory, in TAP.  Outputs
# are checked against float64 attention inside e2e_client; here: the
# scenarios' exit codes, concurrency, a client killed mid-step (once by
# chance, then 50 times with its step held on the daemon), a daemon
# stopped under a client, malformed control frames, active messages of
# ids it does not take, clean shutdown, and the daemon's own refusals.
#
#   check-daemon.sh NELSSAD E2E_CLIENT BAD_FRAMES_PY NELSSA_DEMO NELSSACTL STEP_BENCH AM_IDS
set -u

nd=${1:?usage: check-daemon.sh NELSSAD E2E_CLIENT BAD_FRAMES_PY NELSSA_DEMO NELSSACTL STEP_BENCH AM_IDS}
cli=${2:?}
bad=${3:?}
demo=${4:?}
ctl=${5:?}
sbench=${6:?}
amids=${7:?}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# Clients never wait long; the kill scenario's leak report would be noise.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1"

start() {
	UCX_TLS=$1 nelssad_start "$nd" "$out/daemon.log" "$out/port" --sim-opts mem=256M,cores=1
}

echo "1..86"
t "--help exits 0" 0 "$nd" --help
t "an unknown option is a usage error" 2 "$nd" --no-such-option
t "a bad --listen is a usage error" 2 "$nd" --listen nowhere
t "nelssa-step-bench: a zero budget is a usage error" 2 "$sbench" --port 1 --budget 0
t "nelssa-step-bench: a budget above 1 is a usage error" 2 "$sbench" --port 1 --budget 1.5
t "nelssa-step-bench: an unknown --kv-layout is a usage error" 2 "$sbench" --port 1 \
	--kv-layout interleaved
UCX_TLS=tcp t "--require-rdma refuses a TCP-only UCX" 1 "$nd" --require-rdma \
	--listen 127.0.0.1:0 --sim-opts mem=1M
if grep -q "refusing to run on a TCP or shared-memory fallback" "$out/stderr"; then
	echo "ok $((n += 1)) - --require-rdma says why"
else
	sed 's/^/# /' "$out/stderr"
	echo "not ok $((n += 1)) - --require-rdma says why"
fi

# A config file sets what flags set; a bad line is a usage error.
cat >"$out/good.conf" <<CONF
# two small devices
devices = sim:2
sim-opts = mem=64M
listen = 127.0.0.1:0
port-file = $out/cport
CONF
# (started by hand: the config file, not nelssad_start, names the port file)
printf 'devices = sim:2\nno-such-option = 1\n' >"$out/bad.conf"
t "a config file with an unknown option is a usage error" 2 "$nd" --config "$out/bad.conf"
UCX_TLS=tcp "$nd" --config "$out/good.conf" >"$out/conf.log" 2>&1 &
cpid=$!
i=0
while [ ! -s "$out/cport" ] && [ $i -lt 200 ] && kill -0 $cpid 2>/dev/null; do
	sleep 0.05
	i=$((i + 1))
done
kill -TERM $cpid 2>/dev/null
wait $cpid
if grep -q "with 2 device(s)" "$out/conf.log" && [ -s "$out/cport" ]; then
	echo "ok $((n += 1)) - the config file's devices, listen address and port file are used"
else
	sed 's/^/# /' "$out/conf.log"
	echo "not ok $((n += 1)) - the config file's settings are used"
fi

# Busy-poll mode serves as correctly as the event-fd mode.
UCX_TLS=tcp nelssad_start "$nd" "$out/busy.log" "$out/port" --busy-poll --sim-opts mem=256M,cores=1
UCX_TLS=tcp t "busy-poll mode: outputs equal float64 attention" 0 \
	"$cli" 127.0.0.1 "${port:-0}" check
kill -TERM $pid
wait $pid
pid=

for tls in tcp shm,tcp; do
	if start $tls; then
		echo "ok $((n += 1)) - $tls: daemon listening on port $port"
	else
		sed 's/^/# /' "$out/daemon.log"
		echo "not ok $((n += 1)) - $tls: daemon listening"
		continue
	fi
	export UCX_TLS=$tls
	t "$tls: outputs equal float64 attention over the selected clusters" 0 \
		"$cli" 127.0.0.1 "$port" check
	t "$tls: ... with cluster-wise placement (partial states merged)" 0 \
		"$cli" 127.0.0.1 "$port" check-clusters
	t "$tls: a session of bf16 dot products: outputs equal float64 over bf16 queries" 0 \
		"$cli" 127.0.0.1 "$port" check-bf16
	t "$tls: ... with cluster-wise placement" 0 \
		"$cli" 127.0.0.1 "$port" check-clusters-bf16
	# Three clients at once, each with its own session.
	for i in 1 2 3; do
		"$cli" 127.0.0.1 "$port" check >"$out/conc$i" 2>&1 &
		eval "c$i=\$!"
	done
	# shellcheck disable=SC2154 # c1..c3 set by eval
	if wait "$c1" && wait "$c2" && wait "$c3"; then
		echo "ok $((n += 1)) - $tls: three concurrent clients all correct"
	else
		sed 's/^/# /' "$out"/conc*
		echo "not ok $((n += 1)) - $tls: three concurrent clients all correct"
	fi
	t "$tls: split batch: two sessions' steps in flight at once, collected later, exact" 0 \
		"$cli" 127.0.0.1 "$port" split
	t "$tls: a request migrates from the GPU to PNM mid-decode, exact before and after" 0 \
		"$cli" 127.0.0.1 "$port" migrate
	t "$tls: 8-bit KV (int8, fp8) quantised at offload, appends mid-tile, outputs exact" 0 \
		"$cli" 127.0.0.1 "$port" kv8
	t "$tls: capacity exhaustion refused with a clear error, then served" 0 \
		"$cli" 127.0.0.1 "$port" capacity
	t "$tls: a request beyond the room left refused, the session closed and reclaimed" 0 \
		"$cli" 127.0.0.1 "$port" refused
	if kill -0 $pid 2>/dev/null && ! grep -q "Sanitizer" "$out/daemon.log"; then
		echo "ok $((n += 1)) - $tls: ... the daemon lives through the reclaim, no sanitizer report"
	else
		sed 's/^/# /' "$out/daemon.log" | tail -30
		echo "not ok $((n += 1)) - $tls: ... the daemon lives through the reclaim"
	fi
	t "$tls: unknown request, cluster id and layer refused, then served" 0 \
		"$cli" 127.0.0.1 "$port" bad-step
	t "$tls: a step of no items refused with -EINVAL, then served" 0 \
		"$cli" 127.0.0.1 "$port" zero-items
	# The client stops the daemon itself; a hang is caught by timeout(1).
	NELSSAD_PID=$pid t "$tls: daemon stopped: offload, step, control call time out; served after SIGCONT" 0 \
		timeout 60 "$cli" 127.0.0.1 "$port" stall
	kill -CONT $pid 2>/dev/null
	# Another client works throughout, unaffected.
	"$cli" 127.0.0.1 "$port" check >"$out/bystander" 2>&1 &
	by=$!
	ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" t "$tls: a client killed mid-step" 137 \
		"$cli" 127.0.0.1 "$port" die
	if wait $by; then
		echo "ok $((n += 1)) - $tls: ... a client running meanwhile unaffected"
	else
		sed 's/^/# /' "$out/bystander"
		echo "not ok $((n += 1)) - $tls: ... a client running meanwhile unaffected"
	fi
	i=0
	while ! grep -q "reclaiming" "$out/daemon.log" && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	t "$tls: ... its session reclaimed, others still served" 0 \
		"$cli" 127.0.0.1 "$port" check
	t "$tls: malformed, oversized, truncated frames and wrong versions refused" 0 \
		python3 "$bad" "$port"
	t "$tls: ... and the daemon still correct" 0 "$cli" 127.0.0.1 "$port" check
	t "$tls: active messages of ids the daemon does not take dropped, eager and rendezvous; UCX's emulated put to an address it never gave out harms nothing" 0 \
		"$amids" 127.0.0.1 "$port"
	if [ $tls = tcp ]; then
		t "nelssa-demo (make demo-attn's client) at 4K, JSON" 0 "$demo" --port "$port" \
			--contexts 4096 --layers 1 --kv-heads 4 --steps 1 --json
		# A broken merge or gather gives errors near 100 %; 4K is too short for
		# the 4 % targets (few topics), which the accuracy harness covers.
		json_check "demo: 3-5 % of tokens read, median error below 10 %, needles found, spread estimate" \
			"j['needle_hit_rate'] >= 0.5 and 0.03 <= j['selected_token_fraction'] <= 0.05 \
			 and j['median_rel_err'] < 0.1 and j['layer_step_us']['device'] > 0 \
			 and j['estimate'] == 'spread'"
		cp "$out/stdout" "$out/demo-bf16.json"
		t "nelssa-demo with int8 KV on the devices, JSON" 0 "$demo" --port "$port" \
			--contexts 4096 --layers 1 --kv-heads 4 --steps 1 --json --kv-dtype int8
		# The same workload and selection (made on bf16 centroids); only the
		# bytes the devices read are quantised.
		JSON_PRELUDE="b = json.load(open('$out/demo-bf16.json'))"
		json_check "demo int8: the same tokens read and needles found, error below 10 %" \
			"j['kv_dtype'] == 'int8' and b['kv_dtype'] == 'bf16' and \
			 j['median_rel_err'] < 0.1 and \
			 j['selected_token_fraction'] == b['selected_token_fraction'] and \
			 j['needle_hit_rate'] == b['needle_hit_rate']"
		JSON_PRELUDE=
		t "nelssactl stats shows the daemon's counters" 0 "$ctl" stats "127.0.0.1:$port" --json
		json_check "stats: steps and items served, KV ingested, device time" \
			"j['devices'] == 4 and j['steps'] >= 40 and j['items'] >= j['steps'] \
			 and j['kv_bytes'] > 0 and j['device_ns'] > 0"
		t "nelssactl stats on a closed port fails with exit 3" 3 "$ctl" stats 127.0.0.1:1
		t "nelssactl calibrate measures T_comm against the daemon" 0 "$ctl" calibrate \
			--daemon "127.0.0.1:$port" --context 4096 --iters 1 --json
		# A fit of measured times: its terms are non-negative and not all 0,
		# which of them the noise of one iteration zeroes is not for a test.
		json_check "calibrate: 4 devices measured, a non-negative fit" \
			"j['comm_measured'] and j['daemon_devices'] == 4 and j['t_base'] >= 0 and \
			 j['t_dev'] >= 0 and j['t_host'] >= 0 and \
			 j['t_base'] + j['t_dev'] + j['t_host'] > 0"
		t "nelssa-step-bench at a small size, JSON" 0 "$sbench" --port "$port" \
			--context 4096 --kv-heads 4 --batches 1,2 --iters 5 --json
		json_check "step bench: one run per batch, sizes and ratios consistent" \
			"[r['batch'] for r in j['runs']] == [1, 2] and all(r['items'] == 4 * r['batch'] \
			 and r['rtt_median_us'] > 0 and r['pingpong_median_us'] > 0 and \
			 abs(r['rtt_over_pingpong'] - r['rtt_median_us'] / r['pingpong_median_us']) < 0.01 \
			 for r in j['runs'])"
		# 4 % of 4096 = 164 tokens: 10 whole 16-token clusters, 160 read.
		json_check "step bench: tokens read never above the budget, within one cluster" \
			"j['budget'] == 0.04 and j['budget_tokens'] == 164 and j['selected'] == 10 and \
			 j['tokens_read'] == j['selected'] * j['cluster_tokens'] and \
			 j['budget_tokens'] - j['cluster_tokens'] < j['tokens_read'] <= j['budget_tokens']"
		t "nelssa-step-bench --ratio, the deprecated alias, still runs" 0 "$sbench" \
			--port "$port" --context 4096 --kv-heads 4 --batches 1 --iters 1 --ratio 0.04 --json
		if grep -q "deprecated" "$out/stderr"; then
			echo "ok $((n += 1)) - nelssa-step-bench --ratio says it is deprecated"
		else
			sed 's/^/# /' "$out/stderr"
			echo "not ok $((n += 1)) - nelssa-step-bench --ratio says it is deprecated"
		fi
		json_check "step bench: --ratio sets the same token budget" \
			"j['budget_tokens'] == 164 and j['tokens_read'] == 160"
		t "nelssa-step-bench --kv-layout adjacent runs against the daemon" 0 "$sbench" \
			--port "$port" --context 4096 --kv-heads 4 --batches 1 --iters 2 \
			--kv-layout adjacent --json
		json_check "step bench: ... and says which layout it measured" \
			"j['kv_layout'] == 'adjacent' and j['runs'][0]['rtt_median_us'] > 0"
	fi
	unset UCX_TLS
	if [ $tls = tcp ]; then
		# The daemon dies under a client: its calls fail, none hangs.
		UCX_TLS=$tls "$cli" 127.0.0.1 "$port" outlive >"$out/outlive" 2>&1 &
		ol=$!
		i=0
		while ! grep -q ready "$out/outlive" && [ $i -lt 200 ]; do
			sleep 0.05
			i=$((i + 1))
		done
		kill -9 $pid
		wait $pid 2>/dev/null
		if timeout 30 sh -c "while kill -0 $ol 2>/dev/null; do sleep 0.1; done" && wait $ol; then
			echo "ok $((n += 1)) - $tls: daemon killed under a client: its calls fail, none hangs"
		else
			sed 's/^/# /' "$out/outlive"
			kill -9 $ol 2>/dev/null
			echo "not ok $((n += 1)) - $tls: daemon killed under a client: calls fail promptly"
		fi
		pid=
		continue
	fi
	kill -TERM $pid
	if wait $pid && ! grep -q "Sanitizer" "$out/daemon.log"; then
		echo "ok $((n += 1)) - $tls: SIGTERM: clean shutdown, exit 0, no sanitizer report"
	else
		sed 's/^/# /' "$out/daemon.log" | tail -30
		echo "not ok $((n += 1)) - $tls: SIGTERM: clean shutdown"
	fi
	pid=
done

# A client killed with its step certainly in flight, 50 times: a daemon
# with the test hook answers tenant 77's steps only once their connection
# is gone, and e2e_client's "held" scenario prints "held" once the daemon
# has its step (a second one was refused -EBUSY), then waits to be
# killed.  Every reply must be dropped, none sent (the daemon sent them to
# the endpoint UCX had freed on seeing the client die: SEGV in
# ucp_am_send_nbx); a client of another tenant is served meanwhile.
for tls in tcp shm,tcp; do
	if ! NELSSAD_TEST_HOLD_TENANT=77 UCX_TLS=$tls nelssad_start "$nd" "$out/held.log" \
		"$out/hport" --sim-opts mem=256M,cores=1; then
		sed 's/^/# /' "$out/held.log"
		for i in 1 2 3 4 5 6 7; do
			echo "not ok $((n += 1)) - $tls: held steps: daemon listening"
		done
		continue
	fi
	UCX_TLS=$tls "$cli" 127.0.0.1 "$port" check >"$out/bystander" 2>&1 &
	by=$!
	i=0 held=0
	while [ $i -lt 50 ] && kill -0 $pid 2>/dev/null; do
		i=$((i + 1))
		rm -f "$out/fifo"
		mkfifo "$out/fifo"
		ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" UCX_TLS=$tls \
			"$cli" 127.0.0.1 "$port" held >"$out/fifo" 2>&1 &
		c=$!
		while read -r line; do
			[ "$line" = held ] && held=$((held + 1)) && break
			echo "# $line"
		done <"$out/fifo"
		kill -9 $c 2>/dev/null
		wait $c 2>/dev/null
	done
	if [ $held = 50 ]; then
		echo "ok $((n += 1)) - $tls: 50 clients killed, each with its step held on the daemon"
	else
		echo "not ok $((n += 1)) - $tls: 50 clients killed with a step held (held $held of $i)"
	fi
	# The last kills may still be on their way to the poller.
	i=0
	while [ "$(grep -c 'dropped: its client is gone' "$out/held.log")" -lt $held ] &&
		[ $i -lt 200 ] && kill -0 $pid 2>/dev/null; do
		sleep 0.05
		i=$((i + 1))
	done
	dropped=$(grep -c 'dropped: its client is gone' "$out/held.log")
	if [ "$dropped" = 50 ]; then
		echo "ok $((n += 1)) - $tls: ... all 50 replies dropped, none sent"
	else
		sed 's/^/# /' "$out/held.log" | tail -30
		echo "not ok $((n += 1)) - $tls: ... all 50 replies dropped (dropped $dropped)"
	fi
	# The bystander's own session counts until it is done: wait for it first.
	if wait $by; then
		echo "ok $((n += 1)) - $tls: ... a client of another tenant served meanwhile, exact"
	else
		sed 's/^/# /' "$out/bystander"
		echo "not ok $((n += 1)) - $tls: ... a client of another tenant served meanwhile"
	fi
	t "$tls: ... the daemon's sessions all reclaimed" 0 "$ctl" stats "127.0.0.1:$port" --json
	json_check "$tls: ... (stats: no session left)" "j['sessions'] == 0"
	t "$tls: ... and a fresh client's steps exact afterwards" 0 "$cli" 127.0.0.1 "$port" check
	kill -TERM $pid
	if wait $pid && ! grep -q "Sanitizer" "$out/held.log"; then
		echo "ok $((n += 1)) - $tls: ... the daemon alive to the end, clean exit, no sanitizer report"
	else
		sed 's/^/# /' "$out/held.log" | tail -30
		echo "not ok $((n += 1)) - $tls: ... the daemon alive to the end, no sanitizer report"
	fi
	pid=
done
