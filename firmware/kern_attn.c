// SPDX-License-Identifier: MIT
/*
 * SPARSE_ATTN: validation of a batch of work items and the per-item
 * driver that hands each item to the kernel of the selected ISA.
 *
 * Host memory can change while a command runs (the host maps device
 * memory), so every value read from device memory -- work items, selected
 * ids, cluster-table entries -- is copied once and checked where it is
 * used, not only in validation.  A racing host gets garbage numbers, never
 * an access outside the operands.
 */
#include <math.h>
#include <string.h>

#include <nelssa/attention.h>

#include "fw_internal.h"
#include "npnm_rules.h"

/* The numeric core is the scalar path: its types and tiles are the device's. */
_Static_assert((int)NELSSA_KV_BF16 == NPNM_DTYPE_BF16 && (int)NELSSA_KV_FP16 == NPNM_DTYPE_FP16 &&
	       (int)NELSSA_KV_FP8_E4M3 == NPNM_DTYPE_FP8_E4M3 &&
	       (int)NELSSA_KV_INT8 == NPNM_DTYPE_INT8, "KV type values");
_Static_assert(NELSSA_KV_QTILE == NPNM_KV_QTILE && NELSSA_KV_QGROUP == NPNM_KV_QGROUP &&
	       NELSSA_KV_QALIGN == NPNM_KV_QALIGN, "KV tile geometry");
_Static_assert(NELSSA_ATTN_BF16_DOTS == NPNM_ATTN_F_BF16_DOTS, "attention flags");
/* The firmware runs every flag the command rules let through, and no other. */
_Static_assert(NFW_ATTN_FLAGS == NPNM_RULES_ATTN_FLAGS && NELSSA_ATTN_FLAGS == NFW_ATTN_FLAGS,
	       "attention flag masks");

static float attn_scale(const struct npnm_sparse_attn_params *p)
{
	float s;

	if (!p->scale_f32)
		return 1.0f / sqrtf((float)p->head_dim);
	memcpy(&s, &p->scale_f32, sizeof(s));
	return s;
}

/* Copy item @i and resolve it to pointers; everything but the selection. */
static uint32_t resolve_item(const struct nfw_mem *mem, const struct npnm_cmd *desc, uint32_t i,
			     struct npnm_attn_item *it, struct nfw_attn_args *a)
{
	const struct npnm_sparse_attn_params *p = &desc->p.attn;
	const unsigned int kv_align = npnm_kv_align(p->kv_dtype);
	const uint64_t qbytes = (uint64_t)p->group * p->head_dim * sizeof(float);
	const uint64_t kv_len = desc->op[NPNM_ATTN_KV].len;
	const uint64_t in_len = desc->op[NPNM_ATTN_IN].len;
	const uint64_t out_len = desc->op[NPNM_ATTN_OUT].len;
	uint64_t kv_bytes;

