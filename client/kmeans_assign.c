// SPDX-License-Identifier: MIT
/*
 * The k-means assignment step -- every key's nearest centroid by inner
 * product -- as a GEMM (keys x centroids^T, the BLAS's sgemm), with the
 * answer the strict index-order dot product (nelssa_dot_f32()) gives.
 *
 * Why that answer and not sgemm's own: the BLAS picks its summation order
 * (blocking, FMA, vector width) per CPU, so its argmax could differ
 * between hosts and from the CUDA twin, and a clustering that depends on
 * the machine cannot be tested against a known answer.  Both orders are
 * within gamma_d * sum_i |x_i c_i| <= gamma_d * |x| * |c| of the exact
 * product (gamma_d = d u / (1 - d u), u = 2^-24; Higham, "Accuracy and
 * Stability of Numerical Algorithms", section 3.1), so the two scores of
 * a centroid differ by at most twice that, and the strict winner's sgemm
 * score is within four times it of the sgemm maximum.  Only the centroids
 * in that window are scored again in the strict order; on real keys that
 * is nearly always the maximum alone, so the strict pass costs one dot
 * product a key against the GEMM's k.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cblas.h>

#include <nelssa/attention.h>

#include "kmeans_internal.h"

/*
 * The strict rule, written once: of the centroids from @first on (all of
 * them, or with @g those whose sgemm score is at least @thr), the one with
 * the largest nelssa_dot_f32() product with @xt, ties to the lower index;
 * *@sim its product (-inf, and centroid @first, when none compares greater).
 * Returns how many products it took.
 */
static uint32_t strict_best(const float *xt, const float *c, uint32_t first, uint32_t k,
			    uint32_t d, const float *g, float thr, uint32_t *asg, float *sim)
{
	float bs = -INFINITY;
	uint32_t n = 0;

	*asg = first;
	for (uint32_t j = first; j < k; j++) {
		float s;

		if (g && !(g[j] >= thr))
			continue;
		s = nelssa_dot_f32(xt, c + (size_t)j * d, d);
		n++;
		if (s > bs) {
			bs = s;
			*asg = j;
		}
	}
	*sim = bs;
	return n;
}

uint64_t nelssa_km_assign_ref(const float *x, const float *xn, uint32_t len, const float *c,
			      uint32_t k, uint32_t d, uint32_t *asg, float *sim, float *scratch)
{
	(void)xn;
	(void)scratch;
	for (uint32_t t = 0; t < len; t++) {
		float bs;

		strict_best(x + (size_t)t * d, c, 0, k, d, NULL, 0.0f, asg + t, &bs);
		if (sim)
			sim[t] = bs;
	}
	return (uint64_t)len * k;
}

/* |v| in float64; four partial sums, as only a bound is made of it. */
static double norm(const float *v, uint32_t d)
{
	double n[4] = { 0.0, 0.0, 0.0, 0.0 };
	uint32_t i = 0;

	for (; i + 4 <= d; i += 4)
		for (uint32_t l = 0; l < 4; l++)
			n[l] += (double)v[i + l] * v[i + l];
	for (; i < d; i++)
		n[0] += (double)v[i] * v[i];
	return sqrt(n[0] + n[1] + n[2] + n[3]);
}

/*
 * The two scans over a key's k scores, in GCC's generic vectors (the
 * compiler does not vectorise a float max on its own: NaN rules), 32
 * bytes wide: one register in settle()'s AVX clones (NELSSA_KM_CLONES),
 * two in its baseline build.  Every function taking or returning one is
 * inlined, so the psabi note about passing them without AVX is moot.
 */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float vf __attribute__((vector_size(32)));
typedef int32_t vi __attribute__((vector_size(32)));
#define LANES (sizeof(vf) / sizeof(float))

