// SPDX-License-Identifier: MIT
/*
 * Segmented k-means with the arithmetic on the GPU and the bookkeeping
 * shared with the CPU version (../kmeans_internal.h), so both produce the
 * same segments, initial centroids and index layout.  Assignment is a warp
 * per token; the centroid update gives each (centroid, channel) one thread
 * that walks the segment's tokens in order and sums in float64 -- the CPU
 * version's order and precision, so the update is bit-for-bit the same
 * whenever the assignments are, and no float atomics make runs differ.
 * The outliers of the last round (keys unlike their centroid) are chosen
 * by the same host code as on the CPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"
#include "../kmeans_internal.h"

#define THREADS 256u
#define WARPS (THREADS / NC_WARP)

__global__ void widen_kernel(float *x, const uint16_t *k, size_t n, bool bf16)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = nc_widen(k[i], bf16);
}

/* Channel i's mean over tokens, summed in token order in float64. */
__global__ void mean_kernel(const float *x, uint32_t n, uint32_t d, float *mean)
{
	const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	double s = 0.0;

	if (i >= d)
		return;
	for (uint32_t t = 0; t < n; t++)
		s += x[(size_t)t * d + i];
	mean[i] = n ? (float)(s / n) : 0.0f;
}

/* Channel i's mean square about @mean, in token order in float64. */
__global__ void var_kernel(const float *x, uint32_t n, uint32_t d, const float *mean,
			   double *var)
{
	const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	double s = 0.0;

	if (i >= d)
		return;
	for (uint32_t t = 0; t < n; t++) {
		float e = x[(size_t)t * d + i] - mean[i];

		s += (double)e * e;
	}
	var[i] = n ? s / n : 0.0;
}

/* x <- (x - mean) * weight, per channel. */
__global__ void prepare_kernel(float *x, const float *mean, const float *weight, size_t n,
			       uint32_t d)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = (x[i] - mean[i % d]) * weight[i % d];
}

/* r[t] = |x_t - mean of its cluster|, a warp per token. */
__global__ void residual_kernel(const float *x, const uint32_t *asg, const double *acc,
				const uint32_t *cnt, uint32_t len, uint32_t d, float *r)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	const uint32_t t = blockIdx.x * (blockDim.x / NC_WARP) + threadIdx.x / NC_WARP;
	float s = 0.0f;

	if (t >= len)
		return;
	for (uint32_t i = lane; i < d; i += NC_WARP) {
		const uint32_t j = asg[t];
		float e = (float)(x[(size_t)t * d + i] - acc[(size_t)j * d + i] / cnt[j]);

		s += e * e;
	}
	s = nc_warp_sum(s);
	if (!lane)
		r[t] = sqrtf(s);
}

/* c <- c / |c| with the norm in float64 (a block per centroid). */
static __device__ void normalise(float *c, uint32_t d)
{
	__shared__ double sh[WARPS];
	double n = 0.0;

	for (uint32_t i = threadIdx.x; i < d; i += blockDim.x)
		n += (double)c[i] * c[i];
	n = nc_block_sum(n, sh);
	if (n > 0.0)
		for (uint32_t i = threadIdx.x; i < d; i += blockDim.x)
			c[i] = (float)(c[i] / sqrt(n));
	__syncthreads();
}

/* Centroid j starts at token (2j len + len) / 2k, as on the CPU. */
__global__ void init_kernel(const float *x, uint32_t len, uint32_t k, uint32_t d, float *c)
{
	const uint32_t j = blockIdx.x;
	const uint32_t t = (uint32_t)(((uint64_t)2 * j * len + len) / (2 * (uint64_t)k));

	for (uint32_t i = threadIdx.x; i < d; i += blockDim.x)
		c[(size_t)j * d + i] = x[(size_t)t * d + i];
	__syncthreads();
	normalise(c + (size_t)j * d, d);
}

/*
 * Nearest centroid by inner product; ties to the lower index.  With @cos,
 * also the cosine of the token with it (centroids are unit vectors).
 */
__global__ void assign_kernel(const float *x, const float *c, uint32_t len, uint32_t k,
			      uint32_t d, uint32_t *asg, float *cos)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	const uint32_t t = blockIdx.x * WARPS + threadIdx.x / NC_WARP;
	float xr[NC_LANE_SLOTS], best_s = -INFINITY, norm = 0.0f;
	uint32_t best = 0;

	if (t >= len)
		return;
