#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-accuracy in TAP at a small size (8K context, one trial): exit
# codes, and relations that must hold whatever the numbers: baselines get
# the cluster method's token budget, nothing beats the oracle's attention
# mass recall, and on the calibrated generator the oracle finds every
# needle at 4 % and more.  The issue's targets themselves are reported by
# the tool, not asserted here.
#
#   check-accuracy.sh NELSSA-ACCURACY
set -u

acc=${1:?usage: check-accuracy.sh NELSSA-ACCURACY}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"
JSON_PRELUDE="r=j['rows']"

echo "1..14"
t "--help exits 0" 0 "$acc" --help
t "a ratio of 0 is a usage error" 2 "$acc" --ratios 0
t "a context below 1024 is a usage error" 2 "$acc" --contexts 512
t "a stray argument is a usage error" 2 "$acc" extra
t "an outlier cosine above 1 is a usage error" 2 "$acc" --outlier-cos 1.5
t "a negative outlier count is a usage error" 2 "$acc" --outliers -1
t "small JSON run" 0 "$acc" --contexts 8192 --trials 1 --json
json_check "one row per ratio and method" "len(r) == 20 and {x['method'] for x in r} == \
	{'cluster', 'cluster+est', 'cluster-bound', 'page-topk', 'oracle'}"
json_check "oracle gets the cluster budget, the others no more" "all(
	(o['budget'] == c['budget']) if o['method'] == 'oracle' else (o['budget'] <= c['budget'])
	for c in r if c['method'] == 'cluster'
	for o in r if o['ratio'] == c['ratio'])"
json_check "no method recalls more attention mass than the oracle" "all(
	x['recall'] <= o['recall'] + 1e-9 for o in r if o['method'] == 'oracle'
	for x in r if x['ratio'] == o['ratio'])"
json_check "the oracle finds every needle from 4 % up" "all(
	x['needle_hit_rate'] == 1.0 for x in r if x['method'] == 'oracle' and x['ratio'] >= 4)"

# Splitting outliers off their clusters is what finds the needles at 32K:
# without it a needle hides in its cluster's mean key.
t "32K run without outlier splitting" 0 "$acc" --contexts 32768 --ratios 4 --trials 1 \
	--outliers 0 --json
cp "$out/stdout" "$out/no-split.json"
t "32K run with the default outlier splitting" 0 "$acc" --contexts 32768 --ratios 4 --trials 1 \
	--json
json_check "with splitting the cluster method finds every needle, and more than without" "
	[x['needle_hit_rate'] for x in r if x['method'] == 'cluster'] == [1.0] and
	[x['needle_hit_rate'] for x in json.load(open('$out/no-split.json'))['rows']
	 if x['method'] == 'cluster'][0] < 1.0"
