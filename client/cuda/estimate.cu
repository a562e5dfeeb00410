// SPDX-License-Identifier: MIT
/*
 * The estimation term on the GPU: a warp per query row walks the item's
 * estimation-zone clusters with the same online recurrence as the CPU
 * version -- log-weight s_c + log size_c (s_c raised by half the members'
 * logit variance when the key spread is given), weight sum and V-sum
 * accumulator rescaled when the running maximum grows.
 */
#include <math.h>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"

#define ROWS_PER_BLOCK 4u

__global__ void estimate_kernel(struct nelssa_attn_geom g, uint32_t n_items, const float *q,
				const float *cen, const float *m2, const float *vsum,
				const uint32_t *sizes,
				uint32_t n_clusters, const uint32_t *ids, uint32_t ids_stride,
				const uint32_t *n_ids, float *o, float *lse)
{
	const uint32_t lane = threadIdx.x % NC_WARP, d = g.head_dim;
	const uint32_t r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / NC_WARP;
	const uint32_t item = blockIdx.y;
	const size_t row = (size_t)item * g.group + r;
	float m = -INFINITY, w = 0.0f, acc[NC_LANE_SLOTS] = { 0 };
	const float *qr;

	if (r >= g.group || item >= n_items)
		return;
	qr = q + row * d;
	for (uint32_t n = 0; n < n_ids[item]; n++) {
		const uint32_t id = ids[(size_t)item * ids_stride + n];
		const size_t c = (size_t)item * n_clusters + id;
		float s = 0.0f, v = 0.0f, l, e, alpha;

		if (id >= n_clusters || !sizes[c])
			continue;
#pragma unroll
		for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
			uint32_t i = lane + j * NC_WARP;

			if (i < d) {
				s += qr[i] * cen[c * d + i];
				if (m2)
					v += qr[i] * qr[i] * m2[c * d + i];
			}
		}
		s = g.scale * nc_warp_sum(s);
		/* The CPU's log_mean_weight(): half the members' logit variance. */
		if (m2)
			s += 0.5f * g.scale * g.scale * nc_warp_sum(v);
		l = s + logf((float)sizes[c]);
		alpha = l > m ? expf(m - l) : 1.0f;
		m = fmaxf(m, l);
		w = w * alpha + expf(l - m);
		e = expf(s - m);
#pragma unroll
		for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
			uint32_t i = lane + j * NC_WARP;

			if (i < d)
				acc[j] = acc[j] * alpha + e * vsum[c * d + i];
		}
	}
#pragma unroll
	for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
		uint32_t i = lane + j * NC_WARP;

		if (i < d)
			o[row * d + i] = w > 0.0f ? acc[j] / w : 0.0f;
	}
	if (!lane)
		lse[row] = w > 0.0f ? m + logf(w) : -INFINITY;
}

int nelssa_cuda_estimate_attn(const struct nelssa_attn_geom *geom, uint32_t n_items,
			      const float *q, const float *centroids, const float *vsum,
			      const uint32_t *sizes, uint32_t n_clusters, const uint32_t *ids,
			      uint32_t ids_stride, const uint32_t *n_ids, float *o, float *lse,
			      void *stream)
{
	return nelssa_cuda_estimate_attn_spread(geom, n_items, q, centroids, NULL, vsum, sizes,
						n_clusters, ids, ids_stride, n_ids, o, lse,
						stream);
}

int nelssa_cuda_estimate_attn_spread(const struct nelssa_attn_geom *geom, uint32_t n_items,
				     const float *q, const float *centroids, const float *m2,
				     const float *vsum, const uint32_t *sizes,
				     uint32_t n_clusters, const uint32_t *ids,
				     uint32_t ids_stride, const uint32_t *n_ids, float *o,
				     float *lse, void *stream)
{
	struct nelssa_attn_geom g;

	if (!geom || !geom->head_dim || geom->head_dim > NELSSA_ATTN_MAX_HEAD_DIM ||
	    !geom->group || geom->group > NELSSA_ATTN_MAX_GROUP || !(geom->scale > 0.0f) ||
	    !isfinite(geom->scale) || n_items > 65535)
		return -EINVAL;
	if (!n_items)
		return 0;
	g = *geom;
	estimate_kernel<<<dim3(nc_blocks(g.group, ROWS_PER_BLOCK), n_items),
			  ROWS_PER_BLOCK * NC_WARP, 0, (cudaStream_t)stream>>>(
		g, n_items, q, centroids, m2, vsum, sizes, n_clusters, ids, ids_stride, n_ids, o,
		lse);
	return nc_launched();
}
