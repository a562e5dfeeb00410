// SPDX-License-Identifier: MIT
/*
 * Selection baselines the accuracy harness compares the cluster method
 * with: the oracle (the tokens that really carry the attention mass, which
 * no method can beat at a given budget) and Quest's page Top-K (per-page
 * channel min/max bounds, the best-known cheap alternative).  Reference
 * quality, not speed: float64 where it decides the ranking.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <nelssa/sparse.h>

static double dot_q_row(const float *q, const float *kf, uint32_t d)
{
	double s = 0.0;

	for (uint32_t i = 0; i < d; i++)
		s += (double)q[i] * kf[i];
	return s;
}

int nelssa_token_mass(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		      uint32_t n_tokens, double *mass)
{
	const uint32_t d = geom->head_dim;
	float kf[NELSSA_ATTN_MAX_HEAD_DIM];
	double *logit;
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	if (!nelssa_kv_elem_bytes(geom->kv_dtype))
		return -EINVAL;		/* rows of a 16-bit type only, not 8-bit tiles */
	logit = malloc(sizeof(*logit) * geom->group * (n_tokens ? n_tokens : 1));
	if (!logit)
		return -ENOMEM;
	/* Each K row is widened once and scored against every query row. */
	for (uint32_t t = 0; t < n_tokens; t++) {
		nelssa_kv_widen(kf, (const uint16_t *)k + (size_t)t * d, d, geom->kv_dtype);
		for (uint32_t r = 0; r < geom->group; r++)
			logit[(size_t)r * n_tokens + t] =
				geom->scale * dot_q_row(q + (size_t)r * d, kf, d);
		mass[t] = 0.0;
	}
	for (uint32_t r = 0; r < geom->group; r++) {
		double *l = logit + (size_t)r * n_tokens, m = -INFINITY, sum = 0.0;

		for (uint32_t t = 0; t < n_tokens; t++)
			m = fmax(m, l[t]);
		for (uint32_t t = 0; t < n_tokens; t++) {
			l[t] = exp(l[t] - m);
			sum += l[t];
		}
		for (uint32_t t = 0; t < n_tokens; t++)
			mass[t] += l[t] / sum;
	}
	free(logit);
	return 0;
}

/* Top-K of float64 scores through the float Top-K (ties to the lower id). */
static int topk_f64(const double *score, uint32_t n, uint32_t k, uint32_t *ids)
{
	float *f = malloc(sizeof(*f) * (n ? n : 1));
	int ret;

	if (!f)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		f[i] = (float)score[i];
	ret = nelssa_topk(f, n, k, ids);
	free(f);
	return ret;
}

int nelssa_oracle_tokens(const struct nelssa_attn_geom *geom, const float *q, const void *k,
			 uint32_t n_tokens, uint32_t budget, uint32_t *tok)
{
	double *mass = malloc(sizeof(*mass) * (n_tokens ? n_tokens : 1));
	int ret;

	if (!mass)
		return -ENOMEM;
	ret = nelssa_token_mass(geom, q, k, n_tokens, mass);
	if (!ret)
		ret = topk_f64(mass, n_tokens, budget, tok);
	free(mass);
	return ret;
}

int nelssa_quest_pages(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		       uint32_t n_tokens, uint32_t page, uint32_t n_sel, uint32_t *pages)
{
	/* Pages are clusters in token order: the cluster bounds serve as is. */
	struct nelssa_cluster_index ix = { .head_dim = geom->head_dim, .n_tokens = n_tokens };
	uint32_t *sizes = NULL;
	float *lo = NULL, *hi = NULL, *score = NULL;
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	if (!page || !nelssa_kv_elem_bytes(geom->kv_dtype))
		return -EINVAL;		/* rows of a 16-bit type only, not 8-bit tiles */
	ix.n_clusters = n_tokens / page + (n_tokens % page != 0);
	ix.perm = malloc(sizeof(*ix.perm) * (n_tokens ? n_tokens : 1));
	ix.table = malloc(sizeof(*ix.table) * (ix.n_clusters ? ix.n_clusters : 1));
	sizes = malloc(sizeof(*sizes) * (ix.n_clusters ? ix.n_clusters : 1));
	score = malloc(sizeof(*score) * (ix.n_clusters ? ix.n_clusters : 1));
	lo = malloc(sizeof(*lo) * geom->head_dim * (ix.n_clusters ? ix.n_clusters : 1));
	hi = malloc(sizeof(*hi) * geom->head_dim * (ix.n_clusters ? ix.n_clusters : 1));
	if (!ix.perm || !ix.table || !sizes || !score || !lo || !hi) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t t = 0; t < n_tokens; t++)
		ix.perm[t] = t;
	for (uint32_t p = 0; p < ix.n_clusters; p++) {
		ix.table[p].first = p * page;
		ix.table[p].count = n_tokens - p * page < page ? n_tokens - p * page : page;
		sizes[p] = ix.table[p].count;
	}
	nelssa_cluster_bounds(&ix, geom->kv_dtype, k, lo, hi);
	nelssa_bound_scores(q, geom->group, geom->head_dim, lo, hi, sizes, ix.n_clusters, score);
	ret = nelssa_topk(score, ix.n_clusters, n_sel, pages);
out:
	free(ix.perm);
	free(ix.table);
	free(sizes);
	free(score);
	free(lo);
	free(hi);
	return ret;
}
