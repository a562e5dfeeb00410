// SPDX-License-Identifier: MIT
/*
 * Attention over selected clusters of a cluster-contiguous KV store, the
 * reference for the firmware's SPARSE_ATTN: checked against float64
 * attention over the gathered token set, plus every validation rule.
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
#include <nelssa/lse.h>

#include "testutil.h"

struct store {
	struct nelssa_attn_geom g;
	uint32_t n_tokens, n_clusters;
	uint16_t *k, *v;
	struct nelssa_cluster *table;
	float *q, *o, *lse;
};

/* Clusters of 1..2*avg tokens tile the store back to back. */
static void store_make(struct store *s, struct tu_rng *rng, uint32_t d, uint32_t group,
		       uint32_t n_tokens, uint32_t avg, enum nelssa_kv_dtype dtype)
{
	uint32_t t = 0;

	s->g = (struct nelssa_attn_geom){ d, group, dtype, (float)(1.0 / sqrt((double)d)), 0 };
	s->n_tokens = n_tokens;
	s->k = tu_alloc(sizeof(uint16_t) * d * n_tokens);
	s->v = tu_alloc(sizeof(uint16_t) * d * n_tokens);
	s->q = tu_alloc(sizeof(float) * d * group);
	s->o = tu_alloc(sizeof(float) * d * group);
	s->lse = tu_alloc(sizeof(float) * group);
	s->table = tu_alloc(sizeof(*s->table) * (n_tokens + 4));
	s->n_clusters = 0;
	while (t < n_tokens) {
		uint32_t c = 1 + tu_below(rng, 2 * avg);

		if (c > n_tokens - t)
			c = n_tokens - t;
		s->table[s->n_clusters++] = (struct nelssa_cluster){ t, c };
		t += c;
	}
	tu_fill_f32(rng, s->q, (size_t)d * group, 2.0);
	tu_fill_kv(rng, s->k, (size_t)d * n_tokens, 2.0, dtype);
	tu_fill_kv(rng, s->v, (size_t)d * n_tokens, 1.0, dtype);
}

static void store_free(struct store *s)
{
	free(s->k);
	free(s->v);
	free(s->q);
	free(s->o);
	free(s->lse);
	free(s->table);
}

/* @n distinct random cluster ids, in random order. */
static uint32_t *pick(struct tu_rng *rng, uint32_t n_clusters, uint32_t n)
{
	uint32_t *all = tu_alloc(sizeof(uint32_t) * (n_clusters + 1));

	for (uint32_t i = 0; i < n_clusters; i++)
		all[i] = i;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i + tu_below(rng, n_clusters - i), t = all[i];

		all[i] = all[j];
		all[j] = t;
	}
	return all;
}

/* The token list the selection names, for the float64 reference. */
static uint32_t *gather(const struct store *s, const uint32_t *sel, uint32_t n_sel, size_t *n_tok)
{
	uint32_t *tok = tu_alloc(sizeof(uint32_t) * (s->n_tokens + 1));

	*n_tok = 0;
	for (uint32_t i = 0; i < n_sel; i++)
		for (uint32_t j = 0; j < s->table[sel[i]].count; j++)
			tok[(*n_tok)++] = s->table[sel[i]].first + j;
	return tok;
}

static void check_selection(struct store *s, const uint32_t *sel, uint32_t n_sel, const char *what)
{
	size_t n_tok;
	uint32_t *tok = gather(s, sel, n_sel, &n_tok);

	assert_int_equal(nelssa_attn_clusters(&s->g, s->q, s->k, s->v, s->n_tokens, s->table,
					      s->n_clusters, sel, n_sel, s->o, s->lse), 0);
	assert_int_equal(tu_check_attn(&s->g, s->q, s->k, s->v, tok, n_tok, s->o, s->lse, what), 0);
	free(tok);
}

struct shape {
	uint32_t head_dim, group;
	enum nelssa_kv_dtype dtype;
};

static void selected_vs_reference(void **state)
{
	const struct shape *sh = *state;
	struct store s;
	struct tu_rng rng;

	tu_rng_for(&rng, "selected_vs_reference", sh->head_dim * 100u + sh->group + sh->dtype);
	store_make(&s, &rng, sh->head_dim, sh->group, 6000, 16, sh->dtype);
	for (int rep = 0; rep < 4; rep++) {
		uint32_t n_sel = 1 + tu_below(&rng, s.n_clusters / 8);
		uint32_t *sel = pick(&rng, s.n_clusters, n_sel);

		check_selection(&s, sel, n_sel, "selected");
		free(sel);
	}
	store_free(&s);
}

