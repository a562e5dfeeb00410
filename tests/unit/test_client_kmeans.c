// SPDX-License-Identifier: MIT
/*
 * Segmented k-means (client/kmeans.c): the planted clusters of separable
 * data are found exactly, each token ends at its best centroid, centroids
 * are the float64 mean of their members, the index is a well-formed
 * cluster-contiguous layout, runs are deterministic, and appending a
 * decode-time chunk leaves every old byte as it was.
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

#include "../../client/kmeans_internal.h"
#include "testutil.h"

#define D 32

static uint16_t *random_keys(struct tu_rng *rng, uint32_t n)
{
	uint16_t *k = tu_alloc(sizeof(uint16_t) * D * (n ? n : 1));

	tu_fill_kv(rng, k, (size_t)n * D, 1.0, NELSSA_KV_BF16);
	return k;
}

static double key(const uint16_t *k, uint32_t t, uint32_t i)
{
	return tu_from_kv(k[(size_t)t * D + i], NELSSA_KV_BF16);
}

/* perm is a bijection, clusters tile [0, n) in order, none empty. */
static void check_layout(const struct nelssa_cluster_index *ix, uint32_t n)
{
	unsigned char *seen = calloc(n ? n : 1, 1);
	uint32_t pos = 0;

	assert_non_null(seen);
	assert_int_equal(n, ix->n_tokens);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		assert_int_equal(pos, ix->table[c].first);
		assert_true(ix->table[c].count > 0);
		for (uint32_t i = 1; i < ix->table[c].count; i++)	/* token order kept */
			assert_true(ix->perm[pos + i - 1] < ix->perm[pos + i]);
		pos += ix->table[c].count;
	}
	assert_int_equal(n, pos);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(ix->perm[i] < n);
		assert_false(seen[ix->perm[i]]);
		seen[ix->perm[i]] = 1;
	}
	free(seen);
}

/* Centroids equal the float64 mean of their members' keys. */
static void check_centroids(const struct nelssa_cluster_index *ix, const uint16_t *k)
{
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		for (uint32_t i = 0; i < D; i++) {
			double m = 0.0;

			for (uint32_t j = 0; j < ix->table[c].count; j++)
				m += key(k, ix->perm[ix->table[c].first + j], i);
			m /= ix->table[c].count;
			assert_true(fabs(ix->centroids[(size_t)c * D + i] - m) < 1e-4 * (1 + fabs(m)));
		}
	}
}

/* Random directions of norm @scale, [@n][D]. */
static void random_dirs(struct tu_rng *rng, double *dir, uint32_t n, double scale)
{
	for (uint32_t p = 0; p < n; p++) {
		double norm = 0.0;

		for (uint32_t i = 0; i < D; i++) {
			dir[p * D + i] = tu_normal(rng);
			norm += dir[p * D + i] * dir[p * D + i];
		}
		for (uint32_t i = 0; i < D; i++)
			dir[p * D + i] *= scale / sqrt(norm);
	}
}

/*
 * Three segments of 400 tokens; each segment is 25 blocks of 16 tokens,
 * every block a distinct topic: a unit direction scaled by 3, plus a large
 * offset shared by all keys (which centring must remove) and small noise.
 */
static void make_topics(struct tu_rng *rng, uint16_t *k, double *offset)
{
	const uint32_t topics = 40;
	double *dir = tu_alloc(sizeof(double) * topics * D);
	uint32_t order[40];

	random_dirs(rng, dir, topics, 3.0);
	for (uint32_t i = 0; i < D; i++)
		offset[i] = 4.0 + tu_normal(rng);
	for (uint32_t s = 0; s < 3; s++) {
		for (uint32_t p = 0; p < topics; p++)
			order[p] = p;
		for (uint32_t p = topics; p > 1; p--) {
			uint32_t j = tu_below(rng, p), t = order[p - 1];

			order[p - 1] = order[j];
			order[j] = t;
		}
		for (uint32_t t = 0; t < 400; t++)
			for (uint32_t i = 0; i < D; i++)
				k[(size_t)(s * 400 + t) * D + i] = tu_to_kv(
					offset[i] + dir[order[t / 16] * D + i] +
						0.05 * tu_normal(rng), NELSSA_KV_BF16);
	}
	free(dir);
}

