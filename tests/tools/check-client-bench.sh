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
echo "1..16"
t "--help exits 0" 0 "$bench" --help
t "a budget above 1 is a usage error" 2 "$bench" --budget 1.5
t "a zero budget is a usage error" 2 "$bench" --budget 0
t "a zero context is a usage error" 2 "$bench" --context 0
t "a stray argument is a usage error" 2 "$bench" extra
# shellcheck disable=SC2086 # the options are words
t "text run" 0 "$bench" $small
# shellcheck disable=SC2086
t "JSON run" 0 "$bench" $small --budget 0.04 --json
json_check "Top-K shape: 512 clusters a head, a 4% budget = 328 tokens" \
	"j['topk']['clusters_per_head'] == 512 and j['topk']['budget'] == 0.04 and \
	 j['topk']['budget_tokens'] == 328 and 0 < j['topk']['selected_min'] <= j['topk']['selected_max']"
# The fill skips a cluster that would overflow and reads on, so what is
# left unread is less than one cluster.
json_check "tokens read: never above the budget, within one cluster of it" \
	"j['topk']['tokens_read_max'] <= j['topk']['budget_tokens'] and \
	 j['topk']['tokens_read_min'] > j['topk']['budget_tokens'] - j['topk']['max_cluster_tokens']"
json_check "ratios are time over same-run baseline" \
	"all(abs(s['ratio'] - a / b) <= 0.01 * s['ratio'] for s, a, b in
	 ((j['kmeans'], j['kmeans']['ms_per_1k_tokens_per_head'], j['kmeans']['sgemm_ms_per_1k']),
	  (j['topk'], j['topk']['step_ms'], j['topk']['dot_pass_ms'])))"
json_check "k-means: efficiency is the inverse ratio; the host is named" \
	"abs(j['kmeans']['efficiency'] * j['kmeans']['ratio'] - 1) <= 0.01 and \
	 j['kmeans']['tokens'] == 16384 and j['kmeans']['head_dim'] == 32 and \
	 j['kmeans']['sgemm_gflops'] > 0 and j['cpu'] and j['isa'] and j['blas_threads'] == 1"
json_check "Top-K: read_ratio is the read pass over the step" \
	"abs(j['topk']['read_ratio'] * j['topk']['step_ms'] - j['topk']['read_pass_ms']) <= \
	 0.01 * j['topk']['read_pass_ms'] and j['topk']['read_pass_ms'] > 0"
json_check "Top-K: sgemm_ratio is the sgemm pass over the step" \
	"abs(j['topk']['sgemm_ratio'] * j['topk']['step_ms'] - j['topk']['sgemm_pass_ms']) <= \
	 0.01 * j['topk']['sgemm_pass_ms'] and j['topk']['sgemm_pass_ms'] > 0"
cp "$out/stdout" "$out/budget.json"
# shellcheck disable=SC2086
t "--ratio, the deprecated alias, still runs" 0 "$bench" $small --ratio 0.04 --json
if grep -q "deprecated" "$out/stderr"; then
	echo "ok $((n += 1)) - --ratio says it is deprecated"
else
	sed 's/^/# /' "$out/stderr"
	echo "not ok $((n += 1)) - --ratio says it is deprecated"
fi
json_check "--ratio sets the same token budget as --budget" \
	"j['topk']['budget_tokens'] == json.load(open('$out/budget.json'))['topk']['budget_tokens']"
