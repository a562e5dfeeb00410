#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The install story on the host, in TAP, into staging roots only (never
# the system): make install / uninstall with DESTDIR, the installed module's
# metadata, a program built against the installed headers and libraries
# through pkg-config, the Debian packages of scripts/build-deb.sh, and a
# DKMS build of the driver in a private DKMS tree.  Installing into a live
# system (modprobe, udev, the unit) is tested in the QEMU guest (issue 9).
#
#   check-install.sh SRCDIR WORKDIR
set -u

src=${1:?usage: check-install.sh SRCDIR WORKDIR}
work=${2:?}
out=$work/tmp
rm -rf "$work"
mkdir -p "$out"
n=0

# shellcheck source=../tools/tap-lib.sh
. "$(dirname "$0")/../tools/tap-lib.sh"

stage=$work/stage
# A copy of the tree: make install builds the module in place, and other
# suites copy the driver from the source tree at the same time.
mkdir -p "$work/src"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude='*.o' --exclude='*.ko' \
	--exclude='.*.cmd' -cf - . | tar -C "$work/src" -xf -
src0=$src
src=$work/src
kdir=$(KDIR= "$src/scripts/kdir.sh" 2>/dev/null)
kver=$(sed -n 's/.*UTS_RELEASE "\(.*\)"/\1/p' "$kdir/include/generated/utsrelease.h" 2>/dev/null)

echo "1..14"
t "make install PREFIX=/usr DESTDIR=stage" 0 make -C "$src" install BUILD="$work/build" \
	PREFIX=/usr DESTDIR="$stage"
