// SPDX-License-Identifier: MIT
/*
 * The accuracy harness's baselines (client/baselines.c): token masses
 * against masses derived from the float64 reference's LSE, the oracle
 * against a full sort, Quest's bound against the true per-page maximum
 * and its ranking against an independently computed bound, and the
 * oracle never losing to Quest at the same token budget; the far-member
 * probe against a brute-force float64 search and softmax, and the shipped
 * selection (nelssa_select()) against a greedy fill written here.
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

#include <nelssa/half.h>
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
	f->g = (struct nelssa_attn_geom){ D, G, NELSSA_KV_BF16, 0.5f, 0 };
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

/*
 * A cluster index of a fixture's keys and what the cluster tests derive
 * from it: each cluster's box and far key, and room for the scores.
 */
struct cfx {
	struct nelssa_cluster_index ix;
	float *lo, *hi;		/* [n_clusters][D], nelssa_cluster_bounds() */
	float *far;		/* [n_clusters][D], nelssa_cluster_far_keys() */
	float *score;		/* [n_clusters + 1]: the scores under test */
	float *cscore;		/* [n_clusters + 1]: the centroids', where compared */
	uint32_t *sizes;	/* [n_clusters + 1]: each cluster's count, then 0 */
	uint32_t *ids;		/* [n_clusters] */
};

static void cfx_build(struct cfx *x, const struct fx *f, const struct nelssa_kmeans_cfg *cfg)
{
	struct nelssa_cluster_index *ix = &x->ix;

	assert_int_equal(0, nelssa_kmeans_build(ix, cfg, NELSSA_KV_BF16, f->k, N, D));
	x->lo = tu_alloc(sizeof(float) * ix->n_clusters * D);
	x->hi = tu_alloc(sizeof(float) * ix->n_clusters * D);
	x->far = tu_alloc(sizeof(float) * ix->n_clusters * D);
	x->score = tu_alloc(sizeof(float) * (ix->n_clusters + 1));
	x->cscore = tu_alloc(sizeof(float) * (ix->n_clusters + 1));
	x->sizes = tu_alloc(sizeof(uint32_t) * (ix->n_clusters + 1));
	x->ids = tu_alloc(sizeof(uint32_t) * ix->n_clusters);
	nelssa_cluster_bounds(ix, NELSSA_KV_BF16, f->k, x->lo, x->hi);
	nelssa_cluster_far_keys(ix, NELSSA_KV_BF16, f->k, x->far);
	for (uint32_t c = 0; c < ix->n_clusters; c++)
		x->sizes[c] = ix->table[c].count;
	x->sizes[ix->n_clusters] = 0;
}

