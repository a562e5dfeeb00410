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
	const uint32_t d = geom->head_dim;
	uint32_t n_pages;
	float kf[NELSSA_ATTN_MAX_HEAD_DIM], lo[NELSSA_ATTN_MAX_HEAD_DIM], hi[NELSSA_ATTN_MAX_HEAD_DIM];
	double *score;
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	if (!page)
		return -EINVAL;
	n_pages = n_tokens / page + (n_tokens % page != 0);
	score = malloc(sizeof(*score) * (n_pages ? n_pages : 1));
	if (!score)
		return -ENOMEM;
	for (uint32_t p = 0; p < n_pages; p++) {
		uint32_t end = (p + 1) * page < n_tokens ? (p + 1) * page : n_tokens;

		for (uint32_t t = p * page; t < end; t++) {
			nelssa_kv_widen(kf, (const uint16_t *)k + (size_t)t * d, d, geom->kv_dtype);
			for (uint32_t i = 0; i < d; i++) {
				lo[i] = t == p * page || kf[i] < lo[i] ? kf[i] : lo[i];
				hi[i] = t == p * page || kf[i] > hi[i] ? kf[i] : hi[i];
			}
		}
		score[p] = 0.0;
		for (uint32_t r = 0; r < geom->group; r++)
			for (uint32_t i = 0; i < d; i++) {
				double qi = q[(size_t)r * d + i];

				score[p] += fmax(qi * hi[i], qi * lo[i]);
			}
	}
	ret = topk_f64(score, n_pages, n_sel, pages);
	free(score);
	return ret;
}
