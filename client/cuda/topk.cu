// SPDX-License-Identifier: MIT
/*
 * Top-K on the GPU.  Each head's scores are sorted with CUB's stable
 * segmented sort, descending, carrying the cluster ids; stability with ids
 * fed in ascending order gives exactly the CPU version's tie rule (lower id
 * first).  A per-head pass counts the selectable clusters (score above
 * -inf) and flags NaN, which no ordering would make meaningful.
 */
#include <math.h>

#include <cub/device/device_segmented_sort.cuh>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"

#define THREADS 256u

/* ids 0..n-1 for every head, segment offsets, and the per-head counts. */
__global__ void prepare_kernel(const float *score, uint32_t n, uint32_t *ids, uint32_t *offsets,
			       int32_t *valid)
{
	__shared__ int sh[32];
	const uint32_t h = blockIdx.x;
	int ok = 0, nan = 0;

	for (uint32_t c = threadIdx.x; c < n; c += blockDim.x) {
		float s = score[(size_t)h * n + c];

		ids[(size_t)h * n + c] = c;
		ok += s > -INFINITY;
		nan += isnan(s);
	}
	ok = nc_block_sum(ok, sh);
	nan = nc_block_sum(nan, sh);
	if (!threadIdx.x) {
		valid[h] = nan ? -EINVAL : ok;
		offsets[h] = h * n;
		if (h == gridDim.x - 1)
			offsets[h + 1] = (h + 1) * n;
	}
}

__global__ void take_kernel(const uint32_t *sorted, const int32_t *valid, uint32_t n, uint32_t k,
			    uint32_t *ids, int32_t *count)
{
	const uint32_t h = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
	const int32_t v = valid[h];
	const uint32_t take = v < 0 ? 0 : (uint32_t)v < k ? (uint32_t)v : k;

	if (i < take)
		ids[(size_t)h * k + i] = sorted[(size_t)h * n + i];
	if (!i)
		count[h] = v < 0 ? v : (int32_t)take;
}

/*
 * The budget selection is a prefix of the ranking, and the running token
 * sums along it only grow, so its length is the number of positions whose
 * inclusive sum fits: a block-wide count needs no sequential scan.  Each
 * thread scans a contiguous stretch of positions to get its local sums.
 */
__global__ void budget_kernel(const uint32_t *ranked, const uint32_t *sizes,
			      const int32_t *valid, uint32_t n, uint64_t budget, int32_t *count)
{
	__shared__ unsigned long long sh[THREADS / 32];
	__shared__ unsigned long long base[THREADS];
	const uint32_t h = blockIdx.x, t = threadIdx.x;
	const int32_t v = valid[h];
	const uint32_t nv = v < 0 ? 0 : (uint32_t)v;
	const uint32_t per = (nv + THREADS - 1) / THREADS;
	const uint32_t from = t * per < nv ? t * per : nv;
	const uint32_t to = from + per < nv ? from + per : nv;
	unsigned long long mine = 0, run;
	uint32_t fit = 0;

	for (uint32_t i = from; i < to; i++)
		mine += sizes[(size_t)h * n + ranked[(size_t)h * n + i]];
	base[t] = mine;
	__syncthreads();
	/* Exclusive prefix of the stretch totals (THREADS is small). */
	run = 0;
	for (uint32_t j = 0; j < t; j++)
		run += base[j];
	for (uint32_t i = from; i < to; i++) {
		run += sizes[(size_t)h * n + ranked[(size_t)h * n + i]];
		fit += run <= budget;
	}
	fit = (uint32_t)nc_block_sum((unsigned long long)fit, sh);
	if (!t)
		count[h] = v < 0 ? v : (int32_t)fit;
}

/*
 * Filling a budget skips what does not fit and reads on, so unlike the
 * prefix above it is a true scan: one thread per head walks its ranking
 * (heads in parallel) and compacts the ids it takes in place, exactly the
 * CPU version's loop.
 */
__global__ void fill_kernel(uint32_t *ranked, const uint32_t *sizes, const int32_t *valid,
			    uint32_t n_heads, uint32_t n, uint64_t budget, int32_t *count,
			    unsigned long long *tokens)
{
	const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long used = 0;
	uint32_t m = 0;
	int32_t v;

	if (h >= n_heads)
		return;
	v = valid[h];
	for (uint32_t i = 0; v > 0 && i < (uint32_t)v && used < budget; i++) {
		uint32_t c = ranked[(size_t)h * n + i], sz = sizes[(size_t)h * n + c];

		if (!sz || sz > budget - used)
			continue;
		used += sz;
		ranked[(size_t)h * n + m++] = c;
	}
	count[h] = v < 0 ? v : (int32_t)m;
	if (tokens)
		tokens[h] = v < 0 ? 0 : used;
}

