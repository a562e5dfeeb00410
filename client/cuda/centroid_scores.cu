// SPDX-License-Identifier: MIT
/*
 * Centroid scores on the GPU, three short kernels per call: every logit
 * (a warp per cluster, all of the group's rows), each row's softmax
 * statistics over the clusters (a block per row), then the per-cluster sum
 * of the rows' probabilities.  Keeping the logits in a scratch buffer costs
 * group * n_clusters floats and saves reading the centroids twice.  The
 * far-member scores (nelssa_cuda_far_probs()) are the same three kernels
 * with a second probe per cluster: the logit is the largest of the
 * centroid's, the far member's and the other members' mean's, as on the
 * CPU.
 */
#include <math.h>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"

#define WARPS 8u

/* @far: NULL for centroid scores, else each cluster's second probe. */
__global__ void logits_kernel(const float *q, const float *cen, const float *far,
			      const uint32_t *sizes, uint32_t group, uint32_t d, uint32_t n,
			      float scale, float *logit, int *bad)
{
	const uint32_t h = blockIdx.y, lane = threadIdx.x % NC_WARP;
	const uint32_t c = blockIdx.x * WARPS + threadIdx.x / NC_WARP;
	const float *cr, *fr = NULL, *qh = q + (size_t)h * group * d;
	float *out;

	if (c >= n)
		return;
	cr = cen + ((size_t)h * n + c) * d;
	if (far)
		fr = far + ((size_t)h * n + c) * d;
	out = logit + (size_t)h * group * n + c;
	for (uint32_t g = 0; g < group; g++) {
		float s = 0.0f;

		if (!sizes[(size_t)h * n + c]) {
			if (!lane)
				out[(size_t)g * n] = -INFINITY;
			continue;
		}
		for (uint32_t i = lane; i < d; i += NC_WARP)
			s += qh[(size_t)g * d + i] * cr[i];
		s = nc_warp_sum(s);
		if (fr) {
			const uint32_t sz = sizes[(size_t)h * n + c];
			float sf = 0.0f, rest;

			for (uint32_t i = lane; i < d; i += NC_WARP)
				sf += qh[(size_t)g * d + i] * fr[i];
			sf = nc_warp_sum(sf);
			/* The CPU's third probe: the other members' mean. */
			rest = sz > 1 ? (sz * s - sf) / (float)(sz - 1) : sf;
			s = fmaxf(s, fmaxf(sf, rest));
		}
		s = scale * s;
		if (!lane) {
			out[(size_t)g * n] = s;
			if (!isfinite(s))
				bad[h] = 1;
		}
	}
}

/* Row (h, g): m = max logit, z = sum exp(logit - m) over non-empty clusters. */
__global__ void row_stats_kernel(const float *logit, uint32_t group, uint32_t n, float *m_out,
				 float *z_out)
{
	__shared__ float sh[32];
	const size_t row = (size_t)blockIdx.y * group + blockIdx.x;
	const float *l = logit + row * n;
	float m = -INFINITY, z = 0.0f;

	for (uint32_t c = threadIdx.x; c < n; c += blockDim.x)
		m = fmaxf(m, l[c]);
	m = nc_block_max(m, sh);
	if (m == -INFINITY) {
		if (!threadIdx.x) {
			m_out[row] = m;
			z_out[row] = 0.0f;
		}
		return;
	}
	for (uint32_t c = threadIdx.x; c < n; c += blockDim.x)
		z += expf(l[c] - m);	/* empty clusters: exp(-inf) = 0 */
	z = nc_block_sum(z, sh);
	if (!threadIdx.x) {
		m_out[row] = m;
		z_out[row] = z;
	}
}

__global__ void score_kernel(const float *logit, const uint32_t *sizes, const float *m,
			     const float *z, const int *bad, uint32_t group, uint32_t n,
			     float *score)
{
	const uint32_t h = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0.0f;

	if (c >= n)
		return;
	if (!sizes[(size_t)h * n + c]) {
		score[(size_t)h * n + c] = -INFINITY;
		return;
	}
	if (bad[h]) {
		score[(size_t)h * n + c] = NAN;
		return;
	}
	for (uint32_t g = 0; g < group; g++) {
		const size_t row = (size_t)h * group + g;

		s += expf(logit[row * n + c] - m[row]) / z[row];
	}
	score[(size_t)h * n + c] = s;
}

static int scores(const float *q, uint32_t n_heads, uint32_t group, uint32_t head_dim,
		  float scale, const float *centroids, const float *far, const uint32_t *sizes,
		  uint32_t n_clusters, float *score, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const size_t rows = (size_t)n_heads * group;
	float *logit = NULL, *m, *z;
	int *bad;
	int ret;

	if (!group || group > NELSSA_ATTN_MAX_GROUP || !head_dim ||
	    head_dim > NELSSA_ATTN_MAX_HEAD_DIM || !(scale > 0.0f) || !isfinite(scale) ||
	    n_heads > 65535)
		return -EINVAL;
	if (!n_heads || !n_clusters)
		return 0;
	/* One allocation: logits, then m and z per row, then a flag per head. */
	ret = nc_err(cudaMallocAsync((void **)&logit, sizeof(float) * (rows * n_clusters + 2 * rows) +
				     sizeof(int) * n_heads, st));
	if (ret)
		return ret;
	m = logit + rows * n_clusters;
	z = m + rows;
	bad = (int *)(z + rows);
	cudaMemsetAsync(bad, 0, sizeof(int) * n_heads, st);
	logits_kernel<<<dim3(nc_blocks(n_clusters, WARPS), n_heads), WARPS * NC_WARP, 0, st>>>(
		q, centroids, far, sizes, group, head_dim, n_clusters, scale, logit, bad);
	row_stats_kernel<<<dim3(group, n_heads), 256, 0, st>>>(logit, group, n_clusters, m, z);
	score_kernel<<<dim3(nc_blocks(n_clusters, 256), n_heads), 256, 0, st>>>(
		logit, sizes, m, z, bad, group, n_clusters, score);
	ret = nc_launched();
	cudaFreeAsync(logit, st);
	return ret;
}

int nelssa_cuda_centroid_scores(const float *q, uint32_t n_heads, uint32_t group,
				uint32_t head_dim, float scale, const float *centroids,
				const uint32_t *sizes, uint32_t n_clusters, float *score,
				void *stream)
{
	return scores(q, n_heads, group, head_dim, scale, centroids, NULL, sizes, n_clusters,
		      score, stream);
}

int nelssa_cuda_far_probs(const float *q, uint32_t n_heads, uint32_t group, uint32_t head_dim,
			  float scale, const float *centroids, const float *far,
			  const uint32_t *sizes, uint32_t n_clusters, float *score, void *stream)
{
	if (!far)
		return -EINVAL;
	return scores(q, n_heads, group, head_dim, scale, centroids, far, sizes, n_clusters,
		      score, stream);
}