static void separable_topics_found_exactly(void **state)
{
	const uint32_t n = 1200;
	const struct nelssa_kmeans_cfg cfg = { .segment = 400, .cluster_tokens = 16, .iters = 10,
					       .chunk = 1024 };
	uint16_t *k = tu_alloc(sizeof(uint16_t) * n * D);
	struct nelssa_cluster_index ix;
	struct tu_rng rng;
	double offset[D];

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	make_topics(&rng, k, offset);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	check_layout(&ix, n);
	check_centroids(&ix, k);
	/* Exactly the planted blocks, in order. */
	assert_int_equal(75, ix.n_clusters);
	for (uint32_t c = 0; c < 75; c++) {
		assert_int_equal(16, ix.table[c].count);
		assert_int_equal(16 * c, ix.perm[ix.table[c].first]);
	}
	/* Each token's inner product is largest with its own centred centroid. */
	for (uint32_t t = 0; t < n; t++) {
		uint32_t s = t / 400, own = 0;
		double best = -INFINITY;
		uint32_t arg = UINT32_MAX;

		for (uint32_t c = 0; c < 75; c++)
			for (uint32_t j = 0; j < 16; j++)
				if (ix.perm[ix.table[c].first + j] == t)
					own = c;
		for (uint32_t c = s * 25; c < s * 25 + 25; c++) {
			double dot = 0.0, nc = 0.0;

			for (uint32_t i = 0; i < D; i++) {
				double ci = ix.centroids[(size_t)c * D + i] - ix.key_mean[i];

				dot += (key(k, t, i) - ix.key_mean[i]) * ci;
				nc += ci * ci;
			}
			if (dot / sqrt(nc) > best) {
				best = dot / sqrt(nc);
				arg = c;
			}
		}
		assert_int_equal(own, arg);
	}
	nelssa_kmeans_free(&ix);
	free(k);
}

/* Cluster holding token @t. */
static uint32_t cluster_of(const struct nelssa_cluster_index *ix, uint32_t t)
{
	for (uint32_t c = 0; c < ix->n_clusters; c++)
		for (uint32_t j = 0; j < ix->table[c].count; j++)
			if (ix->perm[ix->table[c].first + j] == t)
				return c;
	fail_msg("token %u in no cluster", t);
	return UINT32_MAX;
}

/*
 * One key of the separable data replaced by a needle: the offset plus an
 * unrelated direction.  With outlier splitting it becomes a cluster of its
 * own, numbered after its segment's regular clusters, whose centroid is
 * the needle's key; without, it hides in its block's cluster.
 */
