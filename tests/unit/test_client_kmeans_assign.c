// SPDX-License-Identifier: MIT
/*
 * k-means' assignment step as an sgemm (client/kmeans_assign.c) against
 * its definition, the strict index-order dot product of every pair
 * (nelssa_km_assign_ref()): the same centroid and the same score for
 * every key, bit for bit -- on random keys of several shapes, on near and
 * exact ties, on keys whose products cancel (where sgemm's own argmax
 * can differ), on zero, huge and non-finite keys -- and whole clusterings
 * built with either step are identical.
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

#include <cblas.h>

#include <nelssa/attention.h>
#include <nelssa/sparse.h>

#include "../../client/kmeans_internal.h"
#include "testutil.h"

struct shape {
	uint32_t len, k, d;
};

static void normalise(float *c, uint32_t d)
{
	double n = 0.0;

	for (uint32_t i = 0; i < d; i++)
		n += (double)c[i] * c[i];
	for (uint32_t i = 0; i < d && n > 0.0; i++)
		c[i] = (float)(c[i] / sqrt(n));
}

/* Both steps on @x[len][d] and @c[k][d]: identical; returns the strict products the fast one took. */
static uint64_t check_same(const float *x, const float *c, const struct shape *s)
{
	uint32_t *a = tu_alloc(sizeof(*a) * s->len), *b = tu_alloc(sizeof(*b) * s->len);
	float *sa = tu_alloc(sizeof(*sa) * s->len), *sb = tu_alloc(sizeof(*sb) * s->len);
	float *scratch = tu_alloc(sizeof(*scratch) * NELSSA_KM_ROWS * s->k);
	float *xn = tu_alloc(sizeof(*xn) * s->len);
	uint64_t strict;

	assert_int_equal((uint64_t)s->len * s->k,
			 nelssa_km_assign_ref(x, NULL, s->len, c, s->k, s->d, a, sa, NULL));
	strict = nelssa_km_assign(x, NULL, s->len, c, s->k, s->d, b, sb, scratch);
	for (uint32_t t = 0; t < s->len; t++) {
		if (a[t] != b[t] || memcmp(&sa[t], &sb[t], sizeof(float)))
			fail_msg("len %u k %u d %u key %u: strict %u (%a), sgemm step %u (%a)", s->len,
				 s->k, s->d, t, a[t], sa[t], b[t], sb[t]);
	}
	/* Without the scores: the same centroids, fewer strict products. */
	memset(b, 0xff, sizeof(*b) * s->len);
	assert_true(nelssa_km_assign(x, NULL, s->len, c, s->k, s->d, b, NULL, scratch) <= strict);
	assert_memory_equal(a, b, sizeof(*a) * s->len);
	/* With the keys' norms as k-means passes them (strict order, fp32). */
	for (uint32_t t = 0; t < s->len; t++)
		xn[t] = sqrtf(nelssa_dot_f32(x + (size_t)t * s->d, x + (size_t)t * s->d, s->d));
	memset(b, 0xff, sizeof(*b) * s->len);
	nelssa_km_assign(x, xn, s->len, c, s->k, s->d, b, sb, scratch);
	assert_memory_equal(a, b, sizeof(*a) * s->len);
	assert_memory_equal(sa, sb, sizeof(*sa) * s->len);
	free(a);
	free(b);
	free(sa);
	free(sb);
	free(scratch);
	free(xn);
	return strict;
}

static void random_keys_of_many_shapes(void **state)
{
	/* d 40 and 96 and the odd lengths are shapes no tuning looked at. */
	const struct shape shapes[] = {
		{ 1, 1, 32 },	  { 2, 1, 32 },	     { 127, 8, 64 },   { 128, 8, 64 },
		{ 129, 9, 64 },	  { 1000, 63, 128 }, { 1000, 500, 32 }, { 777, 49, 40 },
		{ 513, 32, 96 },  { 300, 19, 256 },  { 2048, 128, 128 },
	};
	struct tu_rng rng;

	(void)state;
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const struct shape *s = &shapes[i];
		float *x = tu_alloc(sizeof(*x) * s->len * s->d), *c = tu_alloc(sizeof(*c) * s->k * s->d);
		uint64_t strict;

		tu_rng_for(&rng, __func__, i);
		tu_fill_f32(&rng, x, (size_t)s->len * s->d, 1.0);
		/* Centroids as k-means makes them: unit vectors near some keys. */
		for (uint32_t j = 0; j < s->k; j++) {
			for (uint32_t e = 0; e < s->d; e++)
				c[(size_t)j * s->d + e] =
					x[(size_t)(j % s->len) * s->d + e] + (float)(0.3 * tu_normal(&rng));
			normalise(c + (size_t)j * s->d, s->d);
		}
		strict = check_same(x, c, s);
		/* The sgemm did the scoring: about one strict product a key. */
		if (s->len >= 2 && s->k >= 8)
			assert_true(strict <= 2u * s->len);
		free(x);
		free(c);
	}
}

