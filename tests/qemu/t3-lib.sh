# SPDX-License-Identifier: MIT
#
# Sourced by the guest-side tier T3 scripts: TAP lines the rig collects
# ("RIG: ok ..."; rig.sh numbers them) and a failure count to exit with.
t3_fails=0

check() { # name, status
	if [ "$2" = 0 ]; then
		echo "RIG: ok 0 - $1"
	else
		echo "RIG: not ok 0 - $1"
		t3_fails=$((t3_fails + 1))
	fi
}

note() { # file: shown as comments
	sed 's/^/RIG: # /' "$1"
}

# The /dev node of the card with @1 MiB of memory (rig.sh sizes them).
card() {
	for d in /sys/class/nelssa_pnm/*; do
		[ "$(cat "$d/mem_total")" = $((($1 - 1) * 1048576)) ] &&
			echo "/dev/$(basename "$d")" && return
	done
}

# Waits up to @2 seconds for a TCP listener on port @1.
wait_listen() {
	_i=0
	while [ $_i -lt $(($2 * 10)) ]; do
		netstat -ltn 2>/dev/null | grep -q ":$1 " && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}