static void cfx_free(struct cfx *x)
{
	nelssa_kmeans_free(&x->ix);
	free(x->lo);
	free(x->hi);
	free(x->far);
	free(x->score);
	free(x->cscore);
	free(x->sizes);
	free(x->ids);
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
	struct cfx x;
	const struct nelssa_cluster_index *ix = &x.ix;

	(void)state;
	cfx_build(&x, f, &cfg);
	nelssa_bound_scores(f->q, G, D, x.lo, x.hi, x.sizes, ix->n_clusters, x.score);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		double sum_best = 0.0;

		for (uint32_t r = 0; r < G; r++) {
			double best = -INFINITY;

			for (uint32_t j = 0; j < ix->table[c].count; j++) {
				uint32_t t = ix->perm[ix->table[c].first + j];
				double s = 0.0;

				for (uint32_t i = 0; i < D; i++)
					s += f->q[r * D + i] * kk(f, t, i);
				best = fmax(best, s);
			}
			sum_best += best;
		}
		/* fp32 sums of D products of |x| ~ 1: a loose 1e-3 slack. */
		assert_true(x.score[c] >= sum_best - 1e-3);
		/* A singleton's box is the point itself: the bound is exact. */
		if (ix->table[c].count == 1)
			assert_true(fabs(x.score[c] - sum_best) < 1e-3);
	}
	/* An empty cluster scores -inf. */
	nelssa_bound_scores(f->q, G, D, x.lo, x.hi, x.sizes + ix->n_clusters, 1, x.score);
	assert_true(x.score[0] == -INFINITY);
	cfx_free(&x);
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
	struct cfx x;
	const struct nelssa_cluster_index *ix = &x.ix;
	double *u, total = 0.0;

	(void)state;
	cfx_build(&x, f, &cfg);
	u = tu_alloc(sizeof(double) * ix->n_clusters * (G + 1));
	for (uint32_t c = 0; c < ix->n_clusters; c++)
		x.sizes[c] = c % 7 ? ix->table[c].count : 0;	/* some "empty" */
	assert_int_equal(0, nelssa_bound_probs(f->q, G, D, 0.5f, x.lo, x.hi, x.sizes,
					       ix->n_clusters, x.score));
	for (uint32_t c = 0; c < ix->n_clusters; c++)
		u[(size_t)G * ix->n_clusters + c] = 0.0;
	for (uint32_t r = 0; r < G; r++) {
		double m = -INFINITY, sum = 0.0;

		for (uint32_t c = 0; c < ix->n_clusters; c++) {
			double s = 0.0;

			for (uint32_t i = 0; i < D; i++) {
				double q = f->q[r * D + i];

				s += fmax(q * x.hi[(size_t)c * D + i], q * x.lo[(size_t)c * D + i]);
			}
			u[(size_t)r * ix->n_clusters + c] = 0.5 * s;
			if (x.sizes[c])
				m = fmax(m, 0.5 * s);
		}
		for (uint32_t c = 0; c < ix->n_clusters; c++)
			if (x.sizes[c])
				sum += exp(u[(size_t)r * ix->n_clusters + c] - m);
		for (uint32_t c = 0; c < ix->n_clusters; c++)
			if (x.sizes[c])
				u[(size_t)G * ix->n_clusters + c] +=
					exp(u[(size_t)r * ix->n_clusters + c] - m) / sum;
	}
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		if (!x.sizes[c]) {
			assert_true(x.score[c] == -INFINITY);
			continue;
		}
		assert_true(fabs(x.score[c] - u[(size_t)G * ix->n_clusters + c]) < 1e-5);
		total += x.score[c];
	}
	assert_true(fabs(total - G) < 1e-4);
	assert_int_equal(-EINVAL, nelssa_bound_probs(f->q, G, D, 0.0f, x.lo, x.hi, x.sizes,
						     ix->n_clusters, x.score));
	cfx_free(&x);
	free(u);
	free(f);
}

/* float64 squared distance of token @t's key from centroid @c. */
static double dist2(const struct fx *f, const struct nelssa_cluster_index *ix, uint32_t c,
		    uint32_t t)
{
	double s = 0.0;

	for (uint32_t i = 0; i < D; i++) {
		double e = kk(f, t, i) - ix->centroids[(size_t)c * D + i];

		s += e * e;
	}
	return s;
}

/*
 * float64 per-row softmax of scale * max(q.c, q.far, q.rest), rest the
 * other members' mean (n c - far) / (n - 1), summed over rows.
 */
static void far_ref(const struct fx *f, const struct nelssa_cluster_index *ix, const float *far,
		    const uint32_t *sizes, double scale, double *ref)
{
	const uint32_t n = ix->n_clusters;
	double *u = tu_alloc(sizeof(double) * n);

	for (uint32_t c = 0; c < n; c++)
		ref[c] = sizes[c] ? 0.0 : -INFINITY;
	for (uint32_t r = 0; r < G; r++) {
		double m = -INFINITY, sum = 0.0;

		for (uint32_t c = 0; c < n; c++) {
			double a = 0.0, b = 0.0;

			for (uint32_t i = 0; i < D; i++) {
				a += (double)f->q[r * D + i] * ix->centroids[(size_t)c * D + i];
				b += (double)f->q[r * D + i] * far[(size_t)c * D + i];
			}
			u[c] = scale * (a > b ? a : b);
			if (sizes[c] > 1)
				u[c] = fmax(u[c], scale * (sizes[c] * a - b) / (sizes[c] - 1));
			if (sizes[c])
				m = fmax(m, u[c]);
		}
		for (uint32_t c = 0; c < n; c++)
			if (sizes[c])
				sum += exp(u[c] - m);
		for (uint32_t c = 0; c < n; c++)
			if (sizes[c])
				ref[c] += exp(u[c] - m) / sum;
	}
	free(u);
}

