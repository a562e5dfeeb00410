// SPDX-License-Identifier: MIT
/*
 * The 8-bit KV types: E4M3 conversion against the format's definition in
 * float64 (every code; nearest code by exhaustive search, ties to the even
 * code), the quantiser's tiles against the uapi layout decoded by the test
 * on its own, its error bound, its refusals, and attention over a tiled
 * store against float64 over the decoded values.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/attention.h>
#include <nelssa/half.h>

#include "testutil.h"

static void fp8_widen_every_code(void **state)
{
	(void)state;
	for (unsigned int c = 0; c < 256; c++) {
		double want = tu_code_value((uint8_t)c, NELSSA_KV_FP8_E4M3);
		float got = nelssa_fp8_e4m3_to_f32((uint8_t)c);

		if (isnan(want)) {
			assert_true(isnan(got));
			continue;
		}
		if ((double)got != want || !signbit(got) != !signbit(want))
			fail_msg("code 0x%02x: %a, want %a", c, got, want);
	}
	assert_true(nelssa_fp8_e4m3_to_f32(0x7e) == 448.0f);
	assert_true(nelssa_fp8_e4m3_to_f32(0x01) == 0x1p-9f);
}

/* The code nearest @x among the finite ones, ties to the even code. */
static uint8_t nearest_code(double x)
{
	double best = INFINITY;
	uint8_t code = 0;

	if (fabs(x) >= 448.0)
		return x < 0 ? 0xfe : 0x7e;
	for (unsigned int c = 0; c < 256; c++) {
		double v = tu_code_value((uint8_t)c, NELSSA_KV_FP8_E4M3), e;

		if (isnan(v) || !signbit(v) != !signbit(x))
			continue;
		e = fabs(v - x);
		if (e < best || (e == best && !(c & 1))) {
			best = e;
			code = (uint8_t)c;
		}
	}
	return code;
}

static void fp8_narrow_nearest_even(void **state)
{
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	/* Every code, and every midpoint between neighbours (ties to even). */
	for (unsigned int c = 0; c < 0x7e; c++) {
		float lo = nelssa_fp8_e4m3_to_f32((uint8_t)c);
		float hi = nelssa_fp8_e4m3_to_f32((uint8_t)(c + 1));
		float mid = (lo + hi) / 2;	/* exact: few significant bits */

		assert_int_equal(nelssa_f32_to_fp8_e4m3(lo), c);
		assert_int_equal(nelssa_f32_to_fp8_e4m3(-lo), c | 0x80);
		assert_int_equal(nelssa_f32_to_fp8_e4m3(mid), c & 1 ? c + 1 : c);
		assert_int_equal(nelssa_f32_to_fp8_e4m3(nextafterf(mid, 0)), c);
		assert_int_equal(nelssa_f32_to_fp8_e4m3(nextafterf(mid, INFINITY)), c + 1);
	}
	/* Random magnitudes over the whole range and past it. */
	for (int i = 0; i < 200000; i++) {
		float x = (float)ldexp(tu_uniform(&rng), (int)tu_below(&rng, 24) - 14);

		x = tu_below(&rng, 2) ? -x : x;
		if (nelssa_f32_to_fp8_e4m3(x) != nearest_code(x))
			fail_msg("%a -> 0x%02x, want 0x%02x", x, nelssa_f32_to_fp8_e4m3(x),
				 nearest_code(x));
	}
	/* Saturation, NaN, signed zero. */
	assert_int_equal(nelssa_f32_to_fp8_e4m3(464.0f), 0x7e);
	assert_int_equal(nelssa_f32_to_fp8_e4m3(1e30f), 0x7e);
	assert_int_equal(nelssa_f32_to_fp8_e4m3(-INFINITY), 0xfe);
	assert_int_equal(nelssa_f32_to_fp8_e4m3(NAN) & 0x7f, 0x7f);
	assert_int_equal(nelssa_f32_to_fp8_e4m3(-0.0f), 0x80);
	assert_int_equal(nelssa_f32_to_fp8_e4m3(0x1p-11f), 0x00);	/* a quarter step: 0 */
}