#pragma unroll
	for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
		uint32_t i = lane + j * NC_WARP;

		xr[j] = i < d ? x[(size_t)t * d + i] : 0.0f;
		norm += xr[j] * xr[j];
	}
	norm = sqrtf(nc_warp_sum(norm));
	for (uint32_t j = 0; j < k; j++) {
		const float *cj = c + (size_t)j * d;
		float s = 0.0f;

#pragma unroll
		for (uint32_t a = 0; a < NC_LANE_SLOTS; a++) {
			uint32_t i = lane + a * NC_WARP;

			if (i < d)
				s += xr[a] * cj[i];
		}
		s = nc_warp_sum(s);
		if (s > best_s) {
			best_s = s;
			best = j;
		}
	}
	if (!lane) {
		asg[t] = best;
		if (cos)
			cos[t] = norm > 0.0f ? best_s / norm : 1.0f;
	}
}

/* acc[j][i] = sum of x[t][i] over members t of j, in token order; cnt[j]. */
__global__ void update_kernel(const float *x, const uint32_t *asg, uint32_t len, uint32_t k,
			      uint32_t d, double *acc, uint32_t *cnt)
{
	const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	const uint32_t j = (uint32_t)(e / d), i = (uint32_t)(e % d);
	double s = 0.0;
	uint32_t n = 0;

	if (j >= k)
		return;
	for (uint32_t t = 0; t < len; t++)
		if (asg[t] == j) {
			s += x[(size_t)t * d + i];
			n++;
		}
	acc[e] = s;
	if (!i)
		cnt[j] = n;
}

/* Spherical update; an empty cluster keeps its centroid. */
__global__ void renorm_kernel(const double *acc, const uint32_t *cnt, uint32_t d, float *c)
{
	const uint32_t j = blockIdx.x;

	if (!cnt[j])
		return;
	for (uint32_t i = threadIdx.x; i < d; i += blockDim.x)
		c[(size_t)j * d + i] = (float)acc[(size_t)j * d + i];
	__syncthreads();
	normalise(c + (size_t)j * d, d);
}

/*
 * Cluster the centred keys @x (device, tokens @base..) and append to @ix.
 * The last round's assignment comes to the host, where the shared code
 * splits off the outliers, and goes back for the final sums.
 */
static int run_segment(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
		       const float *x, const float *raw, uint32_t base, uint32_t len,
		       uint32_t tok_at, uint32_t cl_at, uint32_t *added, cudaStream_t st)
{
	const uint32_t d = ix->head_dim, k = nelssa_km_centroids(cfg, len);
	const uint32_t kmax = k + nelssa_km_outlier_cap(cfg, len);
	uint32_t *asg = (uint32_t *)malloc(sizeof(*asg) * len);
	uint32_t *cnt = (uint32_t *)malloc(sizeof(*cnt) * kmax);
	double *acc = (double *)malloc(sizeof(*acc) * kmax * d);
	float *cos = (float *)malloc(sizeof(*cos) * len);
	float *rho = (float *)malloc(sizeof(*rho) * len);
	uint32_t *d_asg = NULL, *d_cnt, m = 0;
	double *d_acc = NULL;
	float *d_c, *d_cos, *d_rho;
	int ret = nelssa_km_reserve(ix, tok_at + len, cl_at + kmax);

	if (!ret && (!asg || !cnt || !acc || !cos || !rho))
		ret = -ENOMEM;
	if (!ret)
		ret = nc_err(cudaMallocAsync((void **)&d_acc, sizeof(double) * kmax * d +
					     sizeof(float) * ((size_t)k * d + 2 * (size_t)len) +
					     sizeof(uint32_t) * (len + kmax), st));
	if (ret)
		goto out;
	d_c = (float *)(d_acc + (size_t)kmax * d);	/* doubles first: alignment */
	d_cos = d_c + (size_t)k * d;
	d_rho = d_cos + len;
	d_cnt = (uint32_t *)(d_rho + len);
	d_asg = d_cnt + kmax;
	init_kernel<<<k, THREADS, 0, st>>>(x, len, k, d, d_c);
	for (uint32_t it = 0; it + 1 < cfg->iters; it++) {
		assign_kernel<<<nc_blocks(len, WARPS), THREADS, 0, st>>>(x, d_c, len, k, d, d_asg,
									 NULL);
		update_kernel<<<nc_blocks((uint64_t)k * d, THREADS), THREADS, 0, st>>>(
			x, d_asg, len, k, d, d_acc, d_cnt);
		renorm_kernel<<<k, THREADS, 0, st>>>(d_acc, d_cnt, d, d_c);
	}
	/* The last round only assigns; then each key's distance from its mean. */
	assign_kernel<<<nc_blocks(len, WARPS), THREADS, 0, st>>>(x, d_c, len, k, d, d_asg, d_cos);
	update_kernel<<<nc_blocks((uint64_t)k * d, THREADS), THREADS, 0, st>>>(x, d_asg, len, k, d,
									       d_acc, d_cnt);
	residual_kernel<<<nc_blocks(len, WARPS), THREADS, 0, st>>>(x, d_asg, d_acc, d_cnt, len, d,
								   d_rho);
	ret = nc_launched();
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(asg, d_asg, sizeof(*asg) * len,
					     cudaMemcpyDeviceToHost, st));
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(cos, d_cos, sizeof(*cos) * len,
					     cudaMemcpyDeviceToHost, st));
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(rho, d_rho, sizeof(*rho) * len,
					     cudaMemcpyDeviceToHost, st));
	if (!ret)
		ret = nc_err(cudaStreamSynchronize(st));
	if (!ret) {
		nelssa_km_residual_ratio(asg, rho, len, k);
		m = nelssa_km_split_outliers(cfg, asg, cos, rho, len, k);
		ret = nc_err(cudaMemcpyAsync(d_asg, asg, sizeof(*asg) * len,
					     cudaMemcpyHostToDevice, st));
	}
	if (!ret) {
		/* Centroids from the raw keys, as on the CPU. */
		update_kernel<<<nc_blocks((uint64_t)(k + m) * d, THREADS), THREADS, 0, st>>>(
			raw, d_asg, len, k + m, d, d_acc, d_cnt);
		ret = nc_launched();
	}
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(cnt, d_cnt, sizeof(*cnt) * (k + m),
					     cudaMemcpyDeviceToHost, st));
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(acc, d_acc, sizeof(*acc) * (k + m) * d,
					     cudaMemcpyDeviceToHost, st));
	if (!ret)
		ret = nc_err(cudaStreamSynchronize(st));
	if (!ret)
		nelssa_km_emit(ix, asg, cnt, acc, k + m, base, len, tok_at, cl_at, added);
