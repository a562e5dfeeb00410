// SPDX-License-Identifier: MIT
/*
 * Local-window attention and the final merge on the GPU.  A warp owns one
 * query row: lanes split the head dimension (coalesced K/V reads), the dot
 * product is a warp reduction, and the row's running max, sum and output
 * accumulator live in the lanes' registers for the online softmax.  The
 * window is small (sinks + recent, 68 tokens by default), so a row is one
 * warp's sequential walk and the batch gives the parallelism.
 */
#include <math.h>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"

#define ROWS_PER_BLOCK 4u

struct row_state {
	float m, z;
	float acc[NC_LANE_SLOTS];
};

static __device__ void feed(struct row_state *st, const float *q, const uint16_t *k,
			    const uint16_t *v, uint32_t d, float scale, bool bf16)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	float s = 0.0f, l, m, alpha, p;

#pragma unroll
	for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
		uint32_t i = lane + j * NC_WARP;

		if (i < d)
			s += q[i] * nc_widen(k[i], bf16);
	}
	l = scale * nc_warp_sum(s);
	m = fmaxf(st->m, l);
	alpha = expf(st->m - m);	/* 0 on the first token: m was -inf */
	p = expf(l - m);
	st->z = st->z * alpha + p;
#pragma unroll
	for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
		uint32_t i = lane + j * NC_WARP;

		if (i < d)
			st->acc[j] = st->acc[j] * alpha + p * nc_widen(v[i], bf16);
	}
	st->m = m;
}

__global__ void window_kernel(struct nelssa_attn_geom g, uint32_t n_items, const float *q,
			      const uint16_t *k, const uint16_t *v, uint64_t stride,
			      const uint32_t *n_tokens, uint32_t sink_cfg, uint32_t recent,
			      float *o, float *lse)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	const uint32_t r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / NC_WARP;
	const uint32_t item = blockIdx.y, d = g.head_dim;
	const bool bf16 = g.kv_dtype == NELSSA_KV_BF16;
	const size_t row = (size_t)item * g.group + r;
	const uint16_t *kb = k + (size_t)item * stride * d, *vb = v + (size_t)item * stride * d;
	struct row_state st = { -INFINITY, 0.0f, { 0 } };
	uint32_t n, sink, from;

	if (r >= g.group || item >= n_items)
		return;
	n = n_tokens[item];
	sink = sink_cfg < n ? sink_cfg : n;
	/* As the CPU version: recent tokens start after the sinks. */
	from = n - sink > recent ? n - recent : sink;
	for (uint32_t t = 0; t < sink; t++)
		feed(&st, q + row * d, kb + (size_t)t * d, vb + (size_t)t * d, d, g.scale, bf16);
	for (uint32_t t = from; t < n; t++)
		feed(&st, q + row * d, kb + (size_t)t * d, vb + (size_t)t * d, d, g.scale, bf16);
#pragma unroll
	for (uint32_t j = 0; j < NC_LANE_SLOTS; j++) {
		uint32_t i = lane + j * NC_WARP;

		if (i < d)
			o[row * d + i] = st.z > 0.0f ? st.acc[j] / st.z : isnan(st.z) ? NAN : 0.0f;
	}
	/* A NaN logit: a NaN state, as on the CPU -- never the empty one. */
	if (!lane)
		lse[row] = st.z > 0.0f ? st.m + logf(st.z) : isnan(st.z) ? NAN : -INFINITY;
}

int nelssa_cuda_window_attn(const struct nelssa_attn_geom *geom, uint32_t n_items,
			    const float *q, const void *k, const void *v, uint64_t kv_stride,
			    const uint32_t *n_tokens, const struct nelssa_window *win, float *o,
			    float *lse, void *stream)
{
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	/* Its products are binary32: it cannot give what NELSSA_ATTN_BF16_DOTS asks. */
	if (geom->flags)
		return -EOPNOTSUPP;
	if (n_items > 65535)
		return -EINVAL;
	if (!n_items)
		return 0;
	window_kernel<<<dim3(nc_blocks(geom->group, ROWS_PER_BLOCK), n_items),
			ROWS_PER_BLOCK * NC_WARP, 0, (cudaStream_t)stream>>>(
		*geom, n_items, q, (const uint16_t *)k, (const uint16_t *)v, kv_stride, n_tokens,
		win->sink, win->recent, o, lse);
	return nc_launched();
}

/* One row: fold state (ob, lb) into (oa, la) by the numeric core's rules. */
static __device__ void merge_row(float *oa, float *la, const float *ob, float lb, uint32_t d)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	const float a = *la;
	float m, wa, wb, ws;

	if (isnan(a) || isnan(lb)) {
		for (uint32_t i = lane; i < d; i += NC_WARP)
			oa[i] = NAN;
		__syncwarp();
		if (!lane)
			*la = NAN;
		return;
	}
	if (isinf(lb)) {
		if (isinf(a)) {
			for (uint32_t i = lane; i < d; i += NC_WARP)
				oa[i] = 0.0f;
			__syncwarp();
			if (!lane)
				*la = -INFINITY;
		}
		return;
	}
	if (isinf(a)) {
		for (uint32_t i = lane; i < d; i += NC_WARP)
			oa[i] = ob[i];
		__syncwarp();
		if (!lane)
			*la = lb;
		return;
	}
	m = fmaxf(a, lb);
	wa = expf(a - m);
	wb = expf(lb - m);
	ws = wa + wb;
	wa /= ws;
	wb /= ws;
	for (uint32_t i = lane; i < d; i += NC_WARP)
		oa[i] = wa * oa[i] + wb * ob[i];
	__syncwarp();
	if (!lane)
		*la = m + logf(ws);
}

__global__ void merge_kernel(float *o, float *lse, const float *win_o, const float *win_lse,
			     const float *pnm_o, const float *pnm_lse, uint32_t n_pnm,
			     uint32_t rows, uint32_t d)
{
	const uint32_t lane = threadIdx.x % NC_WARP;
	const size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / NC_WARP;

	if (r >= rows)
		return;
	if (o != win_o)
		for (uint32_t i = lane; i < d; i += NC_WARP)
			o[r * d + i] = win_o[r * d + i];
	if (lse != win_lse && !lane)
		lse[r] = win_lse[r];
	__syncwarp();
	for (uint32_t s = 0; s < n_pnm; s++) {
		merge_row(o + r * d, lse + r, pnm_o + ((size_t)s * rows + r) * d,
			  pnm_lse[(size_t)s * rows + r], d);
		__syncwarp();
	}
}

int nelssa_cuda_final_merge(float *o, float *lse, const float *win_o, const float *win_lse,
			    const float *pnm_o, const float *pnm_lse, uint32_t n_pnm,
			    uint32_t rows, uint32_t d, void *stream)
{
	if (!d)
		return -EINVAL;
	if (!rows)
		return 0;
	merge_kernel<<<nc_blocks(rows, ROWS_PER_BLOCK), ROWS_PER_BLOCK * NC_WARP, 0,
		       (cudaStream_t)stream>>>(o, lse, win_o, win_lse, pnm_o, pnm_lse, n_pnm, rows,
						d);
	return nc_launched();
}
