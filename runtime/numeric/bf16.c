// SPDX-License-Identifier: MIT
/*
 * bfloat16 array conversion.  The loops call the inline scalar forms from
 * <nelssa/half.h>, which are branch-free, so GCC and Clang vectorise them
 * (shift/add/compare/blend) at -O2 and above.
 */
#include <nelssa/half.h>

void nelssa_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = nelssa_bf16_to_f32(src[i]);
}

void nelssa_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = nelssa_f32_to_bf16(src[i]);
}