static void layout_sizes(void **state)
{
	(void)state;
	/* 16 rows of 128 codes + 4 scales = 2064, padded to 2112. */
	assert_int_equal(nelssa_kv_tile_bytes(128), 2112);
	assert_int_equal(nelssa_kv_tile_bytes(64), 1088);
	assert_int_equal(nelssa_kv_tile_bytes(80), 1344);	/* 1280 + 3 scales */
	assert_int_equal(nelssa_kv_tile_bytes(1), 64);
	assert_int_equal(nelssa_kv_bytes(NELSSA_KV_INT8, 128, 0), 0);
	assert_int_equal(nelssa_kv_bytes(NELSSA_KV_INT8, 128, 1), 2112);
	assert_int_equal(nelssa_kv_bytes(NELSSA_KV_FP8_E4M3, 128, 16), 2112);
	assert_int_equal(nelssa_kv_bytes(NELSSA_KV_FP8_E4M3, 128, 17), 4224);
	assert_int_equal(nelssa_kv_bytes(NELSSA_KV_BF16, 128, 17), 17 * 256);
	assert_int_equal(nelssa_kv_bytes((enum nelssa_kv_dtype)9, 128, 17), 0);
	assert_int_equal(nelssa_kv_elem_bytes(NELSSA_KV_INT8), 0);	/* not row-addressed */
}

/*
 * Quantise random rows -- with a few outlier channels, as real keys have
 * -- and check every scale, code and byte of padding against the format.
 */
static void check_quantize(enum nelssa_kv_dtype dt, uint32_t d, uint32_t n, uint64_t seed)
{
	const double qmax = dt == NELSSA_KV_INT8 ? 127.0 : 448.0;
	uint64_t bytes = nelssa_kv_bytes(dt, d, n), tile = nelssa_kv_tile_bytes(d);
	float *x = tu_alloc(sizeof(*x) * d * n), *dec = tu_alloc(sizeof(*dec) * d * n);
	float *lib = tu_alloc(sizeof(*lib) * d * n);
	uint8_t *st = tu_alloc(bytes + 64);
	struct tu_rng rng;

	tu_rng_for(&rng, "check_quantize", seed);
	tu_fill_f32(&rng, x, (size_t)d * n, 1.0);
	for (uint32_t t = 0; t < n; t++) {
		x[(size_t)t * d] *= 40.0f;			/* an outlier channel */
		if (t % 5 == 0)
			x[(size_t)t * d + d / 2] = 0.0f;
	}
	memset(st, 0xa5, bytes + 64);
	assert_int_equal(nelssa_kv_quantize(dt, d, x, n, st), 0);
	for (uint64_t b = bytes; b < bytes + 64; b++)
		assert_int_equal(st[b], 0xa5);		/* nothing past the store */
	tu_decode_tiled(st, n, d, dt, dec);
	nelssa_kv_widen_at(lib, st, 0, n, d, dt);
	assert_memory_equal(lib, dec, sizeof(*lib) * d * n);
	for (uint32_t t0 = 0; t0 < n; t0 += 16) {
		const uint8_t *tp = st + t0 / 16 * tile;
		uint32_t rows = n - t0 < 16 ? n - t0 : 16;

		for (uint32_t g0 = 0; g0 < d; g0 += 32) {
			double amax = 0.0;
			float s;

			for (uint32_t r = 0; r < rows; r++)
				for (uint32_t j = g0; j < d && j < g0 + 32; j++)
					amax = fmax(amax, fabs(x[(size_t)(t0 + r) * d + j]));
			memcpy(&s, tp + 16 * d + 4 * (g0 / 32), 4);
			assert_true(s == (float)(amax / qmax) || s == (float)amax / (float)qmax);
			for (uint32_t r = 0; r < rows; r++)
				for (uint32_t j = g0; j < d && j < g0 + 32; j++) {
					double xv = x[(size_t)(t0 + r) * d + j];
					double dv = dec[(size_t)(t0 + r) * d + j];
					/* Half a step of the code grid at |x|, the scale's and
					 * the product's roundings. */
					double step = dt == NELSSA_KV_INT8 ? s :
						      s * fmax(ldexp(1.0, -9),
							       ldexp(1.0, (int)floor(log2(fmax(fabs(xv) / s,
							       0x1p-6))) - 3));
					double bound = step / 2 + fabs(xv) * 0x1p-22 + 1e-38;

					if (!(fabs(xv - dv) <= bound))
						fail_msg("t %u j %u: %g decoded %g (bound %g)", t0 + r, j,
							 xv, dv, bound);
				}
		}
		for (uint32_t r = rows; r < 16; r++)		/* a partial tile's rows */
			for (uint32_t j = 0; j < d; j++)
				assert_int_equal(tp[r * d + j], 0);
		for (uint64_t b = 16 * (uint64_t)d + 4 * ((d + 31) / 32); b < tile; b++)
			assert_int_equal(tp[b], 0);		/* padding */
	}
	free(x);
	free(dec);
	free(lib);
	free(st);
}

