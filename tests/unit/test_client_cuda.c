// SPDX-License-Identifier: MIT
/*
 * The CUDA twins (client/cuda/) against their CPU versions on random data,
 * each case batched over several heads or items so that indexing mistakes
 * between heads show.  Top-K, the budget selection, the KV reorder and the
 * merge's special rows must agree exactly; floating-point results within a
 * few fp32 roundings of the CPU result, and the window also against the
 * float64 reference.  Without a GPU every case is reported as skipped.
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

#include <nelssa/half.h>

#include <cuda_runtime_api.h>

#include <nelssa/sparse.h>
#include <nelssa/sparse_cuda.h>

#include "testutil.h"

#define D 128
#define G 4
#define H 3

static void need_gpu(void)
{
	if (nelssa_cuda_device_count() < 1)
		skip();
}

/*
 * A case body runs only with a GPU; skipping before it allocates anything
 * keeps the sanitizer's leak check quiet on machines without one.
 */
#define GPU_TEST(name)                        \
	static void name##_body(void);        \
	static void name(void **state)        \
	{                                     \
		(void)state;                  \
		need_gpu();                   \
		name##_body();                \
	}                                     \
	static void name##_body(void)

static void *dev_put(const void *host, size_t bytes)
{
	void *p = NULL;

	assert_int_equal(cudaSuccess, cudaMalloc(&p, bytes ? bytes : 1));
	if (bytes)
		assert_int_equal(cudaSuccess, cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
	return p;
}

static void *dev_new(size_t bytes)
{
	void *p = NULL;

	assert_int_equal(cudaSuccess, cudaMalloc(&p, bytes ? bytes : 1));
	return p;
}

static void dev_get(void *host, const void *dev, size_t bytes)
{
	assert_int_equal(cudaSuccess, cudaDeviceSynchronize());
	assert_int_equal(cudaSuccess, cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* |a - b| <= abs + rel |b|, with NaN only equal to NaN and infinities exact. */
static void near(float a, float b, double abs, double rel)
{
	if (isnan(b) || isinf(b)) {
		assert_true(isnan(b) ? isnan(a) : a == b);
		return;
	}
	if (!(fabs((double)a - b) <= abs + rel * fabs(b)))
		fail_msg("%.9g vs CPU %.9g", a, b);
}

/*
 * A scoring case: H heads of a group's queries and @n centroids (and far
 * keys), random cluster sizes with about one in ten empty, on the host and
 * the device, and a result buffer on each side.
 */
struct score_fx {
	float *q, *cen, *far;		/* [H][G][D], [H][n][D], [H][n][D] or NULL */
	uint32_t *sizes;		/* [H][n] */
	float *gpu, *cpu;		/* [H][n] from the device, [n] from the CPU */
	float *dq, *dc, *df, *ds;	/* the device's copies; ds for the scores */
	uint32_t *dz;
};

static void score_fx_new(struct score_fx *x, const char *name, uint32_t n, int with_far)
{
	const size_t qn = (size_t)H * G * D, cn = (size_t)H * n * D;
	struct tu_rng rng;

	x->q = tu_alloc(sizeof(float) * qn);
	x->cen = tu_alloc(sizeof(float) * cn);
	x->far = with_far ? tu_alloc(sizeof(float) * cn) : NULL;
	x->gpu = tu_alloc(sizeof(float) * H * n);
	x->cpu = tu_alloc(sizeof(float) * n);
	x->sizes = tu_alloc(sizeof(uint32_t) * H * n);
	tu_rng_for(&rng, name, 0);
	tu_fill_f32(&rng, x->q, qn, 1.0);
	tu_fill_f32(&rng, x->cen, cn, 1.0);
	if (with_far)
		tu_fill_f32(&rng, x->far, cn, 1.5);
	for (size_t c = 0; c < (size_t)H * n; c++)
		x->sizes[c] = tu_below(&rng, 10) ? 1 + tu_below(&rng, 30) : 0;
	x->dq = dev_put(x->q, sizeof(float) * qn);
	x->dc = dev_put(x->cen, sizeof(float) * cn);
	x->df = with_far ? dev_put(x->far, sizeof(float) * cn) : NULL;
	x->dz = dev_put(x->sizes, sizeof(uint32_t) * H * n);
	x->ds = dev_new(sizeof(float) * H * n);
}

static void score_fx_free(struct score_fx *x)
{
	cudaFree(x->dq);
	cudaFree(x->dc);
	cudaFree(x->df);
	cudaFree(x->dz);
	cudaFree(x->ds);
	free(x->q);
	free(x->cen);
	free(x->far);
	free(x->gpu);
	free(x->cpu);
	free(x->sizes);
}

GPU_TEST(centroid_scores_match)
{
	const uint32_t n = 777;
	const size_t cn = (size_t)H * n * D;
	struct score_fx x;

	score_fx_new(&x, __func__, n, 0);
	assert_int_equal(0, nelssa_cuda_centroid_scores(x.dq, H, G, D, 0.088f, x.dc, x.dz, n, x.ds,
							NULL));
	dev_get(x.gpu, x.ds, sizeof(float) * H * n);
	for (uint32_t h = 0; h < H; h++) {
		assert_int_equal(0, nelssa_centroid_scores(x.q + (size_t)h * G * D, G, D, 0.088f,
							    x.cen + (size_t)h * n * D,
							    x.sizes + h * n, n, x.cpu));
		for (uint32_t c = 0; c < n; c++)
			near(x.gpu[h * n + c], x.cpu[c], 1e-6, 1e-4);
	}
	/* A non-finite logit poisons its head only. */
	x.cen[(size_t)n * D + 5] = INFINITY;
	x.sizes[n] = 1;
	assert_int_equal(cudaSuccess, cudaMemcpy(x.dc, x.cen, sizeof(float) * cn,
						 cudaMemcpyHostToDevice));
	assert_int_equal(cudaSuccess, cudaMemcpy(x.dz, x.sizes, sizeof(uint32_t) * H * n,
						 cudaMemcpyHostToDevice));
	assert_int_equal(0, nelssa_cuda_centroid_scores(x.dq, H, G, D, 0.088f, x.dc, x.dz, n, x.ds,
							NULL));
	dev_get(x.gpu, x.ds, sizeof(float) * H * n);
	assert_true(isnan(x.gpu[n]));
	assert_false(isnan(x.gpu[0]));
	assert_int_equal(-EINVAL, nelssa_cuda_centroid_scores(x.dq, H, 0, D, 0.088f, x.dc, x.dz, n,
							      x.ds, NULL));
	score_fx_free(&x);
}

/* Few score levels (many ties), some -inf, one head with a NaN. */
static void fill_scores(struct tu_rng *rng, float *score, uint32_t n)
{
	for (uint32_t c = 0; c < n; c++)
		score[c] = tu_below(rng, 8) ? (float)tu_below(rng, 50) / 7.0f : -INFINITY;
}

/* The budgets of the selection cases: none, one token, a few, all and past all. */
static const uint64_t budgets[] = { 0, 1, 16, 999, 5000, 1000000 };

/* How a selection case draws its cluster sizes. */
enum sel_sizes {
	SEL_NO_SIZES,	/* none: Top-K alone */
	SEL_FULL,	/* 1..31 tokens each */
	SEL_SOME_EMPTY,	/* the same, about one in ten empty */
};

/*
 * A selection case: H heads of @n clusters, one or two score lists and
 * the sizes, then room for @room ids per head; sel_fx_new() draws the host
 * side, so that a case can plant values before sel_fx_upload() copies it.
 */
struct sel_fx {
	uint32_t n, room;
	int lists;
	float *score[2];	/* [H][n] each */
	uint32_t *sizes;	/* [H][n], or NULL */
	uint32_t *ids, *cpu;	/* [H][room] from the device, [n] from the CPU */
	float *ds[2];		/* the device's copies */
	uint32_t *dz, *dids;
	int32_t *dcount;
	uint64_t *dtok;
};

static void sel_fx_new(struct sel_fx *x, const char *name, uint32_t n, uint32_t room, int lists,
		       enum sel_sizes how)
{
	struct tu_rng rng;

	memset(x, 0, sizeof(*x));
	x->n = n;
	x->room = room;
	x->lists = lists;
	tu_rng_for(&rng, name, 0);
	for (int l = 0; l < lists; l++) {
		x->score[l] = tu_alloc(sizeof(float) * H * n);
		fill_scores(&rng, x->score[l], H * n);
	}
	if (how != SEL_NO_SIZES) {
		x->sizes = tu_alloc(sizeof(uint32_t) * H * n);
		for (size_t c = 0; c < (size_t)H * n; c++)
			x->sizes[c] = (how == SEL_FULL || tu_below(&rng, 10)) ?
				      1 + tu_below(&rng, 31) : 0;
	}
	x->ids = tu_alloc(sizeof(uint32_t) * H * room);
	x->cpu = tu_alloc(sizeof(uint32_t) * n);
}

static void sel_fx_upload(struct sel_fx *x)
{
	for (int l = 0; l < x->lists; l++)
		x->ds[l] = dev_put(x->score[l], sizeof(float) * H * x->n);
	if (x->sizes)
		x->dz = dev_put(x->sizes, sizeof(uint32_t) * H * x->n);
	x->dids = dev_new(sizeof(uint32_t) * H * x->room);
	x->dcount = dev_new(sizeof(int32_t) * H);
	x->dtok = dev_new(sizeof(uint64_t) * H);
}

static void sel_fx_free(struct sel_fx *x)
{
	for (int l = 0; l < x->lists; l++) {
		cudaFree(x->ds[l]);
		free(x->score[l]);
	}
	cudaFree(x->dz);
	cudaFree(x->dids);
	cudaFree(x->dcount);
	cudaFree(x->dtok);
	free(x->sizes);
	free(x->ids);
	free(x->cpu);
}

GPU_TEST(topk_matches)
{
	const uint32_t n = 1500, ks[] = { 0, 1, 5, 60, 1400, 1500, 1507 };
	int32_t count[H];
	struct sel_fx x;

	sel_fx_new(&x, __func__, n, n + 7, 1, SEL_NO_SIZES);
	x.score[0][2 * n + 17] = NAN;
	sel_fx_upload(&x);
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		int ret = nelssa_cuda_topk(x.ds[0], H, n, ks[i], x.dids, x.dcount, NULL);

		if (ret)
			fail_msg("k = %u: %d", ks[i], ret);
		dev_get(count, x.dcount, sizeof(count));
		dev_get(x.ids, x.dids, sizeof(uint32_t) * H * ks[i]);
		for (uint32_t h = 0; h < H; h++) {
			int want = nelssa_topk(x.score[0] + h * n, n, ks[i], x.cpu);

			assert_int_equal(want, count[h]);
			if (want > 0)
				assert_memory_equal(x.cpu, x.ids + (size_t)h * ks[i],
						    sizeof(uint32_t) * (size_t)want);
		}
	}
	sel_fx_free(&x);
}

GPU_TEST(budget_matches)
{
	const uint32_t n = 2000;
	int32_t count[H];
	struct sel_fx x;

	sel_fx_new(&x, __func__, n, n, 1, SEL_FULL);
	sel_fx_upload(&x);
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		assert_int_equal(0, nelssa_cuda_topk_budget(x.ds[0], x.dz, H, n, budgets[i], x.dids,
							    x.dcount, NULL));
		dev_get(count, x.dcount, sizeof(count));
		dev_get(x.ids, x.dids, sizeof(uint32_t) * H * n);
		for (uint32_t h = 0; h < H; h++) {
			int want = nelssa_topk_budget(x.score[0] + h * n, x.sizes + h * n, n,
						      budgets[i], x.cpu);

			assert_int_equal(want, count[h]);
			assert_memory_equal(x.cpu, x.ids + (size_t)h * n,
					    sizeof(uint32_t) * (size_t)want);
		}
	}
	sel_fx_free(&x);
}

GPU_TEST(fill_matches)
{
	const uint32_t n = 2000;
	uint64_t tokens[H];
	int32_t count[H];
	struct sel_fx x;

	sel_fx_new(&x, __func__, n, n, 1, SEL_SOME_EMPTY);
	sel_fx_upload(&x);
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		assert_int_equal(0, nelssa_cuda_topk_fill(x.ds[0], x.dz, H, n, budgets[i], x.dids,
							  x.dcount, x.dtok, NULL));
		dev_get(count, x.dcount, sizeof(count));
		dev_get(tokens, x.dtok, sizeof(tokens));
		dev_get(x.ids, x.dids, sizeof(uint32_t) * H * n);
		for (uint32_t h = 0; h < H; h++) {
			uint64_t want_tok;
			int want = nelssa_topk_fill(x.score[0] + h * n, x.sizes + h * n, n,
						    budgets[i], x.cpu, &want_tok);

			assert_int_equal(want, count[h]);
			if (want < 0)
				continue;
			assert_true(want_tok == tokens[h]);
			assert_memory_equal(x.cpu, x.ids + (size_t)h * n,
					    sizeof(uint32_t) * (size_t)want);
		}
	}
	sel_fx_free(&x);
}

