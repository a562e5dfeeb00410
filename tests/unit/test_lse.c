// SPDX-License-Identifier: MIT
/*
 * LSE merge: special values, agreement with float64, order independence,
 * and the property the whole system rests on -- merging the states of any
 * partition of a token set equals attention over the union.
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
#include <nelssa/lse.h>

#include "testutil.h"

#define D 16

static void fill_state(struct tu_rng *rng, float *o, uint32_t rows)
{
	tu_fill_f32(rng, o, (size_t)rows * D, 1.0);
}

/* float64 n-way merge straight from the definition. */
static void ref_merge(const float *const *o, const float *lse, size_t n, double *out, double *l)
{
	double m = -INFINITY, w = 0.0;

	for (size_t s = 0; s < n; s++)
		if (!isinf(lse[s]))
			m = fmax(m, lse[s]);
	for (int i = 0; i < D; i++)
		out[i] = 0.0;
	if (m == -INFINITY) {
		*l = -INFINITY;
		return;
	}
	for (size_t s = 0; s < n; s++)
		if (!isinf(lse[s]))
			w += exp((double)lse[s] - m);
	for (size_t s = 0; s < n; s++)
		if (!isinf(lse[s]))
			for (int i = 0; i < D; i++)
				out[i] += exp((double)lse[s] - m) / w * o[s][i];
	*l = m + log(w);
}

static void one_side_empty(void **state)
{
	float a[D], b[D], la, lb;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, 1);
	fill_state(&rng, b, 1);
	/* Empty b: a unchanged, bit for bit. */
	float keep[D];

	memcpy(keep, a, sizeof(a));
	la = 3.5f;
	lb = -INFINITY;
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_memory_equal(a, keep, sizeof(a));
	assert_true(la == 3.5f);
	/* Empty a: becomes b exactly. */
	la = -INFINITY;
	lb = -7.25f;
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_memory_equal(a, b, sizeof(a));
	assert_true(la == -7.25f);
}

static void both_empty(void **state)
{
	static const float empties[] = { -INFINITY, INFINITY };
	float a[D], b[D], la, lb, out[D], l;

	(void)state;
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			for (int e = 0; e < D; e++) {
				a[e] = 0.0f;
				b[e] = 0.0f;
			}
			la = empties[i];
			lb = empties[j];
			{
				const float *os[2] = { a, b }, *ls[2] = { &la, &lb };

				nelssa_lse_merge_n(out, &l, os, ls, 2, 1, D);
			}
			nelssa_lse_merge(a, &la, b, &lb, 1, D);
			assert_true(la == -INFINITY && l == -INFINITY);
			for (int e = 0; e < D; e++)
				assert_true(a[e] == 0.0f && out[e] == 0.0f);
		}
}

/* FlashAttention-2 marks empty rows with +inf: read as empty, not as huge. */
static void plus_inf_is_empty(void **state)
{
	float a[D], b[D], la = 1.0f, lb = INFINITY;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, 1);
	fill_state(&rng, b, 1);
	float keep[D];

	memcpy(keep, a, sizeof(a));
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_memory_equal(a, keep, sizeof(a));
	assert_true(la == 1.0f);
}

static void nan_propagates(void **state)
{
	float a[D] = { 0 }, b[D] = { 0 }, la = 0.0f, lb = NAN;

	(void)state;
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_true(isnan(la) && isnan(a[0]));
}

/* Finite but astronomically small masses must still merge sensibly. */
static void very_negative(void **state)
{
	float a[D], b[D], la = -1e30f, lb = -1e30f;
	double ref[D], lref;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, 1);
	fill_state(&rng, b, 1);
	{
		const float *os[2] = { a, b };
		const float ls[2] = { la, lb };

		ref_merge(os, ls, 2, ref, &lref);
	}
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_true(isfinite(la));
	assert_true(fabs(la - lref) <= fabs(lref) * 2 * TU_U32);
	for (int i = 0; i < D; i++)
		assert_true(fabs(a[i] - ref[i]) <= 1e-6);
}

