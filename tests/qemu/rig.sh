#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The QEMU test rig (tiers T2 and T3): builds nelssa_pnm.ko against
# Debian's headers, extracts the matching Debian kernel image (never
# installs it), builds a busybox initramfs with the module and the
# kselftests, "make install"s the tree into it with what Soft-RoCE, UCX and
# udev need (stage-t3.sh), boots it under QEMU TCG, and turns what the
# guest printed into TAP.  Pass needs QEMU's isa-debug-exit code 1 *and*
# "RESULT: fails=0" on the console.
#
#   rig.sh SRCDIR OUTDIR [KERNEL]
#
# KERNEL "debian" (the default) boots Debian's kernel; "debug" (tier
# T2-debug) boots the KASAN/lockdep/kmemleak kernel debug-kernel.sh builds
# from linux-source-6.1 (cached outside the clone), with the module built
# against that kernel's tree.  That kernel is trimmed to what the driver's
# suites need: the guest skips tier T3 and the installed-tree tests there,
# saying so, and fails on any report of the checkers.
set -u

src=${1:?usage: rig.sh SRCDIR OUTDIR [debian|debug]}
out=${2:?usage: rig.sh SRCDIR OUTDIR [debian|debug]}
kernel=${3:-debian}
case "$kernel" in
debian | debug) ;;
*) echo "rig.sh: unknown kernel '$kernel' (debian, debug)" >&2; exit 2 ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/rig.log"
: >"$log"

skip() {
	echo "1..1"
	echo "ok 1 - QEMU rig # SKIP $1"
	exit 0
}
die() {
	echo "1..1"
	sed 's/^/# /' "$log" | tail -30
	echo "not ok 1 - QEMU rig: $1"
	exit 1
}

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86 not installed"
[ -x /bin/busybox ] || skip "busybox-static not installed"
command -v cpio >/dev/null || skip "cpio not installed"
[ -f /usr/lib/x86_64-linux-gnu/liburing.a ] || skip "liburing-dev not installed"

# 1. The kernel: Debian's image, extracted (not installed) once per
#    version, or the debug kernel, built once per configuration.
if [ "$kernel" = debug ]; then
	# Progress on stderr: a cold build takes a quarter of an hour.
	entry=$(sh "$src/tests/qemu/debug-kernel.sh")
	case $? in
	0) ;;
	2) skip "cannot build the debug kernel: $entry" ;;
	*) die "building the debug kernel (tests/qemu/debug-kernel.sh)" ;;
	esac
	kdir=$entry/build
	kv=$(cat "$entry/kernel.release")
	image=$entry/bzImage
	echo "debug kernel $kv from $entry" >>"$log"
else
	kdir=$("$src/scripts/kdir.sh" 2>/dev/null) || skip "no kernel headers (linux-headers-amd64)"
	kv=$(basename "$kdir" | sed 's/^linux-headers-//')
	kroot="$out/kroot-$kv"
	image=$kroot/boot/vmlinuz-$kv
fi
if [ "$kernel" = debian ] && [ ! -f "$image" ]; then
	rm -rf "$kroot" "$out/image"
	mkdir -p "$out/image"
	# A fresh machine may have empty package lists: refresh once (root only).
	if ! (cd "$out/image" && apt-get download "linux-image-$kv") >>"$log" 2>&1; then
		[ "$(id -u)" = 0 ] && apt-get update -q >>"$log" 2>&1
		(cd "$out/image" && apt-get download "linux-image-$kv") >>"$log" 2>&1 ||
			skip "cannot download linux-image-$kv (apt-get download)"
	fi
	dpkg-deb -x "$out"/image/linux-image-"$kv"_*.deb "$kroot" >>"$log" 2>&1 ||
		die "dpkg-deb -x linux-image-$kv"
fi

# 2. The module, built in a copy of the tree.
rm -rf "$out/ktree"
mkdir -p "$out/ktree/tests"
(cd "$src" && cp -r Kbuild uapi driver scripts "$out/ktree/" && cp -r tests/kabi "$out/ktree/tests/")
"$src/scripts/kernel-probe.sh" "$kdir" "$out/ktree" >>"$log" 2>&1 || die "feature probes"
make -C "$kdir" M="$out/ktree" modules >>"$log" 2>&1 || die "module build"

# 3. The kselftests, static, with Debian's kselftest harness.
"$src/scripts/linux-source.sh" "$out/linux-source" >>"$log" 2>&1 || skip "no linux-source-6.1"
rm -rf "$out/root"
mkdir -p "$out/root/bin" "$out/root/sbin" "$out/root/proc" "$out/root/sys" "$out/root/dev" \
	"$out/root/tmp" "$out/root/lib/modules" "$out/root/opt/tests"
