#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tier T2-debug's kernel: Debian's linux-source-6.1 built with KASAN,
# lockdep (PROVE_LOCKING, PROVE_RCU), DEBUG_ATOMIC_SLEEP, DEBUG_OBJECTS and
# kmemleak, on the trimmed configuration of debug-kernel.config (only what
# the QEMU rig's guest uses), so that a cold build on two cores takes
# minutes, not hours.
#
# The result is cached outside the clone, in
# ${NELSSA_DEBUG_KERNEL_CACHE:-/var/cache/nelssa/debug-kernel}/KEY/ (or
# ~/.cache/nelssa/debug-kernel/KEY/ for a user who cannot write there).
# KEY hashes everything the kernel is made from: the config fragment, the
# source tarball's name, size and date, the compiler's version and the
# recipe version below.  An entry holds
#
#   bzImage         the kernel the guest boots
#   config          its .config
#   kernel.release  its release string (what a module's vermagic says)
#   build/          a tree to build out-of-tree modules against
#                   (make -C build M=DIR): the generated headers, the
#                   built scripts and objtool, Module.symvers, every
#                   Makefile and Kconfig, nothing compiled for vmlinux
#   build.log.gz    the build's output
#
# A flock(1) on the cache's .lock lets one run build while another waits;
# an entry appears (rename) only when it is complete and a module builds
# against it.  The three most recently used entries are kept.
#
#   debug-kernel.sh [--rebuild]
#
# --rebuild (or NELSSA_DEBUG_KERNEL_REBUILD=1) builds again even when the
# entry exists.  Progress goes to stderr.  On success the entry's directory
# is the one line on stdout, exit status 0.  Exit status 2, with the reason
# on stdout, when this machine cannot build a kernel (no linux-source-6.1,
# no compiler or build tools); 1 when the build failed (the log's tail on
# stderr).
set -u

# Bump when the steps below change what an entry holds.
recipe=1

here=$(cd "$(dirname "$0")" && pwd)
fragment=$here/debug-kernel.config
rebuild=${NELSSA_DEBUG_KERNEL_REBUILD:-0}
[ "${1:-}" = --rebuild ] && rebuild=1

say() {
	echo "debug-kernel: $*" >&2
}
cannot() {
	echo "$*"
	exit 2
}
fail() {
	say "$*"
	[ -n "${log:-}" ] && [ -f "$log" ] && say "the whole log: $log"
	exit 1
}

# 1. Can this machine build a kernel at all?
tarball=$(ls /usr/src/linux-source-6.1*.tar.xz 2>/dev/null | sort -V | tail -n 1)
[ -n "$tarball" ] || cannot "no /usr/src/linux-source-6.1.tar.xz (apt-get install linux-source-6.1)"
for c in gcc make flex bison bc perl xz tar cpio gzip flock sha256sum; do
	command -v "$c" >/dev/null 2>&1 || cannot "no $c to build the debug kernel (scripts/deps.sh test installs it)"
done
printf '#include <gelf.h>\n' | gcc -E -x c - >/dev/null 2>&1 ||
	cannot "no libelf headers for objtool (apt-get install libelf-dev)"

# 2. The cache entry for this configuration.
key=$({
	echo "recipe $recipe"
	echo "source $(basename "$tarball") $(stat -c '%s %Y' "$tarball")"
	echo "gcc $(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
	cat "$fragment"
} | sha256sum | cut -c1-16)
cache=${NELSSA_DEBUG_KERNEL_CACHE:-/var/cache/nelssa/debug-kernel}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/nelssa/debug-kernel
	mkdir -p "$cache" || fail "cannot create a cache directory"
fi
entry=$cache/$key

ready() {
	[ -f "$entry/bzImage" ] && [ -f "$entry/build/Module.symvers" ] &&
		[ -f "$entry/kernel.release" ]
}
if [ "$rebuild" != 1 ] && ready; then
	touch "$entry"
	echo "$entry"
	exit 0
fi

# 3. One build at a time on this machine; the one that waited may find
#    the entry made meanwhile.
exec 9>"$cache/.lock"
if ! flock -n 9; then
	say "another run is building a debug kernel; waiting for $cache/.lock"
	flock 9 || fail "cannot lock $cache/.lock"
	if [ "$rebuild" != 1 ] && ready; then
		touch "$entry"
		echo "$entry"
		exit 0
	fi
fi
rm -rf "$cache"/.tmp-*
tmp=$cache/.tmp-$key-$$
pid=""
trap 'rm -rf "$tmp"' EXIT
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; exit 130' INT TERM
mkdir -p "$tmp/entry"
# Outside $tmp, so that a failed build leaves it to read.
log=$cache/build-$key.log
: >"$log"
avail=$(df -Pk "$cache" | awk 'NR == 2 { print $4 }')
[ "${avail:-0}" -ge 4000000 ] ||
	fail "need 4 GB free in $cache to build the debug kernel, have $((${avail:-0} / 1024)) MB"

