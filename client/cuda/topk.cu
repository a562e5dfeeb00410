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
 * The CPU's fill_from(): walk one ranking, skip what is taken or does not
 * fit, take the rest up to @upto.  @taken may be NULL (one ranking never
 * repeats an id); @out may be @ranked itself, since the m-th id taken is
 * read at position >= m.
 */
__device__ static uint32_t take_from(const uint32_t *ranked, int32_t valid, const uint32_t *sizes,
				     unsigned long long upto, unsigned long long *used,
				     unsigned char *taken, uint32_t *out)
{
	uint32_t m = 0;

	for (uint32_t i = 0; valid > 0 && i < (uint32_t)valid && *used < upto; i++) {
		uint32_t c = ranked[i], sz = sizes[c];

		if ((taken && taken[c]) || !sz || sz > upto - *used)
			continue;
		if (taken)
			taken[c] = 1;
		*used += sz;
		out[m++] = c;
	}
	return m;
}

/*
 * Filling a budget skips what does not fit and reads on, so unlike the
 * prefix above it is a true scan: one thread per head walks its ranking
 * (heads in parallel) with take_from() and compacts the ids it takes in
 * place.
 */
__global__ void fill_kernel(uint32_t *ranked, const uint32_t *sizes, const int32_t *valid,
			    uint32_t n_heads, uint32_t n, uint64_t budget, int32_t *count,
			    unsigned long long *tokens)
{
	const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
	const size_t o = (size_t)h * n;
	unsigned long long used = 0;
	uint32_t m;

	if (h >= n_heads)
		return;
	m = take_from(ranked + o, valid[h], sizes + o, budget, &used, NULL, ranked + o);
	count[h] = valid[h] < 0 ? valid[h] : (int32_t)m;
	if (tokens)
		tokens[h] = valid[h] < 0 ? 0 : used;
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
	/* k = 0 still checks the scores: a NaN head reports -EINVAL, as on the CPU. */
	if (!n_clusters)
		return nc_err(cudaMemsetAsync(count, 0, sizeof(*count) * n_heads, st));
	ret = nc_err(cudaMallocAsync((void **)&ranked,
				     sizeof(uint32_t) * (size_t)n_heads * n_clusters +
				     sizeof(int32_t) * n_heads, st));
	if (ret)
		return ret;
	valid = (int32_t *)(ranked + (size_t)n_heads * n_clusters);
	ret = rank_all(score, n_heads, n_clusters, ranked, valid, st);
	if (!ret) {
		take_kernel<<<dim3(nc_blocks(k ? k : 1, THREADS), n_heads), THREADS, 0, st>>>(
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

/*
 * Two rankings, one budget (nelssa_select_hybrid() with two lists): a
 * thread per head runs the CPU loop exactly -- the first list fills its
 * share, the second the whole budget, then each tops up -- with a byte
 * per cluster marking what is taken.
 */
__global__ void hybrid_kernel(const uint32_t *r0, const uint32_t *r1, const int32_t *v0,
			      const int32_t *v1, const uint32_t *sizes, uint32_t n_heads,
			      uint32_t n, uint64_t first, uint64_t budget, unsigned char *taken,
			      uint32_t *ids, int32_t *count, unsigned long long *tokens)
{
	const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
	const size_t o = (size_t)h * n;
	unsigned long long used = 0;
	uint32_t m = 0;

	if (h >= n_heads)
		return;
	if (v0[h] < 0 || v1[h] < 0) {
		count[h] = v0[h] < 0 ? v0[h] : v1[h];
		if (tokens)
			tokens[h] = 0;
		return;
	}
	m += take_from(r0 + o, v0[h], sizes + o, first, &used, taken + o, ids + o + m);
	m += take_from(r1 + o, v1[h], sizes + o, budget, &used, taken + o, ids + o + m);
	m += take_from(r0 + o, v0[h], sizes + o, budget, &used, taken + o, ids + o + m);
	m += take_from(r1 + o, v1[h], sizes + o, budget, &used, taken + o, ids + o + m);
	count[h] = (int32_t)m;
	if (tokens)
		tokens[h] = used;
}

int nelssa_cuda_select_hybrid2(const float *first, const float *second, double share,
			       const uint32_t *sizes, uint32_t n_heads, uint32_t n_clusters,
			       uint64_t budget, uint32_t *ids, int32_t *count, uint64_t *tokens,
			       void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const size_t items = (size_t)n_heads * n_clusters;
	uint32_t *r0 = NULL, *r1;
	int32_t *v0, *v1;
	unsigned char *taken;
	int ret;

	if (!(share >= 0.0 && share <= 1.0) || n_heads > 65535)
		return -EINVAL;
	if (!n_heads)
		return 0;
	if (!n_clusters) {
		ret = nc_err(cudaMemsetAsync(count, 0, sizeof(*count) * n_heads, st));
		if (!ret && tokens)
			ret = nc_err(cudaMemsetAsync(tokens, 0, sizeof(*tokens) * n_heads, st));
		return ret;
	}
	/* One scratch block: both rankings, their valid counts, the taken bytes. */
	ret = nc_err(cudaMallocAsync((void **)&r0, sizeof(uint32_t) * 2 * items +
				     sizeof(int32_t) * 2 * n_heads + items, st));
	if (ret)
		return ret;
	r1 = r0 + items;
	v0 = (int32_t *)(r1 + items);
	v1 = v0 + n_heads;
	taken = (unsigned char *)(v1 + n_heads);
	ret = nc_err(cudaMemsetAsync(taken, 0, items, st));
	if (!ret)
		ret = rank_all(first, n_heads, n_clusters, r0, v0, st);
	if (!ret)
		ret = rank_all(second, n_heads, n_clusters, r1, v1, st);
	if (!ret) {
		/* The CPU's share arithmetic: the first list fills floor(share * budget). */
		const uint64_t upto = share >= 1.0 ? budget : (uint64_t)(share * (double)budget);

		hybrid_kernel<<<nc_blocks(n_heads, 128), 128, 0, st>>>(
			r0, r1, v0, v1, sizes, n_heads, n_clusters, upto, budget, taken, ids,
			count, (unsigned long long *)tokens);
		ret = nc_launched();
	}
	cudaFreeAsync(r0, st);
	return ret;
}
