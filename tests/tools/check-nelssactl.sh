#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssactl end to end, in TAP: exit codes, human and JSON output (parsed
# with python3's json module and checked field by field), and every
# benchmark at a small size.  Benchmarks here check that they run and
# report consistent numbers, never how fast they are.
#
#   check-nelssactl.sh NELSSACTL
set -u

ctl=${1:?usage: check-nelssactl.sh NELSSACTL}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"

echo "1..49"
t "--help exits 0" 0 "$ctl" --help
t "no command is a usage error" 2 "$ctl"
t "unknown command is a usage error" 2 "$ctl" frobnicate
t "info without DEV is a usage error" 2 "$ctl" info
t "a missing kernel device is a device error" 3 "$ctl" info /dev/nelssa_pnm0
t "a malformed sim option is a device error" 3 "$ctl" info sim:0,cores=0
t "list" 0 "$ctl" list
t "info sim:0 --json" 0 "$ctl" info sim:0,mem=64M,cores=2 --json
json_check "info JSON fields" \
	"j['backend'] == 'sim' and j['nr_cores'] == 2 and j['abi_version'] == 1 and j['opcodes'] == 63 and 0 < j['mem_size'] < 64 << 20"
json_check "info says the dot products SPARSE_ATTN offers and kv_stride (firmware 1.2)" \
	"j['fw_version'] == (1 << 16 | 2) and j['attn_flags'] == 1 and j['attn_dots'] == ['fp32', 'bf16'] and j['caps'] & (1 << 6)"
# KV capacity per type: the tiles' size rule worked out here on its own
# (16 rows of d codes, a 4-byte scale per 32 channels, 64-byte padding).
t "info --head-dim 80 --json" 0 "$ctl" info sim:0,mem=64M --head-dim 80 --json
json_check "info reports every KV type and the tokens of one head each holds" \
	"j['kv_types'] == ['bf16', 'fp16', 'fp8', 'int8'] and j['kv_head_dim'] == 80 and \
	j['kv_head_tokens']['bf16'] == j['mem_size'] // 16 // (2 * 16 * 160) * 16 and \
	j['kv_head_tokens']['int8'] == j['kv_head_tokens']['fp8'] == \
	j['mem_size'] // 16 // (2 * ((16 * 80 + 4 * 3 + 63) // 64 * 64)) * 16"
t "info --head-dim 0 is a usage error" 2 "$ctl" info sim:0 --head-dim 0
t "selftest passes" 0 "$ctl" --json selftest sim:0
json_check "selftest JSON" \
	"j['passed'] is True and j['failed_mask'] == 0 and len(j['tests']) == 6 and 'attn_bf16_dots' in j['tests'] and all(v == 'pass' for v in j['tests'].values())"
t "selftest --mask 0x4" 0 "$ctl" selftest sim:0 --mask 0x4
t "selftest bad mask is a usage error" 2 "$ctl" selftest sim:0 --mask 0x100
t "bench without kind is a usage error" 2 "$ctl" bench sim:0
t "bench unknown kind is a usage error" 2 "$ctl" bench sim:0 fast
t "bench attn bad option is a usage error" 2 "$ctl" bench sim:0 attn --select 2
t "bench attn (small)" 0 "$ctl" bench sim:0 attn --json --context 8192 --items 4 --iters 3 --threads 2
json_check "bench attn JSON fields and arithmetic" \
	"all(k in j for k in ('kv_bytes','seconds','effective_gbps','read_baseline_gbps','ratio','threads')) and j['threads'] == 2 and j['kv_bytes'] == 3 * 4 * 20 * 16 * 512 and abs(j['effective_gbps'] - j['kv_bytes'] / j['seconds'] / 1e9) < 1e-6 * j['effective_gbps'] and abs(j['ratio'] - j['effective_gbps'] / j['read_baseline_gbps']) < 1e-9 and j['max_abs_err_vs_reference'] < 1e-3 and j['gather_baseline_gbps'] > 0 and abs(j['gather_ratio'] - j['effective_gbps'] / j['gather_baseline_gbps']) < 1e-9 and (j['cpus'] is None or j['cpus'] == '%d-%d' % (int(j['cpus'].split('-')[0]), int(j['cpus'].split('-')[0]) + 1))"
