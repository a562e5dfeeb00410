// SPDX-License-Identifier: MIT
/*
 * Dense attention with LSE (fp32, online softmax) against the float64
 * two-pass reference, with the error bound of tu_attn_tol().
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include <nelssa/attention.h>

#include "testutil.h"

struct shape {
	uint32_t head_dim, group, max_len;
	enum nelssa_kv_dtype dtype;
};

struct attn_case {
	struct nelssa_attn_geom g;
	size_t n;
	float *q, *o, *lse;
	uint16_t *k, *v;
};

static void case_alloc(struct attn_case *c, uint32_t d, uint32_t group, size_t n,
		       enum nelssa_kv_dtype dtype)
{
	c->g = (struct nelssa_attn_geom){ d, group, dtype, (float)(1.0 / sqrt((double)d)), 0 };
	c->n = n;
	c->q = tu_alloc(sizeof(float) * d * group);
	c->o = tu_alloc(sizeof(float) * d * group);
	c->lse = tu_alloc(sizeof(float) * group);
	c->k = tu_alloc(sizeof(uint16_t) * d * (n ? n : 1));
	c->v = tu_alloc(sizeof(uint16_t) * d * (n ? n : 1));
}

static void case_random(struct attn_case *c, struct tu_rng *rng, double qk_sigma)
{
	tu_fill_f32(rng, c->q, (size_t)c->g.head_dim * c->g.group, qk_sigma);
	tu_fill_kv(rng, c->k, (size_t)c->g.head_dim * c->n, qk_sigma, c->g.kv_dtype);
	tu_fill_kv(rng, c->v, (size_t)c->g.head_dim * c->n, 1.0, c->g.kv_dtype);
}

static void case_free(struct attn_case *c)
{
	free(c->q);
	free(c->o);
	free(c->lse);
	free(c->k);
	free(c->v);
}

static void run_and_check(struct attn_case *c, const char *what)
{
	assert_int_equal(nelssa_attn_dense(&c->g, c->q, c->k, c->v, c->n, c->o, c->lse), 0);
	assert_int_equal(tu_check_attn(&c->g, c->q, c->k, c->v, NULL, c->n, c->o, c->lse, what), 0);
}

/* Random shapes: several random lengths per (head_dim, group). */
static void dense_shape(void **state)
{
	const struct shape *s = *state;
	struct tu_rng rng;
	char what[64];

	tu_rng_for(&rng, "dense_shape", s->head_dim * 1000u + s->group * 10u + s->dtype);
	for (int rep = 0; rep < 3; rep++) {
		struct attn_case c;
		size_t n = 1 + tu_below(&rng, s->max_len);

		case_alloc(&c, s->head_dim, s->group, n, s->dtype);
		/* Logit spread grows with rep: soft, peaked, very peaked. */
		case_random(&c, &rng, 1.0 + 1.5 * rep);
		snprintf(what, sizeof(what), "d%u g%u n%zu", s->head_dim, s->group, n);
		run_and_check(&c, what);
		case_free(&c);
	}
}

static void dense_length_one(void **state)
{
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 128, 4, 1, NELSSA_KV_BF16);
	case_random(&c, &rng, 1.0);
	run_and_check(&c, "n1");
	/* One token: the output is that token's V exactly (weight 1). */
	for (uint32_t r = 0; r < 4; r++)
		for (uint32_t i = 0; i < 128; i++)
			assert_true(c.o[r * 128 + i] == (float)tu_from_kv(c.v[i], NELSSA_KV_BF16));
	case_free(&c);
}

/* Every length up to a few tiles, to hit every partial-tile boundary. */
static void dense_short_lengths(void **state)
{
	struct tu_rng rng;
	char what[32];

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (size_t n = 1; n <= 40; n++) {
		struct attn_case c;

		case_alloc(&c, 64, 2, n, NELSSA_KV_BF16);
		case_random(&c, &rng, 2.0);
		snprintf(what, sizeof(what), "n%zu", n);
		run_and_check(&c, what);
		case_free(&c);
	}
}

static void dense_length_100k(void **state)
{
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 128, 8, 100000, NELSSA_KV_BF16);
	case_random(&c, &rng, 1.5);
	run_and_check(&c, "n100000");
	case_free(&c);
}

static void dense_fp16(void **state)
{
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 128, 4, 3000, NELSSA_KV_FP16);
	case_random(&c, &rng, 1.5);
	run_and_check(&c, "fp16");
	case_free(&c);
}

/*
 * Logits of magnitude 1e4 after scaling: the scale is chosen so that the
 * largest |scale q.k| is exactly 1e4, which overflows exp() in any
 * implementation that does not subtract the running maximum.
 */