start=$(date +%s)
elapsed() {
	s=$(($(date +%s) - start))
	printf '%d:%02d' $((s / 60)) $((s % 60))
}
# The kernel's make, with nothing from the caller's environment steering it.
kmake() {
	env -u ARCH -u CROSS_COMPILE -u KBUILD_OUTPUT -u O -u KCONFIG_CONFIG -u CC \
		KBUILD_BUILD_USER=nelssa KBUILD_BUILD_HOST=debug-kernel \
		make -C "$tmp/src" ARCH=x86_64 "$@"
}
last_log() {
	tail -n 30 "$log" | sed 's/^/debug-kernel:   /' >&2
}

say "building $key from $(basename "$tarball") with $(basename "$fragment") into $cache"
say "[1/5] extracting the source ($(elapsed))"
mkdir -p "$tmp/src"
tar -xJf "$tarball" -C "$tmp/src" --strip-components=1 >>"$log" 2>&1 ||
	{ last_log; fail "cannot extract $tarball"; }

say "[2/5] configuring: allnoconfig + the fragment ($(elapsed))"
kmake allnoconfig KCONFIG_ALLCONFIG="$fragment" >>"$log" 2>&1 ||
	{ last_log; fail "make allnoconfig failed"; }
# Kconfig drops, without a word, an option whose dependencies are not met:
# every line of the fragment must be in the result.
missing=$(sed -n 's/^\(CONFIG_[A-Za-z0-9_]*=.*\)$/\1/p; s/^# \(CONFIG_[A-Za-z0-9_]*\) is not set$/\1=n/p' \
	"$fragment" | while IFS= read -r want; do
		sym=${want%%=*}
		case "$want" in
		*=n) grep -q "^$sym=" "$tmp/src/.config" && echo "$want" ;;
		*) grep -qxF "$want" "$tmp/src/.config" || echo "$want" ;;
		esac
	done)
[ -z "$missing" ] || fail "options of $(basename "$fragment") the .config did not take:" $missing

jobs=$(nproc 2>/dev/null || echo 2)
say "[3/5] compiling with $jobs jobs ($(elapsed)); output in $log"
kmake -j"$jobs" all >>"$log" 2>&1 &
pid=$!
# A line a minute: how far it got.
while kill -0 $pid 2>/dev/null; do
	i=0
	while [ $i -lt 60 ] && kill -0 $pid 2>/dev/null; do
		sleep 1
		i=$((i + 1))
	done
	kill -0 $pid 2>/dev/null &&
		say "      $(grep -c '^  CC ' "$log") files compiled ($(elapsed))"
done
wait $pid || { last_log; fail "the kernel build failed"; }

# 4. The entry: the image, the configuration, and a tree for M= builds.
#    What kbuild reads for an external module: every Makefile, Kbuild and
#    Kconfig file, the headers (source and generated), scripts/ with its
#    built host programs, objtool, Module.symvers.
say "[4/5] assembling the entry ($(elapsed))"
e=$tmp/entry
cp "$tmp/src/arch/x86/boot/bzImage" "$e/bzImage" &&
	cp "$tmp/src/.config" "$e/config" &&
	cp "$tmp/src/include/config/kernel.release" "$e/kernel.release" || fail "no bzImage"
(cd "$tmp/src" && {
	find . \( -name 'Makefile*' -o -name 'Kbuild*' -o -name 'Kconfig*' \) -type f
	find include scripts arch/x86/include \( -type f -o -type l \) ! -name '*.o' ! -name '.*.cmd'
	echo .config
	echo Module.symvers
	echo System.map
	echo tools/objtool/objtool
} | cpio -pdm "$e/build" 2>>"$log") || { last_log; fail "cannot copy the build tree"; }

# The proof that the tree is enough: a module built against it.
mkdir -p "$tmp/probe"
cat >"$tmp/probe/probe.c" <<'EOF'
// SPDX-License-Identifier: GPL-2.0-only
#include <linux/module.h>
#include <linux/slab.h>

static int __init probe_init(void)
{
	kfree(kmalloc(8, GFP_KERNEL));
	return 0;
}
module_init(probe_init);
MODULE_LICENSE("GPL");
EOF
echo "obj-m := probe.o" >"$tmp/probe/Kbuild"
env -u ARCH -u CROSS_COMPILE -u KBUILD_OUTPUT make -C "$e/build" M="$tmp/probe" modules \
	>>"$log" 2>&1 && modinfo -F vermagic "$tmp/probe/probe.ko" 2>>"$log" |
	grep -q "^$(cat "$e/kernel.release") " ||
	{ last_log; fail "a module does not build against the assembled tree"; }

# 5. Publish, and keep the three entries used last.
say "[5/5] publishing $entry ($(elapsed))"
{
	echo "key $key, built $(date -u '+%Y-%m-%d %H:%M UTC') in $(elapsed) with $jobs jobs"
	echo "recipe $recipe"
	echo "source $tarball $(stat -c '%s %Y' "$tarball")"
	echo "gcc $(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
	echo "release $(cat "$e/kernel.release")"
} >"$e/info"
gzip -c "$log" >"$e/build.log.gz"
rm -rf "$entry"
mv "$e" "$entry" || fail "cannot move the entry to $entry"
rm -f "$log"
ls -dt "$cache"/*/ 2>/dev/null | tail -n +4 | while read -r old; do
	say "removing the old entry $old"
	rm -rf "$old"
done
say "done in $(elapsed): $(cat "$entry/kernel.release"), $(du -sh "$entry" | cut -f1)"
echo "$entry"
