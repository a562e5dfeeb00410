#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Puts tier T3 (RDMA over Soft-RoCE) and the install tests into the rig's
# guest root.  Called by rig.sh after it built the module, the guest build
# and the root:
#
#   stage-t3.sh SRCDIR OUTDIR KDIR KROOT
#
# What it adds to OUTDIR/root:
#   - "make install" of the tree (DESTDIR = the guest's root, the default
#     PREFIX /usr/local): programs, configs, unit, udev rule, sysusers entry,
#     and the module in lib/modules/KV/updates; depmod over that root, as
#     a real install would run it;
#   - the users and groups systemd-sysusers makes from the installed
#     sysusers.d entry, plus a user "outsider" who is in none of them;
#   - kmod (modprobe, modinfo, depmod), udevd/udevadm from Debian's udev
#     package (extracted, never installed on this machine);
#   - the kernel modules Soft-RoCE needs, with their dependencies;
#   - rdma(8), perftest's ib_send_lat/ib_write_lat, the test clients, and
#     every library these load, including the dlopen()ed ones ldd cannot see
#     (UCX's transport modules, the rxe verbs provider, libgcc_s);
#   - the guest-side scripts under /opt/t3.
set -eu

src=$1 out=$2 kdir=$3 kroot=$4
root=$out/root
kv=$(basename "$kdir" | sed 's/^linux-headers-//')
multi=x86_64-linux-gnu
lib=$root/lib/$multi

# shellcheck source=guest-libs.sh
. "$src/tests/qemu/guest-libs.sh"

# 1. make install into the guest's root, from a copy of the tree (make
#    install builds the module in place) and the rig's own build folder.
rm -rf "$out/install-src"
mkdir -p "$out/install-src"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude='*.o' --exclude='*.ko' \
	--exclude='.*.cmd' -cf - . | tar -C "$out/install-src" -xf -
make -C "$out/install-src" install BUILD="$out/guest-build" KDIR="$kdir" DESTDIR="$root" \
	>"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
[ -f "$root/lib/modules/$kv/updates/nelssa_pnm.ko" ] || {
	echo "make install put no module into lib/modules/$kv/updates"
	exit 1
}

# 2. Users: what systemd-sysusers creates from the installed entry.
mkdir -p "$root/etc"
printf 'root:x:0:0:root:/root:/bin/sh\noutsider:x:1001:1001::/tmp:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\noutsider:x:1001:\n' >"$root/etc/group"
printf 'root:*:1::::::\noutsider:*:1::::::\n' >"$root/etc/shadow"
printf 'root:*::\noutsider:*::\n' >"$root/etc/gshadow"
systemd-sysusers --root="$root" >>"$out/install.log" 2>&1
grep -q '^nelssa:' "$root/etc/group" || { echo "systemd-sysusers made no nelssa group"; exit 1; }

# 3. Kernel modules: Soft-RoCE and what it requests (crc32), a dummy netdev.
copy_modules "$root" "$kroot" "$kv" crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm dummy
depmod -b "$root" "$kv"

# 4. kmod and udev.
mkdir -p "$root/sbin" "$root/lib/systemd" "$root/usr/lib/udev/rules.d" "$root/run"
cp -L "$(command -v kmod)" "$root/bin/kmod"
for a in modprobe modinfo depmod; do
	ln -sf ../bin/kmod "$root/sbin/$a"
done
if [ ! -x "$out/udev/bin/udevadm" ]; then
	rm -rf "$out/udev" "$out/udev-deb"
	mkdir -p "$out/udev-deb"
	if ! (cd "$out/udev-deb" && apt-get download udev) >>"$out/install.log" 2>&1; then
		# A fresh machine may have empty package lists: refresh once (root only).
		[ "$(id -u)" = 0 ] && apt-get update -q >>"$out/install.log" 2>&1
		(cd "$out/udev-deb" && apt-get download udev) >>"$out/install.log" 2>&1 ||
			{ echo "cannot download Debian's udev package (apt-get download udev)"; exit 1; }
	fi
	dpkg-deb -x "$out"/udev-deb/udev_*.deb "$out/udev"
fi
cp -L "$out/udev/bin/udevadm" "$root/bin/udevadm"
ln -sf /bin/udevadm "$root/lib/systemd/systemd-udevd"
copy_libs "$root" "$root/bin/kmod" "$root/bin/udevadm"

# 5. RDMA tools and the clients; the verbs provider and UCX's modules.
mkdir -p "$root/opt/t3" "$root/usr/lib/$multi/libibverbs" "$root/etc/libibverbs.d" "$lib/ucx"
for p in rdma ib_send_lat ib_write_lat; do
	cp -L "$(command -v "$p")" "$root/bin/$p"
done
cp "$out/guest-build/tests/daemon/e2e_client" "$out/guest-build/tests/daemon/carve_out_find" \
	"$root/opt/t3/"
cp -L /usr/lib/$multi/libibverbs/librxe-rdmav34.so "$root/usr/lib/$multi/libibverbs/"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
cp -L /usr/lib/$multi/ucx/libuct_*.so.0 "$lib/ucx/"
cp -L /usr/lib/$multi/libgcc_s.so.1 "$lib/"
# The installed programs load the installed libraries (resolved in the
# root, not copied); the loader finds them through the cache ldconfig
# builds below, as after a real install.
LD_LIBRARY_PATH=$root/usr/local/lib/$multi copy_libs "$root" "$root"/bin/rdma \
	"$root"/bin/ib_*_lat "$root"/opt/t3/e2e_client "$root"/opt/t3/carve_out_find \
	"$root"/usr/local/bin/nelssa-step-bench "$root"/usr/local/bin/nelssa-ingest-bench \
	"$root"/usr/local/sbin/nelssad "$root"/usr/local/bin/nelssactl \
	"$root"/usr/local/lib/$multi/libnelssa*.so.0 \
	"$lib"/ucx/*.so.0 "$root"/usr/lib/$multi/libibverbs/*.so "$lib"/libucs.so.0
for l in "$lib"/libucs_signal.so.0 "$lib"/libnuma.so.1; do
	[ -e "$l" ] || cp -L "/usr/lib/$multi/$(basename "$l")" "$lib/"
done
cp "$src"/tests/qemu/t3-lib.sh "$src"/tests/qemu/t3-install.sh "$src"/tests/qemu/t3-rdma.sh \
	"$root/opt/t3/"

# 6. The loader's cache over the root, with Debian's search path (which
#    names /usr/local/lib/x86_64-linux-gnu, where make install put the
#    shared libraries), as a package's postinst or ldconfig would.
mkdir -p "$root/etc/ld.so.conf.d"
echo 'include /etc/ld.so.conf.d/*.conf' >"$root/etc/ld.so.conf"
cp /etc/ld.so.conf.d/*.conf "$root/etc/ld.so.conf.d/"
ldconfig -r "$root" 2>>"$out/install.log" || { echo "ldconfig -r over the guest root failed"; exit 1; }