/* A RetroInfer-sized case: 100k tokens, ~6k clusters, 4% selected. */
static void large_store_4pct(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t *sel;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 128, 4, 100000, 16, NELSSA_KV_BF16);
	sel = pick(&rng, s.n_clusters, s.n_clusters / 25);
	check_selection(&s, sel, s.n_clusters / 25, "100k 4%");
	free(sel);
	store_free(&s);
}

static void empty_selection(void **state)
{
	struct store s;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 64, 4, 500, 16, NELSSA_KV_BF16);
	for (uint32_t i = 0; i < 64 * 4; i++)
		s.o[i] = 5.0f;
	assert_int_equal(nelssa_attn_clusters(&s.g, s.q, s.k, s.v, s.n_tokens, s.table, s.n_clusters,
					      NULL, 0, s.o, s.lse), 0);
	for (uint32_t r = 0; r < 4; r++)
		assert_true(s.lse[r] == -INFINITY);
	for (uint32_t i = 0; i < 64 * 4; i++)
		assert_true(s.o[i] == 0.0f);
	store_free(&s);
}

/* Selecting every cluster is dense attention over the whole store. */
static void all_clusters_is_dense(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t *sel;
	float *od, *ld;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 128, 8, 2500, 16, NELSSA_KV_BF16);
	sel = pick(&rng, s.n_clusters, s.n_clusters);
	check_selection(&s, sel, s.n_clusters, "all");
	od = tu_alloc(sizeof(float) * 128 * 8);
	ld = tu_alloc(sizeof(float) * 8);
	assert_int_equal(nelssa_attn_dense(&s.g, s.q, s.k, s.v, s.n_tokens, od, ld), 0);
	assert_int_equal(tu_check_attn(&s.g, s.q, s.k, s.v, NULL, s.n_tokens, od, ld, "dense"), 0);
	free(od);
	free(ld);
	free(sel);
	store_free(&s);
}

static void zero_count_clusters(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t sel[3];

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 64, 2, 300, 8, NELSSA_KV_BF16);
	/* Three empty clusters at the end of the table: selecting only them is empty. */
	s.table[s.n_clusters] = (struct nelssa_cluster){ 10, 0 };
	s.table[s.n_clusters + 1] = (struct nelssa_cluster){ 300, 0 };
	s.n_clusters += 2;
	sel[0] = s.n_clusters - 1;
	sel[1] = s.n_clusters - 2;
	assert_int_equal(nelssa_attn_clusters(&s.g, s.q, s.k, s.v, s.n_tokens, s.table,
					      s.n_clusters, sel, 2, s.o, s.lse), 0);
	assert_true(s.lse[0] == -INFINITY && s.lse[1] == -INFINITY);
	/* Mixed with a real cluster, they contribute nothing. */
	sel[2] = 0;
	check_selection(&s, sel, 3, "zero-count mix");
	store_free(&s);
}

static void expect_einval(struct store *s, const uint32_t *sel, uint32_t n_sel)
{
	for (uint32_t i = 0; i < s->g.head_dim * s->g.group; i++)
		s->o[i] = 7.0f;
	for (uint32_t r = 0; r < s->g.group; r++)
		s->lse[r] = 7.0f;
	assert_int_equal(nelssa_attn_clusters(&s->g, s->q, s->k, s->v, s->n_tokens, s->table,
					      s->n_clusters, sel, n_sel, s->o, s->lse), -EINVAL);
	/* Nothing written on error. */
	for (uint32_t i = 0; i < s->g.head_dim * s->g.group; i++)
		assert_true(s->o[i] == 7.0f);
	for (uint32_t r = 0; r < s->g.group; r++)
		assert_true(s->lse[r] == 7.0f);
}

static void rejects_bad_ids(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t sel[3];

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 64, 4, 400, 16, NELSSA_KV_BF16);
	sel[0] = 0;
	sel[1] = s.n_clusters;			/* one past the table */
	expect_einval(&s, sel, 2);
	sel[1] = UINT32_MAX;
	expect_einval(&s, sel, 2);
	sel[1] = 1;
	sel[2] = 0;				/* duplicate */
	expect_einval(&s, sel, 3);
	store_free(&s);
}