static void needle_becomes_its_own_cluster(void **state)
{
	const uint32_t n = 1200, needle = 203;	/* not an initial centroid */
	struct nelssa_kmeans_cfg cfg = { .segment = 400, .cluster_tokens = 16, .iters = 10,
					 .chunk = 1024, .outlier_per_mille = 16,
					 .outlier_cos = 0.5f };
	uint16_t *k = tu_alloc(sizeof(uint16_t) * n * D);
	struct nelssa_cluster_index ix;
	struct tu_rng rng;
	double offset[D], dir[D];
	uint32_t c;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	make_topics(&rng, k, offset);
	/*
	 * Unrelated for sure: in 32 dimensions a random direction lies within
	 * 60 degrees of one of 40 topics often enough to fail one seed in a
	 * few dozen, and then it rightly joins that topic.  Draw again until
	 * it is far from every key.
	 */
	for (;;) {
		double worst = 0.0;

		random_dirs(&rng, dir, 1, 3.0);
		for (uint32_t t = 0; t < n; t++) {
			double dot = 0.0, nn = 0.0;

			for (uint32_t i = 0; i < D; i++) {
				double v = key(k, t, i) - offset[i];

				dot += v * dir[i];
				nn += v * v;
			}
			worst = fmax(worst, dot / (3.0 * sqrt(nn)));
		}
		if (worst < 0.3)
			break;
	}
	for (uint32_t i = 0; i < D; i++)
		k[(size_t)needle * D + i] = tu_to_kv(offset[i] + dir[i], NELSSA_KV_BF16);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	check_layout(&ix, n);
	check_centroids(&ix, k);
	assert_int_equal(76, ix.n_clusters);
	c = cluster_of(&ix, needle);
	assert_int_equal(25, c);
	assert_int_equal(1, ix.table[c].count);
	for (uint32_t i = 0; i < D; i++)
		assert_true(ix.centroids[(size_t)c * D + i] == (float)key(k, needle, i));
	assert_int_equal(15, ix.table[cluster_of(&ix, needle - 1)].count);	/* its block */
	nelssa_kmeans_free(&ix);

	cfg.outlier_per_mille = 0;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	assert_int_equal(75, ix.n_clusters);
	/* In the nearest block's cluster, its own or another. */
	assert_true(ix.table[cluster_of(&ix, needle)].count >= 16);
	nelssa_kmeans_free(&ix);
	free(k);
}

/*
 * A key of the separable data given a moderate extra component: it still
 * points its topic's way (cosine ~0.9, so the cosine rule keeps it) but
 * lies five times further from the cluster mean than its neighbours.  The
 * residual rule splits it off; with outlier_ratio = 0 it stays hidden.
 */
static void strong_member_splits_by_residual(void **state)
{
	const uint32_t n = 1200, member = 203;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	uint16_t *k = tu_alloc(sizeof(uint16_t) * n * D);
	struct nelssa_cluster_index ix;
	struct tu_rng rng;
	double offset[D], dir[D];
	uint32_t c;

	(void)state;
	cfg.segment = 400;
	tu_rng_for(&rng, __func__, 0);
	make_topics(&rng, k, offset);
	random_dirs(&rng, dir, 1, 1.5);
	for (uint32_t i = 0; i < D; i++)
		k[(size_t)member * D + i] = tu_to_kv(key(k, member, i) + dir[i], NELSSA_KV_BF16);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	check_layout(&ix, n);
	check_centroids(&ix, k);
	c = cluster_of(&ix, member);
	assert_int_equal(1, ix.table[c].count);
	for (uint32_t i = 0; i < D; i++)
		assert_true(ix.centroids[(size_t)c * D + i] == (float)key(k, member, i));
	nelssa_kmeans_free(&ix);

	cfg.outlier_ratio = 0.0f;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	assert_true(ix.table[cluster_of(&ix, member)].count >= 16);
	nelssa_kmeans_free(&ix);
	free(k);
}

/*
 * Keys whose mean drifts along the context (a moving offset far larger
 * than the topics) and which carry a massive channel (value 50, spread
 * 6): per-segment centring and damping must still find the topics, every
 * centroid must be the float64 mean of its raw member keys, so that a
 * query's centroid logit is its members' mean logit exactly, and the LSE
 * of attention over selected clusters, and of the estimate, must be the
 * float64 LSEs computed from the raw keys.
 */
