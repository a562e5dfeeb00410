// SPDX-License-Identifier: MIT
/*
 * Streaming (online-softmax) attention over K/V blocks, fp32 accumulation.
 *
 * Tokens are taken in tiles: a tile's K and V rows are widened to fp32 once
 * and reused by every query row of the GQA group, the tile's logits are
 * computed, and the running state is rescaled once per tile (not per
 * token) when the tile raises a row's maximum.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/half.h>

/* Tokens per tile: 2 * 8 rows * 1024 dims * 4 B = 64 KiB of stack at most. */
#define TILE NELSSA_ATTN_FEED_TILE

int nelssa_attn_geom_check(const struct nelssa_attn_geom *geom)
{
	if (!geom || geom->head_dim == 0 || geom->head_dim > NELSSA_ATTN_MAX_HEAD_DIM)
		return -EINVAL;
	if (geom->group == 0 || geom->group > NELSSA_ATTN_MAX_GROUP)
		return -EINVAL;
	if (!nelssa_kv_elem_bytes(geom->kv_dtype) && !nelssa_kv_is_tiled(geom->kv_dtype))
		return -EINVAL;
	if (!(geom->scale > 0.0f) || !isfinite(geom->scale))
		return -EINVAL;
	if (geom->flags & ~NELSSA_ATTN_FLAGS)
		return -EINVAL;
	return 0;
}

size_t nelssa_attn_row_bytes(const struct nelssa_attn_geom *geom)
{
	return (size_t)geom->head_dim * nelssa_kv_elem_bytes(geom->kv_dtype);
}

int nelssa_attn_begin(struct nelssa_attn_run *run, const struct nelssa_attn_geom *geom,
		      const float *q, float *o)
{
	int ret = nelssa_attn_geom_check(geom);

	if (ret)
		return ret;
	run->geom = *geom;
	run->q = q;
	run->o = o;
	memset(o, 0, sizeof(*o) * geom->head_dim * geom->group);
	for (uint32_t r = 0; r < geom->group; r++) {
		run->max[r] = -INFINITY;
		run->sum[r] = 0.0f;
	}
	return 0;
}

void nelssa_kv_widen(float *dst, const void *src, size_t n, enum nelssa_kv_dtype dtype)
{
	if (dtype == NELSSA_KV_BF16)
		nelssa_bf16_to_f32_n(dst, src, n);
	else
		nelssa_fp16_to_f32_n(dst, src, n);
}

/*
 * Fold one tile of @n (<= TILE) widened rows into query row @r; @qr has
 * room for a row of queries rounded to bf16 (NELSSA_ATTN_BF16_DOTS).
 */
static void feed_row(struct nelssa_attn_run *run, uint32_t r, const float *kf, const float *vf,
		     uint32_t n, float *qr)
{
	const uint32_t d = run->geom.head_dim;
	const int bf16 = run->geom.flags & NELSSA_ATTN_BF16_DOTS;
	const float *q = run->q + (size_t)r * d;
	float *o = run->o + (size_t)r * d;
	float logit[TILE];
	float tile_max = -INFINITY;

	if (bf16) {
		for (uint32_t i = 0; i < d; i++)
			qr[i] = nelssa_bf16_round(q[i]);
		q = qr;
	}
	for (uint32_t t = 0; t < n; t++) {
		logit[t] = run->geom.scale * nelssa_dot_f32(q, kf + (size_t)t * d, d);
		tile_max = fmaxf(tile_max, logit[t]);
	}

	if (tile_max > run->max[r]) {
		/* exp(-inf) = 0 clears the (empty) state on the first tile. */
		float alpha = expf(run->max[r] - tile_max);

		run->sum[r] *= alpha;
		for (uint32_t i = 0; i < d; i++)
			o[i] *= alpha;
		run->max[r] = tile_max;
	}

	for (uint32_t t = 0; t < n; t++) {
		float p = expf(logit[t] - run->max[r]);
		const float *v = vf + (size_t)t * d;

		/* The sum takes the weight as computed, P.V its bf16 (FlashAttention). */
		run->sum[r] += p;
		if (bf16)
			p = nelssa_bf16_round(p);
		for (uint32_t i = 0; i < d; i++)
			o[i] += p * v[i];
	}
}

void nelssa_attn_feed_at(struct nelssa_attn_run *run, const void *k, const void *v, size_t first,
			 size_t n_tokens)
{
	const uint32_t d = run->geom.head_dim;
	float kf[TILE * NELSSA_ATTN_MAX_HEAD_DIM];
	float vf[TILE * NELSSA_ATTN_MAX_HEAD_DIM];
	float qr[NELSSA_ATTN_MAX_HEAD_DIM];

	for (size_t base = 0; base < n_tokens; base += TILE) {
		uint32_t n = (uint32_t)(n_tokens - base < TILE ? n_tokens - base : TILE);

		nelssa_kv_widen_at(kf, k, first + base, n, d, run->geom.kv_dtype);
		nelssa_kv_widen_at(vf, v, first + base, n, d, run->geom.kv_dtype);
		for (uint32_t r = 0; r < run->geom.group; r++)
			feed_row(run, r, kf, vf, n, qr);
	}
}

void nelssa_attn_feed(struct nelssa_attn_run *run, const void *k, const void *v, size_t n_tokens)
{
	nelssa_attn_feed_at(run, k, v, 0, n_tokens);
}

void nelssa_attn_end(struct nelssa_attn_run *run, float *lse)
{
	const uint32_t d = run->geom.head_dim;

	for (uint32_t r = 0; r < run->geom.group; r++) {
		float *o = run->o + (size_t)r * d;

		if (isnan(run->sum[r])) {
			/* A NaN logit: a NaN state, never the empty one a merge would drop. */
			lse[r] = NAN;
			for (uint32_t i = 0; i < d; i++)
				o[i] = NAN;
			continue;
		}
		if (!(run->sum[r] > 0.0f)) {
			/* No tokens: the empty state, o is still all zero. */
			lse[r] = -INFINITY;
			continue;
		}
		/* Divide once per row; a reciprocal would add a rounding. */
		for (uint32_t i = 0; i < d; i++)
			o[i] /= run->sum[r];
		lse[r] = run->max[r] + logf(run->sum[r]);
	}
}

int nelssa_attn_dense(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		      const void *v, size_t n_tokens, float *o, float *lse)
{
	struct nelssa_attn_run run;
	int ret = nelssa_attn_begin(&run, geom, q, o);

	if (ret)
		return ret;
	nelssa_attn_feed(&run, k, v, n_tokens);
	nelssa_attn_end(&run, lse);
	return 0;
}
