#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T1: nelssad's command line, config files and --devices lists, in
# TAP.  Every bad value, missing value, unreadable path, directory or
# device file must give a clear error (the message is checked) and exit 2,
# promptly (timeout(1) catches a daemon that hangs or spins); good ones
# must start the daemon with what they say.
#
#   check-config.sh NELSSAD SHIPPED_CONF
set -u

nd=${1:?usage: check-config.sh NELSSAD SHIPPED_CONF}
shipped=${2:?}
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

export UCX_TLS=tcp

# refuse NAME MESSAGE ARGS...: exits 2 within 20 s, MESSAGE on stderr.
refuse() {
	name=$1 msg=$2
	shift 2
	n=$((n + 1))
	timeout 20 "$nd" "$@" >"$out/stdout" 2>"$out/stderr" </dev/null
	got=$?
	if [ $got = 2 ] && grep -qF -- "$msg" "$out/stderr"; then
		echo "ok $n - $name: $(head -1 "$out/stderr")"
	else
		sed 's/^/# /' "$out/stderr" | tail -10
		echo "not ok $n - $name (exit $got, expected 2 and '$msg')"
	fi
}

# conf LINE: a config file of a comment and LINE, as $out/c.conf.
conf() {
	printf '# a config file\n%s\n' "$1" >"$out/c.conf"
}

# serves NAME PATTERN... -- ARGS...: the daemon starts with ARGS, its log
# matches every PATTERN, and SIGTERM stops it with exit 0.
serves() {
	name=$1
	shift
	pats=
	while [ "$1" != -- ]; do
		pats="$pats$1
"
		shift
	done
	shift
	n=$((n + 1))
	if ! nelssad_start "$nd" "$out/daemon.log" "$out/port" "$@"; then
		sed 's/^/# /' "$out/daemon.log" | tail -10
		echo "not ok $n - $name (did not start)"
		pid=
		return
	fi
	kill -TERM $pid
	wait $pid
	got=$?
	pid=
	ok=1
	while IFS= read -r p; do
		[ -z "$p" ] || grep -qF -- "$p" "$out/daemon.log" || ok=0
	done <<EOF
$pats
EOF
	if [ $got = 0 ] && [ $ok = 1 ]; then
		echo "ok $n - $name"
	else
		sed 's/^/# /' "$out/daemon.log" | tail -10
		echo "not ok $n - $name (exit $got, or the log lacks: $(echo "$pats" | tr '\n' '|'))"
	fi
}

# The limits (Documentation/tools/nelssad.rst, LIMITS).
limits="max-conns-per-addr max-sessions-per-conn max-requests-per-session max-memory-per-conn
hello-timeout-ms frame-timeout-ms max-unread-kib idle-timeout-ms admin-addr"

echo "1..89"

# A value option without a value, in a config file: named with file and line.
for opt in listen max-sessions max-conns data-port port-file devices sim-opts $limits; do
	conf "$opt ="
	refuse "config '$opt =' refused" "c.conf:2: $opt: needs a value" --config "$out/c.conf"
done
conf "listen"
refuse "config 'listen' alone refused" "c.conf:2: listen: needs a value" --config "$out/c.conf"
conf "max-sessions"
refuse "config 'max-sessions' alone refused" "c.conf:2: max-sessions: needs a value" \
	--config "$out/c.conf"
conf "busy-poll = maybe"
refuse "config 'busy-poll = maybe' refused" "c.conf:2: busy-poll: 'maybe': need yes or no" \
	--config "$out/c.conf"
conf "busy-poll ="
refuse "config 'busy-poll =' refused" "c.conf:2: busy-poll: needs yes or no" --config "$out/c.conf"
conf "max-conns = 0"
refuse "config 'max-conns = 0' refused" "c.conf:2: max-conns: '0': need 1..100000" \
	--config "$out/c.conf"
conf "listen = nowhere"
refuse "config 'listen = nowhere' refused" "c.conf:2: listen: 'nowhere': need HOST:PORT" \
	--config "$out/c.conf"
conf "config = /etc/passwd"
refuse "config 'config =' refused" "c.conf:2: config: only on the command line" \
	--config "$out/c.conf"
conf "no-such-option = 1"
refuse "config with an unknown option refused" "c.conf:2: unknown option 'no-such-option'" \
	--config "$out/c.conf"
# The = form on the command line is read, not ignored.
conf "listen ="
refuse "--config=FILE is read" "c.conf:2: listen: needs a value" --config="$out/c.conf"

# The same on the command line.
refuse "--listen without a value refused" "--listen: needs a value" --listen
refuse "--listen= refused" "--listen: needs a value" --listen=
refuse "--max-sessions=0 refused" "--max-sessions: '0': need 1..100000" --max-sessions=0
refuse "--verbose=maybe refused" "--verbose: 'maybe': need yes or no" --verbose=maybe
refuse "--config without a value refused" "--config: needs a value" --config
refuse "--config given twice refused" "--config: given twice" --config "$shipped" \
	--config="$shipped"