/* The far-member scores: the centroid kernels with a second probe. */
GPU_TEST(far_probs_match)
{
	const uint32_t n = 777;
	struct score_fx x;

	score_fx_new(&x, __func__, n, 1);
	assert_int_equal(0, nelssa_cuda_far_probs(x.dq, H, G, D, 0.088f, x.dc, x.df, x.dz, n, x.ds,
						  NULL));
	dev_get(x.gpu, x.ds, sizeof(float) * H * n);
	for (uint32_t h = 0; h < H; h++) {
		assert_int_equal(0, nelssa_far_probs(x.q + (size_t)h * G * D, G, D, 0.088f,
						     x.cen + (size_t)h * n * D,
						     x.far + (size_t)h * n * D, x.sizes + h * n, n,
						     x.cpu));
		for (uint32_t c = 0; c < n; c++)
			near(x.gpu[h * n + c], x.cpu[c], 1e-6, 1e-4);
	}
	assert_int_equal(-EINVAL, nelssa_cuda_far_probs(x.dq, H, G, D, 0.088f, x.dc, NULL, x.dz, n,
							x.ds, NULL));
	score_fx_free(&x);
}

/* Two rankings filling one budget: exactly nelssa_select_hybrid(). */
GPU_TEST(hybrid_matches)
{
	const uint32_t n = 2000;
	const double shares[] = { 0.0, 0.25, 0.5, 1.0 };
	uint64_t tokens[H];
	int32_t count[H];
	struct sel_fx x;

	sel_fx_new(&x, __func__, n, n, 2, SEL_SOME_EMPTY);
	x.score[1][n + 3] = NAN;	/* head 1's second list is invalid */
	sel_fx_upload(&x);
	for (size_t si = 0; si < sizeof(shares) / sizeof(shares[0]); si++)
		for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
			assert_int_equal(0, nelssa_cuda_select_hybrid2(x.ds[0], x.ds[1], shares[si],
								       x.dz, H, n, budgets[i],
								       x.dids, x.dcount, x.dtok,
								       NULL));
			dev_get(count, x.dcount, sizeof(count));
			dev_get(tokens, x.dtok, sizeof(tokens));
			dev_get(x.ids, x.dids, sizeof(uint32_t) * H * n);
			for (uint32_t h = 0; h < H; h++) {
				const float *lists[2] = { x.score[0] + h * n, x.score[1] + h * n };
				const double share[2] = { shares[si], 1.0 - shares[si] };
				uint64_t want_tok;
				int want = nelssa_select_hybrid(lists, share, 2, x.sizes + h * n, n,
								budgets[i], x.cpu, &want_tok);

				assert_int_equal(want, count[h]);
				if (want < 0)
					continue;
				assert_true(want_tok == tokens[h]);
				assert_memory_equal(x.cpu, x.ids + (size_t)h * n,
						    sizeof(uint32_t) * (size_t)want);
			}
		}
	assert_int_equal(-EINVAL, nelssa_cuda_select_hybrid2(x.ds[0], x.ds[1], 1.5, x.dz, H, n, 10,
							     x.dids, x.dcount, x.dtok, NULL));
	sel_fx_free(&x);
}

