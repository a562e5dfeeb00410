#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Debian packages of this tree, without debhelper: a release build
# installed with prefix /usr into a staging root, split into
#   nelssa           the daemon, the tools, udev rule, systemd unit, configs
#   libnelssa0       the shared libraries (soname 0)
#   libnelssa-dev    headers, .so links, pkg-config files, man(3) pages
#   python3-nelssa   the nelssa Python package
#   nelssa-pnm-dkms  the driver's source for DKMS (built on install, and
#                    again for every new kernel)
# and packed with dpkg-deb.  The .debs land in OUTDIR.
#
#   scripts/build-deb.sh OUTDIR
set -eu

out=$(realpath -m "${1:?usage: build-deb.sh OUTDIR}")
src=$(cd "$(dirname "$0")/.." && pwd)
ver=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$src/meson.build")
arch=$(dpkg --print-architecture)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

echo "build-deb: building $ver for $arch..."
meson setup "$tmp/build" "$src" --prefix=/usr --buildtype=release -Dtests=false \
	-Dcuda=disabled >"$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
ninja -C "$tmp/build" >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; exit 1; }
DESTDIR="$tmp/stage" meson install -C "$tmp/build" --no-rebuild --quiet
s=$tmp/stage
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# move SRC... DEST: paths relative to the staging root into a package root
move() {
	dest=$1
	shift
	for rel in "$@"; do
		[ -e "$s/$rel" ] || continue
		mkdir -p "$dest/$(dirname "$rel")"
		mv "$s/$rel" "$dest/$rel"
	done
}

control() {
	mkdir -p "$1/DEBIAN"
	cat >"$1/DEBIAN/control"
	installed=$(du -sk --exclude=DEBIAN "$1" | cut -f1)
	echo "Installed-Size: $installed" >>"$1/DEBIAN/control"
}

# libnelssa0 and libnelssa-dev first: the man(3) pages are the -dev's.
r=$tmp/lib
# shellcheck disable=SC2046 # the libraries are words
move "$r" $(cd "$s" && ls -d usr/lib/"$multi"/libnelssa*.so.*)
control "$r" <<EOF2
Package: libnelssa0
Version: $ver
Architecture: $arch
Maintainer: NELSSA developers <nelssa@localhost>
Depends: libc6, libucx0 (>= 1.13), liburing2, libcurl4, libjson-c5, libopenblas0
Section: libs
Priority: optional
Description: NELSSA libraries
 libnelssa (numeric core, PNM User Library), libnelssa-sim (the embedded
 sim device, loaded on demand) and libnelssa-client (GPU-node algorithms,
 placement policy and placement across a cluster, the client of nelssad).
EOF2
printf 'activate-noawait ldconfig\n' >"$r/DEBIAN/triggers"

d=$tmp/dev
move "$d" usr/share/man/man3

# python3-nelssa: the extension module and its Python parts.
y=$tmp/python
# shellcheck disable=SC2046 # the directories are words
move "$y" $(cd "$s" && ls -d usr/lib/python3* 2>/dev/null)
if [ -d "$y/usr" ]; then
	control "$y" <<EOF2
Package: python3-nelssa
Version: $ver
Architecture: $arch
Maintainer: NELSSA developers <nelssa@localhost>
Depends: python3 (>= 3.11), libnelssa0 (= $ver)
Recommends: python3-numpy
Suggests: python3-torch, python3-matplotlib
Section: python
Priority: optional
Description: NELSSA for Python: the client of nelssad and the GPU-node algorithms
 The nelssa package: connections, sessions, KV offload and decode steps,
 segmented k-means, centroid Top-K, window attention and merge, on numpy
 arrays and PyTorch CPU tensors; the placement policy; nelssa.serve, a
 split-batch serving engine in PyTorch (python3-torch).
EOF2
fi

# nelssa: programs and system integration.  nelssactl links ndctl's
# libcxl and libdaxctl when the build found them (meson option libcxl).
cxl_deps=""
if readelf -d "$s/usr/bin/nelssactl" 2>/dev/null | grep -q 'NEEDED.*\[libcxl\.so'; then
	cxl_deps=", libcxl1, libdaxctl1"
