/* SPDX-License-Identifier: MIT */
/*
 * Small helpers the benchmark and demo programs share: a monotonic clock,
 * allocation that exits with the program's name on failure, a seeded
 * xorshift generator, and percentiles.
 */
#ifndef NELSSA_TOOL_UTIL_H
#define NELSSA_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Seconds on the monotonic clock. */
double tl_now(void);

/* calloc() of at least one byte; on failure "PROG: out of memory" and exit(1). */
void *tl_calloc(const char *prog, size_t n, size_t size);

/* xorshift64 step of *@state (never seed it with 0). */
uint64_t tl_next(uint64_t *state);

/* Uniform in [-1, 1) from the next 53 bits of *@state. */
float tl_frand(uint64_t *state);

/*
 * Benches' cluster sizes: 1..31 (from *@state) in pairs summing to 32, the
 * remainder of @context in the last, so a token budget differs from a
 * ratio of clusters and the @n clusters hold exactly @context tokens
 * (@context >= 16 * @n - 16).  Returns the largest size.
 */
uint32_t tl_vary_sizes(uint64_t *state, uint32_t *sizes, uint32_t n, uint32_t context);

/* qsort() comparator for doubles, ascending. */
int tl_cmp_double(const void *a, const void *b);

/* Sorts @v and returns the value at fraction @p (0 = min, 0.5 = median, 1 = max). */
double tl_percentile(double *v, size_t n, double p);

/*
 * An integer option in [@lo, @hi] into *@out; otherwise "PROG: WHAT S: need
 * an integer in [lo, hi]" on stderr and -1.
 */
int tl_parse_u32(const char *prog, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
		 const char *what);

/*
 * This machine's CPU model as /proc/cpuinfo names it ("model name", or
 * Arm's "CPU part" when that is all there is) into @buf; "unknown" if
 * neither is there.  Benchmarks print it beside their numbers, also in
 * JSON strings, so quotes, backslashes and control bytes become spaces.
 */
const char *tl_cpu_model(char *buf, size_t len);

/*
 * GB/s of the best of three single-pass reads of [@p, @p + @bytes) on
 * this thread (8-byte aligned): plain 64-bit adds, four chains, as
 * nelssactl's streaming baseline.  The floor a pass over that memory pays.
 */
double tl_stream_read(const void *p, uint64_t bytes);

/*
 * The widest vector ISA this CPU has, as the kernels and --isa name them:
 * "avx512" (avx512f), "avx2", "neon" (asimd), else "scalar"; from the
 * flags /proc/cpuinfo lists.  Benchmarks print it beside the model.
 */
const char *tl_cpu_isa(void);

#endif /* NELSSA_TOOL_UTIL_H */
