# SPDX-License-Identifier: MIT
#
# TAP helpers shared by the tool tests; sourced, with $out a scratch
# directory and $n the subtest counter.
#
# t NAME EXPECTED-STATUS COMMAND...   runs COMMAND, stdout to $out/stdout
# json_check NAME EXPRESSION          a python3 expression over the last
#                                     stdout, parsed as "j" (and whatever
#                                     $JSON_PRELUDE binds from it)

t() {
	name=$1 want=$2
	shift 2
	n=$((n + 1))
	"$@" >"$out/stdout" 2>"$out/stderr"
	got=$?
	if [ "$got" = "$want" ]; then
		echo "ok $n - $name"
	else
		sed 's/^/# /' "$out/stdout" "$out/stderr" | tail -20
		echo "not ok $n - $name (exit $got, expected $want)"
	fi
}

json_check() {
	n=$((n + 1))
	if python3 -c "import json,sys; j=json.load(open('$out/stdout')); ${JSON_PRELUDE:-pass}; sys.exit(0 if ($2) else 1)" \
		2>"$out/py"; then
		echo "ok $n - $1"
	else
		sed 's/^/# /' "$out/stdout" "$out/py" | tail -20
		echo "not ok $n - $1"
	fi
}
