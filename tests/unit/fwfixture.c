// SPDX-License-Identifier: MIT
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/half.h>

#include "fwfixture.h"

#define IN_SPAN (1ull << 22)
#define OUT_SPAN (1ull << 20)

/* A test asked for more than its fixture memory holds: a bug in the test. */
static void too_small(const char *what)
{
	fprintf(stderr, "fwfixture: device memory too small for the %s\n", what);
	abort();
}

void fx_init(struct fx *f, uint64_t mem_bytes, uint32_t d, uint32_t g, uint8_t dtype)
{
	memset(f, 0, sizeof(*f));
	f->mem.base = tu_alloc(mem_bytes);
	f->mem.size = mem_bytes;
	f->d = d;
	f->g = g;
	f->dtype = dtype;
	f->scale = (float)(1.0 / sqrt((double)d));
}

void fx_free(struct fx *f)
{
	free(f->mem.base);
	nfw_scratch_free(&f->scratch);
}

static uint64_t in_off(const struct fx *f)
{
	return f->mem.size - IN_SPAN - OUT_SPAN;
}

static uint64_t out_off(const struct fx *f)
{
	return f->mem.size - OUT_SPAN;
}

void fx_add_item(struct fx *f, struct tu_rng *rng, uint32_t n_tokens, uint32_t max_cluster,
		 uint32_t sel_permille)
{
	struct fx_item *it = &f->it[f->nr_items++];
	enum nelssa_kv_dtype dt = (enum nelssa_kv_dtype)f->dtype;
	uint8_t *kv = f->mem.base + FX_KV_OFF, *in = f->mem.base + in_off(f);
	const uint64_t bytes = (nelssa_kv_bytes(dt, f->d, n_tokens) + 63) & ~63ull;
	const uint64_t packed = nelssa_kv_bytes(dt, f->d, n_tokens);
	const uint64_t block = nelssa_kv_bytes(dt, f->d, NPNM_KV_QTILE);
	const uint64_t nblk = (n_tokens + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE;
	struct npnm_cluster *table;
	uint32_t *sel, *ids;
	uint8_t *pk, *pv;

	it->n_tokens = n_tokens;
	it->k = f->kv_used;
	if (f->kv_stride) {
		it->v = it->k + f->kv_stride / 2 / 64 * 64;
		it->table = it->k + nblk * f->kv_stride;
	} else {
		it->v = it->k + bytes;
		it->table = it->v + bytes;
	}
	table = (struct npnm_cluster *)(kv + it->table);
	for (uint32_t t = 0; t < n_tokens;) {
		uint32_t c = 1 + tu_below(rng, max_cluster);

		if (c > n_tokens - t)
			c = n_tokens - t;
		table[it->n_clusters++] = (struct npnm_cluster){ t, c };
		t += c;
	}
	f->kv_used = (it->table + it->n_clusters * sizeof(*table) + 63) & ~63ull;
	if (FX_KV_OFF + f->kv_used > in_off(f))
		too_small("KV stores");
	pk = f->kv_stride ? tu_alloc(packed + 1) : kv + it->k;
	pv = f->kv_stride ? tu_alloc(packed + 1) : kv + it->v;
	if (nelssa_kv_is_tiled(dt)) {
		float *x = tu_alloc(sizeof(*x) * n_tokens * f->d);

		tu_fill_f32(rng, x, (size_t)n_tokens * f->d, 2.0);
		if (nelssa_kv_quantize(dt, f->d, x, n_tokens, pk))
			abort();	/* finite input, a tiled type: cannot fail */
		tu_fill_f32(rng, x, (size_t)n_tokens * f->d, 1.0);
		if (nelssa_kv_quantize(dt, f->d, x, n_tokens, pv))
			abort();
		free(x);
	} else {
		tu_fill_kv(rng, (uint16_t *)pk, (size_t)n_tokens * f->d, 2.0, dt);
		tu_fill_kv(rng, (uint16_t *)pv, (size_t)n_tokens * f->d, 1.0, dt);
	}
	if (f->kv_stride) {
		/* Block b of K at k + b * stride, of V at v + b * stride (the uapi's words). */
		memset(kv + it->k, 0xff, it->table - it->k);
		for (uint64_t b = 0; b < nblk; b++) {
			uint64_t n = packed - b * block < block ? packed - b * block : block;

			memcpy(kv + it->k + b * f->kv_stride, pk + b * block, n);
			memcpy(kv + it->v + b * f->kv_stride, pv + b * block, n);
		}
		free(pk);
		free(pv);
	}

	it->q = f->in_used;
	tu_fill_f32(rng, (float *)(in + it->q), (size_t)f->g * f->d, 2.0);
	it->sel = it->q + (uint64_t)f->g * f->d * 4;
	/* Random distinct ids: a partial shuffle of 0..n_clusters-1. */
	ids = tu_alloc(sizeof(*ids) * (it->n_clusters + 1));
	for (uint32_t i = 0; i < it->n_clusters; i++)
		ids[i] = i;
	it->n_sel = (uint32_t)((uint64_t)it->n_clusters * sel_permille / 1000);
	sel = (uint32_t *)(in + it->sel);
	for (uint32_t i = 0; i < it->n_sel; i++) {
		uint32_t j = i + tu_below(rng, it->n_clusters - i), t = ids[i];

		ids[i] = ids[j];
		ids[j] = t;
		sel[i] = ids[i];
	}
	free(ids);
	f->in_used = (it->sel + it->n_sel * 4ull + 63) & ~63ull;
	if (f->in_used > IN_SPAN)
		too_small("queries and selections");

	it->o = f->out_used;
	it->lse = it->o + (uint64_t)f->g * f->d * 4;
	f->out_used = (it->lse + f->g * 4ull + 63) & ~63ull;
	if (f->out_used > OUT_SPAN)
		too_small("outputs");
}

void fx_finish(struct fx *f)
{
	struct npnm_attn_item *items = (struct npnm_attn_item *)(f->mem.base + FX_ITEMS_OFF);

	for (uint32_t i = 0; i < f->nr_items; i++) {
		const struct fx_item *it = &f->it[i];

		items[i] = (struct npnm_attn_item){
			.k_off = it->k, .v_off = it->v, .table_off = it->table,
			.q_off = it->q, .sel_off = it->sel, .o_off = it->o, .lse_off = it->lse,
			.nr_tokens = it->n_tokens, .nr_clusters = it->n_clusters, .nr_sel = it->n_sel,
		};
	}
	memset(&f->cmd, 0, sizeof(f->cmd));
	f->cmd.opcode = NPNM_OP_SPARSE_ATTN;
	f->cmd.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0, FX_ITEMS_OFF,
		f->nr_items * sizeof(*items) };
	f->cmd.op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, FX_KV_OFF, f->kv_used };
	f->cmd.op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, in_off(f), f->in_used };
	f->cmd.op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, out_off(f), f->out_used };
	f->cmd.p.attn = (struct npnm_sparse_attn_params){
		.nr_items = f->nr_items, .head_dim = (uint16_t)f->d, .group = (uint8_t)f->g,
		.kv_dtype = f->dtype, .scale_f32 = nelssa_f32_bits(f->scale), .flags = f->flags,
		.kv_stride = f->kv_stride,
	};
}