out:
	if (d_acc)
		cudaFreeAsync(d_acc, st);
	free(asg);
	free(cnt);
	free(acc);
	free(cos);
	free(rho);
	return ret;
}

/*
 * Copy the segment @raw (@len rows, device) to @x, centred on its own mean
 * and with its massive channels damped, as the CPU version does.
 */
static int prepare_segment(const float *raw, float *x, uint32_t len, uint32_t d, cudaStream_t st)
{
	double var[NELSSA_ATTN_MAX_HEAD_DIM], *d_var = NULL;
	float weight[NELSSA_ATTN_MAX_HEAD_DIM];
	float *d_mean, *d_w;
	int ret = nc_err(cudaMallocAsync((void **)&d_var, sizeof(double) * d +
					 2 * sizeof(float) * d, st));

	if (ret)
		return ret;
	d_mean = (float *)(d_var + d);
	d_w = d_mean + d;
	mean_kernel<<<nc_blocks(d, THREADS), THREADS, 0, st>>>(raw, len, d, d_mean);
	var_kernel<<<nc_blocks(d, THREADS), THREADS, 0, st>>>(raw, len, d, d_mean, d_var);
	ret = nc_launched();
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(var, d_var, sizeof(double) * d, cudaMemcpyDeviceToHost,
					     st));
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(x, raw, sizeof(float) * len * d,
					     cudaMemcpyDeviceToDevice, st));
	if (!ret)
		ret = nc_err(cudaStreamSynchronize(st));
	if (!ret) {
		nelssa_km_channel_weights(var, d, weight);
		ret = nc_err(cudaMemcpyAsync(d_w, weight, sizeof(float) * d,
					     cudaMemcpyHostToDevice, st));
	}
	if (!ret) {
		prepare_kernel<<<nc_blocks((uint64_t)len * d, THREADS), THREADS, 0, st>>>(
			x, d_mean, d_w, (size_t)len * d, d);
		ret = nc_launched();
	}
	if (!ret)
		ret = nc_err(cudaStreamSynchronize(st));	/* before weight goes */
	cudaFreeAsync(d_var, st);
	return ret;
}

/* Widen @n rows of @k to fp32 on the device; *@x receives the buffer. */
static int widen(float **x, const void *k, uint32_t n, uint32_t d, enum nelssa_kv_dtype dtype,
		 cudaStream_t st)
{
	const size_t elems = (size_t)n * d;
	int ret = nc_err(cudaMallocAsync((void **)x, sizeof(float) * elems, st));

	if (ret)
		return ret;
	widen_kernel<<<nc_blocks(elems < 1u << 24 ? elems : 1u << 24, THREADS), THREADS, 0, st>>>(
		*x, (const uint16_t *)k, elems, dtype == NELSSA_KV_BF16);
	return nc_launched();
}

