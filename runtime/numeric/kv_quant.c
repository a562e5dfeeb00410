// SPDX-License-Identifier: MIT
/*
 * The 8-bit KV types: FP8 E4M3 and int8 codes in tiles of
 * NELSSA_KV_QTILE tokens with a binary32 scale per NELSSA_KV_QGROUP
 * channels (enum nelssa_kv_dtype).  Quantisation is the host's (the GPU
 * node's) job at offload time; decoding here is the reference every
 * device kernel is tested against.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/half.h>

#define FP8_MAX 448.0f
#define INT8_MAX_CODE 127.0f

float nelssa_fp8_e4m3_to_f32(uint8_t c)
{
	uint32_t mag = c & 0x7fu;
	float x;

	if (mag == 0x7fu)
		x = NAN;
	else if (mag < 8u)
		x = (float)mag * 0x1p-9f;	/* subnormal: m * 2^-9, exact */
	else	/* exponent and fraction moved into place, bias 7 -> 127 */
		x = nelssa_f32_from_bits((mag << 20) + ((127u - 7u) << 23));
	return c & 0x80u ? -x : x;
}

uint8_t nelssa_f32_to_fp8_e4m3(float f)
{
	uint32_t u = nelssa_f32_bits(f), sign = (u >> 24) & 0x80u, code;
	float a = fabsf(f);

	if (isnan(f))
		return (uint8_t)(sign | 0x7fu);
	if (a < 0.015625f) {
		/* Below 2^-6 the codes are evenly spaced by 2^-9: scale, round. */
		code = (uint32_t)nearbyintf(a * 512.0f);	/* 8 is 2^-6, the next code */
	} else if (a >= FP8_MAX) {
		code = 0x7eu;
	} else {
		uint32_t b = nelssa_f32_bits(a);

		/* Keep 3 fraction bits, ties to even; a carry bumps the exponent. */
		b = (b + 0x7ffffu + ((b >> 20) & 1u)) >> 20;
		code = b - ((127u - 7u) << 3);	/* at most 0x7e: a < 448 */
	}
	return (uint8_t)(sign | code);
}

static float decode(enum nelssa_kv_dtype dtype, uint8_t c)
{
	return dtype == NELSSA_KV_INT8 ? (float)(int8_t)c : nelssa_fp8_e4m3_to_f32(c);
}

static uint8_t encode(enum nelssa_kv_dtype dtype, float x)
{
	if (dtype == NELSSA_KV_INT8) {
		float r = nearbyintf(x);

		r = r > INT8_MAX_CODE ? INT8_MAX_CODE : r < -INT8_MAX_CODE ? -INT8_MAX_CODE : r;
		return (uint8_t)(int8_t)r;
	}
	return nelssa_f32_to_fp8_e4m3(x);
}

void nelssa_kv_widen_at(float *dst, const void *store, size_t first, size_t n, uint32_t head_dim,
			enum nelssa_kv_dtype dtype)
{
	const uint8_t *base = store;
	const uint64_t tile = nelssa_kv_tile_bytes(head_dim);

	if (!nelssa_kv_is_tiled(dtype)) {
		nelssa_kv_widen(dst, base + first * head_dim * nelssa_kv_elem_bytes(dtype),
				n * head_dim, dtype);
		return;
	}
	for (size_t t = first; t < first + n; t++, dst += head_dim) {
		const uint8_t *tp = base + (t / NELSSA_KV_QTILE) * tile;
		const uint8_t *row = tp + (t % NELSSA_KV_QTILE) * head_dim;
		const uint8_t *sc = tp + (size_t)NELSSA_KV_QTILE * head_dim;

		for (uint32_t j = 0; j < head_dim; j++) {
			float s;

			memcpy(&s, sc + 4 * (j / NELSSA_KV_QGROUP), sizeof(s));
			dst[j] = s * decode(dtype, row[j]);
		}
	}
}

int nelssa_kv_quantize(enum nelssa_kv_dtype dtype, uint32_t head_dim, const float *src,
		       size_t n_tokens, void *dst)
{
	const float qmax = dtype == NELSSA_KV_INT8 ? INT8_MAX_CODE : FP8_MAX;
	const uint64_t tile = nelssa_kv_tile_bytes(head_dim);
	uint8_t *out = dst;

	if (!nelssa_kv_is_tiled(dtype) || !head_dim || head_dim > NELSSA_ATTN_MAX_HEAD_DIM)
		return -EINVAL;
	for (size_t t0 = 0; t0 < n_tokens; t0 += NELSSA_KV_QTILE, out += tile) {
		size_t rows = n_tokens - t0 < NELSSA_KV_QTILE ? n_tokens - t0 : NELSSA_KV_QTILE;
		const float *x = src + t0 * head_dim;

		memset(out, 0, tile);
		for (uint32_t g0 = 0; g0 < head_dim; g0 += NELSSA_KV_QGROUP) {
			uint32_t g1 = g0 + NELSSA_KV_QGROUP < head_dim ? g0 + NELSSA_KV_QGROUP : head_dim;
			float amax = 0.0f, scale;

			for (size_t r = 0; r < rows; r++)
				for (uint32_t j = g0; j < g1; j++) {
					float a = fabsf(x[r * head_dim + j]);

					if (!isfinite(a))
						return -EINVAL;
					amax = a > amax ? a : amax;
				}
			scale = amax / qmax;
			memcpy(out + (size_t)NELSSA_KV_QTILE * head_dim + 4 * (g0 / NELSSA_KV_QGROUP),
			       &scale, sizeof(scale));
			if (scale == 0.0f)
				continue;	/* codes stay 0 */
			for (size_t r = 0; r < rows; r++)
				for (uint32_t j = g0; j < g1; j++)
					out[r * head_dim + j] = encode(dtype, x[r * head_dim + j] / scale);
		}
	}
	return 0;
}