refuse "a stray argument refused" "unexpected argument 'stray'" stray
refuse "--data-port 65536 refused" "--data-port: '65536': need 0..65535" --data-port 65536
refuse "--data-port=any refused" "--data-port: 'any': need 0..65535" --data-port=any
# A fixed data port is the UCX listener's (a port free a moment ago).
dport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
serves "--data-port $dport: the UCX listener on it" "data path: UCX listening on port $dport" -- \
	--sim-opts mem=1M --data-port "$dport"

# The limits: each without a value, out of range, malformed.
for opt in $limits; do
	refuse "--$opt without a value refused" "--$opt: needs a value" --$opt
done
refuse "--max-conns-per-addr=0 refused" "--max-conns-per-addr: '0': need 1..100000" \
	--max-conns-per-addr=0
refuse "--max-sessions-per-conn 100001 refused" \
	"--max-sessions-per-conn: '100001': need 1..100000" --max-sessions-per-conn 100001
refuse "--max-requests-per-session=many refused" \
	"--max-requests-per-session: 'many': need 1..1000000" --max-requests-per-session=many
refuse "--hello-timeout-ms=0 refused" "--hello-timeout-ms: '0': need 1..3600000" \
	--hello-timeout-ms=0
refuse "--frame-timeout-ms 3600001 refused" "--frame-timeout-ms: '3600001': need 1..3600000" \
	--frame-timeout-ms 3600001
refuse "--max-unread-kib 15 refused" "--max-unread-kib: '15': need 16..65536" \
	--max-unread-kib 15
refuse "--idle-timeout-ms=-1 refused" "--idle-timeout-ms: '-1': need 0..86400000" \
	--idle-timeout-ms=-1
for bad in 0 0% 101% 12X 8GB -1 %; do
	refuse "--max-memory-per-conn=$bad refused" \
		"--max-memory-per-conn: '$bad': need a size (512M, 8G) or a percentage" \
		--max-memory-per-conn=$bad
done
refuse "--admin-addr=localhost refused (numeric only)" \
	"--admin-addr: 'localhost' is not a numeric IPv4 or IPv6 address" --admin-addr=localhost
refuse "--admin-addr with an empty entry refused" "--admin-addr: '' is not a numeric" \
	--admin-addr=127.0.0.1,,::1
refuse "--admin-addr of 17 addresses refused" "--admin-addr: more than 16 addresses" \
	--admin-addr="$(i=1; while [ $i -le 17 ]; do printf '10.0.0.%d,' $i; i=$((i + 1)); done)10.0.1.1"
conf "max-memory-per-conn = 150%"
refuse "config 'max-memory-per-conn = 150%' refused" \
	"c.conf:2: max-memory-per-conn: '150%': need a size" --config "$out/c.conf"
conf "idle-timeout-ms = soon"
refuse "config 'idle-timeout-ms = soon' refused" \
	"c.conf:2: idle-timeout-ms: 'soon': need 0..86400000" --config "$out/c.conf"

# --config on what is not a readable regular file of sane size.
refuse "--config on a directory refused" "$out: not a regular file (a directory)" --config "$out"
refuse "--config /dev/zero refused, without reading it" \
	"/dev/zero: not a regular file (a character device)" --config /dev/zero
mkfifo "$out/fifo"
refuse "--config on a FIFO refused, without blocking" "fifo: not a regular file (a FIFO)" \
	--config "$out/fifo"
refuse "--config on a missing file refused" "$out/none: No such file or directory" \
	--config "$out/none"
refuse "--config under a file refused" "$shipped/x: Not a directory" --config "$shipped/x"
truncate -s 2M "$out/big.conf"
refuse "--config on a file over 1 MiB refused" "big.conf: larger than 1 MiB" \
	--config "$out/big.conf"
printf 'devices = sim:1\0\n' >"$out/nul.conf"
refuse "--config on a binary file refused" "nul.conf: holds a NUL byte" --config "$out/nul.conf"
# Unreadable: root reads anything, so as nobody when run as root.
printf 'devices = sim:1\n' >"$out/secret.conf"
chmod 000 "$out/secret.conf"
if [ "$(id -u)" != 0 ]; then
	refuse "--config on an unreadable file refused" "Permission denied" \
		--config "$out/secret.conf"
elif command -v setpriv >/dev/null 2>&1; then
	chmod 711 "$out"
	n=$((n + 1))
	# nobody may not reach the build tree (a clone under a 0700 mktemp
	# directory): the daemon and the NELSSA libraries it loads go beside
	# the file, libnelssa-sim included (loaded from libnelssa's directory).
	mkdir -p "$out/nobody"
	cp "$nd" "$out/nobody/nelssad"
	for l in $(ldd "$nd" | awk '/libnelssa/ { print $3 }'); do
		cp "$l" "$(dirname "$l")"/libnelssa-sim.so.0 "$out/nobody/" 2>/dev/null
	done
	chmod -R a+rX "$out/nobody"
	timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups \
		env LD_LIBRARY_PATH="$out/nobody" "$out/nobody/nelssad" \
		--config "$out/secret.conf" >"$out/stdout" 2>"$out/stderr"
	got=$?
	chmod 700 "$out"
	if [ $got = 2 ] && grep -qF "secret.conf: Permission denied" "$out/stderr"; then
		echo "ok $n - --config on an unreadable file refused: $(head -1 "$out/stderr")"
	else
		sed 's/^/# /' "$out/stderr" | tail -10
		echo "not ok $n - --config on an unreadable file refused (exit $got)"
	fi