static void dense_extreme_logits(void **state)
{
	struct attn_case c;
	struct tu_rng rng;
	double amax = 0.0;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 64, 4, 2000, NELSSA_KV_BF16);
	case_random(&c, &rng, 1.0);
	for (uint32_t r = 0; r < 4; r++)
		for (size_t t = 0; t < c.n; t++) {
			double s = 0.0;

			for (uint32_t i = 0; i < 64; i++)
				s += c.q[r * 64 + i] * tu_from_kv(c.k[t * 64 + i], NELSSA_KV_BF16);
			amax = fmax(amax, fabs(s));
		}
	c.g.scale = (float)(1e4 / amax);
	run_and_check(&c, "|logit| 1e4");
	for (uint32_t r = 0; r < 4; r++)
		assert_true(isfinite(c.lse[r]) && fabsf(c.lse[r]) > 100.0f);
	case_free(&c);
}

/*
 * One token at logit +1e4 and the rest at -1e4: softmax is one-hot, the
 * output must be that token's V and lse must be 1e4 to fp32 precision.
 */
static void dense_one_hot(void **state)
{
	const uint32_t d = 64;
	struct attn_case c;

	(void)state;
	case_alloc(&c, d, 1, 500, NELSSA_KV_BF16);
	c.g.scale = 1e4f / (float)d;
	for (uint32_t i = 0; i < d; i++)
		c.q[i] = 1.0f;
	for (size_t t = 0; t < c.n; t++)
		for (uint32_t i = 0; i < d; i++) {
			c.k[t * d + i] = tu_to_kv(t == 321 ? 1.0 : -1.0, NELSSA_KV_BF16);
			c.v[t * d + i] = tu_to_kv((double)(t % 17) - 8.0 + i * 0.25, NELSSA_KV_BF16);
		}
	run_and_check(&c, "one-hot");
	assert_true(fabsf(c.lse[0] - 1e4f) <= 1e4f * 4 * (float)TU_U32);
	for (uint32_t i = 0; i < d; i++)
		assert_true(c.o[i] == (float)tu_from_kv(c.v[321 * d + i], NELSSA_KV_BF16));
	case_free(&c);
}

static void dense_empty(void **state)
{
	struct attn_case c;

	(void)state;
	case_alloc(&c, 64, 4, 0, NELSSA_KV_BF16);
	for (uint32_t i = 0; i < 64 * 4; i++)
		c.o[i] = 123.0f;		/* must be overwritten with zeros */
	assert_int_equal(nelssa_attn_dense(&c.g, c.q, c.k, c.v, 0, c.o, c.lse), 0);
	for (uint32_t r = 0; r < 4; r++)
		assert_true(c.lse[r] == -INFINITY);
	for (uint32_t i = 0; i < 64 * 4; i++)
		assert_true(c.o[i] == 0.0f && !signbit(c.o[i]));
	case_free(&c);
}

/*
 * A NaN key element makes its rows' state NaN -- output and LSE -- never
 * the empty state (-inf), which an LSE merge would drop; a NaN value
 * element reaches the output element it is in, not the LSE.
 */
static void dense_nan_propagates(void **state)
{
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 64, 4, 100, NELSSA_KV_BF16);
	case_random(&c, &rng, 1.0);
	c.k[37 * 64 + 5] = 0x7fc0;	/* bf16 NaN */
	assert_int_equal(nelssa_attn_dense(&c.g, c.q, c.k, c.v, c.n, c.o, c.lse), 0);
	for (uint32_t r = 0; r < 4; r++)
		assert_true(isnan(c.lse[r]));
	for (uint32_t i = 0; i < 64 * 4; i++)
		assert_true(isnan(c.o[i]));
	c.k[37 * 64 + 5] = 0;
	c.v[11 * 64 + 9] = 0x7fc0;
	assert_int_equal(nelssa_attn_dense(&c.g, c.q, c.k, c.v, c.n, c.o, c.lse), 0);
	for (uint32_t r = 0; r < 4; r++) {
		assert_true(isfinite(c.lse[r]));
		for (uint32_t i = 0; i < 64; i++)
			assert_true(!isnan(c.o[r * 64 + i]) == (i != 9));
	}
	case_free(&c);
}

/* Feeding the same tokens in random-sized pieces gives the same answer. */
static void streaming_any_split(void **state)
{
	struct nelssa_attn_run run;
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 128, 4, 5000, NELSSA_KV_BF16);
	case_random(&c, &rng, 2.0);
	assert_int_equal(nelssa_attn_begin(&run, &c.g, c.q, c.o), 0);
	for (size_t t = 0; t < c.n;) {
		size_t piece = 1 + tu_below(&rng, 97);

		if (piece > c.n - t)
			piece = c.n - t;
		nelssa_attn_feed(&run, c.k + t * 128, c.v + t * 128, piece);
		t += piece;
	}
	nelssa_attn_end(&run, c.lse);
	assert_int_equal(tu_check_attn(&c.g, c.q, c.k, c.v, NULL, c.n, c.o, c.lse, "split"), 0);
	case_free(&c);
}

/* Attention sinks: a few early tokens with large logits dominate. */
static void dense_sinks(void **state)
{
	struct attn_case c;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	case_alloc(&c, 128, 4, 4096, NELSSA_KV_BF16);
	case_random(&c, &rng, 1.0);
	for (size_t t = 0; t < 4; t++)
		for (uint32_t i = 0; i < 128; i++)
			c.k[t * 128 + i] = tu_to_kv(6.0 * c.q[i], NELSSA_KV_BF16);
	run_and_check(&c, "sinks");
	case_free(&c);
}

