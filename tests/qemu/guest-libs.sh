# SPDX-License-Identifier: MIT
#
# Sourced by rig.sh and stage-t3.sh: copy_modules ROOT KROOT KV MODULE...
# copies kernel modules with what they depend on; copy_libs ROOT FILE... copies the
# shared libraries FILEs load (as ldd resolves them here) to where the
# guest's loader looks, each once.  dlopen()ed ones are the caller's, and
# so are those already inside ROOT (an installed tree's own libraries).
copy_libs() {
	_root=$1
	shift
	mkdir -p "$_root/lib/x86_64-linux-gnu" "$_root/lib64"
	ldd "$@" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/lib64/ { print $1 }' | sort -u |
		while read -r _l; do
			case "$_l" in
			"$_root"/*) ;;
			*/ld-linux-x86-64.so.2) cp -L "$_l" "$_root/lib64/" ;;
			*) [ -e "$_root/lib/x86_64-linux-gnu/${_l##*/}" ] ||
				cp -L "$_l" "$_root/lib/x86_64-linux-gnu/" ;;
			esac
		done
}

# copy_modules ROOT KROOT KV MODULE...: MODULEs of kernel KV (installed
# under KROOT) and their dependencies, as modprobe resolves them, into
# ROOT, with the module lists depmod -b ROOT needs beside them.
copy_modules() {
	_root=$1 _kroot=$2 _kv=$3
	shift 3
	[ -f "$_kroot/lib/modules/$_kv/modules.dep" ] || depmod -b "$_kroot" "$_kv"
	for _m in "$@"; do
		modprobe -d "$_kroot" -S "$_kv" --show-depends "$_m" | awk '$1 == "insmod" { print $2 }'
	done | sort -u | while read -r _ko; do
		_rel=${_ko#"$_kroot"/}
		mkdir -p "$_root/$(dirname "$_rel")"
		cp "$_ko" "$_root/$_rel"
	done
	mkdir -p "$_root/lib/modules/$_kv"
	for _f in modules.order modules.builtin modules.builtin.modinfo; do
		cp "$_kroot/lib/modules/$_kv/$_f" "$_root/lib/modules/$_kv/"
	done
}