for t in "$src"/tests/kselftest/nelssa_pnm/*_test.c; do
	name=$(basename "$t" .c)
	libs=""
	case "$name" in
	uring_test | unplug_test | tenant_test) libs=-luring ;;
	attn_test) libs="-luring -lm" ;;
	esac
	gcc -O2 -static -Wall -Werror -I"$src/uapi" \
		-I"$out/linux-source/tools/testing/selftests" -I"$src/tests/kselftest/nelssa_pnm" \
		"$t" -o "$out/root/opt/tests/$name" $libs >>"$log" 2>&1 || die "build $name"
done

# 4. The runtime's own PNM tests and nelssactl, to run on the kernel backend:
#    a release build of the tree (no sanitizers), with their shared libraries.
if [ ! -f "$out/guest-build/build.ninja" ]; then
	meson setup "$out/guest-build" "$src" --buildtype=release -Dcuda=disabled >>"$log" 2>&1 ||
		die "meson setup of the guest build"
fi
ninja -C "$out/guest-build" tests/unit/test_pnm_sim tools/nelssactl/nelssactl \
	firmware/devemu/nelssa-devemu lib/libnelssa-sim.so.0.1.0 >>"$log" 2>&1 ||
	die "guest build of test_pnm_sim, nelssactl and nelssa-devemu"
mkdir -p "$out/root/opt/host" "$out/root/lib/x86_64-linux-gnu" "$out/root/lib64"
cp "$out/guest-build/tests/unit/test_pnm_sim" "$out/root/opt/host/pnm_kdev"
cp "$out/guest-build/tools/nelssactl/nelssactl" "$out/root/opt/host/nelssactl"
# shellcheck source=guest-libs.sh
. "$src/tests/qemu/guest-libs.sh"
# ldd on the build's own files: their RUNPATH ($ORIGIN/../../lib) finds
# the NELSSA libraries there, not from the copies in the root.
copy_libs "$out/root" "$out/guest-build/tests/unit/test_pnm_sim" \
	"$out/guest-build/tools/nelssactl/nelssactl"
# libnelssa loads it on a sim: device, beside itself: ldd cannot see it.
cp -L "$out/guest-build/lib/libnelssa-sim.so.0" "$out/root/lib/x86_64-linux-gnu/"

# 5. Initramfs: busybox, the module, the tests, /init.
cp /bin/busybox "$out/root/bin/busybox"
for a in sh mount umount insmod rmmod lsmod cat cut sed grep awk dmesg stat dd printf sleep \
	basename poweroff echo ls ip netstat su taskset timeout kill pidof tr head tail wc id ps \
	seq sort uname env mkfifo; do
	ln -sf busybox "$out/root/bin/$a"
done
ln -sf ../bin/busybox "$out/root/sbin/modprobe"
cp "$out/ktree/driver/nelssa_pnm.ko" "$out/root/lib/modules/"
# The device-dax carve-out: device_dax gives /dev/daxX.Y, kmem makes it
# System RAM (Debian builds both as modules, the debug kernel builds them
# in, and then says so for daxctl's libkmod); daxctl reconfigures it.
mkdir -p "$out/root/lib/modules/$kv"
if [ "$kernel" = debian ]; then
	copy_modules "$out/root" "$kroot" "$kv" device_dax kmem 2>>"$log"
else
	printf 'kernel/drivers/dax/device_dax.ko\nkernel/drivers/dax/kmem.ko\n' \
		>"$out/root/lib/modules/$kv/modules.builtin"
	: >"$out/root/lib/modules/$kv/modules.order"
fi
depmod -b "$out/root" "$kv" >>"$log" 2>&1 || die "depmod over the guest root"
if command -v daxctl >/dev/null; then
	cp "$(command -v daxctl)" "$out/root/bin/daxctl"
	copy_libs "$out/root" "$out/root/bin/daxctl"
fi
cp "$src/tests/qemu/init" "$out/root/init"
# Tier T3 and the install tests: make install into this root, Soft-RoCE,
# UCX, udev, perftest (stage-t3.sh says what and why).  The debug kernel
# has no networking (udevd's uevents, Soft-RoCE) and no modules but ours:
# there the guest's two steps only report why they do not run.
if [ "$kernel" = debian ]; then
	sh "$src/tests/qemu/stage-t3.sh" "$src" "$out" "$kdir" "$kroot" >>"$log" 2>&1 ||
		die "staging tier T3 and the install tests (stage-t3.sh)"
else
	mkdir -p "$out/root/opt/t3"
	why="the trimmed debug kernel has no networking (udevd, Soft-RoCE) and no Debian modules;"
	why="$why it runs on Debian's kernel (kselftest-qemu)"
	for t in t3-install t3-rdma; do
		printf '#!/bin/sh\necho "RIG: ok 0 - %s # SKIP %s"\n' "$t" "$why" >"$out/root/opt/t3/$t.sh"
	done
fi
chmod +x "$out/root/init"
(cd "$out/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$out/initramfs.gz") ||
	die "initramfs"

# 6. The emulated cards: one nelssa-devemu per ivshmem-doorbell device.  Two
#    healthy ones (64M, 128M), one per injected fault (32M stall, 16M
#    corrupt, 8M firmware death, 4M heartbeat silence) and one (512M) big
#    enough for a device-dax carve-out of a whole memory block (128M); the
#    guest tells them apart by their memory size.
devemu="$out/guest-build/firmware/devemu/nelssa-devemu"
set -- "--mem 64M --cores 2" "--mem 128M --cores 2" "--mem 32M --stall-nth 3" \
	"--mem 16M --corrupt-nth 2" "--mem 8M --hang-nth 2 --restart-after-hang-ms 3000" \
	"--mem 4M --heartbeat-stop-ms 3000" "--mem 512M --cores 2"
devemu_pids=""
qemu_devs=""
i=0
for opts in "$@"; do
	rm -f "$out/devemu$i.sock"
	# shellcheck disable=SC2086 # the options are words
	"$devemu" --socket "$out/devemu$i.sock" $opts 2>"$out/devemu$i.log" &
	devemu_pids="$devemu_pids $!"
	qemu_devs="$qemu_devs -chardev socket,path=$out/devemu$i.sock,id=ivs$i"
	qemu_devs="$qemu_devs -device ivshmem-doorbell,chardev=ivs$i,vectors=1"
	i=$((i + 1))
done
for s in $(seq 0 $((i - 1))); do
	for t in $(seq 1 100); do
		[ -S "$out/devemu$s.sock" ] && break
		sleep 0.05
	done
	[ -S "$out/devemu$s.sock" ] || die "nelssa-devemu $s did not start (see devemu$s.log)"
done

# 7. Boot.  Exit code 1 = isa-debug-exit with 0 failures; 0 = panic; 124 = hang.
#    The debug kernel runs several times slower under TCG; it prints every
#    KASAN report, not only the first.  Two NUMA nodes: node 1 has neither
#    CPUs nor memory, only the (hotpluggable, SRAT) room maxmem makes, so
#    it is possible but offline until the carve-out goes online there as
#    System RAM.
secs=600 append=""
[ "$kernel" = debug ] && secs=1200 append=" kasan_multi_shot"
timeout $secs qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 2G,slots=1,maxmem=3G \
	-object memory-backend-ram,id=ram0,size=2G -numa node,nodeid=0,cpus=0-1,memdev=ram0 \
	-numa node,nodeid=1 -smp 2 -nographic \
	-no-reboot -nic none -kernel "$image" -initrd "$out/initramfs.gz" \
	-append "console=ttyS0 panic=-1 quiet$append" \
	$qemu_devs \
	-device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null >"$out/serial.log" 2>&1
rc=$?
# shellcheck disable=SC2086
kill $devemu_pids 2>/dev/null
wait

# 8. TAP: the guest's own checks, every kselftest subtest, then the verdict.
tr -d '\r' <"$out/serial.log" | awk -v rc="$rc" '
	/^RIG: (ok|not ok) / { sub(/^RIG: /, ""); st[++n] = (/^not ok/ ? 1 : 0);
			       sub(/^(not )?ok [0-9]+ - /, ""); line[n] = $0; next }
	/^SUITE: / { suite = $2; next }
	/^SUITE-END: / { suite = ""; next }
	suite != "" && /^(not )?ok [0-9]+ / {
		# cmocka writes skips as "not ok N # SKIP name": a skip, not a failure.
		s = $0; bad = (s ~ /^not ok/) && (s !~ /# SKIP/); sub(/^(not )?ok [0-9]+ /, "", s);
		line[++n] = suite ": " s; st[n] = bad; next }
	/^RESULT: fails=/ { result = $0 }
	END {
		verdict = (rc == 1 && result == "RESULT: fails=0");
		printf "1..%d\n", n + 1;
		for (i = 1; i <= n; i++)
			printf "%sok %d - %s\n", st[i] ? "not " : "", i, line[i];
		printf "%sok %d - guest exit code %d, %s\n", verdict ? "" : "not ", n + 1, rc,
		       result == "" ? "no RESULT line" : result;
	}'
# Tier T3's latency line, kept for the record (Documentation/testing.rst).
tr -d '\r' <"$out/serial.log" | sed -n 's/^RIG: # RDMA latency/RDMA latency/p' >"$out/rdma-latency.txt"
[ "$rc" = 1 ] && grep -q "RESULT: fails=0" "$out/serial.log"
