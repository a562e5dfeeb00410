#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-client-bench end to end, in TAP, at a small size: exit codes and
# the consistency of its JSON (never how fast anything is).
#
#   check-client-bench.sh NELSSA-CLIENT-BENCH
set -u

bench=${1:?usage: check-client-bench.sh NELSSA-CLIENT-BENCH}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"

small="--context 8192 --head-dim 32 --heads 2 --iters 1"
echo "1..8"
t "--help exits 0" 0 "$bench" --help
t "a ratio above 1 is a usage error" 2 "$bench" --ratio 2
t "a zero context is a usage error" 2 "$bench" --context 0
t "a stray argument is a usage error" 2 "$bench" extra
# shellcheck disable=SC2086 # the options are words
t "text run" 0 "$bench" $small
# shellcheck disable=SC2086
t "JSON run" 0 "$bench" $small --ratio 0.04 --json
json_check "Top-K shape: 512 clusters a head, 4% = 20 selected" \
	"j['topk']['clusters_per_head'] == 512 and j['topk']['selected'] == 20"
json_check "ratios are time over same-run baseline" \
	"all(abs(s['ratio'] - a / b) <= 0.01 * s['ratio'] for s, a, b in
	 ((j['kmeans'], j['kmeans']['ms_per_1k_tokens_per_head'], j['kmeans']['dot_pass_ms_per_1k']),
	  (j['topk'], j['topk']['step_ms'], j['topk']['dot_pass_ms'])))"
