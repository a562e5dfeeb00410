// SPDX-License-Identifier: MIT
/*
 * The accuracy harness's baselines (client/baselines.c): token masses
 * against masses derived from the float64 reference's LSE, the oracle
 * against a full sort, Quest's bound against the true per-page maximum
 * and its ranking against an independently computed bound, and the
 * oracle never losing to Quest at the same token budget.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/sparse.h>

#include "testutil.h"

#define D 32
#define G 4
#define N 1000
#define PAGE 16
#define PAGES ((N + PAGE - 1) / PAGE)

struct fx {
	struct nelssa_attn_geom g;
	float q[G * D];
	uint16_t k[N * D], v[N * D];
	double mass[N];		/* float64, from the reference LSE */
};

static double kk(const struct fx *f, uint32_t t, uint32_t i)
{
	return tu_from_kv(f->k[(size_t)t * D + i], NELSSA_KV_BF16);
}

static struct fx *fx_new(const char *name)
{
	struct fx *f = tu_alloc(sizeof(*f));
	double o[G * D], lse[G];
	struct tu_rng rng;

	tu_rng_for(&rng, name, 0);
	f->g = (struct nelssa_attn_geom){ D, G, NELSSA_KV_BF16, 0.5f };
	tu_fill_f32(&rng, f->q, G * D, 1.0);
	tu_fill_kv(&rng, f->k, (size_t)N * D, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(&rng, f->v, (size_t)N * D, 1.0, NELSSA_KV_BF16);
	tu_ref_attn(&f->g, f->q, f->k, f->v, NULL, N, o, lse);
	for (uint32_t t = 0; t < N; t++) {
		f->mass[t] = 0.0;
		for (uint32_t r = 0; r < G; r++) {
			double s = 0.0;

			for (uint32_t i = 0; i < D; i++)
				s += (double)f->q[r * D + i] * kk(f, t, i);
			f->mass[t] += exp(s * f->g.scale - lse[r]);
		}
	}
	return f;
}

static void token_mass_matches_float64(void **state)
{
	struct fx *f = fx_new(__func__);
	double mass[N], total = 0.0;

	(void)state;
	assert_int_equal(0, nelssa_token_mass(&f->g, f->q, f->k, N, mass));
	for (uint32_t t = 0; t < N; t++) {
		assert_true(fabs(mass[t] - f->mass[t]) < 1e-9);
		total += mass[t];
	}
	assert_true(fabs(total - G) < 1e-9);
	free(f);
}

static const double *by_mass;

static int cmp_mass(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return by_mass[x] > by_mass[y] ? -1 : by_mass[x] < by_mass[y] ? 1 : (x > y) - (x < y);
}

static double recall(const struct fx *f, const uint32_t *tok, uint32_t n)
{
	double m = 0.0;

	for (uint32_t i = 0; i < n; i++)
		m += f->mass[tok[i]];
	return m / G;
}

static void oracle_is_the_mass_sort(void **state)
{
	struct fx *f = fx_new(__func__);
	uint32_t all[N], tok[N];

	(void)state;
	for (uint32_t t = 0; t < N; t++)
		all[t] = t;
	by_mass = f->mass;
	qsort(all, N, sizeof(*all), cmp_mass);
	assert_int_equal(40, nelssa_oracle_tokens(&f->g, f->q, f->k, N, 40, tok));
	/* Same set (order may differ where fp32-rounded masses tie). */
	assert_true(fabs(recall(f, tok, 40) - recall(f, all, 40)) < 1e-12);
	free(f);
}

static void quest_bound_and_ranking(void **state)
{
	struct fx *f = fx_new(__func__);
	double bound[PAGES];
	uint32_t all[PAGES], pages[PAGES], tok[N], nt = 0, oracle[N];

	(void)state;
	for (uint32_t p = 0; p < PAGES; p++) {
		uint32_t end = (p + 1) * PAGE < N ? (p + 1) * PAGE : N;

		bound[p] = 0.0;
		for (uint32_t r = 0; r < G; r++) {
			double b = 0.0, best = -INFINITY;

			for (uint32_t i = 0; i < D; i++) {
				double qi = f->q[r * D + i], ext = qi >= 0 ? -INFINITY : INFINITY;

				/* The extreme that maximises qi * k_i: max if qi >= 0, else min. */
				for (uint32_t t = p * PAGE; t < end; t++)
					ext = qi >= 0 ? fmax(ext, kk(f, t, i)) : fmin(ext, kk(f, t, i));
				b += qi * ext;
			}
			for (uint32_t t = p * PAGE; t < end; t++) {
				double s = 0.0;

				for (uint32_t i = 0; i < D; i++)
					s += f->q[r * D + i] * kk(f, t, i);
				best = fmax(best, s);
			}
			assert_true(b >= best - 1e-9);	/* it is an upper bound */
			bound[p] += b;
		}
		all[p] = p;
	}
	by_mass = bound;
	qsort(all, PAGES, sizeof(*all), cmp_mass);
	assert_int_equal(5, nelssa_quest_pages(&f->g, f->q, f->k, N, PAGE, 5, pages));
	assert_memory_equal(all, pages, 5 * sizeof(*pages));
	/* At the same token budget the oracle never does worse. */
	for (uint32_t i = 0; i < 5; i++)
		for (uint32_t t = pages[i] * PAGE; t < (pages[i] + 1) * PAGE && t < N; t++)
			tok[nt++] = t;
	assert_int_equal(nt, nelssa_oracle_tokens(&f->g, f->q, f->k, N, nt, oracle));
	assert_true(recall(f, oracle, nt) >= recall(f, tok, nt) - 1e-12);
	free(f);
}

static void quest_finds_a_planted_needle(void **state)
{
	struct fx *f = fx_new(__func__);
	uint32_t pages[3];

	(void)state;
	/* Token 333 (page 20) points along the group's mean query, scaled. */
	for (uint32_t i = 0; i < D; i++) {
		double m = 0.0;

		for (uint32_t r = 0; r < G; r++)
			m += f->q[r * D + i];
		f->k[333 * D + i] = tu_to_kv(3.0 * m, NELSSA_KV_BF16);
	}
	assert_int_equal(3, nelssa_quest_pages(&f->g, f->q, f->k, N, PAGE, 3, pages));
	assert_int_equal(333 / PAGE, pages[0]);
	assert_int_equal(-EINVAL, nelssa_quest_pages(&f->g, f->q, f->k, N, 0, 3, pages));
	free(f);
}

/* The cluster bound is never below any member's q.k, and scores sum it. */
static void cluster_bound_is_an_upper_bound(void **state)
{
	struct fx *f = fx_new(__func__);
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	float *lo, *hi, *score;
	uint32_t *sizes;

	(void)state;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, f->k, N, D));
	lo = tu_alloc(sizeof(float) * ix.n_clusters * D);
	hi = tu_alloc(sizeof(float) * ix.n_clusters * D);
	score = tu_alloc(sizeof(float) * (ix.n_clusters + 1));
	sizes = tu_alloc(sizeof(uint32_t) * (ix.n_clusters + 1));
	nelssa_cluster_bounds(&ix, NELSSA_KV_BF16, f->k, lo, hi);
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		sizes[c] = ix.table[c].count;
	sizes[ix.n_clusters] = 0;
	nelssa_bound_scores(f->q, G, D, lo, hi, sizes, ix.n_clusters, score);
	for (uint32_t c = 0; c < ix.n_clusters; c++) {
		double sum_best = 0.0;

		for (uint32_t r = 0; r < G; r++) {
			double best = -INFINITY;

			for (uint32_t j = 0; j < ix.table[c].count; j++) {
				uint32_t t = ix.perm[ix.table[c].first + j];
				double s = 0.0;

				for (uint32_t i = 0; i < D; i++)
					s += f->q[r * D + i] * kk(f, t, i);
				best = fmax(best, s);
			}
			sum_best += best;
		}
		/* fp32 sums of D products of |x| ~ 1: a loose 1e-3 slack. */
		assert_true(score[c] >= sum_best - 1e-3);
		/* A singleton's box is the point itself: the bound is exact. */
		if (ix.table[c].count == 1)
			assert_true(fabs(score[c] - sum_best) < 1e-3);
	}
	/* An empty cluster scores -inf. */
	nelssa_bound_scores(f->q, G, D, lo, hi, sizes + ix.n_clusters, 1, score);
	assert_true(score[0] == -INFINITY);
	nelssa_kmeans_free(&ix);
	free(lo);
	free(hi);
	free(score);
	free(sizes);
	free(f);
}