/*
 * The far key is, bit for bit, the raw key of the member a brute-force
 * float64 search finds farthest from the centroid (the first on a tie);
 * its scores match a float64 softmax computed here.
 */
static void far_probe_matches_float64(void **state)
{
	struct fx *f = fx_new(__func__);
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct cfx x;
	const struct nelssa_cluster_index *ix = &x.ix;
	double *ref, total = 0.0;

	(void)state;
	cfx_build(&x, f, &cfg);
	ref = tu_alloc(sizeof(double) * ix->n_clusters);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		uint32_t best = ix->perm[ix->table[c].first];

		for (uint32_t j = 1; j < ix->table[c].count; j++) {
			uint32_t t = ix->perm[ix->table[c].first + j];

			if (dist2(f, ix, c, t) > dist2(f, ix, c, best))
				best = t;
		}
		for (uint32_t i = 0; i < D; i++)
			assert_true(x.far[(size_t)c * D + i] == (float)kk(f, best, i));
		x.sizes[c] = c % 5 ? ix->table[c].count : 0;	/* some "empty" */
	}
	assert_int_equal(0, nelssa_far_probs(f->q, G, D, 0.5f, ix->centroids, x.far, x.sizes,
					     ix->n_clusters, x.score));
	far_ref(f, ix, x.far, x.sizes, 0.5, ref);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		if (!x.sizes[c]) {
			assert_true(x.score[c] == -INFINITY);
			continue;
		}
		assert_true(fabs(x.score[c] - ref[c]) < 1e-5);
		total += x.score[c];
	}
	assert_true(fabs(total - G) < 1e-4);
	assert_int_equal(-EINVAL, nelssa_far_probs(f->q, G, D, 0.0f, ix->centroids, x.far, x.sizes,
						   ix->n_clusters, x.score));
	assert_int_equal(-EINVAL, nelssa_far_probs(f->q, 0, D, 0.5f, ix->centroids, x.far, x.sizes,
						   ix->n_clusters, x.score));
	cfx_free(&x);
	free(ref);
	free(f);
}

/* q . x in float64 for a float row. */
static double qdot(const float *q, const float *x)
{
	double s = 0.0;

	for (uint32_t i = 0; i < D; i++)
		s += (double)q[i] * x[i];
	return s;
}

/*
 * What the probe is for: a member whose key is its cluster's plus a
 * strong component along row 0's query stays in the cluster (the mean
 * dilutes it), and the far probe ranks that cluster first for row 0
 * where the centroid scores do not.  The test seeds differ run to run,
 * so the member is moved by exactly enough, and in a cluster chosen so
 * that the move cannot lift the centroid to the top: the premise holds
 * by construction for every draw, not by luck.
 */
