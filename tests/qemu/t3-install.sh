#!/bin/sh
# SPDX-License-Identifier: MIT
#
# In the guest, after the driver suites: the tree as "make install" put it
# into this root (stage-t3.sh).  modprobe (kmod) loads the installed module
# with the options of /etc/modprobe.d, udevd applies the installed rule to
# the device nodes, the nelssa group's members get in and nobody else does.
# Leaves the module loaded and udevd running for t3-rdma.sh.
. /opt/t3/t3-lib.sh

kv=$(uname -r)
modinfo nelssa_pnm >/tmp/modinfo 2>&1 &&
	grep -q "^filename: */lib/modules/$kv/updates/nelssa_pnm.ko" /tmp/modinfo &&
	grep -q '^version: ' /tmp/modinfo && grep -q '^parm: *timeout_ms' /tmp/modinfo
check "modinfo nelssa_pnm: the installed module, its version and parameters" $?
note /tmp/modinfo

# What an administrator does: options in the installed modprobe.d file.
conf=/etc/modprobe.d/nelssa-pnm.conf
[ -f $conf ] &&
	echo "options nelssa_pnm mock_devices=2 mock_mem_mb=8 timeout_ms=2000 dax_mb=128 dax_node=1" >>$conf
check "make install put $conf" $?

# udevd first, as on a booted system: it handles the module's events live.
/lib/systemd/systemd-udevd --daemon >/tmp/udevd.log 2>&1
check "systemd-udevd starts" $?
modprobe nelssa_pnm
check "modprobe nelssa_pnm" $?
udevadm settle --timeout=30
[ "$(cat /sys/module/nelssa_pnm/parameters/mock_devices)" = 2 ] &&
	[ "$(cat /sys/module/nelssa_pnm/parameters/timeout_ms)" = 2000 ]
check "module options from $conf (mock_devices=2, timeout_ms=2000)" $?

bad=""
count=0
for d in /dev/nelssa_pnm*; do
	count=$((count + 1))
	m=$(stat -c '%U:%G %a' "$d")
	[ "$m" = "root:nelssa 660" ] || bad="$bad $d=$m"
done
[ $count -ge 8 ] && [ -z "$bad" ]
check "udev rule: all $count device nodes root:nelssa 0660${bad:+ (not:$bad)}" $?

# The carve-out's dax device: the nelssa group's too.
daxdev=$(cat /sys/class/nelssa_pnm/"$(basename "$(card $((512 - 128)))")"/dax_device 2>/dev/null)
m=$(stat -c '%U:%G %a' "/dev/$daxdev" 2>&1)
[ "$m" = "root:nelssa 660" ]
check "udev rule: the carve-out's /dev/$daxdev is root:nelssa 0660 (is $m)" $?

pci=$(card 64)
ctl=/usr/local/bin/nelssactl
su -s /bin/sh nelssad -c "$ctl info $pci" >/tmp/member 2>&1
check "a member of nelssa (user nelssad) opens $pci" $?
su -s /bin/sh outsider -c "$ctl info $pci" >/tmp/outsider 2>&1
rc=$?
[ $rc != 0 ] && grep -qi "permission denied" /tmp/outsider
check "a user outside nelssa is refused (exit $rc, 'Permission denied')" $?
note /tmp/outsider
exit $t3_fails