static void drift_and_massive_channels(void **state)
{
	const uint32_t n = 3000, topics = 30, G = 4;
	const struct nelssa_attn_geom g = { D, G, NELSSA_KV_BF16, 0.25f, 0 };
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	uint16_t *k = tu_alloc(sizeof(uint16_t) * n * D), *v = tu_alloc(sizeof(uint16_t) * n * D);
	uint16_t *ck = tu_alloc(sizeof(uint16_t) * n * D), *cv = tu_alloc(sizeof(uint16_t) * n * D);
	double *dir = tu_alloc(sizeof(double) * topics * D), drift[2][D];
	uint32_t *topic = tu_alloc(sizeof(uint32_t) * n), *sizes, *sel, pure = 0, n_sel;
	float q[4 * D], o[4 * D], lse[4], *vsum;
	struct nelssa_cluster_index ix;
	struct tu_rng rng;

	(void)state;
	cfg.segment = 250;
	tu_rng_for(&rng, __func__, 0);
	random_dirs(&rng, dir, topics, 6.0);
	random_dirs(&rng, drift[0], 2, 12.0);
	for (uint32_t t = 0; t < n; t++) {
		double ph = 1.5708 * t / n;	/* 1.6 of movement a segment, 12 in all */

		if (t % 16 == 0)
			topic[t] = tu_below(&rng, topics);
		else
			topic[t] = topic[t - 1];
		for (uint32_t i = 0; i < D; i++) {
			double x = dir[topic[t] * D + i] + cos(ph) * drift[0][i] +
				   sin(ph) * drift[1][i] + 0.05 * tu_normal(&rng);

			if (i == 7)
				x += 50.0 + 6.0 * tu_normal(&rng);
			k[(size_t)t * D + i] = tu_to_kv(x, NELSSA_KV_BF16);
		}
	}
	tu_fill_kv(&rng, v, (size_t)n * D, 1.0, NELSSA_KV_BF16);
	tu_fill_f32(&rng, q, G * D, 1.0);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	check_layout(&ix, n);
	check_centroids(&ix, k);
	/* Most clusters hold one topic only, despite drift and the massive channel. */
	for (uint32_t c = 0; c < ix.n_clusters; c++) {
		uint32_t t0 = ix.perm[ix.table[c].first], ok = 1;

		for (uint32_t j = 1; j < ix.table[c].count; j++)
			ok &= topic[ix.perm[ix.table[c].first + j]] == topic[t0];
		pure += ok;
	}
	assert_true(pure >= ix.n_clusters * 3 / 4);
	/* Centroid logits are the members' mean logits, in float64. */
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		for (uint32_t r = 0; r < G; r++) {
			double mean = 0.0, cl = 0.0;

			for (uint32_t j = 0; j < ix.table[c].count; j++)
				for (uint32_t i = 0; i < D; i++)
					mean += q[r * D + i] * key(k, ix.perm[ix.table[c].first + j], i);
			mean /= ix.table[c].count;
			for (uint32_t i = 0; i < D; i++)
				cl += (double)q[r * D + i] * ix.centroids[(size_t)c * D + i];
			assert_true(fabs(cl - mean) < 2e-4 * (1.0 + fabs(mean)) * D);
		}
	/* Attention over a selection: its LSE is the raw keys' float64 LSE. */
	sizes = tu_alloc(sizeof(uint32_t) * ix.n_clusters);
	sel = tu_alloc(sizeof(uint32_t) * ix.n_clusters);
	vsum = tu_alloc(sizeof(float) * ix.n_clusters * D);
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		sizes[c] = ix.table[c].count;
	for (uint32_t c = 0; c < ix.n_clusters; c++)
		sel[c] = c;
	n_sel = ix.n_clusters / 3;
	nelssa_kv_reorder(&ix, D * 2, k, ck);
	nelssa_kv_reorder(&ix, D * 2, v, cv);
	assert_int_equal(0, nelssa_attn_clusters(&g, q, ck, cv, n, ix.table, ix.n_clusters, sel,
						 n_sel, o, lse));
	for (uint32_t r = 0; r < G; r++) {
		double m = -INFINITY, sum = 0.0, *l = tu_alloc(sizeof(double) * n);
		uint32_t nl = 0;

		for (uint32_t c = 0; c < n_sel; c++)
			for (uint32_t j = 0; j < ix.table[c].count; j++) {
				double s = 0.0;

				for (uint32_t i = 0; i < D; i++)
					s += q[r * D + i] * key(k, ix.perm[ix.table[c].first + j], i);
				l[nl] = 0.25 * s;
				m = fmax(m, l[nl++]);
			}
		for (uint32_t i = 0; i < nl; i++)
			sum += exp(l[i] - m);
		assert_true(fabs(lse[r] - (m + log(sum))) < 1e-4 * (1.0 + fabs(m)));
		free(l);
	}
	/* The estimate's LSE: log sum_c size_c exp(scale q . raw mean_c), float64. */
	nelssa_cluster_value_sums(&ix, NELSSA_KV_BF16, v, vsum);
	assert_int_equal(0, nelssa_estimate_attn(&g, q, ix.centroids, vsum, sizes, sel + n_sel,
						 ix.n_clusters - n_sel, o, lse));
	for (uint32_t r = 0; r < G; r++) {
		double m = -INFINITY, sum = 0.0, *l = tu_alloc(sizeof(double) * ix.n_clusters);

		for (uint32_t c = n_sel; c < ix.n_clusters; c++) {
			double s = 0.0;

			for (uint32_t j = 0; j < ix.table[c].count; j++)
				for (uint32_t i = 0; i < D; i++)
					s += q[r * D + i] * key(k, ix.perm[ix.table[c].first + j], i);
			l[c] = 0.25 * s / ix.table[c].count + log(ix.table[c].count);
			m = fmax(m, l[c]);
		}
		for (uint32_t c = n_sel; c < ix.n_clusters; c++)
			sum += exp(l[c] - m);
		assert_true(fabs(lse[r] - (m + log(sum))) < 1e-4 * (1.0 + fabs(m)));
		free(l);
	}
	nelssa_kmeans_free(&ix);
	free(k);
	free(v);
	free(ck);
	free(cv);
	free(dir);
	free(topic);
	free(sizes);
	free(sel);
	free(vsum);
}