static void rejects_bad_table(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t sel[1] = { 0 };

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 64, 4, 400, 16, NELSSA_KV_BF16);
	s.table[0] = (struct nelssa_cluster){ 390, 11 };	/* runs past n_tokens */
	expect_einval(&s, sel, 1);
	s.table[0] = (struct nelssa_cluster){ 401, 0 };	/* starts past the end */
	expect_einval(&s, sel, 1);
	s.table[0] = (struct nelssa_cluster){ UINT32_MAX, 2 };	/* first + count wraps */
	expect_einval(&s, sel, 1);
	s.table[0] = (struct nelssa_cluster){ 390, 10 };	/* ends exactly at the end: fine */
	check_selection(&s, sel, 1, "edge");
	store_free(&s);
}

static void rejects_bad_geom(void **state)
{
	struct store s;
	struct tu_rng rng;
	uint32_t sel[1] = { 0 };

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 64, 4, 100, 16, NELSSA_KV_BF16);
	s.g.kv_dtype = (enum nelssa_kv_dtype)7;
	expect_einval(&s, sel, 1);
	s.g.kv_dtype = NELSSA_KV_BF16;
	s.g.scale = -0.5f;
	expect_einval(&s, sel, 1);
	store_free(&s);
}

/*
 * The selection split across "devices" (disjoint subsets), each computed
 * separately and merged with the LSE merge, equals the whole selection.
 */
static void split_selection_merges(void **state)
{
	enum { DEV = 5 };
	struct store s;
	struct tu_rng rng;
	uint32_t *sel, n_sel, start = 0;
	float *o[DEV], *l[DEV], *out, *lout;
	const float *os[DEV], *ls[DEV];
	size_t n_tok;
	uint32_t *tok;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	store_make(&s, &rng, 128, 4, 8000, 16, NELSSA_KV_BF16);
	n_sel = s.n_clusters / 10;
	sel = pick(&rng, s.n_clusters, n_sel);
	for (int dv = 0; dv < DEV; dv++) {
		uint32_t end = dv == DEV - 1 ? n_sel : start + tu_below(&rng, n_sel - start + 1);

		o[dv] = tu_alloc(sizeof(float) * 128 * 4);
		l[dv] = tu_alloc(sizeof(float) * 4);
		assert_int_equal(nelssa_attn_clusters(&s.g, s.q, s.k, s.v, s.n_tokens, s.table,
						      s.n_clusters, sel + start, end - start, o[dv],
						      l[dv]), 0);
		os[dv] = o[dv];
		ls[dv] = l[dv];
		start = end;
	}
	out = tu_alloc(sizeof(float) * 128 * 4);
	lout = tu_alloc(sizeof(float) * 4);
	nelssa_lse_merge_n(out, lout, os, ls, DEV, 4, 128);
	tok = gather(&s, sel, n_sel, &n_tok);
	assert_int_equal(tu_check_attn(&s.g, s.q, s.k, s.v, tok, n_tok, out, lout, "split"), 0);
	for (int dv = 0; dv < DEV; dv++) {
		free(o[dv]);
		free(l[dv]);
	}
	free(out);
	free(lout);
	free(tok);
	free(sel);
	store_free(&s);
}

int main(void)
{
	static const struct shape shapes[] = {
		{ 64, 1, NELSSA_KV_BF16 },
		{ 128, 4, NELSSA_KV_BF16 },
		{ 256, 8, NELSSA_KV_BF16 },
		{ 128, 8, NELSSA_KV_FP16 },
	};
	const struct CMUnitTest tests[] = {
#define SHAPE(i, name) { name, selected_vs_reference, NULL, NULL, (void *)&shapes[i] }
		SHAPE(0, "selected_d64_g1"),
		SHAPE(1, "selected_d128_g4"),
		SHAPE(2, "selected_d256_g8"),
		SHAPE(3, "selected_d128_g8_fp16"),
#undef SHAPE
		cmocka_unit_test(large_store_4pct),
		cmocka_unit_test(empty_selection),
		cmocka_unit_test(all_clusters_is_dense),
		cmocka_unit_test(zero_count_clusters),
		cmocka_unit_test(rejects_bad_ids),
		cmocka_unit_test(rejects_bad_table),
		cmocka_unit_test(rejects_bad_geom),
		cmocka_unit_test(split_selection_merges),
	};

	tu_init("clusters");
	return cmocka_run_group_tests_name("clusters", tests, NULL, NULL);
}
