// SPDX-License-Identifier: MIT
/*
 * The optional estimation term (RetroInfer's "estimation zone"): clusters
 * ranked just below the Top-K are not fetched but approximated from the
 * Centroid Meta-Info on the GPU, recovering attention mass that a plain
 * Top-K drops.  On by default (NELSSA_SELECT_DEFAULT); Documentation/
 * client.rst gives the measurements.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/sparse.h>

#include "estimate_rule.h"

void nelssa_cluster_value_sums(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			       const void *v, float *vsum)
{
	const uint32_t d = ix->head_dim;
	float row[NELSSA_ATTN_MAX_HEAD_DIM];

	memset(vsum, 0, sizeof(*vsum) * ix->n_clusters * d);
	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		for (uint32_t j = 0; j < ix->table[c].count; j++) {
			uint32_t t = ix->perm[ix->table[c].first + j];

			nelssa_kv_widen(row, (const uint16_t *)v + (size_t)t * d, d, dtype);
			for (uint32_t i = 0; i < d; i++)
				vsum[(size_t)c * d + i] += row[i];
		}
	}
}

void nelssa_cluster_key_spread(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			       const void *k, float *m2)
{
	const uint32_t d = ix->head_dim;
	float row[NELSSA_ATTN_MAX_HEAD_DIM];
	double acc[NELSSA_ATTN_MAX_HEAD_DIM];

	for (uint32_t c = 0; c < ix->n_clusters; c++) {
		const float *cen = ix->centroids + (size_t)c * d;
		const uint32_t n = ix->table[c].count;

		memset(acc, 0, sizeof(*acc) * d);
		for (uint32_t j = 0; j < n; j++) {
			uint32_t t = ix->perm[ix->table[c].first + j];

			nelssa_kv_widen(row, (const uint16_t *)k + (size_t)t * d, d, dtype);
			for (uint32_t i = 0; i < d; i++)
				acc[i] += ((double)row[i] - cen[i]) * ((double)row[i] - cen[i]);
		}
		for (uint32_t i = 0; i < d; i++)
			m2[(size_t)c * d + i] = n ? (float)(acc[i] / n) : 0.0f;
	}
}

int nelssa_unselected(const uint32_t *ids, uint32_t n_ids, const uint32_t *sizes,
		      uint32_t n_clusters, uint32_t *out)
{
	unsigned char *taken;
	uint32_t n = 0;

	if (n_clusters > INT32_MAX)
		return -EINVAL;
	taken = calloc(n_clusters ? n_clusters : 1, 1);
	if (!taken)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_ids; i++)
		if (ids[i] < n_clusters)
			taken[ids[i]] = 1;
	for (uint32_t c = 0; c < n_clusters; c++)
		if (!taken[c] && sizes[c])
			out[n++] = c;
	free(taken);
	return (int)n;
}

int nelssa_estimate_attn(const struct nelssa_attn_geom *geom, const float *q,
			 const float *centroids, const float *vsum, const uint32_t *sizes,
			 const uint32_t *ids, uint32_t n_ids, float *o, float *lse)
{
	return nelssa_estimate_attn_spread(geom, q, centroids, NULL, vsum, sizes, ids, n_ids, o,
					   lse);
}

/*
 * log E[exp(scale q.k)] over a cluster's @n members, to second order: the
 * centroid's logit plus half the variance of the members' logits, that
 * variance taken as scale^2 sum_i q_i^2 m2_i (the channels' spreads about
 * the centroid; cross-channel terms are not kept).  For members spread
 * normally about the centroid this is exact (the log-normal mean) as long
 * as their spread is small beside their number; nelssa_spread_gain()
 * bounds it past that.  @q2h is the row's scale^2/2 q_i^2, computed once
 * per row, so the spread costs one more fp32 dot product per cluster.
 */
static float log_mean_weight(const float *qr, const float *q2h, const float *cen,
			     const float *m2, uint32_t d, float scale, uint32_t n)
{
	float s = scale * nelssa_dot_f32(qr, cen, d);

	return m2 ? s + nelssa_spread_gain(nelssa_dot_f32(q2h, m2, d), n) : s;
}

int nelssa_estimate_attn_spread(const struct nelssa_attn_geom *geom, const float *q,
				const float *centroids, const float *m2, const float *vsum,
				const uint32_t *sizes, const uint32_t *ids, uint32_t n_ids,
				float *o, float *lse)
{
	const uint32_t d = geom->head_dim;
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	for (uint32_t r = 0; r < geom->group; r++) {
		const float *qr = q + (size_t)r * d;
		float *orow = o + (size_t)r * d, m = -INFINITY, w = 0.0f;
		float q2h[NELSSA_ATTN_MAX_HEAD_DIM];

		for (uint32_t i = 0; m2 && i < d; i++)
			q2h[i] = 0.5f * geom->scale * geom->scale * qr[i] * qr[i];

		/*
		 * One online pass, as in the attention kernels: m is the largest
		 * log-weight s_c + log size_c so far, w and orow are kept relative
		 * to exp(m) and rescaled when m grows, so nothing overflows.
		 */
		memset(orow, 0, sizeof(*orow) * d);
		for (uint32_t n = 0; n < n_ids; n++) {
			const uint32_t id = ids[n];
			float s, l, e;

			if (!sizes[id])
				continue;
			s = log_mean_weight(qr, q2h, centroids + (size_t)id * d,
					    m2 ? m2 + (size_t)id * d : NULL, d, geom->scale, sizes[id]);
			if (!isfinite(s))
				return -EINVAL;
			l = s + logf((float)sizes[id]);
			if (l > m) {
				float shrink = expf(m - l);	/* 0 on the first cluster */

				w *= shrink;
				for (uint32_t i = 0; i < d; i++)
					orow[i] *= shrink;
				m = l;
			}
			e = expf(s - m);	/* exp(s_c) / exp(m) */
			w += e * (float)sizes[id];
			for (uint32_t i = 0; i < d; i++)
				orow[i] += e * vsum[(size_t)id * d + i];
		}
		if (m == -INFINITY) {
			lse[r] = -INFINITY;
			continue;
		}
		for (uint32_t i = 0; i < d; i++)
			orow[i] /= w;
		lse[r] = m + logf(w);
	}
	return 0;
}
