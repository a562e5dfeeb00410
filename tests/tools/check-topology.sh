#!/bin/sh
# SPDX-License-Identifier: MIT
#
# 'nelssactl topology' on this machine, in TAP.  On a machine with no CXL
# bus (every CI host) it says so in one line and exits 0, and its JSON
# says so too, whatever DEV names.  The same sources built without libcxl
# (NELSSACTL-NOCXL) still have the command and fail it in one clear line.
# The CXL guest (tests/qemu/topology.sh) checks it against 'cxl list'.
#
#   check-topology.sh NELSSACTL [NELSSACTL-NOCXL]
set -u

ctl=${1:?usage: check-topology.sh NELSSACTL [NELSSACTL-NOCXL]}
nocxl=${2:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
n=0

# shellcheck source=tap-lib.sh
. "$(dirname "$0")/tap-lib.sh"

lines() { # name, expected line count of $out/FILE, FILE
	n=$((n + 1))
	got=$(wc -l <"$out/$3")
	if [ "$got" = "$2" ]; then
		echo "ok $n - $1"
	else
		sed 's/^/# /' "$out/$3" | tail -10
		echo "not ok $n - $1 ($got lines, expected $2)"
	fi
}

grep_out() { # name, fixed string, FILE
	n=$((n + 1))
	if grep -qxF -- "$2" "$out/$3"; then
		echo "ok $n - $1"
	else
		sed 's/^/# /' "$out/$3" | tail -10
		echo "not ok $n - $1"
	fi
}

echo "1..22"
t "topology --help exits 0" 0 "$ctl" topology --help
grep_out "help shows the usage line" "usage: nelssactl topology [DEV] [--json]" stdout
t "nelssactl --help lists topology" 0 "$ctl" --help
n=$((n + 1))
if grep -q "^  topology \[DEV\]" "$out/stdout"; then echo "ok $n - topology in the command list"; else
	echo "not ok $n - topology in the command list"; fi
t "topology with two DEVs is a usage error" 2 "$ctl" topology /dev/nelssa_pnm0 mem0
t "topology with an unknown option is a usage error" 2 "$ctl" topology --frob

# This machine: built with libcxl, and no CXL bus -- or say why not.
"$ctl" topology >"$out/stdout" 2>"$out/stderr"
rc=$?
why=""
if [ $rc = 1 ] && grep -q "built without libcxl" "$out/stderr"; then
	why="this nelssactl was built without libcxl (libcxl-dev, libdaxctl-dev)"
elif [ -n "$(ls /sys/bus/cxl/devices 2>/dev/null)" ]; then
	why="this machine has a CXL bus (the CXL guest covers it)"
fi
if [ -n "$why" ]; then
	while [ $n -lt 16 ]; do
		n=$((n + 1))
		echo "ok $n - no-CXL-bus checks # SKIP $why"
	done
else
	t "topology exits 0 on a machine with no CXL bus" 0 "$ctl" topology
	grep_out "... and says so" "no CXL bus on this machine" stdout
	lines "... in one line" 1 stdout
	lines "... with nothing on stderr" 0 stderr
	t "topology DEV with no CXL bus still exits 0" 0 "$ctl" topology /dev/nelssa_pnm0
	lines "... in one line" 1 stdout
	t "topology --json exits 0" 0 "$ctl" topology --json
	json_check "JSON says there is no CXL bus" \
		"j == {'cxl_bus': False, 'message': 'no CXL bus on this machine', 'buses': [], 'devices': []}"
	t "--json before the command" 0 "$ctl" --json topology mem0
	json_check "... the same JSON" "j['cxl_bus'] is False and j['devices'] == []"
fi

# Built without libcxl: the command exists and fails in one line.
if [ -n "$nocxl" ]; then
	t "without libcxl: topology exits 1" 1 "$nocxl" topology
	lines "... with one line on stderr" 1 stderr
	grep_out "... saying why" \
		"nelssactl topology: not available: nelssactl was built without libcxl (install libcxl-dev and libdaxctl-dev, then rebuild)" stderr
	t "without libcxl: topology --help still exits 0" 0 "$nocxl" topology --help
	t "without libcxl: the rest of nelssactl works (--version)" 0 "$nocxl" --version
	lines "... nothing else" 0 stderr
else
	while [ $n -lt 22 ]; do
		n=$((n + 1))
		echo "ok $n - build without libcxl # SKIP no NELSSACTL-NOCXL given"
	done
fi
