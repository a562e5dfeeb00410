/* SPDX-License-Identifier: MIT */
/*
 * SPARSE_ATTN work-item kernel, written once with GCC/Clang vector
 * extensions and compiled per ISA: the including file defines VW (lanes
 * of fp32 per vector: 4 NEON, 8 AVX2, 16 AVX-512) and NFW_VEC_FN, and is
 * built with that ISA's flags plus -ffp-contract=fast so a*b+c becomes FMA.
 *
 * Per selected cluster, tokens go in tiles of NFW_TILE:
 *  - logits: K rows are widened in registers and dotted with up to four
 *    query rows at once, so a K row is read once per four rows;
 *  - online softmax: the tile maximum rescales the row's state once per
 *    tile, and the tile's weights come from one vector exp;
 *  - values: V rows are widened once into a fp32 tile shared by every
 *    query row; each row's output chunk stays in a register across the tile.
 * The output accumulates in place in the destination, as in the numeric
 * core, and is normalised at the end.
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
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint16_t vh_u __attribute__((vector_size(VW * 2), aligned(2), may_alias));

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

static inline vf widen_bf16(const uint16_t *p)
{
	vu u = __builtin_convertvector(*(const vh_u *)p, vu);

	return (vf)(u << 16);
}

/*
 * Exact binary16 -> binary32 with integer ops only (no F16C needed):
 * shift exponent and fraction into place and re-bias; infinities and NaNs
 * get the rest of the exponent range; subnormals are renormalised by one
 * float subtraction, which is exact.
 */
static inline vf widen_fp16(const uint16_t *p)
{
	const vu shifted_exp = (vu){ 0 } + (0x7c00u << 13);
	vu h = __builtin_convertvector(*(const vh_u *)p, vu);
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

static inline vf widen(const uint16_t *p, int fp16)
{
	return fp16 ? widen_fp16(p) : widen_bf16(p);
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

/* Logits of up to four query rows against one tile of K rows. */
static void tile_logits(const struct nfw_attn_args *a, const uint16_t *k, uint32_t n,
			uint32_t r0, uint32_t nr, int fp16, float *logit)
{
	const uint32_t d = a->head_dim;
	const float *q = a->q + (size_t)r0 * d;

	for (uint32_t t = 0; t < n; t++) {
		const uint16_t *krow = k + (size_t)t * d;
		vf acc0 = splat(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;

		for (uint32_t j = 0; j < d; j += VW) {
			vf kv = widen(krow + j, fp16);

			acc0 += load(q + j) * kv;
			if (nr > 1)
				acc1 += load(q + d + j) * kv;
			if (nr > 2)
				acc2 += load(q + 2 * d + j) * kv;
			if (nr > 3)
				acc3 += load(q + 3 * d + j) * kv;
		}
		logit[0 * NFW_TILE + t] = hsum(acc0) * a->scale;
		if (nr > 1)
			logit[1 * NFW_TILE + t] = hsum(acc1) * a->scale;
		if (nr > 2)
			logit[2 * NFW_TILE + t] = hsum(acc2) * a->scale;
		if (nr > 3)
			logit[3 * NFW_TILE + t] = hsum(acc3) * a->scale;
	}
}

/* Fold one tile into row @r: rescale on a new maximum, then o += p V. */
static void tile_update(const struct nfw_attn_args *a, uint32_t r, float *logit, uint32_t n,
			const float *vt, float *m, float *l)
{
	const uint32_t d = a->head_dim;
	float *o = a->o + (size_t)r * d;
	float p[NFW_TILE];
	float mx = -INFINITY, sum = 0.0f;

	for (uint32_t t = 0; t < n; t++)
		mx = fmaxf(mx, logit[t]);
	for (uint32_t t = n; t < NFW_TILE; t++)
		logit[t] = -INFINITY;	/* padding lanes weigh nothing */
	if (mx > m[r]) {
		float alpha = expf(m[r] - mx);	/* 0 on the first tile */

		l[r] *= alpha;
		for (uint32_t j = 0; j < d; j += VW)
			store(o + j, load(o + j) * alpha);
		m[r] = mx;
	}
	for (uint32_t v = 0; v < TILE_VECS; v++) {
		vf pv = vexp(load(logit + v * VW) - m[r]);

		store(p + v * VW, pv);
		sum += hsum(pv);
	}
	l[r] += sum;
	for (uint32_t j = 0; j < d; j += VW) {
		vf acc = load(o + j);

		for (uint32_t t = 0; t < n; t++)
			acc += splat(p[t]) * load(vt + (size_t)t * d + j);
		store(o + j, acc);
	}
}

void NFW_VEC_FN(const struct nfw_attn_args *a, float *scratch)
{
	const uint32_t d = a->head_dim, g = a->group;
	const int fp16 = a->kv_dtype == NPNM_DTYPE_FP16;
	float *vt = scratch;				/* [NFW_TILE][d] widened V */
	float *logit = scratch + NFW_TILE * NFW_MAX_HEAD_DIM;	/* [4][NFW_TILE] */
	float m[NFW_MAX_GROUP], l[NFW_MAX_GROUP];

	memset(a->o, 0, sizeof(float) * d * g);
	for (uint32_t r = 0; r < g; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	for (uint32_t s = 0; s < a->nr_sel; s++) {
		struct npnm_cluster c;

		if (nfw_attn_cluster(a, s, &c))
			continue;
		for (uint32_t base = 0; base < c.count; base += NFW_TILE) {
			uint32_t n = c.count - base < NFW_TILE ? c.count - base : NFW_TILE;
			const uint16_t *k = a->k + (size_t)(c.first + base) * d;
			const uint16_t *v = a->v + (size_t)(c.first + base) * d;

			for (uint32_t t = 0; t < n; t++)
				for (uint32_t j = 0; j < d; j += VW)
					store(vt + (size_t)t * d + j, widen(v + (size_t)t * d + j, fp16));
			for (uint32_t r0 = 0; r0 < g; r0 += 4) {
				uint32_t nr = g - r0 < 4 ? g - r0 : 4;

				tile_logits(a, k, n, r0, nr, fp16, logit);
				for (uint32_t i = 0; i < nr; i++)
					tile_update(a, r0 + i, logit + i * NFW_TILE, n, vt, m, l);
			}
		}
	}
	for (uint32_t r = 0; r < g; r++) {
		float *o = a->o + (size_t)r * d;

		if (!(l[r] > 0.0f)) {
			a->lse[r] = -INFINITY;
			continue;
		}
		for (uint32_t j = 0; j < d; j += VW)
			store(o + j, load(o + j) / l[r]);
		a->lse[r] = m[r] + logf(l[r]);
	}
}