/* Equal masses average the outputs and add log 2. */
static void equal_masses(void **state)
{
	float a[D], b[D], la = 5.0f, lb = 5.0f;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, 1);
	fill_state(&rng, b, 1);
	float want[D];

	for (int i = 0; i < D; i++)
		want[i] = 0.5f * a[i] + 0.5f * b[i];
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_true(fabsf(la - (5.0f + logf(2.0f))) <= 4 * (float)TU_U32 * 6.0f);
	for (int i = 0; i < D; i++)
		assert_true(a[i] == want[i]);
}

/* A gap of 200 in lse: the small side's weight underflows, nothing overflows. */
static void huge_gap(void **state)
{
	float a[D], b[D], la = 0.0f, lb = 200.0f;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, 1);
	fill_state(&rng, b, 1);
	nelssa_lse_merge(a, &la, b, &lb, 1, D);
	assert_true(la == 200.0f);
	for (int i = 0; i < D; i++)
		assert_true(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(b[i]) + 1e-30f);
}

static void merge_n_zero_states(void **state)
{
	float o[2 * D], l[2] = { 1.0f, 1.0f };

	(void)state;
	for (int i = 0; i < 2 * D; i++)
		o[i] = 9.0f;
	nelssa_lse_merge_n(o, l, NULL, NULL, 0, 2, D);
	assert_true(l[0] == -INFINITY && l[1] == -INFINITY);
	for (int i = 0; i < 2 * D; i++)
		assert_true(o[i] == 0.0f);
}

/* n-way, pairwise in a random order, and float64 all agree. */
static void order_independent(void **state)
{
	enum { N = 9 };
	float o[N][D], l[N];
	const float *os[N], *ls[N];
	float all[D], lall, acc[D], lacc;
	double ref[D], lref;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (int rep = 0; rep < 50; rep++) {
		uint32_t perm[N];

		for (int s = 0; s < N; s++) {
			fill_state(&rng, o[s], 1);
			/* A few empties and a wide spread of masses. */
			l[s] = tu_below(&rng, 5) == 0 ? -INFINITY : (float)(20.0 * tu_normal(&rng));
			os[s] = o[s];
			ls[s] = &l[s];
			perm[s] = (uint32_t)s;
		}
		for (int s = N - 1; s > 0; s--) {
			uint32_t j = tu_below(&rng, (uint32_t)s + 1), t = perm[s];

			perm[s] = perm[j];
			perm[j] = t;
		}
		ref_merge(os, l, N, ref, &lref);
		nelssa_lse_merge_n(all, &lall, os, ls, N, 1, D);
		memset(acc, 0, sizeof(acc));
		lacc = -INFINITY;
		for (int s = 0; s < N; s++)
			nelssa_lse_merge(acc, &lacc, o[perm[s]], &l[perm[s]], 1, D);
		if (lref == -INFINITY) {
			assert_true(lall == -INFINITY && lacc == -INFINITY);
			continue;
		}
		/* Each pairwise step adds a few roundings to weights of magnitude <= 1. */
		assert_true(fabs(lall - lref) <= 8 * TU_U32 * (fabs(lref) + 1));
		assert_true(fabs(lacc - lref) <= 8 * N * TU_U32 * (fabs(lref) + 1));
		for (int i = 0; i < D; i++) {
			assert_true(fabs(all[i] - ref[i]) <= 16 * N * TU_U32 * 6.0);
			assert_true(fabs(acc[i] - ref[i]) <= 16 * N * TU_U32 * 6.0);
		}
	}
}

/*
 * Partition a token set into random (possibly empty) parts, run attention
 * on each part, merge the parts in a random binary tree, and compare with
 * float64 attention over the whole set.  Repeated for GQA groups.
 */
