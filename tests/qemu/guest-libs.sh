# SPDX-License-Identifier: MIT
#
# Sourced by rig.sh and stage-t3.sh: copy_libs ROOT FILE... copies the
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