int nelssa_cuda_kmeans_build(struct nelssa_cluster_index *ix,
			     const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
			     const void *k, uint32_t n_tokens, uint32_t head_dim, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	float *x = NULL, *mean = NULL, *prep = NULL;
	uint32_t n_seg, cl = 0;
	int ret;

	if (nelssa_km_check(cfg, dtype, head_dim))
		return -EINVAL;
	memset(ix, 0, sizeof(*ix));
	ix->head_dim = head_dim;
	ix->key_mean = (float *)calloc(head_dim, sizeof(*ix->key_mean));
	if (!ix->key_mean)
		return -ENOMEM;
	if (!n_tokens)
		return 0;
	ret = widen(&x, k, n_tokens, head_dim, dtype, st);
	if (!ret)
		ret = nc_err(cudaMallocAsync((void **)&mean, sizeof(float) * head_dim, st));
	if (!ret) {
		mean_kernel<<<nc_blocks(head_dim, THREADS), THREADS, 0, st>>>(x, n_tokens, head_dim,
									     mean);
		ret = nc_launched();
	}
	if (!ret)
		ret = nc_err(cudaMemcpyAsync(ix->key_mean, mean, sizeof(float) * head_dim,
					     cudaMemcpyDeviceToHost, st));
	n_seg = nelssa_km_segments(cfg, n_tokens);
	/* Room for the longest segment, prepared; the raw keys stay in x. */
	if (!ret)
		ret = nc_err(cudaMallocAsync((void **)&prep, sizeof(float) * head_dim *
					     ((size_t)n_tokens / n_seg + 1), st));
	for (uint32_t s = 0; s < n_seg && !ret; s++) {
		uint32_t a = (uint32_t)((uint64_t)n_tokens * s / n_seg);
		uint32_t b = (uint32_t)((uint64_t)n_tokens * (s + 1) / n_seg), added = 0;

		ret = prepare_segment(x + (size_t)a * head_dim, prep, b - a, head_dim, st);
		if (!ret)
			ret = run_segment(ix, cfg, prep, x + (size_t)a * head_dim, a, b - a, a, cl,
					  &added, st);
		cl += added;
	}
	cudaFreeAsync(prep, st);
	cudaFreeAsync(mean, st);
	cudaFreeAsync(x, st);
	if (!ret)
		ret = nc_err(cudaStreamSynchronize(st));
	if (ret) {
		nelssa_kmeans_free(ix);
		return ret;
	}
	ix->n_tokens = n_tokens;
	ix->n_clusters = cl;
	return 0;
}

int nelssa_cuda_kmeans_append(struct nelssa_cluster_index *ix,
			      const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
			      const void *k, uint32_t n_new, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const uint32_t d = ix->head_dim;
	float *x = NULL, *prep = NULL;
	uint32_t added = 0;
	int ret;

	if (!ix->key_mean || nelssa_km_check(cfg, dtype, d) || n_new > UINT32_MAX - ix->n_tokens)
		return -EINVAL;
	if (!n_new)
		return 0;
	ret = widen(&x, k, n_new, d, dtype, st);
	if (!ret)
		ret = nc_err(cudaMallocAsync((void **)&prep, sizeof(float) * d * n_new, st));
	if (!ret)
		ret = prepare_segment(x, prep, n_new, d, st);
	/* On failure the reserved room is unused: counts are what define @ix. */
	if (!ret)
		ret = run_segment(ix, cfg, prep, x, ix->n_tokens, n_new, ix->n_tokens,
				  ix->n_clusters, &added, st);
	if (prep)
		cudaFreeAsync(prep, st);
	cudaFreeAsync(x, st);
	if (ret)
		return ret;
	ix->n_tokens += n_new;
	ix->n_clusters += added;
	return 0;
}

__global__ void reorder_kernel(const uint32_t *perm, uint32_t n, size_t words,
			       const uint16_t *src, uint16_t *dst)
{
	const uint32_t i = blockIdx.x;

	if (i >= n)
		return;
	for (size_t w = threadIdx.x; w < words; w += blockDim.x)
		dst[(size_t)i * words + w] = src[(size_t)perm[i] * words + w];
}

int nelssa_cuda_kv_reorder(const uint32_t *perm, uint32_t n_tokens, size_t row_bytes,
			   const void *src, void *dst, void *stream)
{
	if (row_bytes % 2)
		return -EINVAL;
	if (!n_tokens || !row_bytes)
		return 0;
	reorder_kernel<<<n_tokens, 128, 0, (cudaStream_t)stream>>>(
		perm, n_tokens, row_bytes / 2, (const uint16_t *)src, (uint16_t *)dst);
	return nc_launched();
}

int nelssa_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();	/* clear the sticky "no device" error */
		return 0;
	}
	return n;
}
