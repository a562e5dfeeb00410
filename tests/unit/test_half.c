// SPDX-License-Identifier: MIT
/*
 * bf16 and fp16 conversion against references built from the format
 * definitions in float64 (value = sign * significand * 2^exponent; nearest
 * representable found by binary search over the ordered bit patterns), plus
 * the compiler's own _Float16 conversion as a second implementation.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include <nelssa/half.h>

#include "testutil.h"

/* One table describes both formats, so the reference code is shared. */
struct fmt {
	const char *name;
	unsigned int exp_bits, frac_bits;
	uint16_t (*narrow)(float);
	float (*widen)(uint16_t);
};

static uint16_t bf16_narrow(float f)
{
	return nelssa_f32_to_bf16(f);
}

static float bf16_widen(uint16_t h)
{
	return nelssa_bf16_to_f32(h);
}

static const struct fmt BF16 = { "bf16", 8, 7, bf16_narrow, bf16_widen };
static const struct fmt FP16 = { "fp16", 5, 10, nelssa_f32_to_fp16, nelssa_fp16_to_f32 };

static uint16_t exp_all_ones(const struct fmt *f)
{
	return (uint16_t)(((1u << f->exp_bits) - 1) << f->frac_bits);
}

static uint16_t max_finite(const struct fmt *f)
{
	return (uint16_t)(exp_all_ones(f) - 1);
}

static int pattern_is_nan(const struct fmt *f, uint16_t h)
{
	uint16_t a = h & 0x7fff;

	return (a & exp_all_ones(f)) == exp_all_ones(f) && (a & ((1u << f->frac_bits) - 1));
}

/* Value of a non-NaN pattern, from the definition of the format. */
static double ref_value(const struct fmt *f, uint16_t h)
{
	int bias = (1 << (f->exp_bits - 1)) - 1;
	unsigned int e = (h & 0x7fff) >> f->frac_bits;
	unsigned int m = h & ((1u << f->frac_bits) - 1);
	double sign = (h & 0x8000) ? -1.0 : 1.0;

	if ((h & 0x7fff) == exp_all_ones(f))
		return sign * INFINITY;
	if (e == 0)
		return sign * ldexp(m, 1 - bias - (int)f->frac_bits);
	return sign * ldexp((1u << f->frac_bits) + m, (int)e - bias - (int)f->frac_bits);
}

/*
 * IEEE round-to-nearest-even of a finite double into the format.  Above the
 * largest finite value the next step is one more ulp "as if the exponent
 * were unbounded", which is the IEEE overflow rule.
 */
static uint16_t ref_narrow(const struct fmt *f, double x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs(x);
	uint16_t lo = 0, hi = max_finite(f);
	double vlo, vhi;

	if (a >= ref_value(f, hi)) {
		lo = hi;
	} else {
		/* Largest pattern whose value is <= a. */
		while (lo < hi) {
			uint16_t mid = (uint16_t)((lo + hi + 1) / 2);

			if (ref_value(f, mid) <= a)
				lo = mid;
			else
				hi = (uint16_t)(mid - 1);
		}
	}
	vlo = ref_value(f, lo);
	if (lo == max_finite(f))
		vhi = vlo + (vlo - ref_value(f, (uint16_t)(lo - 1)));
	else
		vhi = ref_value(f, (uint16_t)(lo + 1));
	if (a - vlo < vhi - a || (a - vlo == vhi - a && !(lo & 1)))
		return sign | lo;
	return sign | (uint16_t)(lo + 1);
}

static int same_f32(float a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return (double)a == b && !!signbit(a) == !!signbit(b);
}

static void check_widen_all(const struct fmt *f)
{
	for (uint32_t h = 0; h <= 0xffff; h++) {
		float w = f->widen((uint16_t)h);

		if (pattern_is_nan(f, (uint16_t)h)) {
			uint32_t bits = nelssa_f32_bits(w);
			uint32_t frac = (bits & 0x7fffff) >> (23 - f->frac_bits);

			assert_true(isnan(w));
			assert_int_equal(!!(bits >> 31), !!(h & 0x8000));
			/* The payload survives widening unchanged. */
			assert_int_equal(frac, h & ((1u << f->frac_bits) - 1));
		} else if (!same_f32(w, ref_value(f, (uint16_t)h))) {
			fail_msg("%s %#06x widened to %a, expected %a", f->name, h, w,
				 ref_value(f, (uint16_t)h));
		}
	}
}

static void check_narrow(const struct fmt *f, float x)
{
	uint16_t got = f->narrow(x);

	if (isnan(x)) {
		if (!pattern_is_nan(f, got) || !!(got & 0x8000) != !!signbit(x))
			fail_msg("%s: NaN %#010x narrowed to %#06x", f->name, nelssa_f32_bits(x), got);
		return;
	}
	if (got != ref_narrow(f, x))
		fail_msg("%s: %a (%#010x) -> %#06x, expected %#06x", f->name, x,
			 nelssa_f32_bits(x), got, ref_narrow(f, x));
}

