#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T3 in the guest: Soft-RoCE (rdma_rxe) on a dummy netdev, UCX limited
# to its RDMA transports (rc_verbs, with ud_verbs for wire-up: no TCP, no
# shared memory), nelssad with --require-rdma serving GPU-node clients from
# sim devices and then, started from its installed unit, from the driver's
# PCI cards.  Outputs are checked against float64 attention by e2e_client.
# Latency is recorded, never asserted: under TCG only ratios mean anything.
. /opt/t3/t3-lib.sh

ip=10.0.2.15
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm	# UCX looks for it, though told to use none
sbin=/usr/local/sbin
e2e=/opt/t3/e2e_client

modprobe rdma_rxe && modprobe ib_uverbs && modprobe dummy numdummies=1 &&
	ip link set lo up && ip link set dummy0 up && ip addr add $ip/24 dev dummy0 &&
	rdma link add rxe0 type rxe netdev dummy0 && [ -e /sys/class/infiniband/rxe0 ]
check "Soft-RoCE: rxe0 on dummy0 ($ip)" $?
rdma link show >/tmp/link 2>&1
note /tmp/link

# 1. perftest: the verbs baseline for the ratio below, with 4 KiB messages
#    like a step's request and reply (server and client on different
#    vCPUs: sharing one locks the latency to the timer tick).
t_typical() { # perftest output: the t_typical column of the result row
	awk 'f && NF >= 5 { print $5; exit } /t_typical/ { f = 1 }' "$1"
}
perf() { # name
	taskset 1 timeout 60 "$1" -d rxe0 -x 1 -F -n 1000 -s 4096 >/tmp/$1.srv 2>&1 &
	srv=$!
	sleep 1
	taskset 2 timeout 60 "$1" -d rxe0 -x 1 -F -n 1000 -s 4096 $ip >/tmp/$1.cli 2>&1
	rc=$?
	wait $srv
	[ $rc = 0 ] && [ -n "$(t_typical /tmp/$1.cli)" ]
}
perf ib_send_lat
check "ib_send_lat over rxe0" $?
note /tmp/ib_send_lat.cli
perf ib_write_lat
check "ib_write_lat over rxe0" $?
send_lat=$(t_typical /tmp/ib_send_lat.cli)
write_lat=$(t_typical /tmp/ib_write_lat.cli)

# 2. UCX on RDMA only.  rxe leaves the completion's sl field 0, which UCX
#    1.13 takes for an IPv6 GRH on UD: ETH_DGID_CHECK=n (UCX PR #10209).
export UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n \
	UCX_UD_VERBS_TIMEOUT=5s UCX_LOG_LEVEL=warn

# What a node without a working RDMA device gets: TCP on any interface.
UCX_TLS=tcp UCX_NET_DEVICES=all timeout 30 $sbin/nelssad --devices sim:1 --sim-opts mem=1M --listen $ip:0 \
	--require-rdma >/tmp/refuse.log 2>&1
rc=$?
[ $rc = 1 ] && grep -q "refusing to run on a TCP or shared-memory fallback" /tmp/refuse.log
check "--require-rdma refuses UCX_TLS=tcp (exit $rc, says why)" $?
note /tmp/refuse.log

# start_nd LOG PORT [nelssad options]: the daemon on vCPU 0, waits for it.
start_nd() {
	_log=$1 _port=$2
	shift 2
	taskset 1 $sbin/nelssad --listen $ip:"$_port" "$@" >"$_log" 2>&1 &
	nd=$!
	wait_listen "$_port" 60
}
stop_nd() {
	kill -TERM $nd
	wait $nd
}
client() { # log, scenario: e2e_client on vCPU 1
	taskset 2 timeout 300 $e2e $ip "$port" "$2" >"$1" 2>&1
}

port=18600
start_nd /tmp/nd-sim.log $port --devices sim:2 --sim-opts mem=128M,cores=1 --require-rdma
check "nelssad --require-rdma starts on sim devices" $?
grep -q "UCX transports available: rc_verbs ud_verbs$" /tmp/nd-sim.log
check "nelssad logs rc_verbs and ud_verbs as its only transports" $?
client /tmp/check.log check
check "sim over RDMA: offload, appends, steps equal float64 attention" $?
note /tmp/check.log
client /tmp/clusters.log check-clusters
check "sim over RDMA: cluster-wise placement, partial states merged" $?
client /tmp/die.log die
rc=$?
[ $rc = 137 ] || [ $rc = 9 ]
check "a client killed mid-step (exit $rc)" $?
client /tmp/after.log check
check "the daemon reclaimed its session and serves the next client" $?