/*
 * When every key qualifies (cut above any cosine) exactly the cap splits
 * off per segment, as the last clusters of the segment; when none does
 * (cut below -1), nothing changes.
 */
static void outliers_are_capped(void **state)
{
	const uint32_t n = 2000;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index all, none;
	struct tu_rng rng;
	uint16_t *k;
	uint32_t singles = 0;

	(void)state;
	cfg.segment = 1000;
	tu_rng_for(&rng, __func__, 0);
	k = random_keys(&rng, n);
	cfg.outlier_cos = 1.5f;
	assert_int_equal(0, nelssa_kmeans_build(&all, &cfg, NELSSA_KV_BF16, k, n, D));
	cfg.outlier_cos = -1.5f;
	assert_int_equal(0, nelssa_kmeans_build(&none, &cfg, NELSSA_KV_BF16, k, n, D));
	check_layout(&all, n);
	check_centroids(&all, k);
	assert_true(all.n_clusters >= none.n_clusters);
	for (uint32_t c = 0; c < all.n_clusters; c++)
		singles += all.table[c].count == 1;
	assert_true(singles >= 2 * 16);
	/* Segment 0's outliers are the 16 clusters before segment 1's first. */
	for (uint32_t c = 0; c < all.n_clusters; c++) {
		if (all.table[c].first != 1000)
			continue;
		for (uint32_t j = c - 16; j < c; j++)
			assert_int_equal(1, all.table[j].count);
	}
	for (uint32_t j = all.n_clusters - 16; j < all.n_clusters; j++)
		assert_int_equal(1, all.table[j].count);
	nelssa_kmeans_free(&all);
	nelssa_kmeans_free(&none);
	free(k);
}

/*
 * The outlier rule as first written, one pass per distinct ratio raised
 * past: the cut climbs over the smallest candidate ratio until at most
 * the cap remain above it.
 */
static uint32_t split_by_passes(const struct nelssa_kmeans_cfg *cfg, uint32_t *asg,
				const float *cos, const float *rho, uint32_t len, uint32_t k)
{
	const uint32_t cap = nelssa_km_outlier_cap(cfg, len);
	const float ratio = cfg->outlier_ratio > 0.0f ? cfg->outlier_ratio : INFINITY;
	float cut = -INFINITY;
	uint32_t m;

	if (!cap)
		return 0;
	for (;;) {
		float lo = INFINITY;

		m = 0;
		for (uint32_t t = 0; t < len; t++)
			if ((cos[t] < cfg->outlier_cos || rho[t] > ratio) && rho[t] > cut) {
				m++;
				lo = fminf(lo, rho[t]);
			}
		if (m <= cap)
			break;
		cut = lo;
	}
	m = 0;
	for (uint32_t t = 0; t < len; t++)
		if ((cos[t] < cfg->outlier_cos || rho[t] > ratio) && rho[t] > cut)
			asg[t] = k + m++;
	return m;
}

