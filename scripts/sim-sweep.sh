#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-sim over a grid -- long-request fraction x request rate x PNM
# devices x PNM bandwidth (30/50/70 % of a four-channel DDR5-4800 card's
# 153.6 GB/s) -- checking in each configuration the property of issue 8:
# NELSSA never more than 5 % behind GPU-only in throughput or P99 TPOT, and
# never losing a request GPU-only serves (a lost one flatters throughput).
# Prints one line per configuration and the count of violations.
#
#   scripts/sim-sweep.sh BUILDDIR [REQUESTS [nelssa-sim options...]]
set -u

sim=${1:-build}/tools/sim/nelssa-sim
n=${2:-1000}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
echo "long_frac rps devices pnm_bw throughput_ratio p99_tpot_ratio lost_more"
for f in 0 0.05 0.1 0.15 0.24; do
	for rps in 5 10 20; do
		for d in 1 4 8; do
			for bw in 46.08e9 76.8e9 107.52e9; do
				printf '%s %s %s %s ' "$f" "$rps" "$d" "$bw"
				"$sim" --synthetic "$n" --long-frac "$f" --long-len 131072 --rps "$rps" \
					--devices "$d" --pnm-bw "$bw" --quiet --json "$@" |
					python3 -c 'import json, sys; j = json.load(sys.stdin);
r = j["runs"]; print("%.3f %.3f %d" % (j["throughput_ratio"], j["p99_tpot_ratio"],
      r["nelssa"]["lost"] - r["gpu-only"]["lost"]))'
			done
		done
	done
done | awk '{ print } NF < 7 || $5 < 0.95 || $6 < 0.95 || $7 > 0 { v++; bad = bad "\n  " $0 }
	END { printf "%d configurations, %d violate the 5 %% property%s\n", NR, v, bad }'
