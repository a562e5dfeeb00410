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

/* @f rounded to bfloat16 and widened back: the operand a bf16 product sees. */
static inline float nelssa_bf16_round(float f)
{
	return nelssa_bf16_to_f32(nelssa_f32_to_bf16(f));
}

/**
 * nelssa_fp16_to_f32() - widen one IEEE binary16 value to binary32.
 * @h: the binary16 bits.
 *
 * Exact: every binary16 value, subnormals included, is representable in
 * binary32.  Infinities stay infinite and a NaN stays a NaN with its sign
 * and payload kept in the leading fraction bits.
 *
 * Return: the value as a float.
 */
float nelssa_fp16_to_f32(uint16_t h);

/**
 * nelssa_f32_to_fp16() - narrow one binary32 value to IEEE binary16.
 * @f: the value.
 *
 * Rounds to nearest, ties to even.  Magnitudes of 65520 (65504 plus half
 * an ulp) and above become infinity; magnitudes below 2^-14 round to a
 * subnormal or a signed zero.  A NaN stays a NaN (quieted, sign and
 * leading payload kept).
 *
 * Return: the binary16 bits.
 */
uint16_t nelssa_f32_to_fp16(float f);

/**
 * nelssa_bf16_to_f32_n() - widen an array of bfloat16 values to binary32.
 * @dst: receives @n floats.
 * @src: @n bfloat16 values.
 * @n: number of elements.
 *
 * Element by element nelssa_bf16_to_f32(), exact; a branch-free loop the
 * compiler vectorises.
 */
void nelssa_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/**
 * nelssa_f32_to_bf16_n() - narrow an array of binary32 values to bfloat16.
 * @dst: receives @n bfloat16 values.
 * @src: @n floats.
 * @n: number of elements.
 *
 * Element by element nelssa_f32_to_bf16(): round to nearest, ties to
 * even, NaN kept a (quiet) NaN; a branch-free loop the compiler vectorises.
 */
void nelssa_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);

/**
 * nelssa_fp16_to_f32_n() - widen an array of IEEE binary16 values to binary32.
 * @dst: receives @n floats.
 * @src: @n binary16 values.
 * @n: number of elements.
 *
 * Element by element nelssa_fp16_to_f32(), exact.
 */
void nelssa_fp16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/**
 * nelssa_f32_to_fp16_n() - narrow an array of binary32 values to IEEE binary16.
 * @dst: receives @n binary16 values.
 * @src: @n floats.
 * @n: number of elements.
 *
 * Element by element nelssa_f32_to_fp16(): round to nearest, ties to
 * even, overflow to infinity, NaN kept a (quiet) NaN.
 */
void nelssa_f32_to_fp16_n(uint16_t *dst, const float *src, size_t n);

/**
 * nelssa_fp8_e4m3_to_f32() - widen one OCP FP8 E4M3 code to binary32.
 * @c: the code: sign, 4 exponent bits (bias 7), 3 fraction bits.
 *
 * Exact.  E4M3 has no infinities: 0x7f and 0xff are NaN, 0x7e is 448.
 *
 * Return: the value as a float.
 */
float nelssa_fp8_e4m3_to_f32(uint8_t c);

/**
 * nelssa_f32_to_fp8_e4m3() - narrow one binary32 value to FP8 E4M3.
 * @f: the value.
 *
 * Rounds to nearest, ties to even, and saturates: magnitudes past 448
 * become 448 (the formats' "satfinite" conversion, what GPU fp8 KV caches
 * use); a NaN becomes the NaN code of its sign.
 *
 * Return: the code.
 */
uint8_t nelssa_f32_to_fp8_e4m3(float f);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_HALF_H */
