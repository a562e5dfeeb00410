#!/bin/sh
# SPDX-License-Identifier: MIT
#
# 'nelssactl topology' against 'cxl list' in a QEMU TCG guest with CXL
# emulation (one boot, Debian's kernel): a q35 machine with cxl=on, one
# pxb-cxl host bridge with two cxl-rp root ports, a cxl-type3 memdev on the
# first and a NELSSA card (ivshmem-doorbell + nelssa-devemu, bound by
# nelssa_pnm) on the second, and a CXL fixed memory window.  The guest
# (topology-init) prints what both tools say before and after a pmem region
# and a device-dax namespace are made; topology-compare.py checks them
# object by object.  QEMU 7.2 has no type-2 device: see
# Documentation/testing.rst for what this can and cannot show.
#
#   topology.sh SRCDIR OUTDIR NELSSACTL NELSSA-DEVEMU
set -u

src=${1:?usage: topology.sh SRCDIR OUTDIR NELSSACTL NELSSA-DEVEMU}
out=${2:?usage: topology.sh SRCDIR OUTDIR NELSSACTL NELSSA-DEVEMU}
ctl=${3:?usage: topology.sh SRCDIR OUTDIR NELSSACTL NELSSA-DEVEMU}
devemu=${4:?usage: topology.sh SRCDIR OUTDIR NELSSACTL NELSSA-DEVEMU}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/topology.log"
: >"$log"

skip() {
	echo "1..1"
	echo "ok 1 - CXL topology guest # SKIP $1"
	exit 0
}
die() {
	echo "1..1"
	sed 's/^/# /' "$log" | tail -30
	echo "not ok 1 - CXL topology guest: $1"
	exit 1
}

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86 not installed"
[ -x /bin/busybox ] || skip "busybox-static not installed"
command -v cpio >/dev/null || skip "cpio not installed"
command -v python3 >/dev/null || skip "python3 not installed"
command -v ss >/dev/null || skip "iproute2 (ss) not installed"
for t in cxl ndctl daxctl; do
	command -v $t >/dev/null || skip "$t not installed (Debian packages cxl-cli... ndctl, daxctl)"
done
"$ctl" topology >"$out/host.txt" 2>&1
[ $? = 1 ] && grep -q "built without libcxl" "$out/host.txt" &&
	skip "nelssactl was built without libcxl (libcxl-dev, libdaxctl-dev)"

# 1. Debian's kernel image, extracted (never installed), as rig.sh does;
#    of its modules only the CXL, nvdimm and dax drivers are kept (the
#    image is the last file moved in: its presence means the rest is).
kdir=$("$src/scripts/kdir.sh" 2>/dev/null) || skip "no kernel headers (linux-headers-amd64)"
kv=$(basename "$kdir" | sed 's/^linux-headers-//')
kroot="$out/kroot-$kv"
image=$kroot/boot/vmlinuz-$kv
if [ ! -f "$image" ]; then
	rm -rf "$kroot" "$out/image"
	mkdir -p "$out/image"
	if ! (cd "$out/image" && apt-get download "linux-image-$kv") >>"$log" 2>&1; then
		[ "$(id -u)" = 0 ] && apt-get update -q >>"$log" 2>&1
		(cd "$out/image" && apt-get download "linux-image-$kv") >>"$log" 2>&1 ||
			skip "cannot download linux-image-$kv (apt-get download)"
	fi
	x="$out/image/x"
	dpkg-deb -x "$out"/image/linux-image-"$kv"_*.deb "$x" >>"$log" 2>&1 ||
		die "dpkg-deb -x linux-image-$kv"
	mkdir -p "$kroot/boot" "$kroot/lib/modules/$kv/kernel/drivers"
	for d in cxl dax nvdimm; do
		mv "$x/lib/modules/$kv/kernel/drivers/$d" "$kroot/lib/modules/$kv/kernel/drivers/" ||
			die "linux-image-$kv has no drivers/$d"
	done
	mv "$x/lib/modules/$kv"/modules.order "$x/lib/modules/$kv"/modules.builtin \
		"$x/lib/modules/$kv"/modules.builtin.modinfo "$kroot/lib/modules/$kv/" &&
		mv "$x/boot/config-$kv" "$kroot/boot/" && mv "$x/boot/vmlinuz-$kv" "$image" ||
		die "linux-image-$kv: unexpected layout"
	rm -rf "$out/image"
fi
for opt in CXL_BUS CXL_ACPI CXL_PCI CXL_MEM CXL_PMEM CXL_REGION DEV_DAX DEV_DAX_PMEM; do
	grep -Eq "^CONFIG_$opt=(y|m)" "$kroot/boot/config-$kv" ||
		skip "Debian's kernel $kv has no CONFIG_$opt"
done

# 2. The module, built in a copy of the tree.
rm -rf "$out/ktree"
mkdir -p "$out/ktree/tests"
(cd "$src" && cp -r Kbuild uapi driver scripts "$out/ktree/" && cp -r tests/kabi "$out/ktree/tests/")
"$src/scripts/kernel-probe.sh" "$kdir" "$out/ktree" >>"$log" 2>&1 || die "feature probes"
make -C "$kdir" M="$out/ktree" modules >>"$log" 2>&1 || die "module build"

# 3. Initramfs: busybox, the CXL/nvdimm/dax modules, nelssa_pnm, the
#    ndctl tools and nelssactl with the libraries they load.
root="$out/root"
rm -rf "$root"
mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/proc" "$root/sys" "$root/dev" \
	"$root/tmp" "$root/run" "$root/opt" "$root/lib/modules/$kv/kernel/drivers"