static void far_probe_finds_a_hidden_member(void **state)
{
	const double margin = 4.0;	/* logits, before the 0.5 scale */
	struct fx *f = fx_new(__func__);
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct cfx x;
	struct nelssa_cluster_index *ix = &x.ix;
	double qn = 0.0, probe_max = -INFINITY, cen_max = -INFINITY, best_room = -INFINITY;
	double *probe, add = 0.0;
	uint32_t hidden = UINT32_MAX, t = 0;

	(void)state;
	cfg.outlier_per_mille = 0;	/* no split: the member stays hidden */
	cfx_build(&x, f, &cfg);
	for (uint32_t i = 0; i < D; i++)
		qn += (double)f->q[i] * f->q[i];
	qn = sqrt(qn);
	/* Each cluster's probe logit for row 0: centroid, far key, the rest. */
	probe = tu_alloc(sizeof(double) * ix->n_clusters);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		const double n = x.sizes[c], lc = qdot(f->q, ix->centroids + (size_t)c * D);
		const double lf = qdot(f->q, x.far + (size_t)c * D);

		probe[c] = fmax(lc, lf);
		if (n > 1)
			probe[c] = fmax(probe[c], (n * lc - lf) / (n - 1));
		probe_max = fmax(probe_max, probe[c]);
		cen_max = fmax(cen_max, lc);
	}
	/*
	 * Moving member m by a along q/|q| lifts its logit by a |q| and its
	 * centroid's by a |q| / n.  In each cluster of 8 or more take the
	 * member most aligned with q, and a just large enough for it to beat
	 * every other cluster's probe by the margin and to end up the
	 * cluster's farthest member (so that it is the far key the probe
	 * reads); of those clusters, the one whose centroid then stays
	 * furthest below the top.
	 */
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		const uint32_t n = x.sizes[c], first = ix->table[c].first;
		const float *cen = ix->centroids + (size_t)c * D;
		double need, room, best_dot = -INFINITY;
		uint32_t m = 0;

		if (n < 8)
			continue;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t tok = ix->perm[first + j];
			double dq = 0.0;

			for (uint32_t i = 0; i < D; i++)
				dq += (double)f->q[i] * kk(f, tok, i);
			if (dq > best_dot) {
				best_dot = dq;
				m = tok;
			}
		}
		need = fmax(probe_max + margin - best_dot, 0.0) / qn;
		for (int grow = 0; grow < 400; grow++, need += 0.25) {
			double dm = 0.0, dmax = 0.0;

			for (uint32_t j = 0; j < n; j++) {
				uint32_t tok = ix->perm[first + j];
				double d2 = 0.0;

				for (uint32_t i = 0; i < D; i++) {
					double u = need * f->q[i] / qn;
					double k = kk(f, tok, i) + (tok == m ? u : 0.0);

					d2 += (k - cen[i] - u / n) * (k - cen[i] - u / n);
				}
				if (tok == m)
					dm = d2;
				else
					dmax = fmax(dmax, d2);
			}
			if (dm > 1.1 * dmax)
				break;
		}
		room = cen_max - (qdot(f->q, cen) + need * qn / n);
		if (room > best_room) {
			best_room = room;
			hidden = c;
			t = m;
			add = need;
		}
	}
	assert_true(hidden != UINT32_MAX);
	/* bf16 rounding of the moved key moves its logit by far less than this. */
	assert_true(best_room > margin / 2);
	/* Move it (in the stored keys and the centroid alike, as a rebuilt index would). */
	for (uint32_t i = 0; i < D; i++) {
		double d = add * f->q[i] / qn;
		float nk = (float)(kk(f, t, i) + d);

		f->k[(size_t)t * D + i] = tu_to_kv(nk, NELSSA_KV_BF16);
		ix->centroids[(size_t)hidden * D + i] += (float)(d / x.sizes[hidden]);
	}
	nelssa_cluster_far_keys(ix, NELSSA_KV_BF16, f->k, x.far);	/* of the moved keys */
	/* Row 0 alone: a one-row group. */
	assert_int_equal(0, nelssa_far_probs(f->q, 1, D, 0.5f, ix->centroids, x.far, x.sizes,
					     ix->n_clusters, x.score));
	assert_int_equal(0, nelssa_centroid_scores(f->q, 1, D, 0.5f, ix->centroids, x.sizes,
						   ix->n_clusters, x.cscore));
	assert_int_equal(1, nelssa_topk(x.score, ix->n_clusters, 1, x.ids));
	assert_int_equal(hidden, x.ids[0]);
	assert_int_equal(1, nelssa_topk(x.cscore, ix->n_clusters, 1, x.ids));
	assert_int_not_equal(hidden, x.ids[0]);
	free(probe);
	cfx_free(&x);
	free(f);
}

/*
 * In a pair both members are equally far from the mean, so the far key
 * may be the weaker one; the probe still sees the stronger, as the other
 * members' mean, which in a pair is that member.  Cluster 0 = {strong,
 * weak} with the weak one as its far key, cluster 1 a single key between
 * the pair's mean and its strong member: the probe ranks the pair first,
 * at the strong member's logit, the centroids rank the single key first.
 */
/*
 * Known answer on a hand-built index of three clusters, the middle one
 * empty: each far row is the member farthest from its centroid, and the
 * empty cluster's row is zeros (its products are computed with the rest
 * and must read defined values), whatever the buffer held before.
 */
