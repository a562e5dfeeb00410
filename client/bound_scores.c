// SPDX-License-Identifier: MIT
/*
 * Bound-based cluster scoring: each cluster keeps the per-channel minimum
 * and maximum of its keys, and a query scores it by the largest q.k any
 * key inside that box could have.  A mean key (the centroid) dilutes one
 * strongly matching member among ~16; the bound does not, at twice the
 * metadata.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/sparse.h>

#include "scores_internal.h"

void nelssa_cluster_bounds(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			   const void *k, float *lo, float *hi)
{
	const uint32_t d = ix->head_dim;
	float row[NELSSA_ATTN_MAX_HEAD_DIM];

	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		float *l = lo + (size_t)c * d, *h = hi + (size_t)c * d;

		for (uint32_t i = 0; i < d; i++) {
			l[i] = INFINITY;
			h[i] = -INFINITY;
		}
		for (uint32_t j = 0; j < ix->table[c].count; j++) {
			uint32_t t = ix->perm[ix->table[c].first + j];

			nelssa_kv_widen(row, (const uint16_t *)k + (size_t)t * d, d, dtype);
			for (uint32_t i = 0; i < d; i++) {
				l[i] = fminf(l[i], row[i]);
				h[i] = fmaxf(h[i], row[i]);
			}
		}
	}
}

void nelssa_bound_scores(const float *q, uint32_t group, uint32_t head_dim, const float *lo,
			 const float *hi, const uint32_t *sizes, uint32_t n_clusters, float *score)
{
	for (uint32_t c = 0; c < n_clusters; c++) {
		const float *l = lo + (size_t)c * head_dim, *h = hi + (size_t)c * head_dim;
		double s = 0.0;	/* float64: a sum of group * head_dim terms */

		if (!sizes[c]) {
			score[c] = -INFINITY;
			continue;
		}
		for (uint32_t r = 0; r < group; r++)
			for (uint32_t i = 0; i < head_dim; i++) {
				double qi = q[(size_t)r * head_dim + i];

				s += qi >= 0.0 ? qi * h[i] : qi * l[i];
			}
		score[c] = (float)s;
	}
}

int nelssa_bound_probs(const float *q, uint32_t group, uint32_t head_dim, float scale,
		       const float *lo, const float *hi, const uint32_t *sizes,
		       uint32_t n_clusters, float *score)
{
	double *u;
	int ret = nelssa_score_shape_check(group, head_dim, scale);

	if (ret || !n_clusters)
		return ret;
	u = malloc(sizeof(*u) * group * n_clusters);
	if (!u)
		return -ENOMEM;
	for (uint32_t r = 0; r < group; r++) {
		const float *qr = q + (size_t)r * head_dim;

		for (uint32_t c = 0; c < n_clusters; c++) {
			const float *l = lo + (size_t)c * head_dim, *h = hi + (size_t)c * head_dim;
			double s = 0.0;

			if (!sizes[c])
				continue;
			for (uint32_t i = 0; i < head_dim; i++)
				s += qr[i] >= 0.0f ? (double)qr[i] * h[i] : (double)qr[i] * l[i];
			u[(size_t)r * n_clusters + c] = scale * s;
		}
	}
	ret = nelssa_row_probs(u, group, sizes, n_clusters, score);
	free(u);
	return ret;
}

/*
 * The second probe: besides its mean, each cluster keeps the one member
 * farthest from that mean.  A strong member hidden in a cluster of ~16
 * (a key of the cluster's topic plus a component along some query's
 * direction) is exactly the member the mean is least like, so the probe
 * finds it with one exact q.k instead of a box bound, which grows with
 * every member's noise on every channel and ranks noisy clusters first
 * (the collapse of the bound ranking measured in Documentation/client.rst).
 */
void nelssa_cluster_far_keys(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			     const void *k, float *far)
{
	const uint32_t d = ix->head_dim;
	float row[NELSSA_ATTN_MAX_HEAD_DIM];

	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		const float *cen = ix->centroids + (size_t)c * d;
		float *f = far + (size_t)c * d;
		double best = -1.0;

		/* Empty: a zero row, so block products over it read defined values. */
		if (!ix->table[c].count)
			memset(f, 0, sizeof(*f) * d);
		for (uint32_t j = 0; j < ix->table[c].count; j++) {
			uint32_t t = ix->perm[ix->table[c].first + j];
			double dd = 0.0;

			nelssa_kv_widen(row, (const uint16_t *)k + (size_t)t * d, d, dtype);
			for (uint32_t i = 0; i < d; i++)
				dd += ((double)row[i] - cen[i]) * ((double)row[i] - cen[i]);
			/* Strictly farther: ties keep the earlier member (token order). */
			if (dd > best) {
				best = dd;
				for (uint32_t i = 0; i < d; i++)
					f[i] = row[i];
			}
		}
	}
}

void nelssa_far_logits(const float *q, uint32_t group, uint32_t head_dim, float scale,
		       const float *far, const uint32_t *sizes, uint32_t n_clusters,
		       double *logit, float *dots)
{
	nelssa_group_dots(q, group, head_dim, far, n_clusters, dots);
	for (uint32_t r = 0; r < group; r++)
		for (uint32_t c = 0; c < n_clusters; c++) {
			double *u = logit + (size_t)r * n_clusters + c, sf, rest;

			if (!sizes[c])
				continue;
			sf = (double)scale * dots[(size_t)r * n_clusters + c];
			/*
			 * The mean of the other members, (n c - far) / (n - 1), is
			 * known too: its logit is the other member's exactly in a
			 * pair, where "farthest" is a tie the far key may lose.
			 * None of the three exceeds the best member's logit.
			 */
			rest = sizes[c] > 1 ? (sizes[c] * *u - sf) / (sizes[c] - 1) : sf;
			*u = fmax(*u, fmax(sf, rest));
		}
}

int nelssa_far_probs(const float *q, uint32_t group, uint32_t head_dim, float scale,
		     const float *centroids, const float *far, const uint32_t *sizes,
		     uint32_t n_clusters, float *score)
{
	double *u;
	float *dots;
	int ret = nelssa_score_shape_check(group, head_dim, scale);

	if (ret || !n_clusters)
		return ret;
	u = malloc(sizeof(*u) * group * n_clusters);
	dots = malloc(sizeof(*dots) * group * n_clusters);
	if (u && dots) {
		nelssa_centroid_logits(q, group, head_dim, scale, centroids, sizes, n_clusters, u,
				       dots);
		nelssa_far_logits(q, group, head_dim, scale, far, sizes, n_clusters, u, dots);
		ret = nelssa_row_probs(u, group, sizes, n_clusters, score);
	} else {
		ret = -ENOMEM;
	}
	free(u);
	free(dots);
	return ret;
}