	memcpy(it, nfw_ptr(mem, desc, NPNM_ATTN_ITEMS, (uint64_t)i * sizeof(*it)), sizeof(*it));
	if (it->reserved)
		return NPNM_ST_BAD_RESERVED;
	kv_bytes = npnm_kv_span(p->kv_dtype, p->head_dim, p->kv_stride, it->nr_tokens);
	if (!nfw_fits(kv_len, it->k_off, kv_bytes) || !nfw_fits(kv_len, it->v_off, kv_bytes) ||
	    !nfw_fits(kv_len, it->table_off, (uint64_t)it->nr_clusters * sizeof(struct npnm_cluster)) ||
	    !nfw_fits(in_len, it->q_off, qbytes) ||
	    !nfw_fits(in_len, it->sel_off, (uint64_t)it->nr_sel * sizeof(uint32_t)) ||
	    !nfw_fits(out_len, it->o_off, qbytes) ||
	    !nfw_fits(out_len, it->lse_off, (uint64_t)p->group * sizeof(float)))
		return NPNM_ST_BAD_OPERAND;
	if ((desc->op[NPNM_ATTN_KV].offset + it->k_off) % kv_align ||
	    (desc->op[NPNM_ATTN_KV].offset + it->v_off) % kv_align ||
	    (desc->op[NPNM_ATTN_KV].offset + it->table_off) % 4 ||
	    (desc->op[NPNM_ATTN_IN].offset + it->q_off) % 4 ||
	    (desc->op[NPNM_ATTN_IN].offset + it->sel_off) % 4 ||
	    (desc->op[NPNM_ATTN_OUT].offset + it->o_off) % 4 ||
	    (desc->op[NPNM_ATTN_OUT].offset + it->lse_off) % 4)
		return NPNM_ST_BAD_PARAM;
	a->q = (const float *)nfw_ptr(mem, desc, NPNM_ATTN_IN, it->q_off);
	a->k = nfw_ptr(mem, desc, NPNM_ATTN_KV, it->k_off);
	a->v = nfw_ptr(mem, desc, NPNM_ATTN_KV, it->v_off);
	a->row_bytes = (uint64_t)p->head_dim * npnm_kv_elem_bytes(p->kv_dtype);
	a->tile_bytes = npnm_kv_is_tiled(p->kv_dtype) ? npnm_kv_tile_bytes(p->head_dim) : 0;
	a->stride = npnm_kv_stride(p->kv_dtype, p->head_dim, p->kv_stride);
	a->kv_stride = p->kv_stride;
	a->table = (const struct npnm_cluster *)nfw_ptr(mem, desc, NPNM_ATTN_KV, it->table_off);
	a->sel = (const uint32_t *)nfw_ptr(mem, desc, NPNM_ATTN_IN, it->sel_off);
	a->o = (float *)nfw_ptr(mem, desc, NPNM_ATTN_OUT, it->o_off);
	a->lse = (float *)nfw_ptr(mem, desc, NPNM_ATTN_OUT, it->lse_off);
	a->nr_sel = it->nr_sel;
	a->nr_clusters = it->nr_clusters;
	a->nr_tokens = it->nr_tokens;
	a->head_dim = p->head_dim;
	a->group = p->group;
	a->kv_dtype = p->kv_dtype;
	a->flags = p->flags;
	a->scale = attn_scale(p);
	return NPNM_ST_OK;
}

uint32_t nfw_validate_attn(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			   struct nfw_scratch *scratch)
{
	const struct npnm_sparse_attn_params *p = &desc->p.attn;
	float scale;
	uint32_t st;

	if (!npnm_kv_known(p->kv_dtype))
		return NPNM_ST_BAD_PARAM;
	if (p->head_dim == 0 || p->head_dim > NFW_MAX_HEAD_DIM || p->group == 0 ||
	    p->group > NFW_MAX_GROUP)
		return NPNM_ST_BAD_PARAM;
	if (!npnm_kv_stride_valid(p->kv_dtype, p->head_dim, p->kv_stride))
		return NPNM_ST_BAD_PARAM;
	scale = attn_scale(p);
	if (!(scale > 0.0f) || !isfinite(scale))
		return NPNM_ST_BAD_PARAM;
	if (!nfw_fits(desc->op[NPNM_ATTN_ITEMS].len, 0,
		      (uint64_t)p->nr_items * sizeof(struct npnm_attn_item)) ||
	    desc->op[NPNM_ATTN_ITEMS].offset % 8)
		return NPNM_ST_BAD_OPERAND;

	for (uint32_t i = 0; i < p->nr_items; i++) {
		struct npnm_attn_item it;
		struct nfw_attn_args a;
		uint8_t *seen;

		st = resolve_item(mem, desc, i, &it, &a);
		if (st)
			return st;
		/* One bit per cluster catches duplicate ids. */
		seen = nfw_scratch_get(scratch, it.nr_clusters / 8 + 1);
		if (!seen)
			return NPNM_ST_DEVICE_ERROR;
		memset(seen, 0, it.nr_clusters / 8 + 1);
		for (uint32_t s = 0; s < it.nr_sel; s++) {
			uint32_t id = a.sel[s];
			struct npnm_cluster c;

			if (id >= it.nr_clusters || (seen[id / 8] & (1u << (id % 8))))
				return NPNM_ST_BAD_CLUSTER;
			seen[id / 8] |= (uint8_t)(1u << (id % 8));
			c = a.table[id];
			if (c.first > it.nr_tokens || c.count > it.nr_tokens - c.first)
				return NPNM_ST_BAD_CLUSTER;
		}
	}
	return NPNM_ST_OK;
}

