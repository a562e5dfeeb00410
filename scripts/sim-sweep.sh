#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-sim over a grid -- long-request fraction x request rate x PNM
# devices x PNM bandwidth (30/50/70 % of a four-channel DDR5-4800 card's
# 153.6 GB/s) -- checking in each configuration the property of issue 18:
# on the requests GPU-only serves, NELSSA loses none and keeps throughput
# and P99 TPOT with queueing within 5 % of GPU-only.  Prints one line per
# configuration and the count of violations.  The grid is the one the
# project tuned on; `nelssa-sim --property N --seed S` draws workloads from
# far wider distributions (Documentation/simulator.rst).
#
#   scripts/sim-sweep.sh BUILDDIR [REQUESTS [nelssa-sim options...]]
set -u

sim=${1:-build}/tools/sim/nelssa-sim
n=${2:-1000}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
echo "long_frac rps devices pnm_bw throughput_ratio p99_tpot_q_ratio p99_tpot_ratio lost_more"
for f in 0 0.05 0.1 0.15 0.24; do
	len=
	[ "$f" = 0 ] || len="--long-len 131072"
	for rps in 5 10 20; do
		for d in 1 4 8; do
			for bw in 46.08e9 76.8e9 107.52e9; do
				printf '%s %s %s %s ' "$f" "$rps" "$d" "$bw"
				# shellcheck disable=SC2086 # $len holds words
				"$sim" --synthetic "$n" --long-frac "$f" $len --rps "$rps" \
					--devices "$d" --pnm-bw "$bw" --quiet --json "$@" |
					python3 -c 'import json, sys; j = json.load(sys.stdin); p = j["property"]
n = lambda v: "nan" if v is None else "%.3f" % v
print(n(p["throughput_ratio"]), n(p["p99_tpot_q_ratio"]), n(j["p99_tpot_ratio"]), p["lost_more"])'
			done
		done
	done
done | awk '{ print } NF < 8 || $5 == "nan" || $5 < 0.95 || $6 < 0.95 || $8 > 0 { v++; bad = bad "\n  " $0 }
	END { printf "%d configurations, %d violate the 5 %% property%s\n", NR, v, bad }'