/*
 * Every tie: the exact midpoint between each pair of adjacent positive
 * finite patterns (and between the largest finite value and the overflow
 * step), both signs, must go to the even pattern; one fp32 ulp either side
 * must go to the nearer one.
 */
static void check_ties(const struct fmt *f)
{
	for (uint16_t b = 0; b <= max_finite(f); b++) {
		double v0 = ref_value(f, b);
		double v1 = b == max_finite(f) ? v0 + (v0 - ref_value(f, (uint16_t)(b - 1)))
					      : ref_value(f, (uint16_t)(b + 1));
		float mid = (float)((v0 + v1) / 2);
		uint16_t even = (b & 1) ? (uint16_t)(b + 1) : b;

		assert_true((double)mid == (v0 + v1) / 2);	/* midpoints are exact in fp32 */
		for (int s = 0; s < 2; s++) {
			float m = s ? -mid : mid;
			uint16_t sign = s ? 0x8000 : 0;

			if (f->narrow(m) != (sign | even))
				fail_msg("%s tie %a -> %#06x, expected %#06x", f->name, m,
					 f->narrow(m), sign | even);
			if (f->narrow(nextafterf(m, 0.0f)) != (sign | b))
				fail_msg("%s below tie %a", f->name, m);
			if (f->narrow(nextafterf(m, s ? -INFINITY : INFINITY)) !=
			    (sign | (uint16_t)(b + 1)))
				fail_msg("%s above tie %a", f->name, m);
		}
	}
}

/* Random fp32 bit patterns cover NaNs, subnormals and both ends. */
static void check_random_bits(const struct fmt *f, const char *name)
{
	struct tu_rng rng;

	tu_rng_for(&rng, name, 0);
	for (int i = 0; i < 500000; i++)
		check_narrow(f, nelssa_f32_from_bits((uint32_t)tu_next(&rng)));
}

/* Random values concentrated on the format's own range and its edges. */
static void check_random_range(const struct fmt *f, const char *name)
{
	int bias = (1 << (f->exp_bits - 1)) - 1;
	int lo = 1 - bias - (int)f->frac_bits - 2, hi = bias + 2;
	struct tu_rng rng;

	tu_rng_for(&rng, name, 1);
	for (int i = 0; i < 500000; i++) {
		int e = lo + (int)tu_below(&rng, (uint32_t)(hi - lo + 1));
		double x = ldexp(1.0 + tu_uniform(&rng), e);

		check_narrow(f, (float)((tu_next(&rng) & 1) ? -x : x));
	}
}

static void check_roundtrip(const struct fmt *f)
{
	for (uint32_t h = 0; h <= 0xffff; h++) {
		uint16_t back = f->narrow(f->widen((uint16_t)h));

		if (pattern_is_nan(f, (uint16_t)h))
			assert_true(pattern_is_nan(f, back));
		else
			assert_int_equal(back, h);
	}
}

static void bf16_widen_exhaustive(void **state)
{
	(void)state;
	check_widen_all(&BF16);
	/* bf16 is the high half of fp32: widening is exactly a 16-bit shift. */
	for (uint32_t h = 0; h <= 0xffff; h++)
		assert_int_equal(nelssa_f32_bits(nelssa_bf16_to_f32((uint16_t)h)), h << 16);
}

static void fp16_widen_exhaustive(void **state)
{
	(void)state;
	check_widen_all(&FP16);
}

static void bf16_ties_to_even(void **state)
{
	(void)state;
	check_ties(&BF16);
}

static void fp16_ties_to_even(void **state)
{
	(void)state;
	check_ties(&FP16);
}

static void bf16_random_bits(void **state)
{
	(void)state;
	check_random_bits(&BF16, __func__);
}

static void fp16_random_bits(void **state)
{
	(void)state;
	check_random_bits(&FP16, __func__);
}

static void bf16_random_range(void **state)
{
	(void)state;
	check_random_range(&BF16, __func__);
}

static void fp16_random_range(void **state)
{
	(void)state;
	check_random_range(&FP16, __func__);
}

static void bf16_roundtrip(void **state)
{
	(void)state;
	check_roundtrip(&BF16);
}

static void fp16_roundtrip(void **state)
{
	(void)state;
	check_roundtrip(&FP16);
}

