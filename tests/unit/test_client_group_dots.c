// SPDX-License-Identifier: MIT
/*
 * nelssa_group_dots() (client/group_dots.c), the centroid and far-key
 * products of Top-K, against its definition: nelssa_dot_f32() of every
 * (query row, centroid row) pair, bit for bit.  The blocked kernel only
 * moves where each product is computed, so any difference -- a wrong
 * transpose lane, a dropped tail dimension or centroid, a fused
 * multiply-add, a reordered sum -- shows as a different bit pattern.
 * Shapes cover group sizes 1 to NELSSA_ATTN_MAX_GROUP, head_dims that are
 * not multiples of the 8-wide transpose or that span several 128-element
 * chunks, centroid counts around the 16-row block, unaligned rows, and
 * signed zeros, subnormals, overflow and non-finite inputs.  On x86 with
 * GCC every ISA's copy is checked that this CPU can run (the build makes
 * one per ISA under its own name), besides the clone it dispatches to.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/attention.h>

#include "../../client/scores_internal.h"
#include "testutil.h"

typedef void (*group_dots_fn)(const float *q, uint32_t group, uint32_t d, const float *rows,
			      uint32_t n, float *out);

#ifdef NELSSA_GROUP_DOTS_ISAS
void nelssa_group_dots_baseline(const float *q, uint32_t group, uint32_t d, const float *rows,
				uint32_t n, float *out);
void nelssa_group_dots_avx2(const float *q, uint32_t group, uint32_t d, const float *rows,
			    uint32_t n, float *out);
void nelssa_group_dots_avx512f(const float *q, uint32_t group, uint32_t d, const float *rows,
			       uint32_t n, float *out);
#endif

struct impl {
	const char *name;
	group_dots_fn fn;
};

static struct impl impls[4];
static unsigned int n_impls;

static int find_impls(void **state)
{
	(void)state;
	n_impls = 0;
	impls[n_impls++] = (struct impl){ "dispatched", nelssa_group_dots };
#ifdef NELSSA_GROUP_DOTS_ISAS
	__builtin_cpu_init();
	impls[n_impls++] = (struct impl){ "baseline", nelssa_group_dots_baseline };
	if (__builtin_cpu_supports("avx2"))
		impls[n_impls++] = (struct impl){ "avx2", nelssa_group_dots_avx2 };
	if (__builtin_cpu_supports("avx512f"))
		impls[n_impls++] = (struct impl){ "avx512f", nelssa_group_dots_avx512f };
#endif
	for (unsigned int i = 0; i < n_impls; i++)
		print_message("# checking the %s copy\n", impls[i].name);
	return 0;
}

/* Equal bit for bit; any two NaNs are equal (a NaN's payload is not specified). */
static int same(float a, float b)
{
	return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof(a));
}

/*
 * q[group][d] against rows[n][d] (@rows may be unaligned): every output
 * against the scalar definition.  Returns the number of pairs checked.
 */
static size_t check_one(group_dots_fn fn, const char *impl, const float *q, uint32_t group,
			uint32_t d, const float *rows, uint32_t n, const char *what)
{
	/* One spare float each side catches a write outside [group][n]. */
	size_t len = (size_t)group * n;
	float *out = tu_alloc(sizeof(*out) * (len + 2));
	const float canary = -1234.5f;

	out[0] = canary;
	out[len + 1] = canary;
	fn(q, group, d, rows, n, out + 1);
	assert_true(same(out[0], canary));
	assert_true(same(out[len + 1], canary));
	for (uint32_t r = 0; r < group; r++)
		for (uint32_t c = 0; c < n; c++) {
			float want = nelssa_dot_f32(q + (size_t)r * d, rows + (size_t)c * d, d);
			float got = out[1 + (size_t)r * n + c];

			if (!same(want, got))
				fail_msg("%s copy, %s: group %u d %u n %u: row %u centroid %u: %a, "
					 "want %a", impl, what, group, d, n, r, c, got, want);
		}
	free(out);
	return len;
}

