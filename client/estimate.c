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
			s = geom->scale * nelssa_dot_f32(qr, centroids + (size_t)id * d, d);
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