stop_nd
check "nelssad exits 0 on SIGTERM" $?

# Our decode-step round trip, with the bench's own UCX ping-pong baseline.
# The devices run NOP (--nop-kernel): under TCG the emulated devices' time
# would drown the serving path, which is what this compares with verbs.
start_nd /tmp/nd-nop.log 18602 --devices sim:2 --sim-opts mem=64M,cores=1 --require-rdma \
	--nop-kernel
taskset 2 timeout 300 /usr/local/bin/nelssa-step-bench --host $ip --port 18602 --context 8192 \
	--kv-heads 2 --batches 1 --iters 200 --label nop --json >/tmp/step.json 2>/tmp/step.err
check "nelssa-step-bench over RDMA (NOP kernel)" $?
note /tmp/step.json
stop_nd

# A daemon that could also speak TCP, and a client that speaks only TCP:
# --require-rdma must refuse the client's data, and say why on both ends.
taskset 1 env UCX_TLS=rc_verbs,ud_verbs,tcp UCX_NET_DEVICES=rxe0:1,dummy0 $sbin/nelssad \
	--listen $ip:18601 --devices sim:1 --sim-opts mem=64M,cores=1 --require-rdma \
	>/tmp/nd-mixed.log 2>&1 &
nd=$!
wait_listen 18601 60
check "nelssad --require-rdma with TCP allowed beside RDMA starts" $?
taskset 2 timeout 300 env UCX_TLS=tcp UCX_NET_DEVICES=dummy0 $e2e $ip 18601 check \
	>/tmp/tcp-client.log 2>&1
rc=$?
[ $rc != 0 ] && grep -q "requires RDMA" /tmp/tcp-client.log &&
	grep -q "reaches its client over tcp, not RDMA: refused" /tmp/nd-mixed.log
check "--require-rdma refuses a client that reaches it over TCP (client exit $rc, both say why)" $?
grep -m1 "requires RDMA" /tmp/tcp-client.log >/tmp/why
grep -m1 "not RDMA" /tmp/nd-mixed.log >>/tmp/why
note /tmp/why
stop_nd

# The same numbers in one line: the step's round trip (NOP kernel) as a
# multiple of the verbs round trip of the same size.
step=$(sed -n 's/.*"rtt_median_us":\([0-9.]*\).*/\1/p' /tmp/step.json)
pp=$(sed -n 's/.*"pingpong_median_us":\([0-9.]*\).*/\1/p' /tmp/step.json)
echo "RIG: # RDMA latency, 4 KiB (TCG emulation: only ratios mean anything): ib_send_lat" \
	"${send_lat:-?} us, ib_write_lat ${write_lat:-?} us, UCX ping-pong ${pp:-?} us, decode" \
	"step (NOP kernel) ${step:-?} us; step / ib_send_lat = $(awk -v a="$step" -v b="$send_lat" \
	'BEGIN { if (b > 0 && a > 0) printf "%.1f", a / b; else print "?" }'), step / ping-pong =" \
	"$(awk -v a="$step" -v b="$pp" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "?" }')"

# 3. KV by RDMA write straight into a card's memory: nelssad on the card
#    with a device-dax carve-out (t3-install.sh loaded the module with
#    dax_mb=128), zero-copy required.  The session's arena is a window on
#    the carve-out, which the daemon maps through /dev/daxX.Y and registers
#    with UCX (a card's own mapping cannot be pinned: nelssad would stage or,
#    required to, refuse).  The client chooses by itself (AUTO: a native RMA
#    lane, rc_verbs here) to put; the bytes must be in the card's memory as
#    a command reads it, steps must equal float64 attention, and neither
#    the daemon nor UCX on its behalf may have copied any of them.
daxcard=$(card 384)
daxdev=$(cat /sys/class/nelssa_pnm/"$(basename "$daxcard")"/dax_device 2>/dev/null)
start_nd /tmp/nd-dax.log 18603 --devices "$daxcard" --zero-copy=require --require-rdma
check "nelssad --zero-copy=require --require-rdma on $daxcard (carve-out $daxdev)" $?
# "rdma": left to AUTO, the client must choose to put by itself (a lane of
# UCX's RMA API on rc_verbs: nelssa_link_ep_native_rma()).  UCX's own word
# that the puts are its native ones, not emulated with active messages the
# daemon's worker would copy in: the client's endpoint configuration says
# "rma(rc_verbs...)", never "rma_am(...)" (UCX_LOG_LEVEL=info).
taskset 2 timeout 300 env UCX_LOG_LEVEL=info UCX_LOG_FILE=/tmp/ucx-dax.log $e2e $ip 18603 check rdma \
	>/tmp/dax-check.log 2>&1
