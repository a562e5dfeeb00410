#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-accuracy in TAP at a small size (8K context, seed 1, every family
# of the harder generator and the first one).  The tool computes its own
# float64 reference (logits, LSE, output and attention mass from the
# stored bf16 keys) and checks every LSE a method returns against the
# float64 LSE of the tokens it read; this script asserts the relations
# that must hold against that reference, never a timing:
# - every method reads the budget it was given (the oracle exactly);
# - every returned LSE is the float64 LSE of what was read;
# - no method recalls more attention mass than the oracle;
# - the oracle finds every planted target that carries mass (the
#   generator is calibrated so that some selection can);
# - the mean-key estimation term only adds mass it is sure of (cluster
#   means under-estimate by Jensen), so it never moves the LSE away from
#   the dense one;
# - the shipped method (probe+spread: the far-member probe's share of the
#   budget, then centroids, plus the spread-weighted estimation term)
#   finds every target and is no worse than page Top-K at the same budget
#   on every family.
#
#   check-accuracy.sh NELSSA-ACCURACY
set -u

acc=${1:?usage: check-accuracy.sh NELSSA-ACCURACY}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"
JSON_PRELUDE="r = j['rows']; \
by = {(x['family'], x['method']): x for x in r}; \
fams = sorted({x['family'] for x in r})"

echo "1..30"
t "--help exits 0" 0 "$acc" --help
t "a ratio of 0 is a usage error" 2 "$acc" --ratios 0
t "a context below 1024 is a usage error" 2 "$acc" --contexts 512
t "a stray argument is a usage error" 2 "$acc" extra
t "an outlier cosine above 1 is a usage error" 2 "$acc" --outlier-cos 1.5
t "a negative outlier count is a usage error" 2 "$acc" --outliers -1
t "an unknown family is a usage error" 2 "$acc" --families copy,nonesuch
t "a bound share above 1 is a usage error" 2 "$acc" --bound-share 2
t "a far share above 1 is a usage error" 2 "$acc" --far-share 2
t "a 16-bit PNM KV type other than bf16 is a usage error" 2 "$acc" --pnm-kv-dtype fp16

t "8K run, every family, JSON" 0 "$acc" --contexts 8192 --seeds 1 --json \
	--families copy,needle,entropy,drift,hidden,massive,spread,synth
json_check "one row per family and method" "len(fams) == 8 and len(r) == 80 and \
	{x['method'] for x in r} == {'cluster', 'cluster+est', 'cluster+spread', 'probe', \
	'probe+est', 'probe+spread', 'cluster-bound', 'hybrid', 'page-topk', 'oracle'}"
json_check "every method reads its budget: the oracle exactly, the others to within a cluster" "all(
	(x['tokens'] == o['tokens']) if x['method'] == 'oracle' else
	(o['tokens'] - 48 <= x['tokens'] <= o['tokens'])
	for o in r if o['method'] == 'oracle'
	for x in r if x['family'] == o['family'])"
json_check "every LSE returned is the float64 LSE of the tokens read" "all(
	x['lse_bad'] == 0 for x in r)"
json_check "no method recalls more attention mass than the oracle" "all(
	x['recall'] <= by[(x['family'], 'oracle')]['recall'] + 1e-9 for x in r)"
json_check "the oracle finds every planted target that carries mass" "all(
	x['hits'] == x['targets'] for x in r if x['method'] == 'oracle')"
json_check "the mean-key estimate never moves the LSE away from the dense one" "all(
	by[(f, m + '+est')]['median_abs_dlse'] <= by[(f, m)]['median_abs_dlse'] + 1e-6
	for f in fams for m in ('cluster', 'probe'))"
json_check "probe+spread finds every target on every family" "all(
	by[(f, 'probe+spread')]['hits'] == by[(f, 'probe+spread')]['targets'] for f in fams)"
json_check "probe+spread is no worse than page Top-K at the same budget" "all(
	by[(f, 'probe+spread')]['median_err'] <= by[(f, 'page-topk')]['median_err'] for f in fams)"

# The same run with the middle stored as int8 on the PNM side: the
# selection (made on the GPU's bf16) reads the same tokens, the bf16
# baselines are untouched, and every LSE is the float64 LSE of the keys
# as decoded from the store.
cp "$out/stdout" "$out/bf16.json"
t "8K run, every family, int8 PNM KV, JSON" 0 "$acc" --contexts 8192 --seeds 1 --json \
	--families copy,needle,entropy,drift,hidden,massive,spread,synth --pnm-kv-dtype int8
JSON_PRELUDE="$JSON_PRELUDE; b = json.load(open('$out/bf16.json')); \
bb = {(x['family'], x['method']): x for x in b['rows']}"
json_check "the run says its PNM KV type" "j['pnm_kv_dtype'] == 'int8' and b['pnm_kv_dtype'] == 'bf16'"
json_check "every LSE returned is the float64 LSE of the decoded keys read" "all(
	x['lse_bad'] == 0 for x in r)"
json_check "page Top-K and the oracle read bf16: their rows are the bf16 run's" "all(
	x == bb[(x['family'], x['method'])] for x in r if x['method'] in ('page-topk', 'oracle'))"
json_check "quantising changes no selection: tokens, recall and targets as with bf16" "all(
	(x['tokens'], x['recall'], x['hits'], x['targets']) == tuple(bb[(x['family'], x['method'])][k]
	for k in ('tokens', 'recall', 'hits', 'targets')) for x in r)"

# bf16 dot products (NELSSA_ATTN_BF16_DOTS) everywhere attention is computed:
# the selection (made on the unrounded queries) reads the same tokens, every
# LSE is the float64 LSE of the bf16 queries' logits of the tokens read, and
# the outputs move (the flag reached every attention).
t "a dot-product type other than fp32 or bf16 is a usage error" 2 "$acc" --attn-dots fp16
t "8K run, every family, bf16 dot products, JSON" 0 "$acc" --contexts 8192 --seeds 1 --json \
	--families copy,needle,entropy,drift,hidden,massive,spread,synth --attn-dots bf16
json_check "the run says its dot products" "j['attn_dots'] == 'bf16' and b['attn_dots'] == 'fp32'"
json_check "every LSE returned is the float64 LSE of the bf16 queries' logits" "all(
	x['lse_bad'] == 0 for x in r)"
json_check "rounding changes no selection: tokens, recall and targets as with fp32" "all(
	(x['tokens'], x['recall'], x['hits'], x['targets']) == tuple(bb[(x['family'], x['method'])][k]
	for k in ('tokens', 'recall', 'hits', 'targets')) for x in r)"
json_check "every method's outputs moved: the oracle's error is not the fp32 run's" "all(
	x['median_err'] != bb[(x['family'], x['method'])]['median_err']
	for x in r if x['method'] == 'oracle')"
