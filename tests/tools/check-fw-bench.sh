#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-fw-bench end to end, in TAP, at a small size: exit codes, the
# shape of its JSON and the check of every ISA against the scalar kernel
# (never how fast anything is).
#
#   check-fw-bench.sh NELSSA-FW-BENCH
set -u

bench=${1:?usage: check-fw-bench.sh NELSSA-FW-BENCH}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"

small="--context 4096 --items 2 --resident 256 --iters 2"
echo "1..16"
t "--help exits 0" 0 "$bench" --help
t "a zero selection is a usage error" 2 "$bench" --select 0
t "a stray argument is a usage error" 2 "$bench" extra
# shellcheck disable=SC2086 # the options are words
t "text run" 0 "$bench" $small
# shellcheck disable=SC2086
t "JSON run" 0 "$bench" $small --json
json_check "every supported ISA, the scalar one last" \
	"len(j['isas']) >= 1 and j['isas'][-1]['isa'] == 'scalar' and j['random']['items'] == 2"
json_check "outputs agree with the scalar kernel, timings are positive" \
	"all(i['max_abs_err'] < 1e-4 and i['random_gbps'] > 0 and i['resident_ns_per_cluster'] > 0
	     for i in j['isas'])"
json_check "the roofline is min(streaming read, compute) and the ratios follow from it" \
	"j['read_baseline_gbps'] > 0 and j['cpu_model'] and j['group'] == 4 and
	 all(i['peak_gflops'] > 0 and
	     abs(i['compute_gbps'] - i['peak_gflops'] / j['group']) < 1e-4 * i['compute_gbps'] and
	     abs(i['roofline_gbps'] - min(i['compute_gbps'], j['read_baseline_gbps'])) <
	         1e-4 * i['roofline_gbps'] and
	     abs(i['roofline_ratio'] - i['random_gbps'] / i['roofline_gbps']) < 1e-4 * i['roofline_ratio'] and
	     abs(i['resident_compute_ratio'] - i['resident_gbps'] / i['compute_gbps']) <
	         1e-4 * i['resident_compute_ratio']
	     for i in j['isas'])"
# bf16 dot products: the run says so, and every ISA's outputs stay within the
# weights' rounding of the scalar kernel's (each rounds its weights relative
# to its own running maximum, each within 2^-8: up to 2^-7 max|v|, and |v| < 1
# in its bf16 stores).
t "an unknown dot-product type is a usage error" 2 "$bench" --attn-dots fp8
# shellcheck disable=SC2086
t "JSON run, bf16 dot products" 0 "$bench" $small --attn-dots bf16 --json
json_check "it says its dot products; every ISA within the weights' rounding of scalar" \
	"j['attn_dots'] == 'bf16' and len(j['isas']) >= 1 and
	 all(i['max_abs_err'] < 2 ** -7 and i['peak_gflops'] > 0 for i in j['isas'])"
# K and V blocks adjacent (kv_stride): every ISA on that layout against the
# scalar kernel on it, which the unit tests check against float64.
t "an unknown KV layout is a usage error" 2 "$bench" --kv-layout interleaved
# shellcheck disable=SC2086
t "JSON run, adjacent K and V blocks" 0 "$bench" $small --kv-layout adjacent --json
json_check "it says its layout; every ISA agrees with the scalar kernel" \
	"j['kv_layout'] == 'adjacent' and len(j['isas']) >= 1 and
	 all(i['max_abs_err'] < 1e-4 and i['random_gbps'] > 0 for i in j['isas'])"
# shellcheck disable=SC2086
t "JSON run, the default layout is packed" 0 "$bench" $small --kv-dtype int8 --json
json_check "packed unless asked" "j['kv_layout'] == 'packed' and j['kv_dtype'] == 'int8'"