/*
 * Normalised bounds: per row, a float64 softmax over the clusters of the
 * scaled bound computed here from the boxes; scores sum to the group size.
 */
static void bound_probs_match_float64(void **state)
{
	struct fx *f = fx_new(__func__);
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	float *lo, *hi, *score;
	uint32_t *sizes;
	double *u, total = 0.0;

	(void)state;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, f->k, N, D));
	lo = tu_alloc(sizeof(float) * ix.n_clusters * D);
	hi = tu_alloc(sizeof(float) * ix.n_clusters * D);
	score = tu_alloc(sizeof(float) * ix.n_clusters);
	sizes = tu_alloc(sizeof(uint32_t) * ix.n_clusters);
	u = tu_alloc(sizeof(double) * ix.n_clusters * (G + 1));
	nelssa_cluster_bounds(&ix, NELSSA_KV_BF16, f->k, lo, hi);
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		sizes[c] = c % 7 ? ix.table[c].count : 0;	/* some "empty" */
	assert_int_equal(0, nelssa_bound_probs(f->q, G, D, 0.5f, lo, hi, sizes, ix.n_clusters,
					       score));
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		u[(size_t)G * ix.n_clusters + c] = 0.0;
	for (uint32_t r = 0; r < G; r++) {
		double m = -INFINITY, sum = 0.0;

		for (uint32_t c = 0; c < ix.n_clusters; c++) {
			double s = 0.0;

			for (uint32_t i = 0; i < D; i++) {
				double q = f->q[r * D + i];

				s += fmax(q * hi[(size_t)c * D + i], q * lo[(size_t)c * D + i]);
			}
			u[(size_t)r * ix.n_clusters + c] = 0.5 * s;
			if (sizes[c])
				m = fmax(m, 0.5 * s);
		}
		for (uint32_t c = 0; c < ix.n_clusters; c++)
			if (sizes[c])
				sum += exp(u[(size_t)r * ix.n_clusters + c] - m);
		for (uint32_t c = 0; c < ix.n_clusters; c++)
			if (sizes[c])
				u[(size_t)G * ix.n_clusters + c] +=
					exp(u[(size_t)r * ix.n_clusters + c] - m) / sum;
	}
	for (uint32_t c = 0; c < ix.n_clusters; c++) {
		if (!sizes[c]) {
			assert_true(score[c] == -INFINITY);
			continue;
		}
		assert_true(fabs(score[c] - u[(size_t)G * ix.n_clusters + c]) < 1e-5);
		total += score[c];
	}
	assert_true(fabs(total - G) < 1e-4);
	assert_int_equal(-EINVAL, nelssa_bound_probs(f->q, G, D, 0.0f, lo, hi, sizes,
						     ix.n_clusters, score));
	nelssa_kmeans_free(&ix);
	free(lo);
	free(hi);
	free(score);
	free(sizes);
	free(u);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(token_mass_matches_float64),
		cmocka_unit_test(oracle_is_the_mass_sort),
		cmocka_unit_test(quest_bound_and_ranking),
		cmocka_unit_test(quest_finds_a_planted_needle),
		cmocka_unit_test(cluster_bound_is_an_upper_bound),
		cmocka_unit_test(bound_probs_match_float64),
	};

	tu_init("client_baselines");
	return cmocka_run_group_tests_name("client_baselines", tests, NULL, NULL);
}
