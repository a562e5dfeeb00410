// SPDX-License-Identifier: MIT
/*
 * The GPU node's sparse-attention pieces (client/): centroid scores against
 * a float64 softmax, Top-K against a full sort, the window against float64
 * attention over an independently listed token set, and the end-to-end
 * identity the split rests on -- window state merged with the states of
 * selected clusters (spread over several "devices") equals attention over
 * the union of their tokens.
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

#include <nelssa/sparse.h>

#include "testutil.h"
#include "../../client/estimate_rule.h"

#define D 64
#define G 4

/* float64 reference: per row softmax over non-empty centroids, summed. */
static void ref_scores(const float *q, const float *cen, const uint32_t *sizes, uint32_t n,
		       float scale, double *out)
{
	double *l = tu_alloc(sizeof(*l) * n);

	for (uint32_t c = 0; c < n; c++)
		out[c] = sizes[c] ? 0.0 : -INFINITY;
	for (uint32_t g = 0; g < G; g++) {
		double m = -INFINITY, sum = 0.0;

		for (uint32_t c = 0; c < n; c++) {
			double s = 0.0;

			if (!sizes[c])
				continue;
			for (uint32_t i = 0; i < D; i++)
				s += (double)q[g * D + i] * cen[(size_t)c * D + i];
			l[c] = s * scale;
			m = fmax(m, l[c]);
		}
		for (uint32_t c = 0; c < n; c++)
			if (sizes[c])
				sum += exp(l[c] - m);
		for (uint32_t c = 0; c < n; c++)
			if (sizes[c])
				out[c] += exp(l[c] - m) / sum;
	}
	free(l);
}

static void scores_match_float64(void **state)
{
	const uint32_t n = 700;
	float q[G * D], *cen = tu_alloc(sizeof(float) * n * D), *score = tu_alloc(sizeof(float) * n);
	uint32_t *sizes = tu_alloc(sizeof(uint32_t) * n);
	double *ref = tu_alloc(sizeof(double) * n), total = 0.0;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, q, G * D, 1.0);
	tu_fill_f32(&rng, cen, (size_t)n * D, 1.0);
	for (uint32_t c = 0; c < n; c++)
		sizes[c] = tu_below(&rng, 10) ? 1 + tu_below(&rng, 30) : 0;
	assert_int_equal(0, nelssa_centroid_scores(q, G, D, 0.125f, cen, sizes, n, score));
	ref_scores(q, cen, sizes, n, 0.125f, ref);
	for (uint32_t c = 0; c < n; c++) {
		if (!sizes[c]) {
			assert_true(score[c] == -INFINITY);
			continue;
		}
		/* fp32 logits of |x| ~ 1 and a softmax of 700 terms. */
		assert_true(fabs(score[c] - ref[c]) <= 1e-5 * G + 1e-4 * ref[c]);
		total += score[c];
	}
	assert_true(fabs(total - G) < 1e-3);
	free(cen);
	free(score);
	free(sizes);
	free(ref);
}

static void scores_reject_bad_input(void **state)
{
	float q[G * D] = { 0 }, cen[2 * D] = { 0 }, score[2];
	uint32_t sizes[2] = { 1, 1 };

	(void)state;
	assert_int_equal(-EINVAL, nelssa_centroid_scores(q, 0, D, 0.125f, cen, sizes, 2, score));
	assert_int_equal(-EINVAL, nelssa_centroid_scores(q, G, D, 0.0f, cen, sizes, 2, score));
	assert_int_equal(-EINVAL, nelssa_centroid_scores(q, G, D, NAN, cen, sizes, 2, score));
	cen[D + 3] = INFINITY;
	q[3] = 1.0f;
	assert_int_equal(-EINVAL, nelssa_centroid_scores(q, G, D, 0.125f, cen, sizes, 2, score));
}

static const float *cmp_score;