cp /bin/busybox "$root/bin/busybox"
for a in sh mount insmod modprobe ls cat cut sed grep readlink basename dmesg dd printf \
	poweroff echo; do
	ln -sf busybox "$root/bin/$a"
done
ln -sf ../bin/busybox "$root/sbin/modprobe"
kmods=$kroot/lib/modules/$kv
for d in cxl dax nvdimm; do
	cp -r "$kmods/kernel/drivers/$d" "$root/lib/modules/$kv/kernel/drivers/"
done
cp "$kmods"/modules.order "$kmods"/modules.builtin "$kmods"/modules.builtin.modinfo \
	"$root/lib/modules/$kv/"
depmod -b "$root" "$kv" >>"$log" 2>&1 || die "depmod"
cp "$out/ktree/driver/nelssa_pnm.ko" "$root/lib/modules/"
cp "$(command -v cxl)" "$(command -v ndctl)" "$(command -v daxctl)" "$root/usr/bin/"
cp "$ctl" "$root/opt/nelssactl"
# shellcheck source=guest-libs.sh
. "$src/tests/qemu/guest-libs.sh"
# ldd on the build's own nelssactl: its RUNPATH finds the NELSSA libraries.
copy_libs "$root" "$ctl" "$(command -v cxl)" "$(command -v ndctl)" "$(command -v daxctl)"
cp "$src/tests/qemu/topology-init" "$root/init"
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$out/initramfs.gz") ||
	die "initramfs"

# 4. The card's firmware: one nelssa-devemu, listening before QEMU starts
#    (QEMU reads the ivshmem setup messages while it realizes the device).
sock="$out/devemu.sock"
rm -f "$sock"
"$devemu" --socket "$sock" --mem 64M --cores 1 2>"$out/devemu.log" &
devemu_pid=$!
# A bounded wait on a state, not a margin: the socket is in LISTEN.
for _ in $(seq 1 200); do
	ss -xlnH | grep -qF " $sock " && break
	kill -0 $devemu_pid 2>/dev/null || break
	sleep 0.05
done
ss -xlnH | grep -qF " $sock " || { kill $devemu_pid 2>/dev/null; die "nelssa-devemu did not listen"; }

# 5. Boot.  Exit code 1 = isa-debug-exit with 0 failures; 0 = panic; 124 = hang.
#    The memdev's backing files are sparse.
rm -f "$out/cxl-mem0" "$out/cxl-lsa0"
truncate -s 256M "$out/cxl-mem0" "$out/cxl-lsa0"
timeout 600 qemu-system-x86_64 -machine q35,cxl=on -accel tcg -cpu max -m 1G -smp 2 \
	-nographic -no-reboot -nic none -kernel "$image" -initrd "$out/initramfs.gz" \
	-append "console=ttyS0 panic=-1 quiet" \
	-object memory-backend-file,id=cxl-mem0,share=on,mem-path="$out/cxl-mem0",size=256M \
	-object memory-backend-file,id=cxl-lsa0,share=on,mem-path="$out/cxl-lsa0",size=256M \
	-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 \
	-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2 \
	-device cxl-rp,port=1,bus=cxl.1,id=rp1,chassis=0,slot=3 \
	-device cxl-type3,bus=rp0,memdev=cxl-mem0,lsa=cxl-lsa0,id=cxl-pmem0 \
	-chardev socket,path="$sock",id=ivs0 \
	-device ivshmem-doorbell,chardev=ivs0,vectors=1,bus=rp1 \
	-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G \
	-device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null >"$out/serial.log" 2>&1
rc=$?
kill $devemu_pid 2>/dev/null
wait
rm -f "$out/cxl-mem0" "$out/cxl-lsa0"

# 6. The blocks the guest printed, one file each, then TAP: the guest's
#    own checks, the comparisons, the verdict.
rm -rf "$out/blocks"
mkdir -p "$out/blocks"
tr -d '\r' <"$out/serial.log" | awk -v dir="$out/blocks" '
	/^TOPO-BEGIN / { f = dir "/" $2; printf "" > f; next }
	/^TOPO-END / { close(f); f = ""; next }
	f != "" && /^TOPO: / { sub(/^TOPO: /, ""); print >> f; next }
	f != "" && /^TOPO:$/ { print "" >> f }'
python3 "$src/tests/qemu/topology-compare.py" "$out/blocks" >"$out/compare.tap" 2>&1
tr -d '\r' <"$out/serial.log" | awk -v rc="$rc" -v cmp="$out/compare.tap" '
	/^RIG: (ok|not ok) / { sub(/^RIG: /, ""); st[++n] = (/^not ok/ ? 1 : 0);
			       sub(/^(not )?ok [0-9]+ - /, ""); line[n] = $0; next }
	/^RIG: # / { sub(/^RIG: /, ""); diag[n] = diag[n] $0 "\n"; next }
	/^RESULT: fails=/ { result = $0 }
	END {
		while ((getline l < cmp) > 0) {
			if (l ~ /^(not )?ok - /) {
				st[++n] = (l ~ /^not ok/); sub(/^(not )?ok - /, "", l); line[n] = l
			} else {
				diag[n] = diag[n] l "\n"
			}
		}
		verdict = (rc == 1 && result == "RESULT: fails=0");
		printf "1..%d\n", n + 1;
		printf "%s", diag[0];
		for (i = 1; i <= n; i++) {
			printf "%sok %d - %s\n", st[i] ? "not " : "", i, line[i];
			printf "%s", diag[i];
		}
		printf "%sok %d - guest exit code %d, %s\n", verdict ? "" : "not ", n + 1, rc,
		       result == "" ? "no RESULT line" : result;
	}'
[ "$rc" = 1 ] && grep -q "RESULT: fails=0" "$out/serial.log" && ! grep -q "^not ok" "$out/compare.tap"
