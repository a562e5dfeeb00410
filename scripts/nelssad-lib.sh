# SPDX-License-Identifier: MIT
#
# Sourced by the scripts and tests that run nelssad: start one on a free
# port and wait until it listens.
#
#   nelssad_start NELSSAD LOG PORTFILE [nelssad options]
#
# Starts NELSSAD --listen 127.0.0.1:0 --port-file PORTFILE [options] in the
# background with its output in LOG, sets $pid, and waits up to 10 s for
# the port file; returns 1 (the daemon's log is in LOG) when it never
# appears.  The port is then in $port.

nelssad_start() {
	_bin=$1 _log=$2 _pf=$3
	shift 3
	rm -f "$_pf"
	"$_bin" --listen 127.0.0.1:0 --port-file "$_pf" "$@" >"$_log" 2>&1 &
	pid=$!
	_i=0
	while [ ! -s "$_pf" ] && [ $_i -lt 200 ] && kill -0 $pid 2>/dev/null; do
		sleep 0.05
		_i=$((_i + 1))
	done
	port=$(cat "$_pf" 2>/dev/null)
	[ -n "$port" ]
}
