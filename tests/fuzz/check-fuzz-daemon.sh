#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The daemon's stateful fuzzer (fuzz_daemon.c), in TAP: builds nelssad's
# control and data path, the PNM library with its sim backend and the
# firmware, the protocol codec, the data path's UCX setup (runtime/ucx)
# and the target with clang's libFuzzer, ASan and UBSan (the daemon, the
# codec and the UCX setup with coverage, the rest with
# the sanitizers alone; no gcc object, so one runtime); replays every input
# of tests/fuzz/corpus-daemon/ as a regression test; then fuzzes from that
# corpus for a fixed number of inputs (RUNS, 5000: two to four minutes of
# fuzzing on this project's machines, where every link of an input is a UCX
# worker made and destroyed; NELSSA_FUZZ_RUNS wins) with a fixed
# seed (NELSSA_FUZZ_SEED, default 1) and prints how many inputs ran and how
# long it took -- or, with NELSSA_FUZZ_SECONDS set, for that long instead
# (the longer runs: NELSSA_FUZZ_SECONDS=1800 for half an hour).  A finding
# leaves its reproducer in OUTDIR (crash-*) and names what broke in the
# failing subtest; replay it with `OUTDIR/fuzz_daemon FILE`,
# NELSSA_FUZZ_VERBOSE=1 for every operation.  Skipped where clang or its
# fuzzer runtime is missing.
#
#   check-fuzz-daemon.sh SRCDIR OUTDIR [RUNS]
set -u

src=${1:?usage: check-fuzz-daemon.sh SRCDIR OUTDIR [SECONDS]}
dir=${2:?}
runs_max=${NELSSA_FUZZ_RUNS:-${3:-5000}}
secs=${NELSSA_FUZZ_SECONDS:-}
if [ -n "$secs" ]; then
	bound="-max_total_time=$secs" what="$secs s"
else
	bound="-runs=$runs_max" what="$runs_max inputs"
fi
seed=${NELSSA_FUZZ_SEED:-1}
seeds="$src/tests/fuzz/corpus-daemon"
rm -rf "$dir/corpus"	# every run from the seeds alone: the seed decides what it does
mkdir -p "$dir/obj" "$dir/corpus"
dir=$(cd "$dir" && pwd)

