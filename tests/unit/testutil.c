// SPDX-License-Identifier: MIT
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <nelssa/half.h>
#include <nelssa/splitmix64.h>

#include "testutil.h"

static uint64_t run_seed;

void tu_init(const char *suite)
{
	const char *env = getenv("NELSSA_TEST_SEED");

	if (env && *env) {
		run_seed = strtoull(env, NULL, 0);
	} else if (getrandom(&run_seed, sizeof(run_seed), 0) != sizeof(run_seed)) {
		fprintf(stderr, "getrandom failed\n");
		exit(1);
	}
	printf("# %s: seed 0x%016" PRIx64 " (replay: NELSSA_TEST_SEED=0x%016" PRIx64 ")\n",
	       suite, run_seed, run_seed);
	fflush(stdout);
}

/* splitmix64: tiny, full period, good enough for test data. */
uint64_t tu_next(struct tu_rng *rng)
{
	return nelssa_splitmix64(&rng->s);
}

void tu_rng_for(struct tu_rng *rng, const char *name, uint64_t variant)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a of the name */

	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	rng->s = run_seed ^ h ^ (variant * NELSSA_SPLITMIX64_GAMMA);
	tu_next(rng);
}

uint32_t tu_below(struct tu_rng *rng, uint32_t n)
{
	return (uint32_t)(((tu_next(rng) >> 32) * n) >> 32);
}