static void far_keys_known_answer(void **state)
{
	enum { d = 4 };
	static const float keys[4][d] = {
		{ 1, 0, 0, 0 }, { 3, 0, 0, 0 },		/* cluster 0: centroid 1.5 */
		{ 0, 1, 0, 0 }, { 0, -2, 0, 0 },	/* cluster 2: centroid 0 */
	};
	uint16_t k[4 * d];
	uint32_t perm[4] = { 0, 1, 2, 3 };
	struct nelssa_cluster table[3] = { { 0, 2 }, { 2, 0 }, { 2, 2 } };
	float centroids[3 * d] = { 1.5f, 0, 0, 0, 9, 9, 9, 9, 0, 0, 0, 0 };
	struct nelssa_cluster_index ix = {
		.head_dim = d, .n_tokens = 4, .n_clusters = 3, .perm = perm, .table = table,
		.centroids = centroids,
	};
	float far[3 * d];

	(void)state;
	for (int i = 0; i < 4 * d; i++)
		k[i] = nelssa_f32_to_bf16(keys[i / d][i % d]);
	memset(far, 0xff, sizeof(far));		/* NaN everywhere */
	nelssa_cluster_far_keys(&ix, NELSSA_KV_BF16, k, far);
	for (int i = 0; i < d; i++) {
		assert_true(far[i] == keys[1][i]);		/* |3 - 1.5| > |1 - 1.5| */
		assert_true(far[d + i] == 0.0f && !signbit(far[d + i]));
		assert_true(far[2 * d + i] == keys[3][i]);	/* |-2| > |1| */
	}
}

static void far_probe_sees_both_members_of_a_pair(void **state)
{
	float q[D], cen[2 * D], far[2 * D], score[2], cscore[2];
	const uint32_t sizes[2] = { 2, 1 };
	double qn = 0.0, strong = 0.0, u0, u1, m;
	uint32_t ids[1];
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, q, D, 1.0);
	for (uint32_t i = 0; i < D; i++)
		qn += (double)q[i] * q[i];
	for (uint32_t i = 0; i < D; i++) {
		float s = (float)(8.0 * q[i] / sqrt(qn)), w = (float)(-2.0 * q[i] / sqrt(qn));

		far[i] = w;				/* the weak member */
		cen[i] = 0.5f * (s + w);		/* the pair's mean */
		cen[D + i] = far[D + i] = (float)(5.0 * q[i] / sqrt(qn));
		strong += (double)q[i] * s;
	}
	assert_int_equal(0, nelssa_far_probs(q, 1, D, 0.5f, cen, far, sizes, 2, score));
	assert_int_equal(0, nelssa_centroid_scores(q, 1, D, 0.5f, cen, sizes, 2, cscore));
	assert_int_equal(1, nelssa_topk(score, 2, 1, ids));
	assert_int_equal(0, ids[0]);
	assert_int_equal(1, nelssa_topk(cscore, 2, 1, ids));
	assert_int_equal(1, ids[0]);
	/* The pair scores at its strong member's logit: a float64 softmax. */
	u0 = 0.5 * strong;
	u1 = 0.5 * 5.0 * sqrt(qn);
	m = fmax(u0, u1);
	assert_true(fabs(score[0] - exp(u0 - m) / (exp(u0 - m) + exp(u1 - m))) < 1e-4);
}

struct ranked {
	double s;
	uint32_t id;
};

static int by_rank(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->s != y->s)
		return x->s > y->s ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Greedy fill of @upto tokens from a full sort of @score, skipping @taken. */
static uint64_t greedy(const float *score, const uint32_t *sizes, uint32_t n, uint64_t upto,
		       uint64_t used, unsigned char *taken, uint32_t *out, uint32_t *n_out)
{
	struct ranked *r = tu_alloc(sizeof(*r) * n);

	for (uint32_t c = 0; c < n; c++)
		r[c] = (struct ranked){ score[c], c };
	qsort(r, n, sizeof(*r), by_rank);
	for (uint32_t i = 0; i < n && used < upto; i++) {
		uint32_t c = r[i].id;

		if (taken[c] || !sizes[c] || r[i].s == -INFINITY || used + sizes[c] > upto)
			continue;
		taken[c] = 1;
		used += sizes[c];
		out[(*n_out)++] = c;
	}
	free(r);
	return used;
}

