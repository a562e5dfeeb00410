// SPDX-License-Identifier: MIT
/*
 * IEEE binary16 <-> binary32, bit-exact and portable (no F16C/_Float16
 * needed, so the firmware cross-compiles for any core).
 *
 * binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits; subnormals
 * are m * 2^-24.  binary32 exponents are re-biased by 127 - 15 = 112.
 */
#include <nelssa/half.h>

float nelssa_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t frac = h & 0x3ffu;

	if (exp == 0x1f)		/* inf, NaN: payload kept in the top bits */
		return nelssa_f32_from_bits(sign | 0x7f800000u | (frac << 13));
	if (exp != 0)
		return nelssa_f32_from_bits(sign | ((exp + 112) << 23) | (frac << 13));
	if (frac == 0)
		return nelssa_f32_from_bits(sign);
	/* Subnormal: normalise; each shift lowers the exponent by one. */
	exp = 1;
	while (!(frac & 0x400u)) {
		frac <<= 1;
		exp--;
	}
	return nelssa_f32_from_bits(sign | ((exp + 112) << 23) | ((frac & 0x3ffu) << 13));
}

/* Round @m right by @shift bits (1..31), to nearest, ties to even. */
static uint32_t shift_rne(uint32_t m, unsigned int shift)
{
	uint32_t kept = m >> shift;
	uint32_t rest = m & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);

	return kept + (rest > half || (rest == half && (kept & 1u)));
}

uint16_t nelssa_f32_to_fp16(float f)
{
	uint32_t u = nelssa_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;

	if (a > 0x7f800000u)		/* NaN: quiet it, keep the leading payload */
		return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu);
	if (a >= 0x477ff000u)		/* >= 65520 = 65504 + half an ulp, or inf */
		return sign | 0x7c00u;
	if (a >= 0x38800000u)		/* normal: >= 2^-14 */
		return sign | (uint16_t)shift_rne(a - (112u << 23), 13);
	if (a < 0x33000000u)		/* < 2^-25: rounds to zero */
		return sign;
	/*
	 * Subnormal result: value = mant * 2^(e - 150) and the result counts
	 * units of 2^-24, so shift right by 126 - e (14..24).  A carry out of
	 * the fraction lands in the exponent field and yields 2^-14 exactly.
	 */
	return sign | (uint16_t)shift_rne((a & 0x7fffffu) | 0x800000u, 126 - (a >> 23));
}

void nelssa_fp16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = nelssa_fp16_to_f32(src[i]);
}

void nelssa_f32_to_fp16_n(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = nelssa_f32_to_fp16(src[i]);
}
