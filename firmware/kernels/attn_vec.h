/* SPDX-License-Identifier: MIT */
/*
 * SPARSE_ATTN work-item kernel, written once with GCC/Clang vector
 * extensions and compiled per ISA: the including file defines VW (lanes
 * of fp32 per vector: 4 NEON, 8 AVX2, 16 AVX-512) and NFW_VEC_FN, and is
 * built with that ISA's flags plus -ffp-contract=fast so a*b+c becomes FMA.
 *
 * Per selected cluster, tokens go in tiles of NFW_TILE:
 *  - K and V rows are widened once per tile into fp32 scratch shared by the
 *    whole query group (see widen2_bf16() for the shuffle-free layout);
 *  - logits: VW tokens at a time, one accumulator per token (independent
 *    FMA chains), folded into one vector of logits by transpose-and-add;
 *  - online softmax: the tile maximum rescales the row's state once per
 *    tile, and the tile's weights come from one vector exp per VW tokens;
 *  - values: OBLK output vectors accumulate in registers across the tile.
 * The K and V rows of the cluster PF_DIST selections ahead are prefetched
 * into L2 while this one is computed: selected clusters sit at random
 * places in a store far larger than the caches and the hardware
 * prefetchers stop at page boundaries (Documentation/performance.rst has
 * the measurements behind the distance and cache level).
 */
#include <math.h>
#include <string.h>

#include "../fw_internal.h"

#ifndef VW
#error "define VW before including attn_vec.h"
#endif

typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vf_u __attribute__((vector_size(VW * 4), aligned(4), may_alias));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef uint32_t vu_u __attribute__((vector_size(VW * 4), aligned(2), may_alias));

#define TILE_VECS (NFW_TILE / VW)

static inline vf load(const float *p)
{
	return *(const vf_u *)p;
}

static inline void store(float *p, vf v)
{
	*(vf_u *)p = v;
}

static inline vf splat(float x)
{
	return (vf){ 0 } + x;
}

static inline vf blend(vi mask, vf yes, vf no)
{
	return (vf)(((vu)mask & (vu)yes) | (~(vu)mask & (vu)no));
}

/*
 * Widening without shuffles: one load of 2*VW halves is VW 32-bit lanes,
 * each holding an even element in its low half and an odd element in its
 * high half.  For bf16, "lane << 16" is the even element as fp32 and
 * "lane & 0xffff0000" the odd one, exactly.  So rows are widened into a
 * de-interleaved layout -- per 2*VW elements, the VW even ones then the VW
 * odd ones -- and the query rows are permuted the same way once per item;
 * dot products do not care about order, and the output is permuted back
 * at the end.
 */
static inline void widen2_bf16(const uint16_t *p, vf *even, vf *odd)
{
	vu u = *(const vu_u *)p;

	*even = (vf)(u << 16);
	*odd = (vf)(u & 0xffff0000u);
}

/*
 * Exact binary16 -> binary32 of the low 16 bits of each lane, integer ops
 * only (no F16C needed): shift exponent and fraction into place and
 * re-bias; infinities and NaNs get the rest of the exponent range;
 * subnormals are renormalised by one float subtraction, which is exact.
 */
static inline vf fp16_lanes(vu h)
{
	const vu shifted_exp = (vu){ 0 } + (0x7c00u << 13);
	vu u = (h & 0x7fffu) << 13;
	vu exp = u & shifted_exp;
	vi is_special = (vi)(exp == shifted_exp);
	vi is_small = (vi)(exp == 0);
	vf renorm;

	u += (127u - 15u) << 23;
	u += (vu)is_special & ((128u - 16u) << 23);
	renorm = (vf)(u + (1u << 23)) - splat(6.103515625e-05f);	/* 2^-14 */
	u = ((vu)is_small & (vu)renorm) | (~(vu)is_small & u);
	return (vf)(u | ((h & 0x8000u) << 16));
}

static inline void widen2_fp16(const uint16_t *p, vf *even, vf *odd)
{
	vu u = *(const vu_u *)p;

	*even = fp16_lanes(u & 0xffffu);
	*odd = fp16_lanes(u >> 16);
}

/* Widen @n rows of @d halves into @dst, de-interleaved (bf16). */
static void widen_rows_bf16(float *dst, const uint16_t *src, uint32_t n, uint32_t d)
{
	for (size_t j = 0; j < (size_t)n * d; j += 2 * VW) {
		vf e, o;

		widen2_bf16(src + j, &e, &o);
		store(dst + j, e);
		store(dst + j + VW, o);
	}
}

static void widen_rows_fp16(float *dst, const uint16_t *src, uint32_t n, uint32_t d)
{
	for (size_t j = 0; j < (size_t)n * d; j += 2 * VW) {
		vf e, o;

		widen2_fp16(src + j, &e, &o);
		store(dst + j, e);
		store(dst + j + VW, o);
	}
}