/*
 * The shipped selection end to end: the GPU's three steps against
 * nelssa_select() with NELSSA_SELECT_DEFAULT.  The fill must be exactly
 * nelssa_select_hybrid() of the scores the GPU computed; against the CPU's
 * own float64 scores, only clusters whose scores differ by a rounding may
 * swap, so the two selections may differ by a few clusters, never more.
 */
GPU_TEST(select_matches)
{
	const uint32_t n = 2000;
	const uint64_t sel_budgets[] = { 0, 16, 1200, 5000, 40000 };
	const struct nelssa_select_cfg cfg = NELSSA_SELECT_DEFAULT;
	float *far_gpu = tu_alloc(sizeof(float) * H * n), *dfar_s;
	uint32_t *ids = tu_alloc(sizeof(uint32_t) * H * n), *cpu = tu_alloc(sizeof(uint32_t) * n);
	uint32_t *mine = tu_alloc(sizeof(uint32_t) * n), *dids;
	uint64_t tokens[H], *dtok;
	int32_t count[H], *dcount;
	struct score_fx x;

	score_fx_new(&x, __func__, n, 1);
	dfar_s = dev_new(sizeof(float) * H * n);
	dids = dev_new(sizeof(uint32_t) * H * n);
	dcount = dev_new(sizeof(count));
	dtok = dev_new(sizeof(tokens));
	for (size_t b = 0; b < sizeof(sel_budgets) / sizeof(sel_budgets[0]); b++) {
		assert_int_equal(0, nelssa_cuda_centroid_scores(x.dq, H, G, D, 0.088f, x.dc, x.dz, n,
								x.ds, NULL));
		assert_int_equal(0, nelssa_cuda_far_probs(x.dq, H, G, D, 0.088f, x.dc, x.df, x.dz, n,
							  dfar_s, NULL));
		assert_int_equal(0, nelssa_cuda_select_hybrid2(dfar_s, x.ds, cfg.far_share, x.dz, H,
							       n, sel_budgets[b], dids, dcount,
							       dtok, NULL));
		dev_get(x.gpu, x.ds, sizeof(float) * H * n);
		dev_get(far_gpu, dfar_s, sizeof(float) * H * n);
		dev_get(ids, dids, sizeof(uint32_t) * H * n);
		dev_get(count, dcount, sizeof(count));
		dev_get(tokens, dtok, sizeof(tokens));
		for (uint32_t h = 0; h < H; h++) {
			const float *lists[2] = { far_gpu + h * n, x.gpu + h * n };
			const double share[2] = { cfg.far_share, 1.0 - cfg.far_share };
			uint64_t want_tok, cpu_tok;
			int want = nelssa_select_hybrid(lists, share, 2, x.sizes + h * n, n,
							sel_budgets[b], mine, &want_tok);
			int got = nelssa_select(&cfg, x.q + (size_t)h * G * D, G, D, 0.088f,
						x.cen + (size_t)h * n * D, x.far + (size_t)h * n * D,
						x.sizes + h * n, n, sel_budgets[b], cpu, &cpu_tok);
			uint32_t common = 0;

			/* Exactly the CPU fill of the GPU's scores. */
			assert_int_equal(want, count[h]);
			assert_true(want_tok == tokens[h]);
			assert_memory_equal(mine, ids + (size_t)h * n, sizeof(uint32_t) * want);
			/* Nearly the CPU's own selection, within the same budget. */
			assert_true(got >= 0);
			assert_true(cpu_tok <= sel_budgets[b] && tokens[h] <= sel_budgets[b]);
			for (int i = 0; i < want; i++)
				for (int j = 0; j < got; j++)
					common += ids[(size_t)h * n + i] == cpu[j];
			if (common + 2 + (uint32_t)got / 50 < (uint32_t)(got > want ? got : want))
				fail_msg("head %u, budget %llu: %u of %d/%d clusters in common", h,
					 (unsigned long long)sel_budgets[b], common, want, got);
		}
	}
	cudaFree(dfar_s);
	cudaFree(dids);
	cudaFree(dcount);
	cudaFree(dtok);
	score_fx_free(&x);
	free(far_gpu);
	free(ids);
	free(cpu);
	free(mine);
}

