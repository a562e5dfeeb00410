#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-ingest-bench, small: its usage errors, and one run against a
# nelssad on sim devices over tcp whose JSON says what each mode did --
# the zero-copy modes' KV all by RMA, the message modes' none and all but
# the table entries received in place, none copied by RMA modes -- and holds
# every number (no timing is asserted: a benchmark's numbers are its own).
#
#   check-ingest-bench.sh NELSSAD NELSSA_INGEST_BENCH
set -u
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/../fuzz/fuzz_daemon.lsan:print_suppressions=0}"

nd=${1:?usage: check-ingest-bench.sh NELSSAD NELSSA_INGEST_BENCH}
bench=${2:?}
out=$(mktemp -d)
pid=
n=0
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$out"' EXIT

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"
# shellcheck source=../../scripts/nelssad-lib.sh
. "$(dirname "$0")/../../scripts/nelssad-lib.sh"
export UCX_LOG_LEVEL=fatal UCX_TCP_CM_REUSEADDR=y UCX_TLS=tcp

echo "1..13"
t "no --port is a usage error" 2 "$bench" --daemon-pid 1
t "a bad --gb is a usage error" 2 "$bench" --port 1 --daemon-pid 1 --gb 0
t "--help exits 0" 0 "$bench" --help
t "an unknown --kv-layout is a usage error" 2 "$bench" --port 1 --daemon-pid 1 --kv-layout x
nelssad_start "$nd" "$out/daemon.log" "$out/port" --devices sim:2 --sim-opts mem=256M,cores=1 \
	--emulated-rma
t "a small run against nelssad on sim devices" 0 "$bench" --port "$port" --daemon-pid "$pid" \
	--context 1024 --layers 1 --kv-heads 4 --gb 0.02 --ingest-gb 0.02 --steps 20 --json
json_check "zero-copy modes (rows in cluster order, rows gathered): every KV byte by RMA, none copied" \
	'all(j[m]["rma_fraction"] == 1 and j[m]["copied_fraction"] == 0 for m in ("zero_copy", "zero_copy_gathered"))'
# A table entry (8 bytes) a 16-token cluster of 16 K and 16 V rows of 256 bytes.
json_check "message modes: none by RMA, only the table entries copied (8 / 8200 of the bytes)" \
	'all(j[m]["rma_fraction"] == 0 and abs(j[m]["copied_fraction"] - 8 / 8200) < 5e-4 for m in ("messages", "messages_gathered"))'
json_check "throughputs and ratios are positive numbers" \
	'all(j[m]["gbs"] > 0 and j[m]["ratio_to_put"] > 0 for m in ("zero_copy", "zero_copy_gathered", "messages", "messages_gathered")) and j["bare_put_gbs"] > 0'
# The ISA as grep reads /proc/cpuinfo's flags, independently of the bench.
isa=scalar
if grep -qw avx512f /proc/cpuinfo; then isa=avx512
elif grep -qw avx2 /proc/cpuinfo; then isa=avx2
elif grep -qw asimd /proc/cpuinfo; then isa=neon
fi
json_check "the CPU and its ISA named ($isa)" "j['cpu'] != '' and j['isa'] == '$isa'"
json_check "daemon CPU per GB measured for both modes" \
	'j["zero_copy"]["daemon_cpu_s_per_gb"] >= 0 and j["messages"]["daemon_cpu_s_per_gb"] >= 0'
json_check "step latencies measured alone and under both ingests" \
	'all(j["step_us"][k]["n"] > 0 and j["step_us"][k]["p99"] >= j["step_us"][k]["p50"] > 0 for k in ("alone", "zero_copy_ingest", "messages_ingest"))'
t "with K and V blocks adjacent (--kv-layout adjacent)" 0 "$bench" --port "$port" \
	--daemon-pid "$pid" --context 1024 --layers 1 --kv-heads 4 --gb 0.02 --ingest-gb 0.02 \
	--steps 20 --kv-layout adjacent --json
json_check "... named so; puts all by RMA, messages received in place but the table entries" \
	'j["kv_layout"] == "adjacent" and j["zero_copy"]["rma_fraction"] == 1 and j["zero_copy_gathered"]["copied_fraction"] == 0 and abs(j["messages"]["copied_fraction"] - 8 / 8200) < 5e-4'
kill -TERM $pid
wait $pid
pid=