n=0
for f in "$seeds"/*; do
	[ -f "$f" ] && n=$((n + 1))
done
echo "1..$((n + 2))"
# The subtests from 2 on, each "$1 N$2", then the end: the plan is kept
# whatever stopped the run.
rest() {
	i=2
	while [ "$i" -le $((n + 2)) ]; do
		echo "$1 $i$2"
		i=$((i + 1))
	done
	exit 0
}
skip() {
	echo "ok 1 # SKIP $1"
	rest ok " # SKIP $1"
}
if ! command -v clang >/dev/null 2>&1 ||
	! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
	clang -x c -fsanitize=fuzzer,address,undefined -o "$dir/probe" - >/dev/null 2>&1; then
	skip "clang with libFuzzer not installed (clang, libclang-rt-14-dev)"
fi
if ! pkg-config --exists ucx liburing; then
	skip "UCX or liburing development files not installed"
fi

# --- build: one make -j over every object ---
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cov="-fsanitize=fuzzer-no-link"
warn="-Wall -Wextra -Werror -Wno-unused-command-line-argument"
inc="-I$src/uapi -I$src/driver -I$src/runtime/include -I$src/runtime/pnm -I$src/firmware/include -I$src/firmware -I$src/daemon"
fw_args= kernels=
case $(uname -m) in
x86_64)
	fw_args="-DNFW_HAVE_AVX2 -DNFW_HAVE_AVX512"
	kernels="attn_avx2.c:-mavx2:-mfma:-mf16c attn_avx512.c:-mavx512f:-mfma" ;;
aarch64)
	fw_args="-DNFW_HAVE_NEON"
	kernels="attn_neon.c" ;;
esac
mk="$dir/Makefile"
{
	echo "CC = clang"
	echo "BASE = -std=c11 -O1 -g -MMD -MP $warn $(pkg-config --cflags ucx liburing json-c libcurl) $inc"
	echo "-include obj/*.d"	# objects kept from a run before are remade when a header changed
	objs=
	rule() {	# rule OBJ SRC FLAGS...
		o=$1 s=$2
		shift 2
		objs="$objs $o"
		printf '%s: %s\n\t$(CC) $(BASE) %s -c %s -o %s\n' "$o" "$s" "$*" "$s" "$o"
	}
	for f in conn control jobs dataplane ep_table dispatch partition fdlimit registry; do
		rule "obj/d_$f.o" "$src/daemon/$f.c" "$san $cov -DNELSSA_VERSION='\"fuzz\"'"
	done
	# The registry (no --etcd here: linked, never started).
	for f in etcd node view; do
		rule "obj/r_$f.o" "$src/runtime/registry/$f.c" "$san"
	done
	rule obj/proto.o "$src/runtime/proto/proto.c" "$san $cov"
	rule obj/link.o "$src/runtime/ucx/link.c" "$san $cov"
	rule obj/fuzz_daemon.o "$src/tests/fuzz/fuzz_daemon.c" "$san $cov"
	for f in bf16 fp16 attn_dense attn_clusters kv_quant lse_merge; do
		rule "obj/n_$f.o" "$src/runtime/numeric/$f.c" "$san"
	done
	# The static build's sim backend: linked in (sim_linked.c), not loaded.
	for f in pnm sim_dev sim_ctx sim_entry sim_linked kdev kdev_dax; do
		rule "obj/p_$f.o" "$src/runtime/pnm/$f.c" "$san -DNELSSA_VERSION_STRING='\"fuzz\"'"
	done
	for f in clock extent log parse; do
		rule "obj/u_$f.o" "$src/runtime/util/$f.c" "$san -DNELSSA_VERSION_STRING='\"fuzz\"'"
	done
	for f in exec isa kern_attn kern_kv kern_mem opdef runtime selftest validate; do
		rule "obj/f_$f.o" "$src/firmware/$f.c" "$san $fw_args"
	done
	for k in $kernels; do
		f=${k%%:*}
		rule "obj/k_${f%.c}.o" "$src/firmware/kernels/$f" \
			"$san -ffp-contract=fast -fno-trapping-math $(echo "${k#"$f"}" | tr : ' ')"
	done
	echo "fuzz_daemon:$objs"
	echo "	\$(CC) -fsanitize=fuzzer,address,undefined -o \$@ $objs" \
		"-Wl,--export-dynamic-symbol=accept $(pkg-config --libs ucx liburing json-c libcurl)" \
		"-lpthread -lm"
} >"$mk"
jobs=$(nproc 2>/dev/null || echo 2)
t0=$(date +%s)
if make -C "$dir" -j"$jobs" -s fuzz_daemon >"$dir/build.log" 2>&1; then
	echo "ok 1 - fuzz_daemon built with libFuzzer, ASan and UBSan ($(($(date +%s) - t0)) s)"
else
	sed 's/^/# /' "$dir/build.log" | tail -60
	echo "not ok 1 - fuzz_daemon built"
	rest "not ok" " - not built"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/tests/fuzz/fuzz_daemon.lsan:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# UCX reads its log level when it loads, before the target could set it.
export UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-fatal}

# --- every corpus input, replayed: one subtest each (a failure stops a run; the rest go on) ---
i=2
set --
for f in "$seeds"/*; do
	[ -f "$f" ] && set -- "$@" "$f"
done
while [ $# -gt 0 ]; do
	"$dir/fuzz_daemon" -runs=1 "$@" >"$dir/replay.log" 2>&1
	rc=$?
	for f in "$@"; do
		if grep -q "^Executed $f " "$dir/replay.log"; then
			echo "ok $i - corpus-daemon/$(basename "$f") replays"
			i=$((i + 1))
			shift
			continue
		fi
		grep -v '^Running:\|^Executed' "$dir/replay.log" | tail -30 | sed 's/^/# /'
		echo "not ok $i - corpus-daemon/$(basename "$f") replays (exit $rc)"
		i=$((i + 1))
		shift
		break
	done
done

# --- fuzzing, from the corpus (new inputs go to OUTDIR/corpus, never the tree) ---
cp "$seeds"/* "$dir/corpus/" 2>/dev/null
rm -f "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*
t0=$(date +%s)
# shellcheck disable=SC2086 # $bound is one option
"$dir/fuzz_daemon" -seed="$seed" $bound -max_len=4096 -timeout=60 \
	-rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/" \
	"$dir/corpus" >"$dir/fuzz.log" 2>&1
rc=$?
took=$(($(date +%s) - t0))
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/fuzz.log" | grep -o '[0-9]*$')
if [ "$rc" -eq 0 ]; then
	echo "ok $i - fuzzing nelssad for $what (seed $seed): ${runs:-?} inputs in $took s, no finding"
else
	grep -v '^#[0-9]' "$dir/fuzz.log" | tail -60 | sed 's/^/# /'
	echo "# reproducer: $(ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* 2>/dev/null | head -1)"
	# What broke, in the subtest's own line: a summary may show nothing else.
	why=$(grep -m1 -E 'FINDING:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' \
		"$dir/fuzz.log" | sed 's/^.*\(FINDING:\|ERROR:\|runtime error:\) *//' | tr "#" " " | cut -c1-160)
	echo "not ok $i - fuzzing nelssad (seed $seed) found something after ${runs:-?} inputs: ${why:-see the log}"
fi
