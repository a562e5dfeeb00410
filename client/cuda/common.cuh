/* SPDX-License-Identifier: MIT */
/*
 * Device helpers shared by the CUDA twins: widening of the 16-bit KV
 * formats (same rules as the numeric core: bf16 is the top half of an
 * fp32, fp16 goes through the hardware conversion, which is exact), warp
 * and block reductions, and the host-side error mapping to -errno.
 */
#ifndef NELSSA_CUDA_COMMON_CUH
#define NELSSA_CUDA_COMMON_CUH

#include <errno.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <nelssa/attention.h>

#define NC_WARP 32u
/* Per-lane register slots: head_dim <= NELSSA_ATTN_MAX_HEAD_DIM = 32 * 32. */
#define NC_LANE_SLOTS (NELSSA_ATTN_MAX_HEAD_DIM / NC_WARP)

static __device__ __forceinline__ float nc_widen(uint16_t h, bool bf16)
{
	if (bf16)
		return __uint_as_float((uint32_t)h << 16);
	return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ float nc_warp_sum(float x)
{
	for (int o = NC_WARP / 2; o > 0; o /= 2)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

/* Sum of @x over the block; every thread gets it.  @sh: blockDim/32 slots. */
template <typename T>
static __device__ T nc_block_sum(T x, T *sh)
{
	const unsigned lane = threadIdx.x % NC_WARP, warp = threadIdx.x / NC_WARP;
	const unsigned warps = (blockDim.x + NC_WARP - 1) / NC_WARP;

	for (int o = NC_WARP / 2; o > 0; o /= 2)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	__syncthreads();	/* @sh may still be read from a previous call */
	if (!lane)
		sh[warp] = x;
	__syncthreads();
	x = 0;
	for (unsigned w = 0; w < warps; w++)
		x += sh[w];
	return x;
}

static __device__ float nc_block_max(float x, float *sh)
{
	const unsigned lane = threadIdx.x % NC_WARP, warp = threadIdx.x / NC_WARP;
	const unsigned warps = (blockDim.x + NC_WARP - 1) / NC_WARP;

	for (int o = NC_WARP / 2; o > 0; o /= 2)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	__syncthreads();
	if (!lane)
		sh[warp] = x;
	__syncthreads();
	x = -INFINITY;
	for (unsigned w = 0; w < warps; w++)
		x = fmaxf(x, sh[w]);
	return x;
}

static inline unsigned nc_blocks(uint64_t n, unsigned per_block)
{
	return (unsigned)((n + per_block - 1) / per_block);
}

/* A CUDA error as the -errno the C API returns. */
static inline int nc_err(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidConfiguration:
		return -EINVAL;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/* The error of the launches just made, as -errno. */
static inline int nc_launched(void)
{
	return nc_err(cudaGetLastError());
}

#endif /* NELSSA_CUDA_COMMON_CUH */