/* What the selection left, per head, exactly as the CPU lists it. */
GPU_TEST(unselected_matches)
{
	const uint32_t n = 3000, stride = 700;
	uint32_t *sizes = tu_alloc(sizeof(uint32_t) * H * n), *ids = tu_alloc(sizeof(uint32_t) * H * stride);
	uint32_t *left = tu_alloc(sizeof(uint32_t) * H * n), *cpu = tu_alloc(sizeof(uint32_t) * n);
	int32_t count[H] = { 0, 700, -EINVAL };
	uint32_t n_left[H], *dz, *di, *dl, *dn;
	int32_t *dc;
	struct tu_rng rng;

	tu_rng_for(&rng, __func__, 0);
	for (size_t c = 0; c < (size_t)H * n; c++)
		sizes[c] = tu_below(&rng, 8) ? 1 + tu_below(&rng, 30) : 0;
	/* Repeats and ids past the clusters, as a careless caller might pass. */
	for (size_t i = 0; i < (size_t)H * stride; i++)
		ids[i] = tu_below(&rng, 20) ? tu_below(&rng, n) : n + tu_below(&rng, 5);
	dz = dev_put(sizes, sizeof(uint32_t) * H * n);
	di = dev_put(ids, sizeof(uint32_t) * H * stride);
	dc = dev_put(count, sizeof(count));
	dl = dev_new(sizeof(uint32_t) * H * n);
	dn = dev_new(sizeof(n_left));
	assert_int_equal(0, nelssa_cuda_unselected(di, stride, dc, dz, H, n, dl, dn, NULL));
	dev_get(n_left, dn, sizeof(n_left));
	dev_get(left, dl, sizeof(uint32_t) * H * n);
	for (uint32_t h = 0; h < H; h++) {
		int want = count[h] < 0 ? 0 :
			   nelssa_unselected(ids + (size_t)h * stride, (uint32_t)count[h],
					     sizes + (size_t)h * n, n, cpu);

		assert_int_equal(want, (int)n_left[h]);
		if (want > 0)
			assert_memory_equal(cpu, left + (size_t)h * n, sizeof(uint32_t) * (size_t)want);
	}
	assert_int_equal(-EINVAL, nelssa_cuda_unselected(di, stride, dc, dz, 70000, n, dl, dn, NULL));
	cudaFree(dz);
	cudaFree(di);
	cudaFree(dc);
	cudaFree(dl);
	cudaFree(dn);
	free(sizes);
	free(ids);
	free(left);
	free(cpu);
}