double tu_uniform(struct tu_rng *rng)
{
	return (double)(tu_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double tu_normal(struct tu_rng *rng)
{
	double u1 = tu_uniform(rng), u2 = tu_uniform(rng);

	return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

void *tu_alloc(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);

	if (!p) {
		fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
		abort();
	}
	return p;
}

uint16_t tu_to_kv(double x, enum nelssa_kv_dtype dtype)
{
	return dtype == NELSSA_KV_BF16 ? nelssa_f32_to_bf16((float)x) : nelssa_f32_to_fp16((float)x);
}

double tu_from_kv(uint16_t h, enum nelssa_kv_dtype dtype)
{
	return dtype == NELSSA_KV_BF16 ? nelssa_bf16_to_f32(h) : nelssa_fp16_to_f32(h);
}

double tu_code_value(uint8_t c, enum nelssa_kv_dtype dtype)
{
	int e = (c >> 3) & 15, m = c & 7;
	double x;

	if (dtype == NELSSA_KV_INT8)
		return (double)(int8_t)c;
	if ((c & 0x7f) == 0x7f)
		return NAN;
	x = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
	return c & 0x80 ? -x : x;
}

void tu_decode_tiled(const uint8_t *store, size_t n_tokens, uint32_t d,
		     enum nelssa_kv_dtype dtype, float *out)
{
	/* The layout as the uapi header words it, computed here on its own. */
	size_t groups = (d + 31) / 32, tile = (16 * (size_t)d + 4 * groups + 63) / 64 * 64;

	for (size_t t = 0; t < n_tokens; t++) {
		const uint8_t *tp = store + t / 16 * tile, *row = tp + t % 16 * d;

		for (uint32_t j = 0; j < d; j++) {
			float s;

			memcpy(&s, tp + 16 * (size_t)d + 4 * (j / 32), 4);
			out[t * d + j] = (float)((double)s * tu_code_value(row[j], dtype));
		}
	}
}

void tu_fill_f32(struct tu_rng *rng, float *x, size_t n, double sigma)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(sigma * tu_normal(rng));
}

void tu_fill_kv(struct tu_rng *rng, uint16_t *x, size_t n, double sigma,
		enum nelssa_kv_dtype dtype)
{
	for (size_t i = 0; i < n; i++)
		x[i] = tu_to_kv(sigma * tu_normal(rng), dtype);
}

static size_t tok_at(const uint32_t *tok, size_t j)
{
	return tok ? tok[j] : j;
}

/* Element @i of @row: a 16-bit KV type, or fp32 rows with TU_KV_F32. */
static double elem(const struct nelssa_attn_geom *g, const uint16_t *row, uint32_t i)
{
	if (g->kv_dtype == TU_KV_F32)
		return ((const float *)(const void *)row)[i];
	return tu_from_kv(row[i], g->kv_dtype);
}

/* Token @t's row of @kv (rows of fp32 with TU_KV_F32, else of 16 bits). */
static const uint16_t *kv_row(const struct nelssa_attn_geom *g, const uint16_t *kv, size_t t)
{
	return kv + t * g->head_dim * (g->kv_dtype == TU_KV_F32 ? 2 : 1);
}

static double ref_logit(const struct nelssa_attn_geom *g, const float *qr, const uint16_t *krow,
			double *abs_sum)
{
	double s = 0.0, a = 0.0;

	for (uint32_t i = 0; i < g->head_dim; i++) {
		double t = (double)qr[i] * elem(g, krow, i);

		s += t;
		a += fabs(t);
	}
	if (abs_sum)
		*abs_sum = a;
	return (double)g->scale * s;
}

/*
 * Query row @row as the dot products see it: with NELSSA_ATTN_BF16_DOTS
 * each element rounded to bf16 (RNE), into @buf; else the row itself.
 */
static const float *q_row(const struct nelssa_attn_geom *g, const float *q, uint32_t row,
			  float *buf)
{
	const float *qr = q + (size_t)row * g->head_dim;

	if (!(g->flags & NELSSA_ATTN_BF16_DOTS))
		return qr;
	for (uint32_t i = 0; i < g->head_dim; i++)
		buf[i] = nelssa_bf16_round(qr[i]);
	return buf;
}

void tu_ref_attn(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
		 const uint16_t *v, const uint32_t *tok, size_t n_tok, double *o, double *lse)
{
	const uint32_t d = g->head_dim;
	double *s = tu_alloc(sizeof(*s) * (n_tok ? n_tok : 1));
	float *qbuf = tu_alloc(sizeof(*qbuf) * d);

	for (uint32_t r = 0; r < g->group; r++) {
		const float *qr = q_row(g, q, r, qbuf);
		double *orow = o + (size_t)r * d;
		double m = -INFINITY, sum = 0.0;

		for (uint32_t i = 0; i < d; i++)
			orow[i] = 0.0;
		if (n_tok == 0) {
			lse[r] = -INFINITY;
			continue;
		}
		for (size_t j = 0; j < n_tok; j++) {
			s[j] = ref_logit(g, qr, kv_row(g, k, tok_at(tok, j)), NULL);
			m = fmax(m, s[j]);
		}
		for (size_t j = 0; j < n_tok; j++) {
			double p = exp(s[j] - m);
			const uint16_t *vrow = kv_row(g, v, tok_at(tok, j));

			sum += p;
			for (uint32_t i = 0; i < d; i++)
				orow[i] += p * elem(g, vrow, i);
		}
		for (uint32_t i = 0; i < d; i++)
			orow[i] /= sum;
		lse[r] = m + log(sum);
	}
	free(s);
	free(qbuf);
}

#define TOL_C 8.0

struct tu_tol tu_attn_tol(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
			  const uint16_t *v, const uint32_t *tok, size_t n_tok, uint32_t row)
{
	const uint32_t d = g->head_dim;
	float *qbuf = tu_alloc(sizeof(*qbuf) * d);
	const float *qr = q_row(g, q, row, qbuf);
	double delta = 0.0, vmax = 0.0, smax = 0.0, acc;
	struct tu_tol tol;

	for (size_t j = 0; j < n_tok; j++) {
		double abs_sum, s = ref_logit(g, qr, kv_row(g, k, tok_at(tok, j)), &abs_sum);
		double dj = g->scale * TOL_C * sqrt((double)d) * TU_U32 * abs_sum + fabs(s) * TU_U32;
		const uint16_t *vrow = kv_row(g, v, tok_at(tok, j));

		delta = fmax(delta, dj);
		smax = fmax(smax, fabs(s));
		for (uint32_t i = 0; i < d; i++)
			vmax = fmax(vmax, fabs(elem(g, vrow, i)));
	}
	acc = TOL_C * sqrt((double)n_tok + 1.0) * TU_U32;
	/* lse = max + log(sum): the logit error, the sum's error, two roundings. */
	tol.lse = delta + acc + 2.0 * TU_U32 * (smax + 1.0);
	/* Weights off by exp(+-delta) each, sums by acc, plus the final divide. */
	tol.o = (expm1(2.0 * delta) + 3.0 * acc + 2.0 * TU_U32) * vmax + 1e-30;
	/*
	 * The reference keeps the weights exact; P.V's bf16 weights are each
	 * off by at most half a bf16 ulp, 2^-8 relative (8 significant bits),
	 * which moves o by at most 2^-8 max|v| (twice that for margin).
	 */
	if (g->flags & NELSSA_ATTN_BF16_DOTS)
		tol.o += 2.0 * 0x1p-8 * vmax;
	free(qbuf);
	return tol;
}

int tu_check_attn(const struct nelssa_attn_geom *g, const float *q, const uint16_t *k,
		  const uint16_t *v, const uint32_t *tok, size_t n_tok, const float *o,
		  const float *lse, const char *what)
{
	const uint32_t d = g->head_dim;
	double *ro = tu_alloc(sizeof(*ro) * d * g->group);
	double *rl = tu_alloc(sizeof(*rl) * g->group);
	const char *verbose = getenv("NELSSA_TEST_VERBOSE");
	double worst = 0.0;
	int bad = 0;

	tu_ref_attn(g, q, k, v, tok, n_tok, ro, rl);
	for (uint32_t r = 0; r < g->group && !bad; r++) {
		struct tu_tol tol = tu_attn_tol(g, q, k, v, tok, n_tok, r);

		if (n_tok == 0) {
			if (lse[r] != -INFINITY) {
				printf("# %s: row %u empty set but lse %g\n", what, r, lse[r]);
				bad = 1;
			}
		} else if (!(fabs(lse[r] - rl[r]) <= tol.lse)) {
			printf("# %s: row %u lse %.9g ref %.9g |err| %.3g > tol %.3g\n", what, r,
			       lse[r], rl[r], fabs(lse[r] - rl[r]), tol.lse);
			bad = 1;
		} else {
			worst = fmax(worst, fabs(lse[r] - rl[r]) / tol.lse);
		}
		for (uint32_t i = 0; i < d && !bad; i++) {
			double err = fabs(o[(size_t)r * d + i] - ro[(size_t)r * d + i]);

			if (!(err <= tol.o) && !(n_tok == 0 && o[(size_t)r * d + i] == 0.0f)) {
				printf("# %s: row %u o[%u] %.9g ref %.9g |err| %.3g > tol %.3g\n", what,
				       r, i, o[(size_t)r * d + i], ro[(size_t)r * d + i], err, tol.o);
				bad = 1;
			}
			if (n_tok)
				worst = fmax(worst, err / tol.o);
		}
	}
	if (verbose)
		printf("# %s: worst error / tolerance = %.4f\n", what, worst);
	free(ro);
	free(rl);
	return bad;
}
