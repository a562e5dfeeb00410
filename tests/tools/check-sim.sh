#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-sim in TAP on small synthetic workloads: exit codes, and the
# simulator's invariants -- no request lost, every output token produced
# exactly once, GPU KV never above capacity, the same seed giving the same
# result -- in both modes, with recompute and with swap preemption.
#
#   check-sim.sh NELSSA-SIM
set -u

sim=${1:?usage: check-sim.sh NELSSA-SIM}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"
JSON_PRELUDE="g=j['runs']['gpu-only']; s=j['runs']['nelssa']"

small="--synthetic 400 --long-frac 0.15 --long-len 65536 --out-len 64 --rps 20 --quiet"
echo "1..16"
t "--help exits 0" 0 "$sim" --help
t "no workload is a usage error" 2 "$sim" --rps 5
t "a trace and a synthetic workload together are a usage error" 2 "$sim" --trace x \
	--synthetic 5
t "an unknown mode is a usage error" 2 "$sim" --synthetic 5 --mode fast
t "a missing trace file fails" 1 "$sim" --trace "$out/none.jsonl"
# shellcheck disable=SC2086 # the options are words
t "small mixed workload, both modes" 0 "$sim" $small --json --svg "$out/p" --csv "$out/s.csv"
cp "$out/stdout" "$out/first.json"
if python3 -c "import sys, xml.etree.ElementTree as E; [E.parse(f) for f in sys.argv[1:]]" \
	"$out"/p-throughput.svg "$out"/p-kv.svg "$out"/p-batch.svg "$out"/p-queue.svg &&
	[ "$(head -1 "$out/s.csv")" = "run,t,tokens_per_s,kv_util,batch,queue,pnm_batch,t_input" ]; then
	echo "ok $((n += 1)) - four SVG plots that parse, and the CSV time series"
else
	echo "not ok $((n += 1)) - four SVG plots that parse, and the CSV time series"
fi
json_check "invariants: nothing lost, every token once, KV within capacity" \
	"all(r['lost'] == 0 and r['done'] == j['requests'] and r['tokens'] == r['tokens_expected'] \
	 and r['max_kv_util'] <= 1.0 for r in (g, s))"
json_check "the GPU-only baseline never migrates; ratios match the runs" \
	"g['migrations'] == 0 and abs(j['throughput_ratio'] - s['throughput'] / g['throughput']) < 1e-3"
# shellcheck disable=SC2086
t "the same seed again" 0 "$sim" $small --json
if cmp -s "$out/stdout" "$out/first.json"; then
	echo "ok $((n += 1)) - deterministic: the same seed gives the same result"
else
	echo "not ok $((n += 1)) - deterministic: the same seed gives the same result"
fi
# shellcheck disable=SC2086
t "swap preemption, a tight batch limit" 0 "$sim" $small --swap --max-batch 16 --json
json_check "swap: nothing lost, every token once" \
	"all(r['lost'] == 0 and r['tokens'] == r['tokens_expected'] for r in (g, s))"
# shellcheck disable=SC2086
t "a burst of long requests and growing contexts" 0 "$sim" $small --burst 5,5,0.5 --grow 0.5 \
	--comm-scale 2 --json
json_check "burst and growth: nothing lost, every token once" \
	"all(r['lost'] == 0 and r['tokens'] == r['tokens_expected'] for r in (g, s))"
t "a malformed burst is a usage error" 2 "$sim" --synthetic 5 --burst 5,5