GPU_TEST(window_matches)
{
	/* Items shorter than, equal to and longer than the window; one empty. */
	const uint32_t lens[] = { 0, 3, 68, 69, 1000, 4096 }, items = 6, stride = 4096;
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	const size_t rows = (size_t)items * stride * D;
	float *q = tu_alloc(sizeof(float) * items * G * D), *o = tu_alloc(sizeof(float) * items * G * D);
	float lse[6 * G], co[G * D], cl[G];
	uint16_t *k = tu_alloc(2 * rows), *v = tu_alloc(2 * rows);
	struct tu_rng rng;

	for (int dt = NELSSA_KV_BF16; dt <= NELSSA_KV_FP16; dt++) {
		struct nelssa_attn_geom g = { D, G, (enum nelssa_kv_dtype)dt, 0.088f, 0 };
		float *dq, *dout, *dlse;
		uint16_t *dk, *dv;
		uint32_t *dn;

		tu_rng_for(&rng, __func__, (uint64_t)dt);
		tu_fill_f32(&rng, q, (size_t)items * G * D, 1.0);
		tu_fill_kv(&rng, k, rows, 1.0, g.kv_dtype);
		tu_fill_kv(&rng, v, rows, 1.0, g.kv_dtype);
		dq = dev_put(q, sizeof(float) * items * G * D);
		dk = dev_put(k, 2 * rows);
		dv = dev_put(v, 2 * rows);
		dn = dev_put(lens, sizeof(lens));
		dout = dev_new(sizeof(float) * items * G * D);
		dlse = dev_new(sizeof(lse));
		assert_int_equal(0, nelssa_cuda_window_attn(&g, items, dq, dk, dv, stride, dn, &win,
							    dout, dlse, NULL));
		dev_get(o, dout, sizeof(float) * items * G * D);
		dev_get(lse, dlse, sizeof(lse));
		for (uint32_t it = 0; it < items; it++) {
			const uint16_t *ki = k + (size_t)it * stride * D, *vi = v + (size_t)it * stride * D;
			uint32_t tok[4 + 64], nt = 0, n = lens[it];

			assert_int_equal(0, nelssa_window_attn(&g, q + (size_t)it * G * D, ki, vi, n,
							       &win, co, cl));
			for (uint32_t i = 0; i < G * D; i++)
				near(o[(size_t)it * G * D + i], co[i], 1e-5, 1e-4);
			for (uint32_t r = 0; r < G; r++)
				near(lse[it * G + r], cl[r], 1e-5, 1e-5);
			/* And against float64 over the window's token list. */
			for (uint32_t t = 0; t < n; t++)
				if (t < win.sink || t + win.recent >= n)
					tok[nt++] = t;
			assert_int_equal(0, tu_check_attn(&g, q + (size_t)it * G * D, ki, vi, tok, nt,
							  o + (size_t)it * G * D, lse + it * G,
							  "cuda window"));
		}
		cudaFree(dq);
		cudaFree(dk);
		cudaFree(dv);
		cudaFree(dn);
		cudaFree(dout);
		cudaFree(dlse);
	}
	free(q);
	free(o);
	free(k);
	free(v);
}

