// SPDX-License-Identifier: MIT
/*
 * The twin of nelssa_kv_quantize() and of the client's offload gather
 * (client/kv_tiles.c): a GPU node quantises its bf16 or fp16 KV into the
 * 8-bit tiled layout where the KV lives, and transfers half the bytes.
 * One warp per (tile, 32-channel group): lane j owns channel j of the
 * group over the tile's 16 rows, the warp's maximum gives the scale, and
 * every step is the CPU version's float arithmetic (IEEE division and
 * rounding to nearest even, no contraction), so the bytes are identical.
 */
#include <errno.h>
#include <stdint.h>

#include <nelssa/sparse_cuda.h>

#include "common.cuh"

static __device__ uint8_t fp8_code(float f)
{
	const uint32_t u = __float_as_uint(f), sign = (u >> 24) & 0x80u;
	const float a = fabsf(f);
	uint32_t code;

	if (isnan(f))
		return (uint8_t)(sign | 0x7fu);
	if (a < 0.015625f) {
		code = (uint32_t)rintf(__fmul_rn(a, 512.0f));
	} else if (a >= 448.0f) {
		code = 0x7eu;
	} else {
		uint32_t b = __float_as_uint(a);

		b = (b + 0x7ffffu + ((b >> 20) & 1u)) >> 20;
		code = b - ((127u - 7u) << 3);
	}
	return (uint8_t)(sign | code);
}

static __device__ uint8_t code_of(bool int8, float x)
{
	if (int8) {
		float r = rintf(x);

		r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
		return (uint8_t)(int8_t)r;
	}
	return fp8_code(x);
}

__global__ void quantise_kernel(bool int8, uint32_t d, const uint16_t *src, bool bf16,
				const uint32_t *perm, uint32_t first, uint32_t n, uint8_t *dst,
				uint64_t tile_bytes, int32_t *status)
{
	const uint32_t t0 = blockIdx.x * NELSSA_KV_QTILE, g0 = blockIdx.y * NELSSA_KV_QGROUP;
	const uint32_t j = g0 + threadIdx.x, rows = n - t0 < NELSSA_KV_QTILE ? n - t0 :
						   NELSSA_KV_QTILE;
	uint8_t *tile = dst + (uint64_t)blockIdx.x * tile_bytes;
	float x[NELSSA_KV_QTILE], amax = 0.0f, scale;
	bool bad = false;

	for (uint32_t r = 0; r < rows; r++) {
		const uint32_t t = perm ? perm[first + t0 + r] : first + t0 + r;

		x[r] = j < d ? nc_widen(src[(uint64_t)t * d + j], bf16) : 0.0f;
		bad |= !isfinite(x[r]);
		amax = fmaxf(amax, fabsf(x[r]));
	}
	for (int o = NC_WARP / 2; o > 0; o /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	if (__any_sync(0xffffffffu, bad)) {
		if (!threadIdx.x)
			atomicExch(status, -EINVAL);
		return;
	}
	scale = __fdiv_rn(amax, int8 ? 127.0f : 448.0f);
	if (!threadIdx.x)
		*(float *)(tile + (uint64_t)NELSSA_KV_QTILE * d + 4 * blockIdx.y) = scale;
	if (j >= d || scale == 0.0f)
		return;		/* codes stay the zeroes the tile was cleared to */
	for (uint32_t r = 0; r < rows; r++)
		tile[(uint64_t)r * d + j] = code_of(int8, __fdiv_rn(x[r], scale));
}

int nelssa_cuda_kv_quantize(enum nelssa_kv_dtype dtype, uint32_t head_dim,
			    enum nelssa_kv_dtype src_dtype, const void *src, const uint32_t *perm,
			    uint32_t first, uint32_t n_tokens, void *dst, int32_t *status,
			    void *stream)
{
	const cudaStream_t st = (cudaStream_t)stream;
	const dim3 grid(nc_blocks(n_tokens, NELSSA_KV_QTILE),
			(head_dim + NELSSA_KV_QGROUP - 1) / NELSSA_KV_QGROUP);
	int ret;

	if (!nelssa_kv_is_tiled(dtype) || !head_dim || head_dim > NELSSA_ATTN_MAX_HEAD_DIM ||
	    (src_dtype != NELSSA_KV_BF16 && src_dtype != NELSSA_KV_FP16))
		return -EINVAL;
	ret = nc_err(cudaMemsetAsync(status, 0, sizeof(*status), st));
	if (ret || !n_tokens)
		return ret;
	/* Rows of a partial last tile and the padding: zero, as on the CPU. */
	ret = nc_err(cudaMemsetAsync(dst, 0, nelssa_kv_bytes(dtype, head_dim, n_tokens), st));
	if (ret)
		return ret;
	quantise_kernel<<<grid, NC_WARP, 0, st>>>(dtype == NELSSA_KV_INT8, head_dim,
						  (const uint16_t *)src, src_dtype == NELSSA_KV_BF16,
						  perm, first, n_tokens, (uint8_t *)dst,
						  nelssa_kv_tile_bytes(head_dim), status);
	return nc_launched();
}
