#!/bin/sh
# SPDX-License-Identifier: MIT
#
# nelssa-mem-probe end to end, in TAP, at a small size: exit codes, the
# shape of its JSON, and runs that pass the probe's own check of every
# word read against the fill pattern (never how fast anything is).
#
#   check-mem-probe.sh NELSSA-MEM-PROBE
set -u

probe=${1:?usage: check-mem-probe.sh NELSSA-MEM-PROBE}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"

small="--regions 4,8 --bytes 2 --passes 1"
echo "1..13"
t "--help exits 0" 0 "$probe" --help
t "a chunk not a multiple of 64 bytes is a usage error" 2 "$probe" --chunk 100
t "more than half the smallest region per pass is a usage error" 2 "$probe" --regions 8,64 --bytes 8
t "a region that is not a number is a usage error" 2 "$probe" --regions 8,lots
t "an unknown page kind is a usage error" 2 "$probe" --pages 2m
t "a stray argument is a usage error" 2 "$probe" extra
# shellcheck disable=SC2086 # the options are words
t "text run" 0 "$probe" $small
# shellcheck disable=SC2086
t "JSON run with 64 KiB chunks and no prefetch" 0 "$probe" $small --chunk 65536 --ahead 0 --json
json_check "the options are echoed" \
	"j['chunk'] == 65536 and j['ahead'] == 0 and j['bytes_per_pass'] == 2 << 20 and j['pages'] == 'thp'"
json_check "one positive rate per region, in the order given, ratio to the stream" \
	"[r['mib'] for r in j['regions']] == [4, 8] and j['stream_gbps'] > 0 and
	 all(r['gather_gbps'] > 0 and abs(r['ratio'] - r['gather_gbps'] / j['stream_gbps']) < 1e-3
	     for r in j['regions'])"
# shellcheck disable=SC2086
t "one-line chunks with the prefetch further ahead than a pass" 0 \
	"$probe" $small --chunk 64 --ahead 65536 --json
t "a CPU this process may not use is refused" 1 "$probe" $small --cpu 1023
t "a region larger than the machine's memory is refused" 1 "$probe" --regions 1048576 --passes 1
