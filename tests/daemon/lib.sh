# SPDX-License-Identifier: MIT
#
# Sourced by every check-*.sh here, right after its arguments: what each
# of them starts with.  $out a scratch directory and $n the subtest count
# (tests/tools/tap-lib.sh); $pid the daemon nelssad_start() runs, killed
# on exit, when $out goes -- a test with more to clean up sets its own
# trap after this; UCX quiet, and its TCP ports reusable at once, daemon
# after daemon.

# UCX 1.13's own small leaks per endpoint pair (tests/fuzz/fuzz_daemon.lsan
# says which): only allocations made inside libucs/libuct are suppressed.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/../fuzz/fuzz_daemon.lsan:print_suppressions=0}"

out=$(mktemp -d)
pid=
n=0
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$out"' EXIT

# shellcheck source=../tools/tap-lib.sh
. "$(dirname "$0")/../tools/tap-lib.sh"
# shellcheck source=../../scripts/nelssad-lib.sh
. "$(dirname "$0")/../../scripts/nelssad-lib.sh"

export UCX_LOG_LEVEL=fatal UCX_TCP_CM_REUSEADDR=y