/*
 * The shipped selection: the far probe fills its share of the budget,
 * then the centroids the rest, then either tops up -- checked against a
 * greedy fill over full sorts written here; a zero share is the centroid
 * fill alone; the budget is never exceeded.
 */
static void select_is_the_documented_fill(void **state)
{
	struct fx *f = fx_new(__func__);
	const struct nelssa_kmeans_cfg kc = NELSSA_KMEANS_DEFAULT;
	const struct nelssa_select_cfg def = NELSSA_SELECT_DEFAULT;
	struct cfx x;
	const struct nelssa_cluster_index *ix = &x.ix;
	uint32_t *want;
	unsigned char *taken;

	(void)state;
	cfx_build(&x, f, &kc);
	want = tu_alloc(sizeof(uint32_t) * ix->n_clusters);
	taken = tu_alloc(ix->n_clusters);
	assert_int_equal(0, nelssa_far_probs(f->q, G, D, 0.5f, ix->centroids, x.far, x.sizes,
					     ix->n_clusters, x.score));
	assert_int_equal(0, nelssa_centroid_scores(f->q, G, D, 0.5f, ix->centroids, x.sizes,
						   ix->n_clusters, x.cscore));
	for (double share = 0.0; share <= 1.0; share += 0.25)
		for (uint64_t budget = 1; budget <= N; budget = budget * 3 + 7) {
			const struct nelssa_select_cfg cfg = { share, 1 };
			uint64_t tok = 0, used = 0, sum = 0;
			uint32_t nw = 0;
			int n;

			memset(taken, 0, ix->n_clusters);
			if (share > 0.0) {
				used = greedy(x.score, x.sizes, ix->n_clusters,
					      share >= 1.0 ? budget : (uint64_t)(share * budget),
					      used, taken, want, &nw);
				used = greedy(x.cscore, x.sizes, ix->n_clusters, budget, used,
					      taken, want, &nw);
				used = greedy(x.score, x.sizes, ix->n_clusters, budget, used,
					      taken, want, &nw);
			}
			used = greedy(x.cscore, x.sizes, ix->n_clusters, budget, used, taken, want,
				      &nw);
			n = nelssa_select(&cfg, f->q, G, D, 0.5f, ix->centroids, x.far, x.sizes,
					  ix->n_clusters, budget, x.ids, &tok);
			assert_int_equal((int)nw, n);
			for (int i = 0; i < n; i++) {
				assert_int_equal(want[i], x.ids[i]);
				sum += x.sizes[x.ids[i]];
			}
			assert_true(tok == used && sum == used && used <= budget);
		}
	assert_true(def.far_share > 0.0 && def.far_share < 1.0 &&
		    def.estimate == NELSSA_ESTIMATE_SPREAD);
	{
		const struct nelssa_select_cfg bad = { 1.5, 1 }, probe = { 0.25, 1 };

		assert_int_equal(-EINVAL, nelssa_select(&bad, f->q, G, D, 0.5f, ix->centroids,
							x.far, x.sizes, ix->n_clusters, 10, x.ids,
							NULL));
		assert_int_equal(-EINVAL, nelssa_select(&probe, f->q, G, D, 0.5f, ix->centroids,
							NULL, x.sizes, ix->n_clusters, 10, x.ids,
							NULL));
	}
	cfx_free(&x);
	free(want);
	free(taken);
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
		cmocka_unit_test(far_probe_matches_float64),
		cmocka_unit_test(far_probe_finds_a_hidden_member),
		cmocka_unit_test(far_keys_known_answer),
		cmocka_unit_test(far_probe_sees_both_members_of_a_pair),
		cmocka_unit_test(select_is_the_documented_fill),
	};

	tu_init("client_baselines");
	return cmocka_run_group_tests_name("client_baselines", tests, NULL, NULL);
}