else
	echo "ok $((n += 1)) # SKIP root without setpriv: every file is readable"
fi

# Good files: the = form, the command line over the file, the shipped file.
cat >"$out/good.conf" <<CONF
# two small devices, busy-polling
devices = sim:2   # trailing comment
sim-opts = mem=32M
busy-poll
CONF
serves "--config=FILE: its devices, options and switches are used" \
	"device sim:1,mem=32M (sim): 32 MiB" "with 2 device(s), busy-polling" -- \
	--config="$out/good.conf"
serves "the command line overrides the file" "with 1 device(s)" "device sim:0,mem=16M" -- \
	--config "$out/good.conf" --devices=sim:1 --sim-opts=mem=16M --busy-poll=no
t "the command line overrides the file: no busy-poll" 1 grep -q busy-polling "$out/daemon.log"
serves "the shipped config file parses (devices overridden)" "with 1 device(s)" -- \
	--config "$shipped" --devices sim:1 --sim-opts mem=16M
serves "the limits' defaults in force" \
	"limits: 256 connections, 32 per address; 64 sessions, 16 per connection; 1024 requests per session; 100%: 64.0 MiB of device memory per connection; 256 KiB of replies unread; timeouts: HELLO 10000 ms, frame 10000 ms, idle 300000 ms; admin: 127.0.0.1,::1" \
	"file descriptors: limit" -- --devices sim:1 --sim-opts mem=64M
cat >"$out/limits.conf" <<CONF
max-conns = 10
max-conns-per-addr = 2
max-sessions-per-conn = 5
max-requests-per-session = 7
max-memory-per-conn = 25%
hello-timeout-ms = 500
frame-timeout-ms = 700
max-unread-kib = 64
idle-timeout-ms = 0
admin-addr = none
CONF
serves "every limit set from a config file" \
	"limits: 10 connections, 2 per address; 64 sessions, 5 per connection; 7 requests per session; 25%: 16.0 MiB of device memory per connection; 64 KiB of replies unread; timeouts: HELLO 500 ms, frame 700 ms, idle 0 ms; admin: none" \
	-- --config "$out/limits.conf" --devices sim:1 --sim-opts mem=64M
serves "a size for max-memory-per-conn, IPv6 and v4-mapped admin addresses" \
	"20.0 MiB of device memory per connection" "admin: 10.0.0.1,fe80::1" -- \
	--devices sim:1 --sim-opts mem=64M --max-memory-per-conn 20M \
	--admin-addr=::ffff:10.0.0.1,fe80::1

# --devices: a comma starts a device only before sim: or /; no device twice.
serves "--devices sim:0,mem=64M (the documented example) opens one 64 MiB device" \
	"device sim:0,mem=64M (sim): 64 MiB" "with 1 device(s)" -- --devices sim:0,mem=64M
serves "--devices sim:0,mem=64M,cores=1,sim:1,mem=32M: two devices, their own options" \
	"device sim:0,mem=64M,cores=1 (sim): 64 MiB" "device sim:1,mem=32M (sim): 32 MiB" \
	"with 2 device(s)" -- --devices=sim:0,mem=64M,cores=1,sim:1,mem=32M
serves "--sim-opts applies to listed sim devices, their own options win" \
	"(sim): 64 MiB, 1 cores" "device sim:1,mem=16M,cores=1 (sim): 16 MiB" -- \
	--devices sim:0,mem=64M,sim:1 --sim-opts mem=16M,cores=1
refuse "--devices sim:1,sim:1 refused" "names a sim device twice (as sim:1 and as sim:1)" \
	--devices sim:1,sim:1
refuse "--devices sim:0,mem=64M,sim:00 refused (one device number)" "names a sim device twice" \
	--devices sim:0,mem=64M,sim:00
conf "devices = /dev/nelssa_pnm0,/dev/nelssa_pnm0"
refuse "a device path named twice in a config file refused" \
	"c.conf:2: devices: /dev/nelssa_pnm0,/dev/nelssa_pnm0: names a device twice" \
	--config "$out/c.conf"
ln -s /dev/null "$out/null"
t "a device and a link to it refused" 1 "$nd" --devices "/dev/null,$out/null"
if grep -qF "/dev/null and $out/null are the same device" "$out/stderr"; then
	echo "ok $((n += 1)) - ... saying they are the same device"
else
	sed 's/^/# /' "$out/stderr" | tail -5
	echo "not ok $((n += 1)) - ... saying they are the same device"
fi
refuse "--devices with an empty name refused" "an empty device name" --devices sim:0,,sim:1
refuse "--devices ending in a comma refused" "an empty device name" --devices sim:0,
refuse "--devices naming no device kind refused" "'nowhere' is not a device" --devices nowhere
