#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The serving engine against nelssa-sim on the same workload
# (Documentation/serve.rst, "The engine against the simulator").
#
#   scripts/serve-vs-sim.sh BUILDDIR [OUTDIR]
#
# 1. calibration: the engine runs a Mooncake excerpt (trace lines from 0)
#    in both modes, prefill off the clock, and fits nelssa-sim's step model
#    to its steps (nelssa.serve --sim-out: node.profile, model.conf);
# 2. evaluation, held out: another excerpt (lines from 2,000), the engine's
#    router on the fitted profile, both modes;
# 3. nelssa-sim replays the evaluation workload on the fitted profile and
#    model, same threshold, pool, batch limit, devices, no migration, no
#    adaptive threshold, all requests at time 0 as in the engine;
# 4. the NELSSA / GPU-only throughput and P99 TPOT ratios of both, and
#    their agreement (sim / engine; the target is within 25 %).
# Prints one JSON object last.  Takes about 4 minutes on 2 cores (REQUESTS=
# sets the requests of each excerpt; 60 by default).
set -u

build=${1:?usage: serve-vs-sim.sh BUILDDIR [OUTDIR]}
out=${2:-$build/serve-vs-sim}
dir=$(mktemp -d) || exit 1
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
# shellcheck source=nelssad-lib.sh
. "$(dirname "$0")/nelssad-lib.sh"

src=$(cd "$(dirname "$0")/.." && pwd)
trace=${TRACE:-$src/../shared/data/mooncake/conversation_trace.jsonl}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
[ -r "$trace" ] || { echo "serve-vs-sim: no trace at $trace (set TRACE=)" >&2; exit 1; }
mkdir -p "$out"

export UCX_TLS="${UCX_TLS:-tcp}" UCX_LOG_LEVEL="${UCX_LOG_LEVEL:-fatal}"
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 \
	MALLOC_TOP_PAD_=268435456
if ! nelssad_start "$build/daemon/nelssad" "$dir/daemon.log" "$dir/port" --devices sim:4; then
	cat "$dir/daemon.log" >&2
	exit 1
fi

# The setting both sides share.
threshold=1024 pool=8192 batch=32 devices=4 n=${REQUESTS:-60} scale=8
serve() {
	PYTHONPATH="$build/python" "$py" -m nelssa.serve --port "$port" --workload "$trace" \
		--requests "$n" --scale $scale --threshold $threshold --pool-tokens $pool \
		--max-batch $batch --devices $devices --no-migrate --prefill-elsewhere \
		--accuracy-every 0 --json "$@"
}
echo "== calibration: trace lines 1-$n, both modes ==" >&2
serve --sim-out "$out/cal" --out "$out/cal" >"$out/cal.json" || exit 1
echo "== evaluation (held out): trace lines 2001-$((2000 + n)), fitted profile ==" >&2
mkdir -p "$out/eval"
serve --skip 2000 --seed 2 --profile "$out/cal/node.profile" \
	--trace-out "$out/eval/workload.jsonl" --out "$out/eval" >"$out/eval.json" || exit 1
echo "== nelssa-sim on the evaluation workload ==" >&2
"$build/tools/sim/nelssa-sim" --trace "$out/eval/workload.jsonl" --profile "$out/cal/node.profile" \
	--model "$out/cal/model.conf" --threshold $threshold --devices $devices \
	--max-batch $batch --rps 1e9 --no-migrate --no-adaptive --quiet --json >"$out/sim.json" ||
	exit 1
kill -TERM $pid
wait $pid
pid=

"$py" - "$out" <<'PYEOF'
import json, sys
out = sys.argv[1]
eng = {r["mode"]: r for r in json.load(open(out + "/eval.json"))["runs"]}
sim = json.load(open(out + "/sim.json"))
fit = json.load(open(out + "/cal/fit.json"))
g, s = sim["runs"]["gpu-only"], sim["runs"]["nelssa"]
res = dict(
    engine=dict(tput_gpu=eng["gpu"]["tokens_per_s"], tput_nelssa=eng["nelssa"]["tokens_per_s"],
                tpot_p99_gpu=eng["gpu"]["tpot_p99"], tpot_p99_nelssa=eng["nelssa"]["tpot_p99"]),
    sim=dict(tput_gpu=g["throughput"], tput_nelssa=s["throughput"],
             tpot_p99_gpu=g["tpot_p99_ms"] / 1e3, tpot_p99_nelssa=s["tpot_p99_ms"] / 1e3),
    fit=fit)
for k in ("engine", "sim"):
    r = res[k]
    r["throughput_ratio"] = r["tput_nelssa"] / r["tput_gpu"]
    r["p99_tpot_ratio"] = r["tpot_p99_gpu"] / r["tpot_p99_nelssa"]
res["agreement"] = {m: res["sim"][m] / res["engine"][m]
                    for m in ("throughput_ratio", "p99_tpot_ratio")}
res["within_25_percent"] = all(0.75 <= v <= 1.25 for v in res["agreement"].values())
print("%-22s %10s %10s" % ("", "engine", "nelssa-sim"))
for m in ("tput_gpu", "tput_nelssa", "throughput_ratio", "tpot_p99_gpu", "tpot_p99_nelssa",
          "p99_tpot_ratio"):
    print("%-22s %10.3f %10.3f" % (m, res["engine"][m], res["sim"][m]))
print("agreement (sim / engine): throughput ratio %.3f, P99 TPOT ratio %.3f"
      % (res["agreement"]["throughput_ratio"], res["agreement"]["p99_tpot_ratio"]))
print(json.dumps(res))
PYEOF