/*
 * Exact duplicates (the lower index wins), centroids one ulp apart, and
 * keys half way between two centroids: the strict order decides them all.
 */
static void ties_and_near_ties(void **state)
{
	const struct shape s = { 400, 12, 64 };
	float *x = tu_alloc(sizeof(*x) * s.len * s.d), *c = tu_alloc(sizeof(*c) * s.k * s.d);
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, c, (size_t)4 * s.d, 1.0);
	for (uint32_t j = 0; j < 4; j++)
		normalise(c + (size_t)j * s.d, s.d);
	/* 4..7 copy 0..3; 8..11 are 0..3 with one element moved by an ulp. */
	memcpy(c + (size_t)4 * s.d, c, sizeof(*c) * 4 * s.d);
	memcpy(c + (size_t)8 * s.d, c, sizeof(*c) * 4 * s.d);
	for (uint32_t j = 8; j < 12; j++) {
		float *e = &c[(size_t)j * s.d + j];

		*e = nextafterf(*e, j % 2 ? INFINITY : -INFINITY);
	}
	for (uint32_t t = 0; t < s.len; t++) {
		const uint32_t a = tu_below(&rng, 4), b = tu_below(&rng, 4);
		const double w = t % 3 ? 0.5 : tu_uniform(&rng);

		for (uint32_t e = 0; e < s.d; e++)
			x[(size_t)t * s.d + e] = (float)(w * c[(size_t)a * s.d + e] +
							 (1.0 - w) * c[(size_t)b * s.d + e]);
		/* Every fourth key scaled to where its squares underflow, not its products. */
		for (uint32_t e = 0; e < s.d && t % 4 == 0; e++)
			x[(size_t)t * s.d + e] = ldexpf(x[(size_t)t * s.d + e], -83);
	}
	check_same(x, c, &s);
	free(x);
	free(c);
}

/*
 * Keys and centroids of large, cancelling elements: the products are small
 * beside their terms, so the summation order moves them, and sgemm's own
 * argmax can differ from the strict one (counted, for the log).
 */
static void cancelling_products(void **state)
{
	const struct shape s = { 1024, 64, 128 };
	float *x = tu_alloc(sizeof(*x) * s.len * s.d), *c = tu_alloc(sizeof(*c) * s.k * s.d);
	float *g = tu_alloc(sizeof(*g) * s.len * s.k);
	uint32_t *ref = tu_alloc(sizeof(*ref) * s.len), differ = 0;
	float *sim = tu_alloc(sizeof(*sim) * s.len);
	struct tu_rng rng;

	(void)state;
	for (uint32_t trial = 0; trial < 4; trial++) {
		tu_rng_for(&rng, __func__, trial);
		for (uint32_t j = 0; j < s.k; j++)
			for (uint32_t e = 0; e < s.d; e++)
				c[(size_t)j * s.d + e] = (float)((e % 2 ? -1.0 : 1.0) * 0.125 +
								 1e-5 * tu_normal(&rng));
		for (size_t i = 0; i < (size_t)s.len * s.d; i++)
			x[i] = (float)(1e4 * (1.0 + 1e-6 * tu_normal(&rng)));
		check_same(x, c, &s);
		nelssa_km_assign_ref(x, NULL, s.len, c, s.k, s.d, ref, sim, NULL);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s.len, (int)s.k, (int)s.d,
			    1.0f, x, (int)s.d, c, (int)s.d, 0.0f, g, (int)s.k);
		for (uint32_t t = 0; t < s.len; t++) {
			uint32_t best = 0;

			for (uint32_t j = 1; j < s.k; j++)
				best = g[(size_t)t * s.k + j] > g[(size_t)t * s.k + best] ? j : best;
			differ += best != ref[t];
		}
	}
	print_message("# keys whose plain sgemm argmax differs from the strict one: %u of %u\n",
		      differ, 4 * s.len);
	free(x);
	free(c);
	free(g);
	free(ref);
	free(sim);
}