/*
 * NELSSA_ATTN_BF16_DOTS: bf16 and fp16 KV, soft and peaked logits, against
 * float64 over the rounded queries (the weights' rounding is in the
 * bound); the binary32 reference must reject the same outputs.
 */
static void dense_bf16_dots(void **state)
{
	static const enum nelssa_kv_dtype types[] = { NELSSA_KV_BF16, NELSSA_KV_FP16 };
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (int t = 0; t < 2; t++)
		for (int rep = 0; rep < 3; rep++) {
			struct attn_case c;

			case_alloc(&c, 128, 4, 200 + tu_below(&rng, 3000), types[t]);
			c.g.flags = NELSSA_ATTN_BF16_DOTS;
			case_random(&c, &rng, 1.0 + 1.5 * rep);
			run_and_check(&c, "bf16 dots");
			c.g.flags = 0;
			assert_int_not_equal(tu_check_attn(&c.g, c.q, c.k, c.v, NULL, c.n, c.o,
							   c.lse, "binary32 reference (must fail)"),
					     0);
			case_free(&c);
		}
}

static void geom_rejects_bad(void **state)
{
	const struct nelssa_attn_geom good = { 128, 4, NELSSA_KV_BF16, 0.088f, 0 };
	struct nelssa_attn_geom g;
	float q[4] = { 0 }, o[4] = { 0 }, lse[4] = { 0 };
	uint16_t kv[4] = { 0 };

	(void)state;
	assert_int_equal(nelssa_attn_geom_check(&good), 0);
	assert_int_equal(nelssa_attn_geom_check(NULL), -EINVAL);
#define BAD(field, value)                                                                \
	do {                                                                             \
		g = good;                                                                \
		g.field = value;                                                         \
		assert_int_equal(nelssa_attn_geom_check(&g), -EINVAL);                   \
		assert_int_equal(nelssa_attn_dense(&g, q, kv, kv, 1, o, lse), -EINVAL);  \
	} while (0)
	BAD(head_dim, 0);
	BAD(head_dim, NELSSA_ATTN_MAX_HEAD_DIM + 1);
	BAD(group, 0);
	BAD(group, NELSSA_ATTN_MAX_GROUP + 1);
	BAD(kv_dtype, (enum nelssa_kv_dtype)0);
	BAD(kv_dtype, (enum nelssa_kv_dtype)5);
	BAD(kv_dtype, (enum nelssa_kv_dtype)255);
	BAD(scale, 0.0f);
	BAD(scale, -1.0f);
	BAD(scale, NAN);
	BAD(scale, INFINITY);
	BAD(flags, 2u);
	BAD(flags, NELSSA_ATTN_BF16_DOTS | 1u << 31);
#undef BAD
	/* Rejected calls leave the outputs alone. */
	for (int i = 0; i < 4; i++)
		assert_true(o[i] == 0.0f && lse[i] == 0.0f);
}

int main(void)
{
	static const struct shape shapes[] = {
		{ 64, 1, 4096, NELSSA_KV_BF16 },  { 64, 4, 4096, NELSSA_KV_BF16 },
		{ 64, 8, 4096, NELSSA_KV_BF16 },  { 128, 1, 4096, NELSSA_KV_BF16 },
		{ 128, 4, 4096, NELSSA_KV_BF16 }, { 128, 8, 4096, NELSSA_KV_BF16 },
		{ 256, 1, 2048, NELSSA_KV_BF16 }, { 256, 4, 2048, NELSSA_KV_BF16 },
		{ 256, 8, 2048, NELSSA_KV_BF16 },
	};
	const struct CMUnitTest tests[] = {
#define SHAPE(i, name) { name, dense_shape, NULL, NULL, (void *)&shapes[i] }
		SHAPE(0, "dense_d64_g1"),  SHAPE(1, "dense_d64_g4"),  SHAPE(2, "dense_d64_g8"),
		SHAPE(3, "dense_d128_g1"), SHAPE(4, "dense_d128_g4"), SHAPE(5, "dense_d128_g8"),
		SHAPE(6, "dense_d256_g1"), SHAPE(7, "dense_d256_g4"), SHAPE(8, "dense_d256_g8"),
#undef SHAPE
		cmocka_unit_test(dense_length_one),
		cmocka_unit_test(dense_short_lengths),
		cmocka_unit_test(dense_length_100k),
		cmocka_unit_test(dense_fp16),
		cmocka_unit_test(dense_extreme_logits),
		cmocka_unit_test(dense_one_hot),
		cmocka_unit_test(dense_empty),
		cmocka_unit_test(dense_nan_propagates),
		cmocka_unit_test(streaming_any_split),
		cmocka_unit_test(dense_sinks),
		cmocka_unit_test(dense_bf16_dots),
		cmocka_unit_test(geom_rejects_bad),
	};

	tu_init("attention");
	return cmocka_run_group_tests_name("attention", tests, NULL, NULL);
}