GPU_TEST(merge_matches)
{
	const uint32_t rows = 40, np = 3;
	float wo[40 * D], wl[40], po[3 * 40 * D], pl[3 * 40], o[40 * D], l[40];
	const float *pop[3], *plp[3];
	struct tu_rng rng;
	float *dwo, *dwl, *dpo, *dpl, *dout, *dl;

	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, wo, sizeof(wo) / sizeof(wo[0]), 1.0);
	tu_fill_f32(&rng, wl, rows, 3.0);
	tu_fill_f32(&rng, po, sizeof(po) / sizeof(po[0]), 1.0);
	tu_fill_f32(&rng, pl, np * rows, 3.0);
	/* Special rows: empty window, empty device, +inf empty, NaN, all empty. */
	wl[1] = -INFINITY;
	pl[rows + 2] = -INFINITY;
	pl[3] = INFINITY;
	pl[2 * rows + 4] = NAN;
	wl[5] = pl[5] = pl[rows + 5] = pl[2 * rows + 5] = -INFINITY;
	for (uint32_t s = 0; s < np; s++) {
		pop[s] = po + (size_t)s * rows * D;
		plp[s] = pl + s * rows;
	}
	dwo = dev_put(wo, sizeof(wo));
	dwl = dev_put(wl, sizeof(wl));
	dpo = dev_put(po, sizeof(po));
	dpl = dev_put(pl, sizeof(pl));
	dout = dev_new(sizeof(o));
	dl = dev_new(sizeof(l));
	assert_int_equal(0, nelssa_cuda_final_merge(dout, dl, dwo, dwl, dpo, dpl, np, rows, D, NULL));
	dev_get(o, dout, sizeof(o));
	dev_get(l, dl, sizeof(l));
	nelssa_final_merge(wo, wl, wo, wl, pop, plp, np, rows, D);	/* in place, as allowed */
	for (uint32_t r = 0; r < rows; r++) {
		near(l[r], wl[r], 1e-6, 1e-6);
		for (uint32_t i = 0; i < D; i++)
			near(o[r * D + i], wo[r * D + i], 1e-6, 1e-5);
	}
	assert_true(isnan(l[4]) && l[5] == -INFINITY && o[5 * D] == 0.0f);
	cudaFree(dwo);
	cudaFree(dwl);
	cudaFree(dpo);
	cudaFree(dpl);
	cudaFree(dout);
	cudaFree(dl);
}

/* One head dimension: every register layout of the kernels is a case. */
static void estimate_case(uint32_t d)
{
	/* Lists of none, one partial chunk and several chunks (128 ids each). */
	const uint32_t n = 3000, stride = 1500, n_ids[H] = { 0, 7, 1500 };
	const struct nelssa_attn_geom g = { d, G, NELSSA_KV_BF16, 0.088f, 0 };
	float *q = tu_alloc(sizeof(float) * H * G * d), *cen = tu_alloc(sizeof(float) * H * n * d);
	float *vs = tu_alloc(sizeof(float) * H * n * d), *o = tu_alloc(sizeof(float) * H * G * d);
	float *m2 = tu_alloc(sizeof(float) * H * n * d);
	float lse[H * G], *co = tu_alloc(sizeof(float) * G * d), cl[G];
	uint32_t *sizes = tu_alloc(sizeof(uint32_t) * H * n), *ids = tu_alloc(sizeof(uint32_t) * H * stride);
	struct tu_rng rng;
	float *dq, *dc, *dv, *dm, *dout, *dl;
	uint32_t *dz, *di, *dn;

	tu_rng_for(&rng, __func__, d);
	tu_fill_f32(&rng, q, (size_t)H * G * d, 1.0);
	tu_fill_f32(&rng, cen, (size_t)H * n * d, 1.0);
	tu_fill_f32(&rng, vs, (size_t)H * n * d, 8.0);
	/* Key spreads: squares, as nelssa_cluster_key_spread() gives. */
	tu_fill_f32(&rng, m2, (size_t)H * n * d, 0.3);
	for (size_t i = 0; i < (size_t)H * n * d; i++)
		m2[i] *= m2[i];
	for (size_t c = 0; c < (size_t)H * n; c++)
		sizes[c] = tu_below(&rng, 6) ? 1 + tu_below(&rng, 40) : 0;
	for (size_t i = 0; i < (size_t)H * stride; i++)
		ids[i] = tu_below(&rng, n);
	dq = dev_put(q, sizeof(float) * H * G * d);
	dc = dev_put(cen, sizeof(float) * H * n * d);
	dv = dev_put(vs, sizeof(float) * H * n * d);
	dm = dev_put(m2, sizeof(float) * H * n * d);
	dz = dev_put(sizes, sizeof(uint32_t) * H * n);
	di = dev_put(ids, sizeof(uint32_t) * H * stride);
	dn = dev_put(n_ids, sizeof(n_ids));
	dout = dev_new(sizeof(float) * H * G * d);
	dl = dev_new(sizeof(lse));
	/* Without the key spread (the mean-key estimate), then with it. */
	for (int sp = 0; sp < 2; sp++) {
		assert_int_equal(0, nelssa_cuda_estimate_attn_spread(&g, H, dq, dc, sp ? dm : NULL,
								     dv, dz, n, di, stride, dn,
								     dout, dl, NULL));
		dev_get(o, dout, sizeof(float) * H * G * d);
		dev_get(lse, dl, sizeof(lse));
		for (uint32_t h = 0; h < H; h++) {
			assert_int_equal(0, nelssa_estimate_attn_spread(
						    &g, q + (size_t)h * G * d, cen + (size_t)h * n * d,
						    sp ? m2 + (size_t)h * n * d : NULL,
						    vs + (size_t)h * n * d, sizes + h * n,
						    ids + h * stride, n_ids[h], co, cl));
			for (uint32_t r = 0; r < G; r++)
				near(lse[h * G + r], cl[r], 1e-5, 1e-5);
			for (uint32_t i = 0; i < G * d; i++)
				near(o[(size_t)h * G * d + i], co[i], 1e-5, 1e-4);
		}
	}
	/* The plain entry point is the spread one without a spread. */
	assert_int_equal(0, nelssa_cuda_estimate_attn(&g, H, dq, dc, dv, dz, n, di, stride, dn,
						      dout, dl, NULL));
	dev_get(lse, dl, sizeof(lse));
	for (uint32_t h = 0; h < H; h++) {
		assert_int_equal(0, nelssa_estimate_attn(&g, q + (size_t)h * G * d,
							 cen + (size_t)h * n * d, vs + (size_t)h * n * d,
							 sizes + h * n, ids + h * stride, n_ids[h], co,
							 cl));
		for (uint32_t r = 0; r < G; r++)
			near(lse[h * G + r], cl[r], 1e-5, 1e-5);
	}
	cudaFree(dq);
	cudaFree(dc);
	cudaFree(dv);
	cudaFree(dm);
	cudaFree(dz);
	cudaFree(di);
	cudaFree(dn);
	cudaFree(dout);
	cudaFree(dl);
	free(q);
	free(cen);
	free(vs);
	free(m2);
	free(o);
	free(sizes);
	free(ids);
	free(co);
}