/* Zero keys tie everywhere (centroid 0); huge and non-finite ones take the strict path. */
static void zero_huge_and_non_finite(void **state)
{
	const struct shape s = { 64, 10, 32 };
	float *x = tu_alloc(sizeof(*x) * s.len * s.d), *c = tu_alloc(sizeof(*c) * s.k * s.d);
	uint32_t asg[64];
	float sim[64], scratch[NELSSA_KM_ROWS * 10];
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, x, (size_t)s.len * s.d, 1.0);
	tu_fill_f32(&rng, c, (size_t)s.k * s.d, 1.0);
	for (uint32_t j = 0; j < s.k; j++)
		normalise(c + (size_t)j * s.d, s.d);
	memset(x, 0, sizeof(*x) * s.d);			/* key 0: zero */
	x[1 * s.d + 3] = 3e38f;				/* key 1: a product overflows */
	x[2 * s.d + 5] = NAN;				/* key 2 */
	x[3 * s.d + 0] = INFINITY;			/* key 3 */
	x[4 * s.d + 7] = -INFINITY;			/* key 4 */
	x[5 * s.d + 1] = 1e-40f;			/* key 5: subnormal */
	for (uint32_t i = 0; i < s.d; i++) {		/* keys 6, 7: squares underflow */
		x[6 * s.d + i] = 1e-25f * x[8 * s.d + i];
		x[7 * s.d + i] = i ? 1e-30f * x[8 * s.d + i] : 2e-19f;
	}
	check_same(x, c, &s);
	nelssa_km_assign(x, NULL, s.len, c, s.k, s.d, asg, sim, scratch);
	assert_int_equal(0, asg[0]);
	assert_true(sim[0] == 0.0f);
	/* A non-finite centroid: the whole pass is strict, and still the same. */
	c[3 * s.d + 2] = INFINITY;
	check_same(x, c, &s);
	c[3 * s.d + 2] = NAN;
	check_same(x, c, &s);
	free(x);
	free(c);
}

static void assert_same_index(const struct nelssa_cluster_index *a,
			      const struct nelssa_cluster_index *b, uint32_t d)
{
	assert_int_equal(a->n_tokens, b->n_tokens);
	assert_int_equal(a->n_clusters, b->n_clusters);
	assert_memory_equal(a->perm, b->perm, sizeof(*a->perm) * a->n_tokens);
	assert_memory_equal(a->table, b->table, sizeof(*a->table) * a->n_clusters);
	assert_memory_equal(a->centroids, b->centroids, sizeof(float) * d * a->n_clusters);
	assert_memory_equal(a->key_mean, b->key_mean, sizeof(float) * d);
}

/* Whole clusterings, prefill and appended chunks, with either step. */
static void clusterings_are_identical(void **state)
{
	const struct shape runs[] = { { 3000, 0, 128 }, { 2500, 0, 64 }, { 1800, 0, 96 } };
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct tu_rng rng;

	(void)state;
	cfg.segment = 1000;
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		const uint32_t n = runs[r].len, d = runs[r].d, chunk = 256;
		uint16_t *k = tu_alloc(sizeof(*k) * (n + chunk) * d);
		struct nelssa_cluster_index fast, ref;

		tu_rng_for(&rng, __func__, r);
		/* Keys near a few hundred directions, as real keys cluster. */
		for (uint32_t t = 0; t < n + chunk; t++) {
			struct tu_rng topic;

			tu_rng_for(&topic, "topic", tu_below(&rng, 300));
			for (uint32_t i = 0; i < d; i++)
				k[(size_t)t * d + i] = tu_to_kv(tu_normal(&topic) + 0.4 * tu_normal(&rng),
								NELSSA_KV_BF16);
		}
		assert_int_equal(0, nelssa_km_build(&fast, &cfg, NELSSA_KV_BF16, k, n, d,
						    nelssa_km_assign));
		assert_int_equal(0, nelssa_km_build(&ref, &cfg, NELSSA_KV_BF16, k, n, d,
						    nelssa_km_assign_ref));
		assert_same_index(&fast, &ref, d);
		assert_int_equal(0, nelssa_km_append(&fast, &cfg, NELSSA_KV_BF16,
						     k + (size_t)n * d, chunk, nelssa_km_assign));
		assert_int_equal(0, nelssa_km_append(&ref, &cfg, NELSSA_KV_BF16,
						     k + (size_t)n * d, chunk, nelssa_km_assign_ref));
		assert_same_index(&fast, &ref, d);
		nelssa_kmeans_free(&fast);
		nelssa_kmeans_free(&ref);
		free(k);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(random_keys_of_many_shapes),
		cmocka_unit_test(ties_and_near_ties),
		cmocka_unit_test(cancelling_products),
		cmocka_unit_test(zero_huge_and_non_finite),
		cmocka_unit_test(clusterings_are_identical),
	};

	tu_init("client_kmeans_assign");
	return cmocka_run_group_tests_name("client_kmeans_assign", tests, NULL, NULL);
}