fi
p=$tmp/nelssa
move "$p" usr/sbin usr/bin usr/share/man etc usr/lib/systemd usr/lib/udev usr/lib/sysusers.d
control "$p" <<EOF2
Package: nelssa
Version: $ver
Architecture: $arch
Maintainer: NELSSA developers <nelssa@localhost>
Depends: libc6, libnelssa0 (= $ver), libucx0 (>= 1.13), libjson-c5, libcurl4, liburing2, adduser$cxl_deps
Recommends: nelssa-pnm-dkms
Suggests: etcd-client
Section: misc
Priority: optional
Description: NELSSA: sparse attention on processing-near-memory devices
 nelssad serves decode-time sparse attention from PNM devices to GPU
 nodes over UCX; nelssactl inspects, tests and benchmarks the devices;
 nelssa-demo, nelssa-sim and the benchmarks come along.
EOF2
printf '/etc/nelssa/nelssad.conf\n/etc/modprobe.d/nelssa-pnm.conf\n' >"$p/DEBIAN/conffiles"
cat >"$p/DEBIAN/postinst" <<'EOF2'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	if command -v systemd-sysusers >/dev/null; then
		systemd-sysusers nelssa.conf
	else
		getent group nelssa >/dev/null || addgroup --system nelssa
		getent passwd nelssad >/dev/null ||
			adduser --system --ingroup nelssa --home /var/lib/nelssad nelssad
	fi
	if command -v udevadm >/dev/null; then
		udevadm control --reload-rules || true
		udevadm trigger --subsystem-match=nelssa_pnm || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
fi
EOF2
chmod 0755 "$p/DEBIAN/postinst"

# libnelssa-dev: everything a program building against the libraries needs.
move "$d" usr/include usr/lib
control "$d" <<EOF2
Package: libnelssa-dev
Version: $ver
Architecture: $arch
Maintainer: NELSSA developers <nelssa@localhost>
Depends: libnelssa0 (= $ver)
Section: libdevel
Priority: optional
Description: NELSSA libraries: headers, .so links, pkg-config files, man pages
 Build against libnelssa (pkg-config nelssa), libnelssa-sim (nelssa-sim)
 and libnelssa-client (nelssa-client).
EOF2

# nelssa-pnm-dkms: the driver's source and dkms.conf.
k=$tmp/dkms
dst=$k/usr/src/nelssa-pnm-$ver
mkdir -p "$dst/scripts" "$dst/driver/probes"
cp "$src/dkms.conf" "$dst/"
cp "$src/scripts/kernel-probe.sh" "$dst/scripts/"
cp -r "$src/uapi" "$dst/"
cp "$src"/driver/Kbuild "$src"/driver/*.c "$src"/driver/*.h "$dst/driver/"
rm -f "$dst/driver/compat_generated.h"
cp "$src"/driver/probes/* "$dst/driver/probes/"
control "$k" <<EOF2
Package: nelssa-pnm-dkms
Version: $ver
Architecture: all
Maintainer: NELSSA developers <nelssa@localhost>
Depends: dkms, kmod
Section: kernel
Priority: optional
Description: NELSSA PNM driver (nelssa_pnm) in DKMS form
 The kernel driver for NELSSA CXL processing-near-memory cards, built by
 DKMS for the running kernel and every kernel installed later.
EOF2
cat >"$k/DEBIAN/postinst" <<EOF2
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
	dkms add -m nelssa-pnm -v $ver >/dev/null 2>&1 || true
	dkms autoinstall || true
fi
EOF2
cat >"$k/DEBIAN/prerm" <<EOF2
#!/bin/sh
set -e
dkms remove -m nelssa-pnm -v $ver --all >/dev/null 2>&1 || true
EOF2
chmod 0755 "$k/DEBIAN/postinst" "$k/DEBIAN/prerm"

left=$(find "$s" -type f | sed "s|^$s||")
if [ -n "$left" ]; then
	echo "build-deb: installed files no package took:" >&2
	echo "$left" >&2
	exit 1
fi
for root in "$p" "$r" "$d" "$k" "$y"; do
	[ -d "$root/DEBIAN" ] || continue
	dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
done
ls "$out"/*.deb