static void quantize_bounds(void **state)
{
	static const uint32_t dims[] = { 128, 64, 80, 1, 256, 33 };
	static const uint32_t ns[] = { 1, 15, 16, 17, 100 };

	(void)state;
	for (unsigned int di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
		for (unsigned int ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
			check_quantize(NELSSA_KV_INT8, dims[di], ns[ni], di * 10 + ni);
			check_quantize(NELSSA_KV_FP8_E4M3, dims[di], ns[ni], 100 + di * 10 + ni);
		}
}

static void quantize_refuses(void **state)
{
	float x[64] = { 0 };
	uint8_t st[2 * 1088];

	(void)state;
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_BF16, 64, x, 1, st), -EINVAL);
	assert_int_equal(nelssa_kv_quantize((enum nelssa_kv_dtype)0, 64, x, 1, st), -EINVAL);
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_INT8, 0, x, 1, st), -EINVAL);
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_INT8, NELSSA_ATTN_MAX_HEAD_DIM + 1, x, 1, st),
			 -EINVAL);
	x[7] = INFINITY;
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_INT8, 64, x, 1, st), -EINVAL);
	x[7] = NAN;
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_FP8_E4M3, 64, x, 1, st), -EINVAL);
	/* All zero: scales 0, codes 0, decoded 0. */
	x[7] = 0.0f;
	assert_int_equal(nelssa_kv_quantize(NELSSA_KV_INT8, 64, x, 1, st), 0);
	for (int i = 0; i < 1088; i++)
		assert_int_equal(st[i], 0);
}

/* nelssa_attn_clusters() on a tiled store: float64 over the decoded values. */
static void attention_over_tiles(void **state)
{
	const uint32_t d = 128, g = 4, n = 333;
	static const enum nelssa_kv_dtype types[] = { NELSSA_KV_INT8, NELSSA_KV_FP8_E4M3 };

	(void)state;
	for (unsigned int ti = 0; ti < 2; ti++) {
		struct nelssa_attn_geom geom = { d, g, types[ti], 0.0883883f, 0 };
		struct nelssa_attn_geom ref = { d, g, TU_KV_F32, 0.0883883f, 0 };
		uint64_t bytes = nelssa_kv_bytes(types[ti], d, n);
		float *x = tu_alloc(sizeof(*x) * d * n), *kf = tu_alloc(sizeof(*kf) * d * n);
		float *vf = tu_alloc(sizeof(*vf) * d * n), q[4 * 128], o[4 * 128], lse[4];
		uint8_t *k = tu_alloc(bytes), *v = tu_alloc(bytes);
		struct nelssa_cluster table[40];
		uint32_t sel[] = { 3, 39, 0, 17, 22, 8 }, tok[400], nt = 0;
		struct tu_rng rng;

		tu_rng_for(&rng, __func__, ti);
		tu_fill_f32(&rng, x, (size_t)d * n, 2.0);
		assert_int_equal(nelssa_kv_quantize(types[ti], d, x, n, k), 0);
		tu_fill_f32(&rng, x, (size_t)d * n, 1.0);
		assert_int_equal(nelssa_kv_quantize(types[ti], d, x, n, v), 0);
		tu_decode_tiled(k, n, d, types[ti], kf);
		tu_decode_tiled(v, n, d, types[ti], vf);
		for (uint32_t c = 0, t = 0; c < 40; c++) {	/* 8 or 9 tokens, across tiles */
			uint32_t len = c < 13 ? 9 : 8;

			table[c] = (struct nelssa_cluster){ t, len };
			t += len;
		}
		tu_fill_f32(&rng, q, sizeof(q) / sizeof(q[0]), 2.0);
		assert_int_equal(nelssa_attn_clusters(&geom, q, k, v, n, table, 40, sel, 6, o, lse), 0);
		for (uint32_t s = 0; s < 6; s++)
			for (uint32_t j = 0; j < table[sel[s]].count; j++)
				tok[nt++] = table[sel[s]].first + j;
		assert_int_equal(tu_check_attn(&ref, q, (const uint16_t *)(void *)kf,
					       (const uint16_t *)(void *)vf, tok, nt, o, lse, "tiles"), 0);
		free(x);
		free(kf);
		free(vf);
		free(k);
		free(v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fp8_widen_every_code),
		cmocka_unit_test(fp8_narrow_nearest_even),
		cmocka_unit_test(layout_sizes),
		cmocka_unit_test(quantize_bounds),
		cmocka_unit_test(quantize_refuses),
		cmocka_unit_test(attention_over_tiles),
	};

	tu_init("kv_quant");
	return cmocka_run_group_tests_name("kv_quant", tests, NULL, NULL);
}