/* Every copy this CPU can run; returns the pairs checked by one. */
static size_t check(const float *q, uint32_t group, uint32_t d, const float *rows, uint32_t n,
		    const char *what)
{
	size_t len = 0;

	for (unsigned int i = 0; i < n_impls; i++)
		len = check_one(impls[i].fn, impls[i].name, q, group, d, rows, n, what);
	return len;
}

static void random_shapes(void **state)
{
	static const uint32_t groups[] = { 1, 2, 3, 4, 5, 7, 8, 64 };
	static const uint32_t dims[] = { 1, 7, 8, 9, 40, 96, 127, 128, 129, 300, 1024 };
	static const uint32_t counts[] = { 0, 1, 15, 16, 17, 33, 100 };
	struct tu_rng rng;
	size_t pairs = 0;

	(void)state;
	tu_rng_for(&rng, "group_dots_shapes", 0);
	for (size_t gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++)
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
			for (size_t ni = 0; ni < sizeof(counts) / sizeof(counts[0]); ni++) {
				uint32_t g = groups[gi], d = dims[di], n = counts[ni];
				float *q = tu_alloc(sizeof(*q) * g * d);
				/* + 1: the rows start one float in, off any vector alignment. */
				float *rows = tu_alloc(sizeof(*rows) * ((size_t)n * d + 1));

				tu_fill_f32(&rng, q, (size_t)g * d, 1.0);
				tu_fill_f32(&rng, rows + 1, (size_t)n * d, 1.0);
				pairs += check(q, g, d, rows + 1, n, "random");
				free(q);
				free(rows);
			}
	print_message("# %zu products equal to the scalar definition\n", pairs);
}

/*
 * Values whose sum depends on the order it is taken in: large products of
 * both signs that cancel, so a reordered or fused sum gives other bits.
 */
static void cancelling_sums(void **state)
{
	const uint32_t g = 4, d = 200, n = 48;
	float *q = tu_alloc(sizeof(*q) * g * d), *rows = tu_alloc(sizeof(*rows) * n * d);
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, "group_dots_cancel", 0);
	for (size_t i = 0; i < (size_t)g * d; i++)
		q[i] = (float)(tu_normal(&rng) * ldexp(1.0, (int)tu_below(&rng, 40) - 20));
	for (size_t i = 0; i < (size_t)n * d; i++)
		rows[i] = (float)(tu_normal(&rng) * ldexp(1.0, (int)tu_below(&rng, 40) - 20));
	check(q, g, d, rows, n, "cancelling");
	free(q);
	free(rows);
}

static void special_values(void **state)
{
	static const float specials[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, 1.1754942e-38f,
					  3.0e38f, -3.0e38f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f };
	const uint32_t nspec = sizeof(specials) / sizeof(specials[0]);
	const uint32_t g = 3, d = 24, n = 40;
	float *q = tu_alloc(sizeof(*q) * g * d), *rows = tu_alloc(sizeof(*rows) * n * d);
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, "group_dots_special", 0);
	for (int round = 0; round < 50; round++) {
		/* Mostly specials, a few ordinary values between. */
		for (size_t i = 0; i < (size_t)g * d; i++)
			q[i] = tu_below(&rng, 4) ? specials[tu_below(&rng, nspec)] :
						   (float)tu_normal(&rng);
		for (size_t i = 0; i < (size_t)n * d; i++)
			rows[i] = tu_below(&rng, 4) ? specials[tu_below(&rng, nspec)] :
						      (float)tu_normal(&rng);
		check(q, g, d, rows, n, "specials");
	}
	/* All-zero rows of both signs: +0 + (-0 * x) keeps the scalar loop's +0. */
	for (size_t i = 0; i < (size_t)g * d; i++)
		q[i] = -0.0f;
	for (size_t i = 0; i < (size_t)n * d; i++)
		rows[i] = (i & 1) ? 0.0f : -0.0f;
	check(q, g, d, rows, n, "signed zeros");
	free(q);
	free(rows);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(random_shapes),
		cmocka_unit_test(cancelling_sums),
		cmocka_unit_test(special_values),
	};

	tu_init("client_group_dots");
	return cmocka_run_group_tests_name("client_group_dots", tests, find_impls, NULL);
}
