#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The serving experiments of issue 8, rerun for issue 18, each GPU-only
# against NELSSA in the same run, written as tables (stdout) and plots
# (OUTDIR).  The paper's three first:
#   1. fixed length: the fraction of 128K requests swept 0-24 %, 10 req/s
#      (the paper: up to 5.5x decode throughput);
#   2. mixed traffic with a burst of long requests, on the Mooncake trace
#      (the paper: up to 15x lower P99 TPOT);
#   3. growing contexts (input:output 1:2) with and without migration
#      (the paper: +29 %);
# then 4. sensitivity (PNM bandwidth, communication, devices, rate,
# length) and 5. the adaptive threshold through steps of load.
# Every row checks the property on the requests GPU-only serves: none
# lost by NELSSA, throughput and P99 TPOT with queueing within 5 %.
# Ratios are NELSSA / GPU-only for throughput, GPU-only / NELSSA for TPOT.
#
#   scripts/sim-experiments.sh BUILDDIR OUTDIR [TRACE [nelssa-sim options...]]
set -u

sim=${1:-build}/tools/sim/nelssa-sim
outdir=${2:-sim-experiments}
trace=${3:-../shared/data/mooncake/conversation_trace.jsonl}
if [ $# -ge 3 ]; then shift 3; else shift $#; fi
extra="$*"
mkdir -p "$outdir"
viol=0
rows=0

# run LABEL ARGS...: one table row.
run() {
	label=$1
	shift
	# shellcheck disable=SC2086 # $extra holds words
	"$sim" --quiet --json "$@" $extra >"$outdir/last.json" || { echo "$label: failed"; return; }
	python3 - "$label" "$outdir/last.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
g, s, p = j["runs"]["gpu-only"], j["runs"]["nelssa"], j["property"]
f = lambda v, w=6: ("%*.2fx" % (w - 1, v)) if v is not None else " " * (w - 3) + "n/a"
print("%-32s %8.0f %8.0f %s %8.1f %8.1f %s %s %5d %s" % (sys.argv[1], g["throughput"],
      s["throughput"], f(p["throughput_ratio"]), g["tpot_q_p99_ms"], s["tpot_q_p99_ms"],
      f(p["p99_tpot_q_ratio"]), f(j["p99_tpot_ratio"]), s["migrations"] + s["moved"],
      ("" if p["holds"] else "VIOLATES") + (" (%d lost)" % p["lost_more"] if p["lost_more"] else "") +
      (" (%d only NELSSA serves)" % p["extra"] if p["extra"] else "")))
sys.exit(0 if p["holds"] else 3)
PY
	[ $? -eq 3 ] && viol=$((viol + 1))
	rows=$((rows + 1))
}

header() {
	echo
	echo "== $1 =="
	printf '%-32s %8s %8s %6s %8s %8s %6s %6s %5s\n' "" "GPU" "NELSSA" "" "GPU P99" \
		"N P99" "" "P99" ""
	printf '%-32s %8s %8s %6s %8s %8s %6s %6s %5s\n' "configuration" "tok/s" "tok/s" \
		"ratio" "TPOT+q" "TPOT+q" "ratio" "TPOT" "migr"
}

if [ -f "$trace" ]; then
	work="--trace $trace --max 4000"
else
	echo "(no $trace: synthetic mixes stand in for the Mooncake trace)"
	work="--synthetic 4000 --long-frac 0.02"
fi
syn="--synthetic 1000 --long-len 131072"

header "1. fixed length: 128K requests, their fraction swept, 10 req/s (paper: up to 5.5x throughput)"
for f in 0 0.04 0.08 0.12 0.16 0.20 0.24; do
	len=
	[ "$f" = 0 ] || len="--long-len 131072"
	# shellcheck disable=SC2086
	run "long fraction $f" --synthetic 1000 --long-frac $f $len --rps 10
done
# Saturated: all 1000 requests within a second, so both run at capacity
# (at 10 req/s NELSSA serves the offered load, whatever it could do more).
for f in 0.04 0.12 0.24; do
	run "saturated, long fraction $f" --synthetic 1000 --long-frac $f --long-len 131072 --rps 1000
done

header "2. mixed traffic, 10 req/s, a 60 s burst of 50 % long (128K) at 60 s (paper: up to 15x lower P99)"
# shellcheck disable=SC2086 # the options are words
run "no burst" $work --rps 10
# shellcheck disable=SC2086
run "burst" $work --rps 10 --burst 60,60,0.5 --long-len 131072 --svg "$outdir/burst"

header "3. growing contexts, output = 2 x input, 5 % at 64K, 5 req/s (paper: +29 %)"
# shellcheck disable=SC2086
run "1:2, migration" --synthetic 600 --long-frac 0.05 --long-len 65536 --grow 2 --rps 5 \
	--svg "$outdir/growth"
cp "$outdir/last.json" "$outdir/growth-migrate.json"
# shellcheck disable=SC2086
run "1:2, no migration" --synthetic 600 --long-frac 0.05 --long-len 65536 --grow 2 --rps 5 \
	--no-migrate
python3 - "$outdir/growth-migrate.json" "$outdir/last.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["runs"]["nelssa"] for f in sys.argv[1:])
print("%-32s throughput x%.3f, P99 TPOT with queueing x%.3f lower, TTFT P99 x%.3f lower" % (
      "  migration over none (NELSSA)", a["throughput"] / b["throughput"],
      b["tpot_q_p99_ms"] / a["tpot_q_p99_ms"], b["ttft_p99_ms"] / a["ttft_p99_ms"]))
PY
rm -f "$outdir/growth-migrate.json"

header "4. sensitivity, 10 % long at 128K, 10 req/s, 4 devices unless said"
for bw in 46.08e9 76.8e9 107.52e9; do
	# shellcheck disable=SC2086
	run "PNM bandwidth $bw B/s" $syn --long-frac 0.1 --rps 10 --pnm-bw $bw
done
for c in 0.5 1 2 4; do
	# shellcheck disable=SC2086
	run "communication x$c" $syn --long-frac 0.1 --rps 10 --comm-scale $c
done
for d in 1 2 4 8; do
	# shellcheck disable=SC2086
	run "$d devices" $syn --long-frac 0.1 --rps 10 --devices $d
done
for r in 5 10 15 20; do
	# shellcheck disable=SC2086
	run "$r req/s" $syn --long-frac 0.1 --rps $r
done
for l in 65536 131072 262144 524288 1048576; do
	# shellcheck disable=SC2086
	run "long requests of $l tokens" --synthetic 1000 --long-frac 0.1 --long-len $l --rps 10
done
# The adaptive threshold (Documentation/policy.rst): where it goes and how
# often it turns back, through steps of load and on the trace, beside the
# threshold held at the model's crossover.
# thresh LABEL ARGS...: the run's T_input moves and reversals from its CSV.
thresh() {
	label=$1
	shift
	# shellcheck disable=SC2086 # $extra holds words
	"$sim" --quiet --mode nelssa --csv "$outdir/thresh.csv" "$@" $extra >/dev/null ||
		{ echo "$label: failed"; return; }
	awk -F, -v label="$label" '$1 == "nelssa" {
		if (prev != "" && $8 != prev) { d = ($8 > prev) ? 1 : -1; if (dir && d != dir) rev++
			dir = d; moves++; path = path sprintf(" %.0fs:%.1fK", $2, $8 / 1000) }
		if (prev == "") path = sprintf("%.1fK", $8 / 1000)
		prev = $8 }
		END { printf "%-34s %3d moves, %d reversals: %s\n", label, moves, rev, path }' \
		"$outdir/thresh.csv"
}
echo
echo "== 5. the adaptive threshold: moves and reversals of T_input =="
thresh "steps 4 -> 12 -> 4 req/s at 300/900 s" --synthetic 12000 --long-frac 0.3 \
	--long-len 16384-65536 --rps 4 --rps-step 300,12 --rps-step 900,4
if [ -f "$trace" ]; then
	for r in 10 20 40; do
		thresh "Mooncake conversation, $r req/s" --trace "$trace" --rps "$r"
		# shellcheck disable=SC2086
		run "  ... NELSSA/GPU-only, adaptive" --trace "$trace" --rps "$r"
		# shellcheck disable=SC2086
		run "  ... NELSSA/GPU-only, fixed T" --trace "$trace" --rps "$r" --no-adaptive
	done
fi
rm -f "$outdir/last.json" "$outdir/thresh.csv"
echo
echo "$rows configurations, $viol violate the property (NELSSA more than 5 % behind)"