GPU_TEST(estimate_matches)
{
	const uint32_t dims[] = { 40, 128, 256, 300 };

	for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++)
		estimate_case(dims[i]);
}

/* Cluster of every token under @ix. */
static uint32_t *token_cluster(const struct nelssa_cluster_index *ix)
{
	uint32_t *of = tu_alloc(sizeof(*of) * ix->n_tokens);

	for (uint32_t c = 0; c < ix->n_clusters; c++)
		for (uint32_t j = 0; j < ix->table[c].count; j++)
			of[ix->perm[ix->table[c].first + j]] = c;
	return of;
}

/*
 * Same layout and, up to near-tie flips of the fp32 assignment, the same
 * clusters: at least 99% of tokens in the same-numbered cluster, and the
 * centroids of identical clusters equal to fp32 rounding.
 */
static void same_clustering(const struct nelssa_cluster_index *a,
			    const struct nelssa_cluster_index *b)
{
	uint32_t *ca, *cb, same = 0;

	assert_int_equal(a->n_tokens, b->n_tokens);
	assert_int_equal(a->head_dim, b->head_dim);
	assert_memory_equal(a->key_mean, b->key_mean, sizeof(float) * a->head_dim);
	assert_true(abs((int)a->n_clusters - (int)b->n_clusters) <= (int)(b->n_clusters / 100));
	ca = token_cluster(a);
	cb = token_cluster(b);
	for (uint32_t t = 0; t < a->n_tokens; t++)
		same += ca[t] == cb[t];
	if (same < a->n_tokens - a->n_tokens / 100)
		fail_msg("only %u of %u tokens in the same cluster", same, a->n_tokens);
	for (uint32_t c = 0; c < a->n_clusters && c < b->n_clusters; c++) {
		if (a->table[c].first != b->table[c].first || a->table[c].count != b->table[c].count ||
		    memcmp(a->perm + a->table[c].first, b->perm + b->table[c].first,
			   sizeof(uint32_t) * a->table[c].count))
			continue;
		for (uint32_t i = 0; i < a->head_dim; i++)
			near(a->centroids[(size_t)c * a->head_dim + i],
			     b->centroids[(size_t)c * b->head_dim + i], 1e-6, 1e-5);
	}
	free(ca);
	free(cb);
}

GPU_TEST(kmeans_matches)
{
	const uint32_t n = 6000, extra = 700;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index gpu, cpu;
	uint16_t *k = tu_alloc(2 * (size_t)(n + extra) * D), *dk;
	struct tu_rng rng;

	cfg.segment = 2048;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_kv(&rng, k, (size_t)(n + extra) * D, 1.0, NELSSA_KV_BF16);
	/* A shared offset that mean-centring must remove. */
	for (size_t i = 0; i < (size_t)(n + extra) * D; i += D)
		k[i] = tu_to_kv(tu_from_kv(k[i], NELSSA_KV_BF16) + 4.0, NELSSA_KV_BF16);
	dk = dev_put(k, 2 * (size_t)(n + extra) * D);
	assert_int_equal(0, nelssa_cuda_kmeans_build(&gpu, &cfg, NELSSA_KV_BF16, dk, n, D, NULL));
	assert_int_equal(0, nelssa_kmeans_build(&cpu, &cfg, NELSSA_KV_BF16, k, n, D));
	same_clustering(&gpu, &cpu);
	assert_int_equal(0, nelssa_cuda_kmeans_append(&gpu, &cfg, NELSSA_KV_BF16,
						      dk + (size_t)n * D, extra, NULL));
	assert_int_equal(0, nelssa_kmeans_append(&cpu, &cfg, NELSSA_KV_BF16, k + (size_t)n * D,
						 extra));
	same_clustering(&gpu, &cpu);
	cfg.iters = 0;
	assert_int_equal(-EINVAL, nelssa_cuda_kmeans_build(&gpu, &cfg, NELSSA_KV_BF16, dk, n, D,
							   NULL));
	nelssa_kmeans_free(&cpu);
	cudaFree(dk);
	free(k);
}

GPU_TEST(reorder_matches)
{
	const uint32_t n = 3000;
	struct nelssa_kmeans_cfg cfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_cluster_index ix;
	uint16_t *k = tu_alloc(2 * (size_t)n * D), *a = tu_alloc(2 * (size_t)n * D);
	uint16_t *b = tu_alloc(2 * (size_t)n * D), *dk, *dout;
	struct tu_rng rng;
	uint32_t *dp;

	tu_rng_for(&rng, __func__, 0);
	tu_fill_kv(&rng, k, (size_t)n * D, 1.0, NELSSA_KV_FP16);
	assert_int_equal(0, nelssa_kmeans_build(&ix, &cfg, NELSSA_KV_FP16, k, n, D));
	dk = dev_put(k, 2 * (size_t)n * D);
	dp = dev_put(ix.perm, sizeof(uint32_t) * n);
	dout = dev_new(2 * (size_t)n * D);
	assert_int_equal(0, nelssa_cuda_kv_reorder(dp, n, 2 * D, dk, dout, NULL));
	dev_get(a, dout, 2 * (size_t)n * D);
	nelssa_kv_reorder(&ix, 2 * D, k, b);
	assert_memory_equal(a, b, 2 * (size_t)n * D);
	nelssa_kmeans_free(&ix);
	cudaFree(dk);
	cudaFree(dp);
	cudaFree(dout);
	free(k);
	free(a);
	free(b);
}

