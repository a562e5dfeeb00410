#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Keeps the documentation honest about the code, in TAP:
#   1. every uapi identifier is described in the userspace-api page
#   2. every public numeric-core function is described in Documentation/
#   3. Documentation/index.rst reaches every .rst page
#   4. the README opens with the two commands
#   5. every directory holding code has a README.md
#   6. every source file starts with an SPDX line
#   7. every page parses as reStructuredText without a warning
#
#   check-docs.sh SRCDIR
set -u

src=${1:?usage: check-docs.sh SRCDIR}
cd "$src" || exit 1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
n=0

check() { # name; reads missing items from $tmp
	n=$((n + 1))
	if [ -s "$tmp" ]; then
		sed 's/^/# missing: /' "$tmp"
		echo "not ok $n - $1"
	else
		echo "ok $n - $1"
	fi
	: >"$tmp"
}

echo "1..7"

page=Documentation/userspace-api/nelssa_pnm.rst
for id in $(grep -oE '\b(struct npnm_[a-z0-9_]+|NPNM_(IOC|OP|ST|CAP|DTYPE|KV_F)_[A-Z0-9_]+)' \
	uapi/linux/nelssa_pnm.h | sed 's/struct /struct:/' | sort -u); do
	word=$(echo "$id" | sed 's/struct://')
	grep -q -- "$word" "$page" 2>/dev/null || echo "$word" >>"$tmp"
done
check "uapi identifiers documented in $page"

for fn in $(grep -hoE '\bnelssa_[a-z0-9_]+\(' runtime/include/nelssa/*.h | tr -d '(' | sort -u); do
	grep -rq -- "$fn" Documentation/ || echo "$fn" >>"$tmp"
done
check "numeric-core functions documented in Documentation/"

for f in $(find Documentation -name '*.rst' ! -path Documentation/index.rst | sort); do
	rel=${f#Documentation/}
	rel=${rel%.rst}
	# Reached from index.rst directly or from an index.rst one level down.
	grep -rqx "   $rel" Documentation/index.rst ||
		grep -rqx "   ${rel#*/}" "$(dirname "$f")/index.rst" 2>/dev/null ||
		echo "$f" >>"$tmp"
done
check "Documentation/index.rst reaches every page"

head -n 12 README.md 2>/dev/null | grep -q 'make demo' || echo "make demo in README's first lines" >>"$tmp"
head -n 12 README.md 2>/dev/null | grep -q 'make test' || echo "make test in README's first lines" >>"$tmp"
check "README.md opens with make demo and make test"

for d in $(find . -path ./.git -prune -o -path './build*' -prune -o -path ./.cache -prune -o \
	-type f \( -name '*.c' -o -name '*.h' -o -name '*.sh' -o -name '*.py' \) -print |
	sed 's|^\./||; s|/.*||' | sort -u); do
	[ -f "$d/README.md" ] || [ -f "$d" ] || echo "$d/README.md" >>"$tmp"
done
check "every top-level code directory has a README.md"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	files=$(git ls-files --cached --others --exclude-standard)
else
	files=$(find . -type f ! -path './.git/*' | sed 's|^\./||')
fi
for f in $files; do
	case "$f" in
	LICENSES/*|*/LICENSE-*|Documentation/ABI/*|*.md|*.rst|*.txt|.gitignore|*.json|*.jsonl) continue ;;
	tests/fuzz/corpus-*/*) continue ;;	# fuzz inputs: bytes, written by corpus-*.py
	esac
	[ -f "$f" ] || continue
	head -n 3 "$f" | grep -q 'SPDX-License-Identifier:' || echo "$f" >>"$tmp"
done
check "every source file carries an SPDX line"

n=$((n + 1))
python3 scripts/rst-check $(find Documentation -name '*.rst' | sort) >"$tmp" 2>&1
case $? in
0) echo "ok $n - Documentation/ parses cleanly (docutils)" ;;
77) echo "ok $n - Documentation/ parses cleanly # SKIP python3-docutils not installed" ;;
*) sed 's/^/# /' "$tmp"; echo "not ok $n - Documentation/ parses cleanly (docutils)" ;;
esac