static inline __attribute__((always_inline)) vf load(const float *p)
{
	vf v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline __attribute__((always_inline)) vf vmax(vf a, vf b)
{
	const vi gt = a > b;

	return (vf)(((vi)a & gt) | ((vi)b & ~gt));
}

/* The largest of the finite @g[k]; four independent maxima in flight. */
static inline __attribute__((always_inline)) float row_max(const float *g, uint32_t k)
{
	const vf lo = (vf){ 0 } - INFINITY;
	vf m0 = lo, m1 = lo, m2 = lo, m3 = lo;
	float best = -INFINITY;
	uint32_t j = 0;

	for (; j + 4 * LANES <= k; j += 4 * LANES) {
		m0 = vmax(load(g + j), m0);
		m1 = vmax(load(g + j + LANES), m1);
		m2 = vmax(load(g + j + 2 * LANES), m2);
		m3 = vmax(load(g + j + 3 * LANES), m3);
	}
	for (; j < k; j++)
		best = g[j] > best ? g[j] : best;
	m0 = vmax(vmax(m0, m1), vmax(m2, m3));
	for (uint32_t l = 0; l < LANES; l++)
		best = m0[l] > best ? m0[l] : best;
	return best;
}

/* Whether any of @g[j0, j0 + BLOCK) is at least @thr: one lane test a block. */
#define BLOCK (4 * LANES)

static inline __attribute__((always_inline)) int any_at_least(const float *g, float thr)
{
	const vf t = (vf){ 0 } + thr;
	const vi ge = (load(g) >= t) | (load(g + LANES) >= t) | (load(g + 2 * LANES) >= t) |
		      (load(g + 3 * LANES) >= t);
	int32_t any = 0;

	for (uint32_t l = 0; l < LANES; l++)
		any |= ge[l];
	return any != 0;
}

/*
 * Key @xt's strict winner among the centroids whose sgemm score in @g[k]
 * is within @win of the maximum; the strict products it took -- none when
 * the window holds one centroid and its score is not wanted (@sim NULL).
 * A superset of that window changes nothing (the strict winner is in it,
 * and any other candidate scores below it or ties from a higher index), so
 * the threshold is rounded down to a float.
 */
NELSSA_KM_CLONES
static uint32_t settle(const float *xt, const float *c, const float *g, uint32_t k, uint32_t d,
		       double win, uint32_t *asg, float *sim)
{
	const float thr = nextafterf((float)((double)row_max(g, k) - win), -INFINITY);
	uint32_t n = 0, first = k, j0;
	float bs;

	/* The first candidate, and whether there is a second. */
	for (j0 = 0; j0 < k && n < 2; j0 += BLOCK) {
		const uint32_t end = k - j0 < BLOCK ? k : j0 + BLOCK;

		if (end < j0 + BLOCK || any_at_least(g + j0, thr))
			for (uint32_t j = j0; j < end; j++)
				if (g[j] >= thr && n++ == 0)
					first = j;
	}
	*asg = first;
	if (n == 1 && !sim)
		return 0;
	n = strict_best(xt, c, first, k, d, g, thr, asg, &bs);
	if (sim)
		*sim = bs;
	return n;
}

uint64_t nelssa_km_assign(const float *x, const float *xn, uint32_t len, const float *c,
			  uint32_t k, uint32_t d, uint32_t *asg, float *sim, float *scratch)
{
	/* 4 gamma_d, with room for the rounding of the norms themselves. */
	const double gamma = 4.0 * 1.01 * d * 0x1p-24 / (1.0 - d * 0x1p-24);
	/* An additive term for products that fall below FLT_MIN. */
	const double tiny = 4.0 * d * FLT_MIN;
	uint64_t strict = 0;
	double cmax = 0.0;

	for (uint32_t j = 0; j < k; j++)
		cmax = fmax(cmax, norm(c + (size_t)j * d, d));
	/*
	 * Non-finite centroids, or products that could overflow, leave the
	 * error bound meaningless: score everything in the strict order.
	 */
	if (!isfinite(cmax) || !k)
		return nelssa_km_assign_ref(x, xn, len, c, k, d, asg, sim, scratch);
	for (uint32_t t0 = 0; t0 < len; t0 += NELSSA_KM_ROWS) {
		const uint32_t rows = len - t0 < NELSSA_KM_ROWS ? len - t0 : NELSSA_KM_ROWS;

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)k, (int)d, 1.0f,
			    x + (size_t)t0 * d, (int)d, c, (int)d, 0.0f, scratch, (int)k);
		for (uint32_t r = 0; r < rows; r++) {
			const uint32_t t = t0 + r;
			const float *xt = x + (size_t)t * d;
			/*
			 * The 1 % margin in gamma covers xn's own rounding; below
			 * 1e-12 the squares xn was summed from may have underflowed.
			 */
			const double bound = (xn && xn[t] >= 1e-12f ? xn[t] : norm(xt, d)) * cmax;

			if (!(bound < FLT_MAX / 4)) {
				strict += nelssa_km_assign_ref(xt, NULL, 1, c, k, d, asg + t,
							       sim ? sim + t : NULL, NULL);
				continue;
			}
			strict += settle(xt, c, scratch + (size_t)r * k, k, d, gamma * bound + tiny,
					 asg + t, sim ? sim + t : NULL);
		}
	}
	return strict;
}