static void partition_tree_equals_union(void **state)
{
	const uint32_t d = 64, g = 4, n = 3000;
	const struct nelssa_attn_geom geom = { d, g, NELSSA_KV_BF16, 0.125f, 0 };
	uint16_t *k = tu_alloc(sizeof(uint16_t) * d * n), *v = tu_alloc(sizeof(uint16_t) * d * n);
	float q[64 * 4];
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, q, d * g, 1.5);
	tu_fill_kv(&rng, k, (size_t)d * n, 1.5, NELSSA_KV_BF16);
	tu_fill_kv(&rng, v, (size_t)d * n, 1.0, NELSSA_KV_BF16);
	for (int rep = 0; rep < 8; rep++) {
		uint32_t parts = 1 + tu_below(&rng, 12), cut[13];
		float *o[12], *l[12];
		uint32_t live = parts;

		/* Sorted random cut points; equal cuts make empty parts. */
		cut[0] = 0;
		cut[parts] = n;
		for (uint32_t p = 1; p < parts; p++)
			cut[p] = tu_below(&rng, n + 1);
		for (uint32_t p = 1; p < parts; p++)
			for (uint32_t j = p; j > 1 && cut[j - 1] > cut[j]; j--) {
				uint32_t t = cut[j];

				cut[j] = cut[j - 1];
				cut[j - 1] = t;
			}
		for (uint32_t p = 0; p < parts; p++) {
			o[p] = tu_alloc(sizeof(float) * d * g);
			l[p] = tu_alloc(sizeof(float) * g);
			assert_int_equal(nelssa_attn_dense(&geom, q, k + (size_t)cut[p] * d,
							   v + (size_t)cut[p] * d,
							   cut[p + 1] - cut[p], o[p], l[p]), 0);
		}
		/* Random tree: merge two random live states until one is left. */
		while (live > 1) {
			uint32_t i = tu_below(&rng, live), j = tu_below(&rng, live - 1);

			if (j >= i)
				j++;
			nelssa_lse_merge(o[i], l[i], o[j], l[j], g, d);
			free(o[j]);
			free(l[j]);
			o[j] = o[live - 1];
			l[j] = l[live - 1];
			live--;
		}
		assert_int_equal(tu_check_attn(&geom, q, k, v, NULL, n, o[0], l[0], "tree"), 0);
		free(o[0]);
		free(l[0]);
	}
	free(k);
	free(v);
}

/* Rows are independent: a multi-row merge equals row-by-row merges. */
static void rows_independent(void **state)
{
	enum { R = 8 };
	float a[R * D], b[R * D], la[R], lb[R], a1[R * D], la1[R];
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	fill_state(&rng, a, R);
	fill_state(&rng, b, R);
	for (int r = 0; r < R; r++) {
		la[r] = r == 2 ? -INFINITY : (float)tu_normal(&rng);
		lb[r] = r == 5 ? -INFINITY : (float)tu_normal(&rng);
	}
	memcpy(a1, a, sizeof(a));
	memcpy(la1, la, sizeof(la));
	nelssa_lse_merge(a, la, b, lb, R, D);
	for (int r = 0; r < R; r++) {
		nelssa_lse_merge(a1 + r * D, &la1[r], b + r * D, &lb[r], 1, D);
		assert_true(la[r] == la1[r]);
	}
	assert_memory_equal(a, a1, sizeof(a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_side_empty),
		cmocka_unit_test(both_empty),
		cmocka_unit_test(plus_inf_is_empty),
		cmocka_unit_test(nan_propagates),
		cmocka_unit_test(very_negative),
		cmocka_unit_test(equal_masses),
		cmocka_unit_test(huge_gap),
		cmocka_unit_test(merge_n_zero_states),
		cmocka_unit_test(order_independent),
		cmocka_unit_test(partition_tree_equals_union),
		cmocka_unit_test(rows_independent),
	};

	tu_init("lse");
	return cmocka_run_group_tests_name("lse", tests, NULL, NULL);
}
