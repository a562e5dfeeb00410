// SPDX-License-Identifier: MIT
/*
 * The optional estimation term (RetroInfer's "estimation zone"): clusters
 * ranked just below the Top-K are not fetched but approximated from the
 * Centroid Meta-Info on the GPU, recovering attention mass that a plain
 * Top-K drops.  Off by default; Documentation/client.rst says when it
 * helps.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <nelssa/sparse.h>

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

int nelssa_estimate_attn(const struct nelssa_attn_geom *geom, const float *q,
			 const float *centroids, const float *vsum, const uint32_t *sizes,
			 const uint32_t *ids, uint32_t n_ids, float *o, float *lse)
{
	const uint32_t d = geom->head_dim;
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	for (uint32_t r = 0; r < geom->group; r++) {
		const float *qr = q + (size_t)r * d;
		float *orow = o + (size_t)r * d, m = -INFINITY, w = 0.0f;

		/* Two passes: the largest log-weight first, so nothing overflows. */
		for (uint32_t n = 0; n < n_ids; n++) {
			const float *c = centroids + (size_t)ids[n] * d;
			float s = 0.0f;

			if (!sizes[ids[n]])
				continue;
			for (uint32_t i = 0; i < d; i++)
				s += qr[i] * c[i];
			m = fmaxf(m, geom->scale * s + logf((float)sizes[ids[n]]));
		}
		memset(orow, 0, sizeof(*orow) * d);
		if (m == -INFINITY) {
			lse[r] = -INFINITY;
			continue;
		}
		for (uint32_t n = 0; n < n_ids; n++) {
			const float *c = centroids + (size_t)ids[n] * d;
			const float *vs = vsum + (size_t)ids[n] * d;
			float s = 0.0f, e;

			if (!sizes[ids[n]])
				continue;
			for (uint32_t i = 0; i < d; i++)
				s += qr[i] * c[i];
			e = expf(geom->scale * s - m);	/* exp(s_c) / exp(m) */
			w += e * (float)sizes[ids[n]];
			for (uint32_t i = 0; i < d; i++)
				orow[i] += e * vs[i];
		}
		for (uint32_t i = 0; i < d; i++)
			orow[i] /= w;
		lse[r] = m + logf(w);
	}
	return 0;
}