int fx_check(const struct fx *f, uint32_t i, const char *what)
{
	const struct fx_item *it = &f->it[i];
	const uint8_t *kv = f->mem.base + FX_KV_OFF, *in = f->mem.base + in_off(f);
	const uint8_t *out = f->mem.base + out_off(f);
	const struct npnm_cluster *table = (const struct npnm_cluster *)(kv + it->table);
	const uint32_t *sel = (const uint32_t *)(in + it->sel);
	struct nelssa_attn_geom g = { f->d, f->g, (enum nelssa_kv_dtype)f->dtype, f->scale,
				      f->flags };
	const uint16_t *k = (const uint16_t *)(kv + it->k), *v = (const uint16_t *)(kv + it->v);
	uint32_t *tok = tu_alloc(sizeof(uint32_t) * (it->n_tokens + 1));
	float *kf = NULL, *vf = NULL;
	uint8_t *pk = NULL, *pv = NULL;
	size_t n = 0;
	int ret;

	if (f->kv_stride) {
		/* Back to the packed layout, block by block, as the uapi states it. */
		const uint64_t packed = nelssa_kv_bytes(g.kv_dtype, f->d, it->n_tokens);
		const uint64_t block = nelssa_kv_bytes(g.kv_dtype, f->d, NPNM_KV_QTILE);

		pk = tu_alloc(packed + 1);
		pv = tu_alloc(packed + 1);
		for (uint64_t b = 0; b * block < packed; b++) {
			uint64_t len = packed - b * block < block ? packed - b * block : block;

			memcpy(pk + b * block, kv + it->k + b * f->kv_stride, len);
			memcpy(pv + b * block, kv + it->v + b * f->kv_stride, len);
		}
		k = (const uint16_t *)(const void *)pk;
		v = (const uint16_t *)(const void *)pv;
	}
	if (nelssa_kv_is_tiled(g.kv_dtype)) {
		/* Decoded by the test, from the layout the uapi header states. */
		kf = tu_alloc(sizeof(*kf) * it->n_tokens * f->d);
		vf = tu_alloc(sizeof(*vf) * it->n_tokens * f->d);
		tu_decode_tiled((const uint8_t *)k, it->n_tokens, f->d, g.kv_dtype, kf);
		tu_decode_tiled((const uint8_t *)v, it->n_tokens, f->d, g.kv_dtype, vf);
		k = (const uint16_t *)(const void *)kf;
		v = (const uint16_t *)(const void *)vf;
		g.kv_dtype = TU_KV_F32;
	}

	for (uint32_t s = 0; s < it->n_sel; s++)
		for (uint32_t j = 0; j < table[sel[s]].count; j++)
			tok[n++] = table[sel[s]].first + j;
	ret = tu_check_attn(&g, (const float *)(in + it->q), k, v, tok, n,
			    (const float *)(out + it->o), (const float *)(out + it->lse), what);
	free(tok);
	free(kf);
	free(vf);
	free(pk);
	free(pv);
	return ret;
}