/*
 * The 8-bit quantiser: the GPU's bytes are the CPU's, for both types,
 * head dims that are and are not multiples of 32, a partial last tile,
 * rows gathered through a permutation from a @first onwards; and a NaN
 * reported in @status as the CPU's -EINVAL.
 */
GPU_TEST(kv_quantize_matches)
{
	static const enum nelssa_kv_dtype types[] = { NELSSA_KV_INT8, NELSSA_KV_FP8_E4M3 };
	static const uint32_t dims[] = { 128, 80 };
	const uint32_t n = 1000, first = 37, total = first + n;

	for (unsigned int ti = 0; ti < 2; ti++)
		for (unsigned int di = 0; di < 2; di++) {
			const uint32_t d = dims[di];
			const size_t bytes = nelssa_kv_bytes(types[ti], d, n);
			uint16_t *k = tu_alloc(2 * (size_t)total * d);
			uint32_t *perm = tu_alloc(sizeof(uint32_t) * total);
			float *x = tu_alloc(sizeof(float) * (size_t)n * d);
			uint8_t *want = tu_alloc(bytes), *got = tu_alloc(bytes), *dout;
			int32_t st = 1, *dst;
			struct tu_rng rng;
			uint16_t *dk;
			uint32_t *dp;

			tu_rng_for(&rng, __func__, ti * 2 + di);
			tu_fill_kv(&rng, k, (size_t)total * d, 1.0, NELSSA_KV_BF16);
			for (uint32_t t = 0; t < total; t++) {
				uint32_t j = tu_below(&rng, t + 1);

				k[(size_t)t * d] = nelssa_f32_to_bf16(40.0f * nelssa_bf16_to_f32(
					k[(size_t)t * d]));	/* an outlier channel */
				perm[t] = perm[j];
				perm[j] = t;
			}
			for (uint32_t i = 0; i < n; i++)
				nelssa_bf16_to_f32_n(x + (size_t)i * d, k + (size_t)perm[first + i] * d, d);
			assert_int_equal(0, nelssa_kv_quantize(types[ti], d, x, n, want));
			dk = dev_put(k, 2 * (size_t)total * d);
			dp = dev_put(perm, sizeof(uint32_t) * total);
			dout = dev_new(bytes);
			dst = dev_new(sizeof(int32_t));
			assert_int_equal(0, nelssa_cuda_kv_quantize(types[ti], d, NELSSA_KV_BF16, dk, dp,
								    first, n, dout, dst, NULL));
			dev_get(got, dout, bytes);
			dev_get(&st, dst, sizeof(st));
			assert_int_equal(st, 0);
			assert_memory_equal(got, want, bytes);
			/* A NaN anywhere: the CPU's -EINVAL, in @status. */
			k[(size_t)perm[first + 500] * d + 3] = 0x7fc0;
			assert_int_equal(cudaSuccess, cudaMemcpy(dk, k, 2 * (size_t)total * d,
								 cudaMemcpyHostToDevice));
			assert_int_equal(0, nelssa_cuda_kv_quantize(types[ti], d, NELSSA_KV_BF16, dk, dp,
								    first, n, dout, dst, NULL));
			dev_get(&st, dst, sizeof(st));
			assert_int_equal(st, -EINVAL);
			assert_int_equal(-EINVAL, nelssa_cuda_kv_quantize(NELSSA_KV_BF16, d,
									   NELSSA_KV_BF16, dk, dp, first,
									   n, dout, dst, NULL));
			cudaFree(dk);
			cudaFree(dp);
			cudaFree(dout);
			cudaFree(dst);
			free(k);
			free(perm);
			free(x);
			free(want);
			free(got);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(centroid_scores_match),
		cmocka_unit_test(topk_matches),
		cmocka_unit_test(budget_matches),
		cmocka_unit_test(fill_matches),
		cmocka_unit_test(far_probs_match),
		cmocka_unit_test(hybrid_matches),
		cmocka_unit_test(select_matches),
		cmocka_unit_test(window_matches),
		cmocka_unit_test(merge_matches),
		cmocka_unit_test(estimate_matches),
		cmocka_unit_test(unselected_matches),
		cmocka_unit_test(kmeans_matches),
		cmocka_unit_test(reorder_matches),
		cmocka_unit_test(kv_quantize_matches),
	};

	const size_t n = sizeof(tests) / sizeof(tests[0]);

	/*
	 * Without a GPU, plain TAP skips ("ok # SKIP"): cmocka's own skip
	 * lines read "not ok ... # SKIP", which meson counts as failures.
	 */
	if (nelssa_cuda_device_count() < 1) {
		printf("1..%zu\n", n);
		for (size_t i = 0; i < n; i++)
			printf("ok %zu - %s # SKIP no CUDA device\n", i + 1, tests[i].name);
		return 0;
	}
	tu_init("client_cuda");
	return cmocka_run_group_tests_name("client_cuda", tests, NULL, NULL);
}