/*
 * The split takes its cut from a sort; the choice is the one the passes
 * make, on ratios with many ties, NaNs and infinities, few and many
 * candidates, and caps of 0 to all.
 */
static void outlier_cut_matches_the_passes(void **state)
{
	const uint32_t lens[] = { 1, 63, 64, 1000, 4096 }, per_mille[] = { 0, 16, 100, 1000 };
	struct tu_rng rng;

	(void)state;
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t p = 0; p < sizeof(per_mille) / sizeof(per_mille[0]); p++) {
			const uint32_t n = lens[l], k = 7;
			struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
			uint32_t *a = tu_alloc(sizeof(*a) * n), *b = tu_alloc(sizeof(*b) * n);
			float *cos = tu_alloc(sizeof(*cos) * n), *rho = tu_alloc(sizeof(*rho) * n);

			tu_rng_for(&rng, __func__, l * 16 + p);
			cfg.outlier_per_mille = per_mille[p];
			for (uint32_t t = 0; t < n; t++) {
				const uint32_t r = tu_below(&rng, 40);

				cos[t] = (float)(2.0 * tu_uniform(&rng) - 1.0);
				/* Ratios on a coarse grid (ties at every cut) or all distinct. */
				rho[t] = r == 0 ? NAN : r == 1 ? INFINITY :
					 l % 2 ? 0.25f * (float)(r % 12) : (float)tu_uniform(&rng);
				a[t] = b[t] = tu_below(&rng, k);
			}
			assert_int_equal(split_by_passes(&cfg, a, cos, rho, n, k),
					 nelssa_km_split_outliers(&cfg, b, cos, rho, n, k));
			assert_memory_equal(a, b, sizeof(*a) * n);
			free(a);
			free(b);
			free(cos);
			free(rho);
		}
}

static void random_keys_give_a_valid_deterministic_index(void **state)
{
	const uint32_t lens[] = { 1, 15, 17, 1000, 2500 };
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct tu_rng rng;

	(void)state;
	cfg.segment = 1000;
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		struct nelssa_cluster_index a, b;
		uint16_t *k;

		tu_rng_for(&rng, __func__, l);
		k = random_keys(&rng, lens[l]);
		assert_int_equal(0, nelssa_kmeans_build(&a, &cfg, NELSSA_KV_BF16, k, lens[l], D));
		assert_int_equal(0, nelssa_kmeans_build(&b, &cfg, NELSSA_KV_BF16, k, lens[l], D));
		check_layout(&a, lens[l]);
		check_centroids(&a, k);
		/* About cluster_tokens per cluster (empty ones dropped), plus outliers. */
		assert_true(a.n_clusters >= 1 &&
			    a.n_clusters <= lens[l] / 16 + 3 + lens[l] * 16 / 1000);
		assert_int_equal(a.n_clusters, b.n_clusters);
		assert_memory_equal(a.perm, b.perm, sizeof(*a.perm) * lens[l]);
		assert_memory_equal(a.table, b.table, sizeof(*a.table) * a.n_clusters);
		assert_memory_equal(a.centroids, b.centroids,
				    sizeof(float) * D * a.n_clusters);
		nelssa_kmeans_free(&a);
		nelssa_kmeans_free(&b);
		free(k);
	}
}