/* The de-interleaved position of element @i of a row. */
static inline uint32_t deint(uint32_t i)
{
	uint32_t base = i & ~(2u * VW - 1), k = i & (2u * VW - 1);

	return base + (k & 1u) * VW + k / 2;
}

/*
 * exp(x) for x <= 0 (softmax weights): Cody-Waite reduction and the Cephes
 * expf polynomial, within 2 ulp of expf over the range; below the fp32
 * normal range, and for -inf, it returns 0.
 */
static inline vf vexp(vf x)
{
	const float lo = -87.33654f;
	vi under = (vi)(x < lo);
	vf n, r, p;
	vi e;

	x = blend(under, splat(lo), x);
	n = x * 1.44269504088896341f;
	n = (n + 12582912.0f) - 12582912.0f;	/* round to nearest integer */
	r = x - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	p = splat(1.9875691500e-4f);
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	e = (__builtin_convertvector(n, vi) + 127) << 23;
	return blend(under, splat(0.0f), p * (vf)e);
}

static inline float hsum(vf v)
{
	float s = 0.0f;

	for (int i = 0; i < VW; i++)
		s += v[i];
	return s;
}

/*
 * Transpose-and-add: @a and @b each hold @g partial sums per token for
 * VW / @g tokens; the result holds @g / 2 partial sums per token for the
 * tokens of both, in order.  VW - 1 such steps turn VW dot-product
 * accumulators into one vector of VW logits, three vector ops per token
 * instead of a full horizontal sum each.
 */
#if VW == 16
#define LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO4 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define HI4 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define LO2 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29
#define HI2 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31
#define LO1 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define HI1 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#elif VW == 8
#define LO4 0, 1, 2, 3, 8, 9, 10, 11
#define HI4 4, 5, 6, 7, 12, 13, 14, 15
#define LO2 0, 1, 4, 5, 8, 9, 12, 13
#define HI2 2, 3, 6, 7, 10, 11, 14, 15
#define LO1 0, 2, 4, 6, 8, 10, 12, 14
#define HI1 1, 3, 5, 7, 9, 11, 13, 15
#elif VW == 4
#define LO2 0, 1, 4, 5
#define HI2 2, 3, 6, 7
#define LO1 0, 2, 4, 6
#define HI1 1, 3, 5, 7
#endif

#define FOLD(a, b, lo, hi) (__builtin_shufflevector(a, b, lo) + __builtin_shufflevector(a, b, hi))

static inline vf fold_all(vf *acc)
{
#if VW == 16
	for (int i = 0; i < 8; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO8, HI8);
#endif
#if VW >= 8
	for (int i = 0; i < 4; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO4, HI4);
#endif
	for (int i = 0; i < 2; i++)
		acc[i] = FOLD(acc[2 * i], acc[2 * i + 1], LO2, HI2);
	return FOLD(acc[0], acc[1], LO1, HI1);
}

/*
 * Logits of query row @q against a tile of widened K rows @kt (NFW_TILE
 * rows, rows past the tile's tokens zeroed): VW tokens at a time, one
 * accumulator per token so the FMA chains are independent.
 */
static void tile_logits(const float *q, const float *kt, uint32_t d, float scale, float *logit)
{
	for (uint32_t tb = 0; tb < NFW_TILE; tb += VW) {
		vf acc[VW];

#pragma GCC unroll 16
		for (int t = 0; t < VW; t++)
			acc[t] = splat(0.0f);
		for (uint32_t j = 0; j < d; j += VW) {
			vf qj = load(q + j);

#pragma GCC unroll 16
			for (int t = 0; t < VW; t++)
				acc[t] += qj * load(kt + (size_t)(tb + (uint32_t)t) * d + j);
		}
		store(logit + tb, fold_all(acc) * scale);
	}
}

/* Output vectors accumulated at once in the P.V product. */
#define OBLK 8

/* o[0 .. OBLK*VW) += sum_t p[t] vt[t]: OBLK independent FMA chains. */
static inline void pv_block(float *o, const float *vt, const float *p, uint32_t d)
{
	vf acc[OBLK];

#pragma GCC unroll 8
	for (uint32_t b = 0; b < OBLK; b++)
		acc[b] = load(o + b * VW);
	for (uint32_t t = 0; t < NFW_TILE; t++) {
		vf pt = splat(p[t]);

#pragma GCC unroll 8
		for (uint32_t b = 0; b < OBLK; b++)
			acc[b] += pt * load(vt + (size_t)t * d + b * VW);
	}
#pragma GCC unroll 8
	for (uint32_t b = 0; b < OBLK; b++)
		store(o + b * VW, acc[b]);
}

/* The same for a last block of @nb < OBLK vectors. */
static void pv_tail(float *o, const float *vt, const float *p, uint32_t d, uint32_t nb)
{
	for (uint32_t b = 0; b < nb; b++) {
		vf acc = load(o + b * VW);

		for (uint32_t t = 0; t < NFW_TILE; t++)
			acc += splat(p[t]) * load(vt + (size_t)t * d + b * VW);
		store(o + b * VW, acc);
	}
}

