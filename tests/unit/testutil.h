/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the numeric unit tests: run seed, a small PRNG, random
 * inputs, and the float64 references the fp32 kernels are checked against.
 */
#ifndef NELSSA_TESTUTIL_H
#define NELSSA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/attention.h>

/* fp32 unit roundoff, 2^-24. */
#define TU_U32 (1.0 / 16777216.0)

/*
 * Picks the run seed (NELSSA_TEST_SEED if set, else fresh from the OS) and
 * prints it as a TAP comment so any failure can be replayed.
 */
void tu_init(const char *suite);

struct tu_rng {
	uint64_t s;
};

/* A generator for one test: the run seed mixed with the test's name. */
void tu_rng_for(struct tu_rng *rng, const char *name, uint64_t variant);
uint64_t tu_next(struct tu_rng *rng);
uint32_t tu_below(struct tu_rng *rng, uint32_t n);	/* uniform in [0, n) */
double tu_uniform(struct tu_rng *rng);			/* uniform in [0, 1) */
double tu_normal(struct tu_rng *rng);			/* standard normal */

/* Checked allocation: tests abort cleanly rather than dereference NULL. */
void *tu_alloc(size_t bytes);

/* Narrow one double to the KV element type (through fp32). */
uint16_t tu_to_kv(double x, enum nelssa_kv_dtype dtype);
double tu_from_kv(uint16_t h, enum nelssa_kv_dtype dtype);

/* The value of an 8-bit KV code (E4M3 or int8), from the formats' definitions. */
double tu_code_value(uint8_t c, enum nelssa_kv_dtype dtype);
/* Decode tokens [0, @n_tokens) of a tiled KV store to fp32 rows [n][d]. */
void tu_decode_tiled(const uint8_t *store, size_t n_tokens, uint32_t d,
		     enum nelssa_kv_dtype dtype, float *out);

/* Fill @n elements with N(0, sigma^2), rounded to fp32 / the KV type. */
void tu_fill_f32(struct tu_rng *rng, float *x, size_t n, double sigma);
void tu_fill_kv(struct tu_rng *rng, uint16_t *x, size_t n, double sigma,
		enum nelssa_kv_dtype dtype);

/*
 * float64 reference attention of every query row over the tokens listed
 * in @tok (or tokens 0..n_tok-1 when @tok is NULL); two-pass softmax.
 * @o is [group][head_dim], @lse is [group]; empty gives (0, -inf).
 */
/*
 * A kv_dtype for the references below only: K and V are rows of fp32 (cast
 * to uint16_t pointers), for stores of a tiled type decoded by the test.
 */
#define TU_KV_F32 ((enum nelssa_kv_dtype)0x7f)

void tu_ref_attn(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
		 const uint16_t *v, const uint32_t *tok, size_t n_tok, double *o, double *lse);

/*
 * Error bound for an fp32 attention result against the float64 reference.
 * Logit error: each logit is an fp32 dot product of head_dim terms; its
 * rounding error behaves like a random walk, |err| <= C sqrt(d) u sum|q_i k_i|
 * (the deterministic worst case d u sum|q_i k_i| is far too loose to catch
 * real bugs), plus one rounding for the scale.  A logit error delta scales
 * each softmax weight by at most exp(+-delta), so the output moves by at most
 * (exp(2 delta) - 1) max|v|.  The running sums over n tokens add
 * C sqrt(n) u relative error.  C = 8 gives wide margin (observed errors stay
 * below a quarter of the bound over thousands of seeds) while still failing
 * for any wrong scale, dropped token, or missing rescale.
 */
struct tu_tol {
	double lse;	/* absolute, on lse */
	double o;	/* absolute, on each output element */
};
struct tu_tol tu_attn_tol(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
			  const uint16_t *v, const uint32_t *tok, size_t n_tok, uint32_t row);

/*
 * Compares fp32 results with the reference row by row; on failure prints
 * the worst element and returns non-zero.  @what names the case.
 */
int tu_check_attn(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
		  const uint16_t *v, const uint32_t *tok, size_t n_tok, const float *o,
		  const float *lse, const char *what);

#endif /* NELSSA_TESTUTIL_H */