static void specials(void **state)
{
	(void)state;
	/* Infinities stay infinite, finite overflow rounds to infinity. */
	assert_int_equal(nelssa_f32_to_bf16(INFINITY), 0x7f80);
	assert_int_equal(nelssa_f32_to_bf16(-INFINITY), 0xff80);
	assert_int_equal(nelssa_f32_to_bf16(FLT_MAX), 0x7f80);
	assert_int_equal(nelssa_f32_to_fp16(INFINITY), 0x7c00);
	assert_int_equal(nelssa_f32_to_fp16(-INFINITY), 0xfc00);
	assert_int_equal(nelssa_f32_to_fp16(65504.0f), 0x7bff);
	assert_int_equal(nelssa_f32_to_fp16(65519.99f), 0x7bff);
	assert_int_equal(nelssa_f32_to_fp16(65520.0f), 0x7c00);
	assert_int_equal(nelssa_f32_to_fp16(-1e9f), 0xfc00);
	/* Signed zeros and the fp16 subnormal edge. */
	assert_int_equal(nelssa_f32_to_bf16(-0.0f), 0x8000);
	assert_int_equal(nelssa_f32_to_fp16(-0.0f), 0x8000);
	assert_int_equal(nelssa_f32_to_fp16(ldexpf(1.0f, -24)), 0x0001);
	assert_int_equal(nelssa_f32_to_fp16(ldexpf(1.0f, -25)), 0x0000);
	assert_int_equal(nelssa_f32_to_fp16(ldexpf(1.5f, -25)), 0x0001);
	assert_int_equal(nelssa_f32_to_fp16(ldexpf(1.0f, -14)), 0x0400);
	/* A signalling NaN whose payload sits in the low bits stays a NaN. */
	assert_true(isnan(nelssa_bf16_to_f32(nelssa_f32_to_bf16(nelssa_f32_from_bits(0x7f800001)))));
	assert_true(isnan(nelssa_fp16_to_f32(nelssa_f32_to_fp16(nelssa_f32_from_bits(0xff800001)))));
	assert_int_equal(nelssa_f32_to_bf16(nelssa_f32_from_bits(0xff800001)) & 0x8000, 0x8000);
}

static void arrays_match_scalar(void **state)
{
	static const size_t sizes[] = { 0, 1, 7, 31, 64, 1003 };
	uint16_t h[1003], out[1003];
	float f[1003], w[1003];
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];

		for (size_t i = 0; i < n; i++) {
			h[i] = (uint16_t)tu_next(&rng);
			f[i] = nelssa_f32_from_bits((uint32_t)tu_next(&rng));
		}
		nelssa_bf16_to_f32_n(w, h, n);
		nelssa_f32_to_bf16_n(out, f, n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(nelssa_f32_bits(w[i]), nelssa_f32_bits(nelssa_bf16_to_f32(h[i])));
			assert_int_equal(out[i], nelssa_f32_to_bf16(f[i]));
		}
		nelssa_fp16_to_f32_n(w, h, n);
		nelssa_f32_to_fp16_n(out, f, n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(nelssa_f32_bits(w[i]), nelssa_f32_bits(nelssa_fp16_to_f32(h[i])));
			assert_int_equal(out[i], nelssa_f32_to_fp16(f[i]));
		}
	}
}

/* Second implementation: the compiler's _Float16 (x86-64 and AArch64). */
static void fp16_matches_compiler(void **state)
{
	(void)state;
#ifdef __FLT16_MAX__
	struct tu_rng rng;

	tu_rng_for(&rng, __func__, 0);
	for (uint32_t h = 0; h <= 0xffff; h++) {
		_Float16 x;
		uint16_t bits = (uint16_t)h;

		memcpy(&x, &bits, sizeof(x));
		if (!pattern_is_nan(&FP16, bits))
			assert_int_equal(nelssa_f32_bits(nelssa_fp16_to_f32(bits)),
					 nelssa_f32_bits((float)x));
	}
	for (int i = 0; i < 1000000; i++) {
		float f = nelssa_f32_from_bits((uint32_t)tu_next(&rng));
		_Float16 x = (_Float16)f;
		uint16_t bits;

		memcpy(&bits, &x, sizeof(bits));
		if (!isnan(f))
			assert_int_equal(nelssa_f32_to_fp16(f), bits);
	}
#else
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bf16_widen_exhaustive),
		cmocka_unit_test(fp16_widen_exhaustive),
		cmocka_unit_test(bf16_ties_to_even),
		cmocka_unit_test(fp16_ties_to_even),
		cmocka_unit_test(bf16_random_bits),
		cmocka_unit_test(fp16_random_bits),
		cmocka_unit_test(bf16_random_range),
		cmocka_unit_test(fp16_random_range),
		cmocka_unit_test(bf16_roundtrip),
		cmocka_unit_test(fp16_roundtrip),
		cmocka_unit_test(specials),
		cmocka_unit_test(arrays_match_scalar),
		cmocka_unit_test(fp16_matches_compiler),
	};

	tu_init("half");
	return cmocka_run_group_tests_name("half", tests, NULL, NULL);
}