check "RDMA into $daxcard's carve-out: AUTO puts, steps equal float64, every KV byte put by the client, none copied by the daemon" $?
note /tmp/dax-check.log
grep "ep_cfg" /tmp/ucx-dax.log >/tmp/ucx-dax.cfg
grep -q "rma(rc_verbs" /tmp/ucx-dax.cfg && ! grep -q "rma_am(" /tmp/ucx-dax.cfg
check "UCX put the client's KV natively over rc_verbs (its endpoint configurations: rma, not rma_am)" $?
note /tmp/ucx-dax.cfg
row=$(sed -n 's/^# first K row: //p' /tmp/dax-check.log)
grep -q "KV written by the client (zero-copy)" /tmp/nd-dax.log &&
	! grep -q "zero-copy ingest off\|session refused" /tmp/nd-dax.log
check "the daemon's session took its KV by RDMA: none staged, none refused" $?
stop_nd
check "nelssad on the dax card exits 0 on SIGTERM" $?
note /tmp/nd-dax.log
# The session is gone, its rows are not (a window is zeroed when handed
# out, not when freed): read back by the card itself, through a command.
[ -n "$row" ] && /opt/t3/carve_out_find "$daxcard" "$row" >/tmp/found 2>&1
check "the client's KV row is in $daxcard's carve-out, read by a COPY command" $?
note /tmp/found
# The bench over RDMA into the same card, zero-copy beside staged (so not
# --zero-copy=require): ratios recorded, not asserted (TCG, Soft-RoCE).
start_nd /tmp/nd-bench.log 18604 --devices "$daxcard" --require-rdma
taskset 2 timeout 300 /usr/local/bin/nelssa-ingest-bench --host $ip --port 18604 --daemon-pid "$nd" \
	--context 4096 --gb 0.03 --ingest-gb 0.03 --json >/tmp/ingest.json 2>/tmp/ingest.err
check "nelssa-ingest-bench over RDMA into the carve-out" $?
note /tmp/ingest.json
note /tmp/ingest.err
stop_nd

# 4. nelssad as its installed unit starts it: ExecStart, User, Group and
#    LimitMEMLOCK read from the unit file; the administrator's config names
#    the two healthy PCI cards and insists on RDMA.
unit=/usr/local/lib/systemd/system/nelssad.service
exec_start=$(sed -n 's/^ExecStart=//p' $unit)
user=$(sed -n 's/^User=//p' $unit)
memlock=$(sed -n 's/^LimitMEMLOCK=//p' $unit)
conf=$(echo "$exec_start" | sed -n 's/.*--config \([^ ]*\).*/\1/p')
pci=$(card 64)
pci_b=$(card 128)
sed -i -e "s|^devices = .*|devices = $pci,$pci_b|" -e "s|^listen = .*|listen = $ip:18515|" \
	-e 's|^# require-rdma = yes|require-rdma = yes|' "$conf"
grep -q "^devices = $pci,$pci_b" "$conf" && grep -q '^require-rdma = yes' "$conf"
check "configured $conf: devices $pci,$pci_b, require-rdma" $?
(
	[ "$memlock" = infinity ] && ulimit -l unlimited
	exec taskset 1 su -s /bin/sh "$user" -c "exec $exec_start"
) >/tmp/nd-unit.log 2>&1 &
wait_listen 18515 60
check "nelssad starts from the unit's ExecStart as $user" $?
nd=$(pidof nelssad)
[ -n "$nd" ] && [ "$(stat -c %U /proc/"$nd")" = "$user" ]
check "the daemon runs as $user" $?
port=18515
client /tmp/unit-check.log check
check "PCI cards through the driver, over RDMA: steps equal float64 attention" $?
note /tmp/unit-check.log
client /tmp/unit-die.log die
client /tmp/unit-after.log check
check "a client killed mid-step; the next one served" $?
kill -TERM "$nd"
i=0
while kill -0 "$nd" 2>/dev/null && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
! kill -0 "$nd" 2>/dev/null
check "the unit's daemon stops on SIGTERM" $?
note /tmp/nd-unit.log
exit $t3_fails