static void append_keeps_old_clusters_byte_identical(void **state)
{
	const uint32_t n = 1500, chunk = 300;
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	uint32_t *perm0, ncl0;
	struct nelssa_cluster *table0;
	float *cen0, mean0[D];
	uint16_t *k, *all;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	all = random_keys(&rng, n + 2 * chunk);
	k = all;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	ncl0 = ix.n_clusters;
	perm0 = tu_alloc(sizeof(*perm0) * n);
	table0 = tu_alloc(sizeof(*table0) * ncl0);
	cen0 = tu_alloc(sizeof(*cen0) * ncl0 * D);
	memcpy(perm0, ix.perm, sizeof(*perm0) * n);
	memcpy(table0, ix.table, sizeof(*table0) * ncl0);
	memcpy(cen0, ix.centroids, sizeof(*cen0) * ncl0 * D);
	memcpy(mean0, ix.key_mean, sizeof(mean0));
	for (uint32_t c = 0; c < 2; c++) {
		uint32_t before = ix.n_clusters;

		assert_int_equal(0, nelssa_kmeans_append(&ix, &cfg, NELSSA_KV_BF16,
							 all + (size_t)(n + c * chunk) * D, chunk));
		assert_true(ix.n_clusters > before);
		/* The new clusters hold exactly the new tokens. */
		for (uint32_t i = ix.table[before].first; i < n + (c + 1) * chunk; i++)
			assert_true(ix.perm[i] >= n + c * chunk && ix.perm[i] < n + (c + 1) * chunk);
	}
	check_layout(&ix, n + 2 * chunk);
	check_centroids(&ix, all);
	assert_memory_equal(perm0, ix.perm, sizeof(*perm0) * n);
	assert_memory_equal(table0, ix.table, sizeof(*table0) * ncl0);
	assert_memory_equal(cen0, ix.centroids, sizeof(*cen0) * ncl0 * D);
	assert_memory_equal(mean0, ix.key_mean, sizeof(mean0));
	nelssa_kmeans_free(&ix);
	free(perm0);
	free(table0);
	free(cen0);
	free(all);
}

static void reorder_gathers_by_perm(void **state)
{
	const uint32_t n = 700;
	const struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	uint16_t *k, *out;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	k = random_keys(&rng, n);
	out = tu_alloc(sizeof(uint16_t) * n * D);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, n, D));
	nelssa_kv_reorder(&ix, D * sizeof(uint16_t), k, out);
	for (uint32_t i = 0; i < n; i++)
		assert_memory_equal(out + (size_t)i * D, k + (size_t)ix.perm[i] * D,
				    D * sizeof(uint16_t));
	nelssa_kmeans_free(&ix);
	free(k);
	free(out);
}

static void bad_arguments(void **state)
{
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	uint16_t k[D] = { 0 };

	(void)state;
	assert_int_equal(-EINVAL, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, 1, 0));
	assert_int_equal(-EINVAL, nelssa_kmeans_build(&ix, &cfg, 0, k, 1, D));
	cfg.iters = 0;
	assert_int_equal(-EINVAL, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, 1, D));
	cfg = NELSSA_KMEANS_DEFAULT;
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_BF16, k, 0, D));
	assert_int_equal(0, ix.n_clusters);
	cfg.cluster_tokens = 0;
	assert_int_equal(-EINVAL, nelssa_kmeans_append(&ix, &cfg, NELSSA_KV_BF16, k, 1));
	assert_int_equal(0, ix.n_tokens);
	nelssa_kmeans_free(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(separable_topics_found_exactly),
		cmocka_unit_test(needle_becomes_its_own_cluster),
		cmocka_unit_test(outliers_are_capped),
		cmocka_unit_test(outlier_cut_matches_the_passes),
		cmocka_unit_test(strong_member_splits_by_residual),
		cmocka_unit_test(drift_and_massive_channels),
		cmocka_unit_test(random_keys_give_a_valid_deterministic_index),
		cmocka_unit_test(append_keeps_old_clusters_byte_identical),
		cmocka_unit_test(reorder_gathers_by_perm),
		cmocka_unit_test(bad_arguments),
	};

	tu_init("client_kmeans");
	return cmocka_run_group_tests_name("client_kmeans", tests, NULL, NULL);
}