json_check "bench attn roofline: min(read, compute) of the sim device's kernel, same run" \
	"j['isa'] in ('scalar','avx2','avx512','avx512-bf16','neon') and j['cpu_model'] and j['peak_gflops'] > 0 and abs(j['compute_gbps'] - j['peak_gflops'] / j['group']) < 1e-9 * j['compute_gbps'] and j['roofline_gbps'] == min(j['compute_gbps'], j['read_baseline_gbps']) and abs(j['roofline_ratio'] - j['effective_gbps'] / j['roofline_gbps']) < 1e-9"
json_check "bench attn lays its stores out packed unless asked" "j['kv_layout'] == 'packed'"
t "bench attn --isa scalar" 0 "$ctl" bench sim:0 attn --json --isa scalar --context 4096 --items 2 --iters 1
json_check "bench attn names the ISA it was given" "j['isa'] == 'scalar' and ',isa=scalar' in j['device'] and j['roofline_ratio'] > 0"
t "bench attn --isa of no ISA is a usage error" 2 "$ctl" bench sim:0 attn --isa sse9
t "bench attn --attn-dots of no type is a usage error" 2 "$ctl" bench sim:0 attn --attn-dots fp8
t "bench attn --attn-dots bf16" 0 "$ctl" bench sim:0 attn --json --context 4096 --items 2 --iters 1 \
	--attn-dots bf16
json_check "bench attn with bf16 dot products says so, within the weights' rounding" \
	"j['attn_dots'] == 'bf16' and j['max_abs_err_vs_reference'] < 1e-3 + 2 ** -7 and j['peak_gflops'] > 0"
# K and V blocks adjacent (kv_stride): the device reads that layout and
# matches the reference, which reads the stores unpacked again.
t "bench attn --kv-layout of no layout is a usage error" 2 "$ctl" bench sim:0 attn --kv-layout kv
t "bench attn --kv-layout adjacent" 0 "$ctl" bench sim:0 attn --json --context 4096 --items 2 \
	--iters 1 --kv-layout adjacent --kv-dtype int8
json_check "bench attn says its layout and matches the reference on it" \
	"j['kv_layout'] == 'adjacent' and j['kv_dtype'] == 'int8' and j['max_abs_err_vs_reference'] < 1e-3 and j['gather_baseline_gbps'] > 0"
t "bench attn human output" 0 "$ctl" bench sim:0 attn --context 4096 --items 2 --iters 2
t "bench attn --cpus with --no-pin is a usage error" 2 "$ctl" bench sim:0 attn --cpus 0 --no-pin
t "bench attn --no-pin" 0 "$ctl" bench sim:0 attn --json --context 4096 --items 2 --iters 1 --no-pin
json_check "bench attn --no-pin leaves threads unpinned" "j['cpus'] is None"
t "bench latency (small)" 0 "$ctl" bench sim:0 latency --count 500 --json
json_check "bench latency JSON percentiles ordered" \
	"all(j[k]['p50_us'] <= j[k]['p90_us'] <= j[k]['p99_us'] <= j[k]['max_us'] for k in ('nop','fill64','copy4k')) and j['count'] == 500"
t "bench latency --cpu: submitter and executor on CPU 0" 0 "$ctl" bench sim:0,cpus=0 latency \
	--count 200 --cpu 0 --json
json_check "bench latency --cpu is in the JSON" "j['cpu'] == 0 and j['count'] == 200"
t "bench latency --cpu past the CPU set is a usage error" 2 "$ctl" bench sim:0 latency --cpu 100000
t "bench bw (small)" 0 "$ctl" bench sim:0 bw --size 4194304 --iters 2 --json
json_check "bench bw JSON" \
	"all(j[k] > 0 for k in ('fill_gbps','copy_gbps','write_gbps','read_gbps','memcpy_gbps')) and abs(j['copy_ratio'] - j['copy_gbps'] / j['memcpy_gbps']) < 1e-9"
t "calibrate with an unknown profile is a usage error" 2 "$ctl" calibrate --profile a100
t "calibrate bad option is a usage error" 2 "$ctl" calibrate --select 2
t "calibrate (small, no daemon)" 0 "$ctl" calibrate --json --context 4096 --iters 1 \
	--output "$out/profile"
json_check "calibrate: T_comm grows with N, thresholds follow the model" \
	"not j['comm_measured'] and j['pnm_bw'] > 0 and len(j['thresholds']) == 8 and \
	 all(a['t_comm'] < b['t_comm'] for a, b in zip(j['thresholds'], j['thresholds'][1:])) and \
	 all(t['t_input'] is None or t['t_input'] > 0 for t in j['thresholds'])"
t "calibrate's profile file loads back" 0 "$ctl" calibrate --json --context 4096 --iters 1 \
	--profile "$out/profile"