/*
 * Tokens [@first, @first + @n) of @a's store into @run: at once when the
 * store is packed, else a feed tile at a time, as one call groups them
 * over a packed store -- so both layouts give the same bits.  A tile
 * within one block (a packed store of its own, NPNM_KV_QTILE tokens) is
 * fed from there; one across two blocks from a packed copy of both in
 * @buf (four blocks' bytes), of the second only the rows it has.
 */
/* feed_tokens() copies two blocks of K and two of V at the largest head dimension. */
_Static_assert(4ull * NPNM_KV_QTILE * NFW_MAX_HEAD_DIM * 2 <= NFW_ATTN_SCRATCH_BYTES,
	       "attention scratch holds four blocks");

static void feed_tokens(struct nelssa_attn_run *run, const struct nfw_attn_args *a,
			uint32_t first, uint32_t n, uint8_t *buf)
{
	const size_t block = npnm_kv_block_bytes(a->kv_dtype, a->head_dim);

	if (!a->kv_stride) {
		nelssa_attn_feed_at(run, a->k, a->v, first, n);
		return;
	}
	while (n) {
		const uint32_t in = first % NPNM_KV_QTILE;
		const uint32_t take = n < NELSSA_ATTN_FEED_TILE ? n : NELSSA_ATTN_FEED_TILE;
		const size_t at = (size_t)(first / NPNM_KV_QTILE) * a->stride;
		const uint8_t *k = a->k + at, *v = a->v + at;

		if (in + take > NPNM_KV_QTILE) {
			const size_t rest = npnm_kv_bytes(a->kv_dtype, a->head_dim,
							  in + take - NPNM_KV_QTILE);

			memcpy(buf, k, block);
			memcpy(buf + block, k + a->stride, rest);
			memcpy(buf + 2 * block, v, block);
			memcpy(buf + 3 * block, v + a->stride, rest);
			k = buf;
			v = buf + 2 * block;
		}
		nelssa_attn_feed_at(run, k, v, in, take);
		first += take;
		n -= take;
	}
}

/* Scalar fallback: the numeric core's streaming kernel, cluster by cluster. */
void nfw_attn_item_scalar(const struct nfw_attn_args *a, float *scratch)
{
	const struct nelssa_attn_geom g = {
		.head_dim = a->head_dim,
		.group = a->group,
		.kv_dtype = (enum nelssa_kv_dtype)a->kv_dtype,	/* same values */
		.scale = a->scale,
		.flags = a->flags,	/* same bits */
	};
	struct nelssa_attn_run run;

	if (nelssa_attn_begin(&run, &g, a->q, a->o))
		return;		/* unreachable: validated */
	for (uint32_t s = 0; s < a->nr_sel; s++) {
		struct npnm_cluster c;

		if (nfw_attn_cluster(a, s, &c))
			continue;
		feed_tokens(&run, a, c.first, c.count, (uint8_t *)scratch);
	}
	nelssa_attn_end(&run, a->lse);
}

uint32_t nfw_exec_attn(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		       uint32_t item_begin, uint32_t item_end, struct nfw_scratch *scratch)
{
	nfw_attn_item_fn fn = nfw_attn_kernel(isa, desc->p.attn.head_dim, desc->p.attn.flags);
	float *buf = nfw_scratch_get(scratch, NFW_ATTN_SCRATCH_BYTES);

	if (!buf)
		return NPNM_ST_DEVICE_ERROR;
	if (item_end > desc->p.attn.nr_items)
		item_end = desc->p.attn.nr_items;
	for (uint32_t i = item_begin; i < item_end; i++) {
		struct npnm_attn_item it;
		struct nfw_attn_args a;

		if (resolve_item(mem, desc, i, &it, &a))
			continue;	/* rewritten by the host since validation */
		fn(&a, buf);
	}
	return NPNM_ST_OK;
}
