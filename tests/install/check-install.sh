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

echo "1..17"
t "make install PREFIX=/usr DESTDIR=stage" 0 make -C "$src" install BUILD="$work/build" \
	PREFIX=/usr DESTDIR="$stage"
missing=
for f in usr/sbin/nelssad usr/bin/nelssactl usr/include/nelssa/pnm.h usr/include/linux/nelssa_pnm.h \
	usr/lib/udev/rules.d/60-nelssa-pnm.rules usr/lib/systemd/system/nelssad.service \
	usr/lib/sysusers.d/nelssa.conf etc/nelssa/nelssad.conf etc/modprobe.d/nelssa-pnm.conf \
	usr/share/man/man1/nelssactl.1 usr/share/man/man8/nelssad.8 \
	usr/share/man/man3/nelssa_pnm_open.3 usr/share/man/man3/nelssa_client_step.3; do
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

# The shared libraries: sonames, exports, a man(3) page per function.
libdir=$(dirname "$(find "$stage/usr/lib" -name 'libnelssa.so.0' | head -1)")
ok=1
for l in libnelssa libnelssa-sim libnelssa-client; do
	soname=$(objdump -p "$libdir/$l.so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
	[ "$soname" = "$l.so.0" ] || { echo "# $l.so: soname '$soname'"; ok=0; }
	nm -D --defined-only "$libdir/$l.so.0" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' \
		>"$out/$l.exports"
	bad=$(grep -v -E '^(nelssa|npnm)_' "$out/$l.exports" | head -3)
	[ -z "$bad" ] || { echo "$bad" | sed "s/^/# $l exports /"; ok=0; }
done
if [ $ok = 1 ] && [ -s "$out/libnelssa.exports" ]; then
	echo "ok $((n += 1)) - three shared libraries, soname .so.0, exporting only nelssa_/npnm_ names"
else
	echo "not ok $((n += 1)) - three shared libraries, soname .so.0, exporting only nelssa_/npnm_ names"
fi
# The API's nodes (not NELSSA_PRIVATE, not the sim backend's entry point).
nm -D --defined-only --with-symbol-versions "$libdir/libnelssa.so.0" "$libdir/libnelssa-client.so.0" |
	grep -E '@@NELSSA(_CLIENT)?_0$' | awk '{ print $3 }' | sed 's/@.*//' | sort -u >"$out/api"
nopage=$(while read -r f; do [ -f "$stage/usr/share/man/man3/$f.3" ] || echo "$f"; done <"$out/api")
if [ "$(wc -l <"$out/api")" -ge 90 ] && [ -z "$nopage" ]; then
	echo "ok $((n += 1)) - every one of the $(wc -l <"$out/api") API functions has its man(3) page"
else
	echo "$nopage" | head -10 | sed 's/^/# no page: /'
	echo "not ok $((n += 1)) - every API function has its man(3) page"
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
	pkg-config --cflags --libs nelssa-client 2>"$out/pc.err")
# shellcheck disable=SC2086 # the flags are words
t "a program builds with pkg-config --cflags --libs nelssa-client" 0 \
	cc -o "$out/use" "$out/use.c" $flags -Wl,-rpath,"$libdir"
t "... and runs against the installed tree (sim:0 loads the installed libnelssa-sim)" 0 \
	"$out/use"

# A GPU-node program: the client library alone, never the card's firmware.
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
# shellcheck disable=SC2086 # the flags are words
t "a GPU-node program builds against libnelssa-client and runs" 0 \
	sh -c "cc -o '$out/gpu' '$out/gpu.c' $flags -Wl,-rpath,'$libdir' && '$out/gpu'"
ldd "$out/gpu" >"$out/gpu.ldd" 2>&1
fw=$(for f in "$out/gpu" $(awk '/libnelssa/ { print $3 }' "$out/gpu.ldd"); do nm "$f" 2>/dev/null; done |
	grep -c -E ' [TtDdBbRr] (nfw_|sim_dev|pnm_sim_ops)')
if [ -x "$out/gpu" ] && grep -q "libnelssa-client.so.0 => $libdir/" "$out/gpu.ldd" &&
	! grep -q libnelssa-sim "$out/gpu.ldd" && [ "$fw" = 0 ]; then
	echo "ok $((n += 1)) - it loads no firmware: no libnelssa-sim (ldd), no firmware symbol (nm)"
else
	sed 's/^/# /' "$out/gpu.ldd"
	echo "not ok $((n += 1)) - it loads no firmware: no libnelssa-sim (ldd), no firmware symbol ($fw, nm)"
fi

# The Python package, from the installed tree.
pyinit=$(find "$stage/usr" -path '*/nelssa/__init__.py' | head -1)
if [ -z "$pyinit" ] || [ ! -x /usr/bin/python3 ]; then
	echo "not ok $((n += 1)) - the nelssa Python package is installed (no nelssa/__init__.py)"
else
	t "the installed nelssa Python package imports and reports the version" 0 \
		env PYTHONPATH="$(dirname "$(dirname "$pyinit")")" LD_LIBRARY_PATH="$libdir" \
		/usr/bin/python3 -c 'import nelssa, sys; sys.exit(nelssa.version() != "0.1.0")'
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
	"libnelssa-dev_:./usr/include/nelssa/client.h" "libnelssa-dev_:/man3/nelssa_pnm_open.3" \
	"libnelssa0_:/libnelssa-sim.so.0" "libnelssa0_:/libnelssa-client.so.0" \
	"python3-nelssa_:/nelssa/__init__.py" "nelssa-pnm-dkms_:/dkms.conf" \
	"nelssa-pnm-dkms_:/driver/probes/"; do
	deb=$(ls "$work"/debs/"${want%%:*}"*.deb 2>/dev/null | head -1)
	[ -n "$deb" ] && dpkg-deb --contents "$deb" >"$out/contents"
	if [ -z "$deb" ] || ! grep -q "${want#*:}" "$out/contents"; then
		echo "# ${want%%:*}*.deb lacks ${want#*:}"
		ok=0
	fi
done
dpkg-deb --info "$work"/debs/nelssa_*.deb >"$out/info" 2>&1
if [ $ok = 1 ] && grep -q 'libucx0' "$out/info" && grep -q 'libnelssa0 (= 0.1.0)' "$out/info"; then
	echo "ok $((n += 1)) - five packages with the right files and dependencies"
else
	echo "not ok $((n += 1)) - five packages with the right files and dependencies"
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
