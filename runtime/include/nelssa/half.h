/* SPDX-License-Identifier: MIT */
/*
 * bfloat16 and IEEE binary16 <-> binary32 conversion.
 *
 * Narrowing rounds to nearest, ties to even, as IEEE 754 and every GPU do;
 * values past the largest finite half round to infinity; NaN stays NaN
 * (quieted, sign and leading payload kept) and infinities stay infinite.
 * Widening is exact.  The array forms are branch-free loops the compiler
 * vectorises; the scalar forms are the same arithmetic.
 */
#ifndef NELSSA_HALF_H
#define NELSSA_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint32_t nelssa_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float nelssa_f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* bfloat16 is the top half of a binary32, so widening is a shift. */
static inline float nelssa_bf16_to_f32(uint16_t h)
{
	return nelssa_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t nelssa_f32_to_bf16(float f)
{
	uint32_t u = nelssa_f32_bits(f);
	/* Adding 0x7fff plus the kept LSB carries exactly when RNE rounds up. */
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	/* The same add could turn a NaN with a low payload into infinity. */
	uint32_t quiet_nan = (u >> 16) | 0x0040u;

	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

float nelssa_fp16_to_f32(uint16_t h);
uint16_t nelssa_f32_to_fp16(float f);

void nelssa_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void nelssa_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void nelssa_fp16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void nelssa_f32_to_fp16_n(uint16_t *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_HALF_H */