/* Sort every head's (score, id) pairs, best first, into @ranked. */
static int rank_all(const float *score, uint32_t n_heads, uint32_t n, uint32_t *ranked,
		    int32_t *valid, cudaStream_t st)
{
	const size_t items = (size_t)n_heads * n;
	size_t tmp_bytes = 0, bytes;
	float *keys_out = NULL;
	uint32_t *ids_in, *offsets;
	void *tmp;
	int ret;

	/* CUB counts items in int (before CCCL 3), offsets here are uint32_t. */
	if (items > INT32_MAX)
		return -EINVAL;
	if (cub::DeviceSegmentedSort::StableSortPairsDescending(
		    NULL, tmp_bytes, score, (float *)NULL, (uint32_t *)NULL, (uint32_t *)NULL,
		    (int)items, (int)n_heads, (uint32_t *)NULL, (uint32_t *)NULL, st))
		return -EIO;
	/* One scratch block: sorted keys, input ids, offsets, CUB's temp. */
	bytes = sizeof(float) * items + sizeof(uint32_t) * (items + n_heads + 1);
	bytes = (bytes + 255) & ~(size_t)255;
	ret = nc_err(cudaMallocAsync((void **)&keys_out, bytes + tmp_bytes, st));
	if (ret)
		return ret;
	ids_in = (uint32_t *)(keys_out + items);
	offsets = ids_in + items;
	tmp = (char *)keys_out + bytes;
	prepare_kernel<<<n_heads, THREADS, 0, st>>>(score, n, ids_in, offsets, valid);
	ret = nc_launched();
	if (!ret)
		ret = nc_err(cub::DeviceSegmentedSort::StableSortPairsDescending(
			tmp, tmp_bytes, score, keys_out, ids_in, ranked, (int)items,
			(int)n_heads, offsets, offsets + 1, st));
	cudaFreeAsync(keys_out, st);
	return ret;
}

int nelssa_cuda_topk(const float *score, uint32_t n_heads, uint32_t n_clusters, uint32_t k,
		     uint32_t *ids, int32_t *count, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	uint32_t *ranked = NULL;
	int32_t *valid;
	int ret;

	if (n_heads > 65535)
		return -EINVAL;
	if (!n_heads)
		return 0;
	if (!n_clusters || !k)
		return nc_err(cudaMemsetAsync(count, 0, sizeof(*count) * n_heads, st));
	ret = nc_err(cudaMallocAsync((void **)&ranked,
				     sizeof(uint32_t) * (size_t)n_heads * n_clusters +
				     sizeof(int32_t) * n_heads, st));
	if (ret)
		return ret;
	valid = (int32_t *)(ranked + (size_t)n_heads * n_clusters);
	ret = rank_all(score, n_heads, n_clusters, ranked, valid, st);
	if (!ret) {
		take_kernel<<<dim3(nc_blocks(k, THREADS), n_heads), THREADS, 0, st>>>(
			ranked, valid, n_clusters, k, ids, count);
		ret = nc_launched();
	}
	cudaFreeAsync(ranked, st);
	return ret;
}

int nelssa_cuda_topk_budget(const float *score, const uint32_t *sizes, uint32_t n_heads,
			    uint32_t n_clusters, uint64_t budget, uint32_t *ids, int32_t *count,
			    void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	int32_t *valid = NULL;
	int ret;

	if (!n_heads)
		return 0;
	if (!n_clusters)
		return nc_err(cudaMemsetAsync(count, 0, sizeof(*count) * n_heads, st));
	ret = nc_err(cudaMallocAsync((void **)&valid, sizeof(*valid) * n_heads, st));
	if (ret)
		return ret;
	ret = rank_all(score, n_heads, n_clusters, ids, valid, st);
	if (!ret) {
		budget_kernel<<<n_heads, THREADS, 0, st>>>(ids, sizes, valid, n_clusters, budget,
							   count);
		ret = nc_launched();
	}
	cudaFreeAsync(valid, st);
	return ret;
}

int nelssa_cuda_topk_fill(const float *score, const uint32_t *sizes, uint32_t n_heads,
			  uint32_t n_clusters, uint64_t budget, uint32_t *ids, int32_t *count,
			  uint64_t *tokens, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	int32_t *valid = NULL;
	int ret;

	if (!n_heads)
		return 0;
	if (!n_clusters) {
		ret = nc_err(cudaMemsetAsync(count, 0, sizeof(*count) * n_heads, st));
		if (!ret && tokens)
			ret = nc_err(cudaMemsetAsync(tokens, 0, sizeof(*tokens) * n_heads, st));
		return ret;
	}
	ret = nc_err(cudaMallocAsync((void **)&valid, sizeof(*valid) * n_heads, st));
	if (ret)
		return ret;
	ret = rank_all(score, n_heads, n_clusters, ids, valid, st);
	if (!ret) {
		fill_kernel<<<nc_blocks(n_heads, 128), 128, 0, st>>>(
			ids, sizes, valid, n_heads, n_clusters, budget, count,
			(unsigned long long *)tokens);
		ret = nc_launched();
	}
	cudaFreeAsync(valid, st);
	return ret;
}