/*
 * Fold one tile into query row @r (output accumulator @o): rescale on a
 * new maximum, then o += p V.  Padding tokens get logit -inf, weight 0.
 */
static void tile_update(float *o, float *logit, uint32_t n, const float *vt, uint32_t d,
			float *m, float *l)
{
	float p[NFW_TILE];
	float mx = -INFINITY, sum = 0.0f;

	for (uint32_t t = 0; t < n; t++)
		mx = logit[t] > mx ? logit[t] : mx;
	for (uint32_t t = n; t < NFW_TILE; t++)
		logit[t] = -INFINITY;
	if (mx > *m) {
		float alpha = expf(*m - mx);	/* 0 on the first tile */

		*l *= alpha;
		for (uint32_t j = 0; j < d; j += VW)
			store(o + j, load(o + j) * alpha);
		*m = mx;
	}
	for (uint32_t v = 0; v < TILE_VECS; v++) {
		vf pv = vexp(load(logit + v * VW) - *m);

		store(p + v * VW, pv);
		sum += hsum(pv);
	}
	*l += sum;
	for (uint32_t jb = 0; jb < d; jb += OBLK * VW) {
		uint32_t nb = (d - jb) / VW;

		if (nb >= OBLK)
			pv_block(o + jb, vt + jb, p, d);
		else
			pv_tail(o + jb, vt + jb, p, d, nb);
	}
}

#define PF_DIST 2u

static void prefetch_cluster(const struct nfw_attn_args *a, uint32_t s)
{
	struct npnm_cluster c;
	const char *k, *v;

	if (s >= a->nr_sel || nfw_attn_cluster(a, s, &c))
		return;
	k = (const char *)(a->k + (size_t)c.first * a->head_dim);
	v = (const char *)(a->v + (size_t)c.first * a->head_dim);
	for (size_t off = 0; off < (size_t)c.count * a->head_dim * 2; off += 64) {
		__builtin_prefetch(k + off, 0, 1);	/* locality 1: into L2 */
		__builtin_prefetch(v + off, 0, 1);
	}
}

void NFW_VEC_FN(const struct nfw_attn_args *a, float *scratch)
{
	const uint32_t d = a->head_dim, g = a->group;
	const int fp16 = a->kv_dtype == NPNM_DTYPE_FP16;
	float *kt = scratch;			/* [NFW_TILE][d] widened K */
	float *vt = kt + NFW_TILE * d;		/* [NFW_TILE][d] widened V */
	float *qp = vt + NFW_TILE * d;		/* [g][d] permuted queries */
	float *op = qp + (size_t)g * d;		/* [g][d] permuted outputs */
	float *logit = op + (size_t)g * d;	/* [NFW_TILE] */
	float m[NFW_MAX_GROUP], l[NFW_MAX_GROUP];

	for (uint32_t r = 0; r < g; r++) {
		for (uint32_t i = 0; i < d; i++) {
			qp[(size_t)r * d + deint(i)] = a->q[(size_t)r * d + i];
			op[(size_t)r * d + i] = 0.0f;
		}
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	for (uint32_t s = 0; s < PF_DIST; s++)
		prefetch_cluster(a, s);
	for (uint32_t s = 0; s < a->nr_sel; s++) {
		struct npnm_cluster c;

		prefetch_cluster(a, s + PF_DIST);
		if (nfw_attn_cluster(a, s, &c))
			continue;
		for (uint32_t base = 0; base < c.count; base += NFW_TILE) {
			uint32_t n = c.count - base < NFW_TILE ? c.count - base : NFW_TILE;
			const uint16_t *k = a->k + (size_t)(c.first + base) * d;
			const uint16_t *v = a->v + (size_t)(c.first + base) * d;

			if (fp16) {
				widen_rows_fp16(kt, k, n, d);
				widen_rows_fp16(vt, v, n, d);
			} else {
				widen_rows_bf16(kt, k, n, d);
				widen_rows_bf16(vt, v, n, d);
			}
			/* Rows past the tile's tokens: zero, so logits stay finite. */
			for (uint32_t t = n; t < NFW_TILE; t++)
				for (uint32_t j = 0; j < d; j += VW) {
					store(kt + (size_t)t * d + j, splat(0.0f));
					store(vt + (size_t)t * d + j, splat(0.0f));
				}
			for (uint32_t r = 0; r < g; r++) {
				tile_logits(qp + (size_t)r * d, kt, d, a->scale, logit);
				tile_update(op + (size_t)r * d, logit, n, vt, d, &m[r], &l[r]);
			}
		}
	}
	for (uint32_t r = 0; r < g; r++) {
		float inv = l[r] > 0.0f ? l[r] : 1.0f;

		a->lse[r] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
		for (uint32_t i = 0; i < d; i++)
			a->o[(size_t)r * d + i] = op[(size_t)r * d + deint(i)] / inv;
	}
}
