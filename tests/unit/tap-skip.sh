#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Runs a cmocka suite and passes its TAP on with each skipped test written
# "ok N # SKIP": cmocka 1.1 writes "not ok N # SKIP", which TAP readers
# such as meson count as a failure (an AVX2-only host listed fw_kernels as
# FAIL for its skipped AVX-512 cases).  The suite's exit status is kept.
#
#   tap-skip.sh SUITE [ARGS...]
status=$(mktemp) || exit 1
trap 'rm -f "$status"' EXIT
{
	"$@"
	echo $? >"$status"
} | sed -u 's/^not ok \([0-9][0-9]*\) # SKIP/ok \1 # SKIP/'
exit "$(cat "$status")"