missing=
for f in usr/sbin/nelssad usr/bin/nelssactl usr/include/nelssa/pnm.h usr/include/linux/nelssa_pnm.h \
	usr/lib/udev/rules.d/60-nelssa-pnm.rules usr/lib/systemd/system/nelssad.service \
	usr/lib/sysusers.d/nelssa.conf etc/nelssa/nelssad.conf etc/modprobe.d/nelssa-pnm.conf \
	usr/share/man/man1/nelssactl.1 usr/share/man/man8/nelssad.8; do
	[ -e "$stage/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ] && grep -q '^ExecStart=/usr/sbin/nelssad --config /etc/nelssa/nelssad.conf$' \
	"$stage/usr/lib/systemd/system/nelssad.service"; then
	echo "ok $((n += 1)) - programs, headers, udev rule, unit (paths filled in), configs, man pages"
else
	echo "# missing:$missing"
	echo "not ok $((n += 1)) - programs, headers, udev rule, unit, configs, man pages"
fi
if [ -z "$kver" ]; then
	echo "ok $((n += 1)) # SKIP no kernel headers: no module to install"
	echo "ok $((n += 1)) # SKIP no module"
else
	t "the module is in lib/modules/$kver/updates" 0 test -f \
		"$stage/lib/modules/$kver/updates/nelssa_pnm.ko"
	if command -v modinfo >/dev/null &&
		modinfo "$stage/lib/modules/$kver/updates/nelssa_pnm.ko" >"$out/modinfo" 2>&1 &&
		grep -q '^version: *0.1.0' "$out/modinfo" && grep -q '^parm: *timeout_ms' "$out/modinfo" &&
		grep -q "^vermagic: *$kver " "$out/modinfo"; then
		echo "ok $((n += 1)) - modinfo: version, parameters, vermagic $kver"
	else
		sed 's/^/# /' "$out/modinfo" 2>/dev/null
		echo "not ok $((n += 1)) - modinfo: version, parameters, vermagic"
	fi
fi

# A program against the installed tree, found through pkg-config.
cat >"$out/use.c" <<'C'
#include <stdio.h>
#include <nelssa/client.h>
#include <nelssa/pnm.h>
#include <nelssa/policy.h>
int main(void)
{
	struct nelssa_hw_profile hw;
	struct nelssa_pnm *p;

	if (nelssa_hw_profile_builtin("h200", &hw) || nelssa_pnm_open("sim:0,mem=1M", &p))
		return 1;
	nelssa_pnm_close(p);
	printf("%.1f\n", hw.gpu_bw / 1e12);
	return 0;
}
C
pcdir=$(find "$stage/usr/lib" -name pkgconfig -type d | head -1)
flags=$(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$pcdir" \
	pkg-config --cflags --libs --static libnelssa-remote libnelssa 2>"$out/pc.err")
# shellcheck disable=SC2086 # the flags are words
t "a program builds against the installed headers and libraries (pkg-config)" 0 \
	cc -o "$out/use" "$out/use.c" $flags
t "... and runs" 0 "$out/use"

# A GPU-node program: the client library alone, never the card's firmware
# or the PNM User Library (issue 19).
cat >"$out/gpu.c" <<'C'
#include <stdio.h>
#include <nelssa/client.h>
#include <nelssa/log.h>
#include <nelssa/version.h>

int main(void)
{
	struct nelssa_client_opts o = { "127.0.0.1", 1, 100, "gpu" };
	struct nelssa_cluster_index ix;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_client *c = NULL;
	unsigned short k[16 * 8] = { 0 };

	nelssa_set_log_fn(NULL, NULL);
	if (nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, 16, 8))
		return 1;
	nelssa_kmeans_free(&ix);
	/* Nothing listens on port 1: refused, with words. */
	if (nelssa_client_connect(&o, &c) == 0)
		return 1;
	nelssa_client_close(c);
	printf("%s\n", nelssa_version());
	return 0;
}
C
gflags=$(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_PATH="$pcdir" \
	pkg-config --cflags --libs --static libnelssa-remote 2>>"$out/pc.err")
# shellcheck disable=SC2086 # the flags are words
t "a GPU-node program builds against libnelssa-remote alone and runs" 0 \
	sh -c "cc -o '$out/gpu' '$out/gpu.c' $gflags && '$out/gpu'"
fw=$(nm "$out/gpu" 2>/dev/null | grep -E ' [TtDdBbRr] (nfw_|nelssa_pnm_|pnm_|sim_)' | head -5)
if [ -x "$out/gpu" ] && [ -z "$fw" ]; then
	echo "ok $((n += 1)) - it holds no firmware or PNM-library symbol (nm)"
else
	echo "$fw" | sed 's/^/# /'
	echo "not ok $((n += 1)) - it holds no firmware or PNM-library symbol (nm)"
fi
t "make uninstall DESTDIR=stage" 0 make -C "$src" uninstall BUILD="$work/build" DESTDIR="$stage"
left=$(find "$stage" -type f | sed "s|^$stage||")
if [ -z "$left" ]; then
	echo "ok $((n += 1)) - uninstall left no file behind"
else
	echo "$left" | sed 's/^/# left: /'
	echo "not ok $((n += 1)) - uninstall left no file behind"
fi

# Debian packages.
t "scripts/build-deb.sh" 0 "$src/scripts/build-deb.sh" "$work/debs"
ok=1
for want in "nelssa_:./usr/sbin/nelssad" "nelssa_:./usr/lib/udev/rules.d/60-nelssa-pnm.rules" \
	"libnelssa-dev_:./usr/include/nelssa/client.h" "nelssa-pnm-dkms_:/dkms.conf" \
	"nelssa-pnm-dkms_:/driver/probes/"; do
	deb=$(ls "$work"/debs/"${want%%:*}"*.deb 2>/dev/null | head -1)
	[ -n "$deb" ] && dpkg-deb --contents "$deb" >"$out/contents"
	if [ -z "$deb" ] || ! grep -q "${want#*:}" "$out/contents"; then
		echo "# ${want%%:*}*.deb lacks ${want#*:}"
		ok=0
	fi
done
dpkg-deb --info "$work"/debs/nelssa_*.deb >"$out/info" 2>&1
if [ $ok = 1 ] && grep -q 'libucx0' "$out/info"; then
	echo "ok $((n += 1)) - three packages with the right files and dependencies"
else
	echo "not ok $((n += 1)) - three packages with the right files and dependencies"
fi

# DKMS, in a private tree, from the package's own source.
if ! command -v dkms >/dev/null || [ -z "$kver" ]; then
	echo "ok $((n += 1)) # SKIP dkms or kernel headers not installed"
	echo "ok $((n += 1)) # SKIP no DKMS build"
else
	mkdir -p "$work/dkms/src" "$work/dkms/tree"
	dpkg-deb -x "$work"/debs/nelssa-pnm-dkms_*.deb "$work/dkms/root"
	cp -r "$work"/dkms/root/usr/src/* "$work/dkms/src/"
	t "dkms build for $kver from the package's source" 0 dkms build -m nelssa-pnm -v 0.1.0 \
		-k "$kver" --dkmstree "$work/dkms/tree" --sourcetree "$work/dkms/src" \
		--kernelsourcedir "$kdir"
	ko=$(find "$work/dkms/tree" -name 'nelssa_pnm.ko*' | head -1)
	t "... gives a module of version 0.1.0" 0 sh -c "modinfo '$ko' | grep -q '^version: *0.1.0'"
fi