/* Independent ordering for the reference sort: score desc, id asc. */
static int cmp_ids(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (cmp_score[x] != cmp_score[y])
		return cmp_score[x] > cmp_score[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

static void topk_equals_full_sort(void **state)
{
	const uint32_t n = 1000;
	float *score = tu_alloc(sizeof(float) * n);
	uint32_t *all = tu_alloc(sizeof(uint32_t) * n), *ids = tu_alloc(sizeof(uint32_t) * n);
	/* 62 and 63 straddle the switch from the heap to the radix sort (n / 16). */
	const uint32_t ks[] = { 0, 1, 2, 7, 40, 62, 63, 333, 999, 1000, 5000 };
	static const float odd[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, INFINITY, -3e38f, 3e38f };
	struct tu_rng rng;

	(void)state;
	for (uint32_t v = 0; v < 40; v++) {
		uint32_t finite = 0;

		tu_rng_for(&rng, __func__, v);
		for (uint32_t c = 0; c < n; c++) {
			if (!tu_below(&rng, 8))
				score[c] = -INFINITY;	/* some empty clusters */
			else if (v % 4 == 0)		/* few levels, so ties are common */
				score[c] = (float)tu_below(&rng, 50) / 7.0f;
			else if (v % 4 == 1)		/* both signs, every magnitude, zeros of both signs */
				score[c] = tu_below(&rng, 4) ? (float)(tu_normal(&rng) *
					ldexp(1.0, (int)tu_below(&rng, 200) - 100)) :
					odd[tu_below(&rng, sizeof(odd) / sizeof(odd[0]))];
			else if (v % 4 == 2)		/* all tied */
				score[c] = 0.5f;
			else
				score[c] = (float)tu_normal(&rng);
			all[c] = c;
			finite += score[c] != -INFINITY;
		}
		cmp_score = score;
		qsort(all, n, sizeof(*all), cmp_ids);
		for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
			uint32_t want = ks[i] < finite ? ks[i] : finite;

			assert_int_equal(want, nelssa_topk(score, n, ks[i], ids));
			assert_memory_equal(all, ids, want * sizeof(*ids));
		}
	}
	free(score);
	free(all);
	free(ids);
}

static void topk_rejects_nan(void **state)
{
	float score[3] = { 1.0f, NAN, 2.0f };
	uint32_t ids[3];

	(void)state;
	assert_int_equal(-EINVAL, nelssa_topk(score, 3, 2, ids));
}

static void ratio_counts(void **state)
{
	(void)state;
	/* The 128K-context table of the sparse-attention notes: 8192 clusters. */
	assert_int_equal(328, nelssa_topk_ratio_count(8192, 0.04));
	assert_int_equal(147, nelssa_topk_ratio_count(8192, 0.018));
	assert_int_equal(1, nelssa_topk_ratio_count(10, 0.01));
	assert_int_equal(0, nelssa_topk_ratio_count(10, 0.0));
	assert_int_equal(10, nelssa_topk_ratio_count(10, 1.0));
	assert_int_equal(0, nelssa_topk_ratio_count(10, 1.5));
	assert_int_equal(0, nelssa_topk_ratio_count(10, NAN));
	assert_int_equal(0, nelssa_topk_ratio_count(0, 0.5));
}

static void budget_is_a_fitting_prefix(void **state)
{
	/* Ranking: 3 (9), 0 (8), 4 (7), 1 (6), 2 (5). */
	const float score[5] = { 8, 6, 5, 9, 7 };
	const uint32_t sizes[5] = { 10, 1, 1, 16, 20 };
	uint32_t ids[5];

	(void)state;
	assert_int_equal(0, nelssa_topk_budget(score, sizes, 5, 15, ids));
	assert_int_equal(2, nelssa_topk_budget(score, sizes, 5, 45, ids));
	assert_int_equal(3, ids[0]);
	assert_int_equal(0, ids[1]);
	/* 16 + 10 + 20 = 46: cluster 4 fills the budget exactly. */
	assert_int_equal(3, nelssa_topk_budget(score, sizes, 5, 46, ids));
	assert_int_equal(5, nelssa_topk_budget(score, sizes, 5, UINT64_MAX, ids));
}

/*
 * Filling a budget: against a reference that walks the full sort and
 * takes every cluster that still fits, on random scores and sizes; the
 * selection never passes the budget and leaves less room than the
 * smallest cluster not taken.  With two lists, each id once, the first
 * list's share taken first, and the whole budget filled likewise.
 */
static void fill_reaches_the_budget(void **state)
{
	const uint32_t n = 300;
	float *score = tu_alloc(sizeof(float) * n), *other = tu_alloc(sizeof(float) * n);
	uint32_t *sizes = tu_alloc(sizeof(uint32_t) * n), *ids = tu_alloc(sizeof(uint32_t) * n);
	uint32_t *order = tu_alloc(sizeof(uint32_t) * n), *ref = tu_alloc(sizeof(uint32_t) * n);
	unsigned char *in = tu_alloc(n);
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	for (int round = 0; round < 20; round++) {
		uint64_t budget = 1 + tu_below(&rng, 3000), used = 0, tokens, small = UINT64_MAX;
		const float *lists[2] = { other, score };
		const double share[2] = { 0.3, 0.7 };
		uint32_t nr = 0;
		int ns;

		for (uint32_t c = 0; c < n; c++) {
			score[c] = (float)tu_below(&rng, 50);	/* many ties */
			other[c] = (float)tu_normal(&rng);
			sizes[c] = tu_below(&rng, 8) ? 1 + tu_below(&rng, 40) : 0;
		}
		assert_int_equal((int)n, nelssa_topk(score, n, n, order));
		for (uint32_t i = 0; i < n; i++)
			if (sizes[order[i]] && sizes[order[i]] <= budget - used) {
				used += sizes[order[i]];
				ref[nr++] = order[i];
			}
		ns = nelssa_topk_fill(score, sizes, n, budget, ids, &tokens);
		assert_int_equal((int)nr, ns);
		assert_memory_equal(ref, ids, sizeof(*ids) * nr);
		assert_true(tokens == used && used <= budget);

		ns = nelssa_select_hybrid(lists, share, 2, sizes, n, budget, ids, &tokens);
		assert_true(ns >= 0 && tokens <= budget);
		memset(in, 0, n);
		used = 0;
		for (int i = 0; i < ns; i++) {
			assert_false(in[ids[i]]);
			assert_true(sizes[ids[i]] > 0);
			in[ids[i]] = 1;
			used += sizes[ids[i]];
		}
		assert_true(used == tokens);
		for (uint32_t c = 0; c < n; c++)
			if (!in[c] && sizes[c] && sizes[c] < small)
				small = sizes[c];
		assert_true(small == UINT64_MAX || budget - tokens < small);
		/* The first list's share came first, from the first list's order. */
		assert_int_equal((int)n, nelssa_topk(other, n, n, order));
		used = 0;
		for (uint32_t i = 0, j = 0; i < n && used < (uint64_t)(0.3 * budget); i++) {
			if (!sizes[order[i]] || sizes[order[i]] > (uint64_t)(0.3 * budget) - used)
				continue;
			assert_int_equal(order[i], ids[j++]);
			used += sizes[order[i]];
		}
	}
	assert_int_equal(-EINVAL, nelssa_select_hybrid((const float *const[]){ score },
						       (const double[]){ 1.5 }, 1, sizes, n, 10,
						       ids, NULL));
	assert_int_equal(-EINVAL, nelssa_select_hybrid((const float *const[]){ score },
						       (const double[]){ 1.0 }, 0, sizes, n, 10,
						       ids, NULL));
	free(score);
	free(other);
	free(sizes);
	free(ids);
	free(order);
	free(ref);
	free(in);
}

struct kv {
	struct nelssa_attn_geom g;
	float q[G * D];
	uint16_t *k, *v;
};

static void kv_init(struct kv *kv, struct tu_rng *rng, uint32_t n)
{
	kv->g = (struct nelssa_attn_geom){ D, G, NELSSA_KV_BF16, 0.125f, 0 };
	kv->k = tu_alloc(sizeof(uint16_t) * D * (n ? n : 1));
	kv->v = tu_alloc(sizeof(uint16_t) * D * (n ? n : 1));
	tu_fill_f32(rng, kv->q, G * D, 1.0);
	tu_fill_kv(rng, kv->k, (size_t)n * D, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(rng, kv->v, (size_t)n * D, 1.0, NELSSA_KV_BF16);
}

static void window_matches_float64(void **state)
{
	const uint32_t lens[] = { 0, 1, 3, 4, 5, 50, 67, 68, 69, 500 };
	const struct nelssa_window wins[] = { NELSSA_WINDOW_DEFAULT, { 0, 16 }, { 8, 0 }, { 0, 0 } };
	uint32_t tok[512];
	float o[G * D], lse[G];
	struct tu_rng rng;
	struct kv kv;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	kv_init(&kv, &rng, 500);
	for (size_t w = 0; w < sizeof(wins) / sizeof(wins[0]); w++) {
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint32_t n = lens[i], nt = 0;
			char what[64];

			for (uint32_t t = 0; t < n; t++)
				if (t < wins[w].sink || t + wins[w].recent >= n)
					tok[nt++] = t;
			snprintf(what, sizeof(what), "window %u+%u of %u", wins[w].sink,
				 wins[w].recent, n);
			assert_int_equal(0, nelssa_window_attn(&kv.g, kv.q, kv.k, kv.v, n, &wins[w],
							       o, lse));
			assert_int_equal(0, tu_check_attn(&kv.g, kv.q, kv.k, kv.v, tok, nt, o, lse,
							  what));
		}
	}
	free(kv.k);
	free(kv.v);
}

/*
 * The window over a KV store of an 8-bit type (token ranges, not row
 * offsets): float64 over the test's own decoding of the tiles; and the
 * baselines, which read 16-bit rows, refuse such a type.
 */
static void window_over_tiles(void **state)
{
	const uint32_t n = 500;
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	const enum nelssa_kv_dtype types[] = { NELSSA_KV_INT8, NELSSA_KV_FP8_E4M3 };
	float *x = tu_alloc(sizeof(float) * n * D), *kf = tu_alloc(sizeof(float) * n * D);
	float *vf = tu_alloc(sizeof(float) * n * D), o[G * D], lse[G];
	uint8_t *k = tu_alloc(nelssa_kv_bytes(NELSSA_KV_INT8, D, n));
	uint8_t *v = tu_alloc(nelssa_kv_bytes(NELSSA_KV_INT8, D, n));
	uint32_t tok[80], nt = 0, pick[4];
	double mass[500];
	struct tu_rng rng;
	struct kv kv;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	kv_init(&kv, &rng, n);
	for (uint32_t t = 0; t < n; t++)
		if (t < win.sink || t + win.recent >= n)
			tok[nt++] = t;
	for (int i = 0; i < 2; i++) {
		struct nelssa_attn_geom g = kv.g, ref = kv.g;

		g.kv_dtype = types[i];
		ref.kv_dtype = TU_KV_F32;
		tu_fill_f32(&rng, x, (size_t)n * D, 1.0);
		assert_int_equal(0, nelssa_kv_quantize(types[i], D, x, n, k));
		tu_fill_f32(&rng, x, (size_t)n * D, 1.0);
		assert_int_equal(0, nelssa_kv_quantize(types[i], D, x, n, v));
		tu_decode_tiled(k, n, D, types[i], kf);
		tu_decode_tiled(v, n, D, types[i], vf);
		assert_int_equal(0, nelssa_window_attn(&g, kv.q, k, v, n, &win, o, lse));
		assert_int_equal(0, tu_check_attn(&ref, kv.q, (const uint16_t *)(void *)kf,
						  (const uint16_t *)(void *)vf, tok, nt, o, lse,
						  "window over tiles"));
		assert_int_equal(-EINVAL, nelssa_token_mass(&g, kv.q, k, n, mass));
		assert_int_equal(-EINVAL, nelssa_oracle_tokens(&g, kv.q, k, n, 4, pick));
		assert_int_equal(-EINVAL, nelssa_quest_pages(&g, kv.q, k, n, 16, 4, pick));
	}
	free(kv.k);
	free(kv.v);
	free(x);
	free(kf);
	free(vf);
	free(k);
	free(v);
}

/*
 * A 600-token context: the window keeps 4 + 64 tokens; the middle 532 are
 * shuffled into clusters of 1..31 tokens stored cluster-contiguously, as
 * the PNM devices hold them.  The selected clusters are split over three
 * devices; merging everything must equal attention over the union.
 */
static void window_plus_clusters_equals_union(void **state)
{
	const uint32_t n = 600, mid0 = 4, mid = 600 - 4 - 64;
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	uint32_t perm[600], tok[600], sel[600], n_cl = 0, nt = 0;
	struct nelssa_cluster table[600];
	float o[G * D], lse[G], po[3][G * D], pl[3][G];
	const float *pop[3] = { po[0], po[1], po[2] }, *plp[3] = { pl[0], pl[1], pl[2] };
	uint16_t *ck, *cv;
	struct tu_rng rng;
	struct kv kv;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	kv_init(&kv, &rng, n);
	ck = tu_alloc(sizeof(uint16_t) * D * mid);
	cv = tu_alloc(sizeof(uint16_t) * D * mid);
	for (uint32_t i = 0; i < mid; i++)
		perm[i] = mid0 + i;
	for (uint32_t i = mid; i > 1; i--) {
		uint32_t j = tu_below(&rng, i), t = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	for (uint32_t i = 0; i < mid; i++) {
		memcpy(ck + (size_t)i * D, kv.k + (size_t)perm[i] * D, D * sizeof(uint16_t));
		memcpy(cv + (size_t)i * D, kv.v + (size_t)perm[i] * D, D * sizeof(uint16_t));
	}
	for (uint32_t first = 0; first < mid; n_cl++) {
		uint32_t cnt = 1 + tu_below(&rng, 31);

		table[n_cl].first = first;
		table[n_cl].count = cnt < mid - first ? cnt : mid - first;
		first += table[n_cl].count;
	}
	/* Select about a third of the clusters; list window tokens first. */
	for (uint32_t t = 0; t < n; t++)
		if (t < win.sink || t + win.recent >= n)
			tok[nt++] = t;
	uint32_t n_sel = 0;

	for (uint32_t c = 0; c < n_cl; c++) {
		if (tu_below(&rng, 3))
			continue;
		sel[n_sel++] = c;
		for (uint32_t i = 0; i < table[c].count; i++)
			tok[nt++] = perm[table[c].first + i];
	}
	assert_int_equal(0, nelssa_window_attn(&kv.g, kv.q, kv.k, kv.v, n, &win, o, lse));
	for (uint32_t d = 0; d < 3; d++) {
		uint32_t a = n_sel * d / 3, b = n_sel * (d + 1) / 3;

		assert_int_equal(0, nelssa_attn_clusters(&kv.g, kv.q, ck, cv, mid, table, n_cl,
							 sel + a, b - a, po[d], pl[d]));
	}
	nelssa_final_merge(o, lse, o, lse, pop, plp, 3, G, D);
	assert_int_equal(0, tu_check_attn(&kv.g, kv.q, kv.k, kv.v, tok, nt, o, lse,
					  "window + clusters"));
	free(ck);
	free(cv);
	free(kv.k);
	free(kv.v);
}

/*
 * When every member of a cluster has the centroid as its key, the
 * estimation term is exact: it must equal float64 attention over the
 * members of the estimated clusters.
 */
static void estimate_exact_for_identical_keys(void **state)
{
	const uint32_t n_cl = 40;
	struct nelssa_cluster table[40];
	uint32_t perm[40 * 31], sizes[40], ids[40], tok[40 * 31], n = 0, n_ids = 0, nt = 0;
	float *cen = tu_alloc(sizeof(float) * n_cl * D), *vsum = tu_alloc(sizeof(float) * n_cl * D);
	float o[G * D], lse[G];
	struct nelssa_cluster_index ix;
	struct tu_rng rng;
	struct kv kv;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	kv_init(&kv, &rng, 40 * 31);
	for (uint32_t c = 0; c < n_cl; c++) {
		sizes[c] = tu_below(&rng, 6) ? 1 + tu_below(&rng, 31) : 0;
		table[c] = (struct nelssa_cluster){ n, sizes[c] };
		for (uint32_t j = 0; j < sizes[c]; j++, n++) {
			if (j)
				memcpy(kv.k + (size_t)n * D, kv.k + (size_t)table[c].first * D,
				       D * sizeof(uint16_t));
			perm[n] = n;
		}
		for (uint32_t i = 0; i < D; i++)
			cen[c * D + i] = (float)tu_from_kv(kv.k[(size_t)table[c].first * D + i],
							   NELSSA_KV_BF16);
	}
	ix = (struct nelssa_cluster_index){ .head_dim = D, .n_tokens = n, .n_clusters = n_cl,
					    .perm = perm, .table = table };
	nelssa_cluster_value_sums(&ix, NELSSA_KV_BF16, kv.v, vsum);
	for (uint32_t c = 0; c < n_cl; c++) {
		for (uint32_t i = 0; i < D; i++) {
			double ref = 0.0;

			for (uint32_t j = 0; j < sizes[c]; j++)
				ref += tu_from_kv(kv.v[(size_t)(table[c].first + j) * D + i],
						  NELSSA_KV_BF16);
			assert_true(fabs(vsum[c * D + i] - ref) < 1e-5 * (1 + sizes[c]));
		}
		if (tu_below(&rng, 2))
			continue;
		ids[n_ids++] = c;
		for (uint32_t j = 0; j < sizes[c]; j++)
			tok[nt++] = table[c].first + j;
	}
	assert_int_equal(0, nelssa_estimate_attn(&kv.g, kv.q, cen, vsum, sizes, ids, n_ids, o,
						 lse));
	assert_int_equal(0, tu_check_attn(&kv.g, kv.q, kv.k, kv.v, tok, nt, o, lse,
					  "estimate, identical keys"));
	/* Nothing to estimate: the empty state. */
	assert_int_equal(0, nelssa_estimate_attn(&kv.g, kv.q, cen, vsum, sizes, ids, 0, o, lse));
	assert_true(lse[0] == -INFINITY && o[0] == 0.0f);
	free(cen);
	free(vsum);
	free(kv.k);
	free(kv.v);
}

/*
 * The spread's gain as sparse.h defines it, in float64: half the logit
 * variance sigma^2, or past sigma = a_n the tangent a_n sigma - a_n^2 / 2,
 * a_n Blom's expected largest of n normal draws, Phi^-1((n - 0.375) /
 * (n + 0.25)) -- here by bisection on erfc(), not the library's rational
 * approximation.
 */
static double ref_gain(double half_var, uint32_t n)
{
	const double p = (n - 0.375) / (n + 0.25);
	double lo = -10.0, hi = 10.0, a;

	for (int i = 0; i < 200; i++) {
		double mid = 0.5 * (lo + hi);

		if (0.5 * erfc(-mid / sqrt(2.0)) < p)
			lo = mid;
		else
			hi = mid;
	}
	a = 0.5 * (lo + hi);
	return half_var <= a * a / 2 ? half_var : a * sqrt(2.0 * half_var) - a * a / 2;
}

/*
 * The gain's shape (client/estimate_rule.h), known answers: half the
 * variance up to sigma = a_n, then a line of slope a_n in sigma, so the
 * two meet with the same value and slope; no gain for a single member;
 * never more than the log-normal; growing with the spread.  And the
 * expected largest of n draws within 0.03 of its exact value (the
 * integral of x n phi(x) Phi(x)^(n-1), computed here) for n <= 64.
 */
static void spread_gain_shape(void **state)
{
	(void)state;
	for (uint32_t n = 1; n <= 64; n++) {
		double a = nelssa_normal_max(n), exact = 0.0, prev = -1.0;

		for (double x = -12.0; x < 12.0; x += 1e-4)
			exact += 1e-4 * x * n * exp(-x * x / 2) / sqrt(2 * 3.14159265358979323846) *
				 pow(0.5 * erfc(-x / sqrt(2.0)), n - 1);
		assert_true(fabs(a - (n == 1 ? 0.0 : exact)) < 0.03);
		assert_true(fabs(nelssa_spread_gain((float)(a * a / 2), n) - a * a / 2) <=
			    1e-5 * (1 + a * a));
		if (n > 1) {
			/* The slope in half_var at the join is 1 on both sides. */
			double h = a * a / 2, e = 1e-3 * h;
			double up = (nelssa_spread_gain((float)(h + e), n) -
				     nelssa_spread_gain((float)h, n)) / e;

			assert_true(fabs(up - 1.0) < 1e-2);
		}
		for (double h = 0.01; h < 200.0; h *= 1.3) {
			double g = nelssa_spread_gain((float)h, n);

			assert_true(g <= h * (1 + 1e-6) && g >= prev - 1e-6 && g >= 0.0);
			assert_true(fabs(g - ref_gain(h, n)) <= 1e-5 * (1.0 + h));
			prev = g;
		}
	}
	assert_true(nelssa_spread_gain(50.0f, 1) == 0.0f);
}

/*
 * Clusters of members spread a little about their mean: the key spread
 * against float64, and the spread-weighted estimate against the float64
 * second-order formula and against the members' true LSE, which it must
 * come closer to than the mean key's weight (Jensen's shortfall).
 */
static void estimate_spread_weighs_the_members(void **state)
{
	enum { N_CL = 30, MAX_SZ = 20 };
	struct nelssa_cluster table[N_CL];
	uint32_t perm[N_CL * MAX_SZ], sizes[N_CL], ids[N_CL], n = 0;
	float *cen = tu_alloc(sizeof(float) * N_CL * D), *vsum = tu_alloc(sizeof(float) * N_CL * D);
	float *m2 = tu_alloc(sizeof(float) * N_CL * D);
	float o[G * D], lse[G], po[G * D], pl[G], no[G * D], nl[G];
	struct nelssa_cluster_index ix;
	struct tu_rng rng;
	struct kv kv;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	kv_init(&kv, &rng, N_CL * MAX_SZ);
	for (uint32_t c = 0; c < N_CL; c++) {
		double base[D];

		sizes[c] = c == 7 ? 0 : 2 + tu_below(&rng, MAX_SZ - 1);
		table[c] = (struct nelssa_cluster){ n, sizes[c] };
		for (uint32_t i = 0; i < D; i++)
			base[i] = tu_normal(&rng);
		for (uint32_t j = 0; j < sizes[c]; j++, n++) {
			perm[n] = n;
			for (uint32_t i = 0; i < D; i++)
				kv.k[(size_t)n * D + i] =
					tu_to_kv(base[i] + 0.1 * tu_normal(&rng), NELSSA_KV_BF16);
		}
		/* The centroid: the float64 mean of the stored members. */
		for (uint32_t i = 0; i < D; i++) {
			double m = 0.0;

			for (uint32_t j = 0; j < sizes[c]; j++)
				m += tu_from_kv(kv.k[(size_t)(table[c].first + j) * D + i],
						NELSSA_KV_BF16);
			cen[c * D + i] = sizes[c] ? (float)(m / sizes[c]) : 0.0f;
		}
		ids[c] = c;
	}
	ix = (struct nelssa_cluster_index){ .head_dim = D, .n_tokens = n, .n_clusters = N_CL,
					    .perm = perm, .table = table, .centroids = cen };
	nelssa_cluster_key_spread(&ix, NELSSA_KV_BF16, kv.k, m2);
	nelssa_cluster_value_sums(&ix, NELSSA_KV_BF16, kv.v, vsum);
	for (uint32_t c = 0; c < N_CL; c++)
		for (uint32_t i = 0; i < D; i++) {
			double ref = 0.0;

			for (uint32_t j = 0; j < sizes[c]; j++) {
				double e = tu_from_kv(kv.k[(size_t)(table[c].first + j) * D + i],
						      NELSSA_KV_BF16) - cen[c * D + i];

				ref += e * e;
			}
			ref = sizes[c] ? ref / sizes[c] : 0.0;
			assert_true(fabs(m2[c * D + i] - ref) <= 1e-6 * (1.0 + ref));
		}
	assert_int_equal(0, nelssa_estimate_attn_spread(&kv.g, kv.q, cen, m2, vsum, sizes, ids,
							N_CL, o, lse));
	assert_int_equal(0, nelssa_estimate_attn(&kv.g, kv.q, cen, vsum, sizes, ids, N_CL, po,
						 pl));
	/* No spread given: the plain estimate, bit for bit. */
	assert_int_equal(0, nelssa_estimate_attn_spread(&kv.g, kv.q, cen, NULL, vsum, sizes, ids,
							N_CL, no, nl));
	assert_memory_equal(po, no, sizeof(po));
	assert_memory_equal(pl, nl, sizeof(pl));
	for (uint32_t r = 0; r < G; r++) {
		const float *qr = kv.q + r * D;
		double w = 0.0, ws[D] = { 0 }, m = -INFINITY, tm = -INFINITY, tsum = 0.0;
		double lw[N_CL], tl[N_CL * MAX_SZ];

		/* The formula, float64: log w_c = s q.c + gain(s^2/2 sum q_i^2 m2_ci, n_c). */
		for (uint32_t c = 0; c < N_CL; c++) {
			double dot = 0.0, v = 0.0;

			if (!sizes[c])
				continue;
			for (uint32_t i = 0; i < D; i++) {
				dot += (double)qr[i] * cen[c * D + i];
				v += (double)qr[i] * qr[i] * m2[c * D + i];
			}
			lw[c] = 0.125 * dot + ref_gain(0.5 * 0.125 * 0.125 * v, sizes[c]);
			m = fmax(m, lw[c]);
		}
		for (uint32_t c = 0; c < N_CL; c++) {
			if (!sizes[c])
				continue;
			w += sizes[c] * exp(lw[c] - m);
			for (uint32_t i = 0; i < D; i++)
				ws[i] += exp(lw[c] - m) * vsum[c * D + i];
		}
		assert_true(fabs(lse[r] - (m + log(w))) <= 1e-4 * (1.0 + fabs(m)));
		for (uint32_t i = 0; i < D; i++)
			assert_true(fabs(o[r * D + i] - ws[i] / w) <= 1e-4);
		/* The members' true LSE, float64 over the stored keys. */
		for (uint32_t t = 0; t < n; t++) {
			double dot = 0.0;

			for (uint32_t i = 0; i < D; i++)
				dot += (double)qr[i] * tu_from_kv(kv.k[(size_t)t * D + i],
								  NELSSA_KV_BF16);
			tl[t] = 0.125 * dot;
			tm = fmax(tm, tl[t]);
		}
		for (uint32_t t = 0; t < n; t++)
			tsum += exp(tl[t] - tm);
		tsum = tm + log(tsum);
		/* The mean key's weight falls short; the spread recovers it. */
		assert_true(pl[r] < tsum);
		assert_true(fabs(lse[r] - tsum) < fabs(pl[r] - tsum));
		/*
		 * How close it comes depends on the draw (cross terms of the
		 * keys' spread and cumulants past the second are left out, a
		 * fixed 2e-3 failed one seed in some hundreds): bounded, for
		 * every draw, by the worst cluster -- if each cluster's log
		 * weight is within eps of its members' true one, so is the
		 * log of their sum.
		 */
		{
			double eps = 0.0;

			for (uint32_t c = 0; c < N_CL; c++) {
				double cm = -INFINITY, cs = 0.0;

				if (!sizes[c])
					continue;
				for (uint32_t j = 0; j < sizes[c]; j++)
					cm = fmax(cm, tl[table[c].first + j]);
				for (uint32_t j = 0; j < sizes[c]; j++)
					cs += exp(tl[table[c].first + j] - cm);
				eps = fmax(eps, fabs(log((double)sizes[c]) + lw[c] - (cm + log(cs))));
			}
			assert_true(fabs(lse[r] - tsum) <= eps + 1e-4 * (1.0 + fabs(tsum)));
		}
	}
	free(cen);
	free(vsum);
	free(m2);
	free(kv.k);
	free(kv.v);
}

/*
 * A peaked head: 16-token clusters whose members' logits spread by about
 * 7 about the centroid's (one channel carries them, the query is along
 * it).  The log-normal mean puts each cluster 13-40 nats above its
 * centroid, 8-26 above its members' true log mean weight; the bounded gain
 * must be the defined one, stay between the mean key's weight (Jensen)
 * and the log-normal figure, and come near the truth over the clusters.
 */
static void estimate_spread_bounds_peaked_clusters(void **state)
{
	enum { N_CL = 64, SZ = 16 };
	const double sigma = 7.0, a = 8.0;	/* q = a e_0; logits = 0.125 a k_0 */
	struct nelssa_cluster_index ix;
	struct nelssa_cluster table[N_CL];
	struct nelssa_attn_geom g = { .head_dim = D, .group = 1, .kv_dtype = NELSSA_KV_BF16,
				      .scale = 0.125f };
	uint32_t perm[N_CL * SZ], sizes[N_CL], ids[1];
	float *cen = tu_alloc(sizeof(float) * N_CL * D), *m2 = tu_alloc(sizeof(float) * N_CL * D);
	float *vsum = tu_alloc(sizeof(float) * N_CL * D), q[D] = { 0 }, o[D], lse, po[D], pl;
	uint16_t *k = tu_alloc(sizeof(uint16_t) * N_CL * SZ * D);
	struct tu_rng rng;
	double err = 0.0, err_lognormal = 0.0, bias = 0.0;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	q[0] = (float)a;
	for (uint32_t t = 0; t < N_CL * SZ; t++) {
		perm[t] = t;
		for (uint32_t i = 0; i < D; i++)
			k[(size_t)t * D + i] = tu_to_kv(i ? 0.01 * tu_normal(&rng) :
						      sigma / (0.125 * a) * tu_normal(&rng),
						      NELSSA_KV_BF16);
	}
	for (uint32_t c = 0; c < N_CL; c++) {
		table[c] = (struct nelssa_cluster){ c * SZ, SZ };
		sizes[c] = SZ;
		for (uint32_t i = 0; i < D; i++) {
			double m = 0.0;

			for (uint32_t j = 0; j < SZ; j++)
				m += tu_from_kv(k[(size_t)(c * SZ + j) * D + i], NELSSA_KV_BF16);
			cen[c * D + i] = (float)(m / SZ);
		}
	}
	ix = (struct nelssa_cluster_index){ .head_dim = D, .n_tokens = N_CL * SZ,
					    .n_clusters = N_CL, .perm = perm, .table = table,
					    .centroids = cen };
	nelssa_cluster_key_spread(&ix, NELSSA_KV_BF16, k, m2);
	nelssa_cluster_value_sums(&ix, NELSSA_KV_BF16, k, vsum);
	for (uint32_t c = 0; c < N_CL; c++) {
		double mu = 0.125 * a * cen[c * D], half_var = 0.0, tm = -INFINITY, ts = 0.0, truth;
		double lognormal;

		for (uint32_t i = 0; i < D; i++)
			half_var += 0.5 * 0.125 * 0.125 * (double)q[i] * q[i] * m2[c * D + i];
		for (uint32_t j = 0; j < SZ; j++)
			tm = fmax(tm, 0.125 * a * tu_from_kv(k[(size_t)(c * SZ + j) * D],
							      NELSSA_KV_BF16));
		for (uint32_t j = 0; j < SZ; j++)
			ts += exp(0.125 * a * tu_from_kv(k[(size_t)(c * SZ + j) * D], NELSSA_KV_BF16) -
				  tm);
		truth = tm + log(ts / SZ);
		lognormal = mu + half_var;
		ids[0] = c;
		assert_int_equal(0, nelssa_estimate_attn_spread(&g, q, cen, m2, vsum, sizes, ids, 1,
								o, &lse));
		assert_int_equal(0, nelssa_estimate_attn(&g, q, cen, vsum, sizes, ids, 1, po, &pl));
		/* lse = log(size * mean weight): the gain is lse - pl, past the join. */
		assert_true(half_var > 0.5 * nelssa_normal_max(SZ) * nelssa_normal_max(SZ));
		assert_true(fabs((lse - pl) - ref_gain(half_var, SZ)) <= 1e-3 * (1.0 + half_var));
		assert_true(pl < lse && mu + ref_gain(half_var, SZ) < lognormal);
		bias += mu + ref_gain(half_var, SZ) - truth;
		err += fabs(mu + ref_gain(half_var, SZ) - truth);
		err_lognormal += fabs(lognormal - truth);
	}
	/*
	 * One cluster's truth moves by several nats with its draw (its
	 * largest member), so the checks are over all 64: the log-normal is
	 * some 14 nats high on average; the bounded gain within 2.5 either
	 * way (-0.5 to 1.5 in 2,000 simulated runs of this draw), and its
	 * error a fraction of the log-normal's.
	 */
	print_message("# mean error: bounded %.2f (|%.2f|), log-normal |%.2f|\n", bias / N_CL,
		      err / N_CL, err_lognormal / N_CL);
	assert_true(fabs(bias / N_CL) < 2.5);
	assert_true(err < 0.5 * err_lognormal);
	free(k);
	free(cen);
	free(m2);
	free(vsum);
}

/* The clusters a selection left: a known answer, hostile ids included. */
static void unselected_known_answer(void **state)
{
	const uint32_t sizes[8] = { 3, 0, 5, 1, 2, 0, 7, 4 };
	const uint32_t ids[6] = { 6, 2, 6, 99, 1, 8 };	/* a repeat, an empty, two past the end */
	const uint32_t want[3] = { 0, 3, 4 }, all[6] = { 0, 2, 3, 4, 6, 7 };
	uint32_t out[8];

	(void)state;
	assert_int_equal(4, nelssa_unselected(ids, 6, sizes, 8, out));
	assert_memory_equal(want, out, sizeof(want));
	assert_int_equal(7, out[3]);
	/* Nothing selected: every non-empty cluster, in order. */
	assert_int_equal(6, nelssa_unselected(ids, 0, sizes, 8, out));
	assert_memory_equal(all, out, sizeof(all));
	assert_int_equal(0, nelssa_unselected(ids, 6, sizes, 0, out));
}

static void merge_with_empty_states(void **state)
{
	float wo[G * D], wl[G], o[G * D], lse[G], eo[G * D] = { 0 }, el[G];
	const float *pop[2] = { eo, eo }, *plp[2] = { el, el };
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	tu_fill_f32(&rng, wo, G * D, 1.0);
	tu_fill_f32(&rng, wl, G, 3.0);
	for (int r = 0; r < G; r++)
		el[r] = -INFINITY;
	/* Devices that selected nothing leave the window state as it was. */
	nelssa_final_merge(o, lse, wo, wl, pop, plp, 2, G, D);
	assert_memory_equal(wo, o, sizeof(o));
	assert_memory_equal(wl, lse, sizeof(lse));
	nelssa_final_merge(o, lse, wo, wl, NULL, NULL, 0, G, D);
	assert_memory_equal(wo, o, sizeof(o));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(scores_match_float64),
		cmocka_unit_test(window_over_tiles),
		cmocka_unit_test(scores_reject_bad_input),
		cmocka_unit_test(topk_equals_full_sort),
		cmocka_unit_test(topk_rejects_nan),
		cmocka_unit_test(ratio_counts),
		cmocka_unit_test(budget_is_a_fitting_prefix),
		cmocka_unit_test(fill_reaches_the_budget),
		cmocka_unit_test(window_matches_float64),
		cmocka_unit_test(window_plus_clusters_equals_union),
		cmocka_unit_test(estimate_exact_for_identical_keys),
		cmocka_unit_test(estimate_spread_weighs_the_members),
		cmocka_unit_test(estimate_spread_bounds_peaked_clusters),
		cmocka_unit_test(spread_gain_shape),
		cmocka_unit_test(unselected_known_answer),
		cmocka_unit_test(merge_with_empty_states),
	};

	tu_init("client_sparse");
	return cmocka_run_group_tests_name("client_sparse", tests, NULL, NULL);
}
