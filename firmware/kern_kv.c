// SPDX-License-Identifier: MIT
/*
 * KV_WRITE: place K/V rows into a cluster-contiguous store and write
 * cluster-table entries.  Prefill ingest and decode-time appends are both
 * KV writes; with NPNM_KV_F_SCATTER every row names its destination token,
 * so rows arriving in sequence order land in cluster order.
 *
 * The 8-bit types are stored in tiles that carry their scales (enum
 * npnm_kv_dtype), so they are written a whole tile at a time: the write
 * starts on a tile boundary, its last tile is written whole, and rows
 * cannot be scattered (the host quantises after clustering, in cluster
 * order).
 */
#include <string.h>

#include "fw_internal.h"
#include "npnm_rules.h"

struct kv_layout {
	uint64_t row;		/* bytes per K or V row; 0 for a tiled type */
	uint64_t rows;		/* bytes of the source's K (or V) rows */
	uint64_t cap;		/* bytes of the destination K (or V) array */
	uint64_t src_k, src_v, src_table, src_index, src_len;
};

static void layout(const struct npnm_kv_write_params *p, struct kv_layout *l)
{
	l->row = (uint64_t)p->head_dim * npnm_kv_elem_bytes(p->kv_dtype);
	l->rows = npnm_kv_bytes(p->kv_dtype, p->head_dim, p->nr_tokens);
	l->cap = npnm_kv_bytes(p->kv_dtype, p->head_dim, p->max_tokens);
	l->src_k = 0;
	l->src_v = l->rows;
	l->src_table = 2 * l->rows;
	l->src_index = l->src_table + (uint64_t)p->nr_clusters * sizeof(struct npnm_cluster);
	l->src_len = l->src_index + ((p->flags & NPNM_KV_F_SCATTER) ? 4ull * p->nr_tokens : 0);
}

uint32_t nfw_validate_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_kv_write_params *p = &desc->p.kv_write;
	uint64_t dst_len = desc->op[NPNM_KV_DST].len;
	const struct npnm_cluster *table;
	struct kv_layout l;

	if (!npnm_kv_known(p->kv_dtype))
		return NPNM_ST_BAD_PARAM;
	if (p->head_dim == 0 || p->head_dim > NFW_MAX_HEAD_DIM)
		return NPNM_ST_BAD_PARAM;
	if (npnm_kv_is_tiled(p->kv_dtype) &&
	    ((p->flags & NPNM_KV_F_SCATTER) || p->first_token % NPNM_KV_QTILE))
		return NPNM_ST_BAD_PARAM;
	layout(p, &l);
	if (!nfw_fits(desc->op[NPNM_KV_SRC].len, 0, l.src_len))
		return NPNM_ST_BAD_OPERAND;
	/* The whole store, at capacity, must lie inside the destination. */
	if (!nfw_fits(dst_len, p->k_off, l.cap) || !nfw_fits(dst_len, p->v_off, l.cap) ||
	    !nfw_fits(dst_len, p->table_off, (uint64_t)p->max_clusters * sizeof(*table)))
		return NPNM_ST_BAD_OPERAND;
	if ((desc->op[NPNM_KV_DST].offset + p->k_off) % npnm_kv_align(p->kv_dtype) ||
	    (desc->op[NPNM_KV_DST].offset + p->v_off) % npnm_kv_align(p->kv_dtype) ||
	    (desc->op[NPNM_KV_DST].offset + p->table_off) % 4 ||
	    desc->op[NPNM_KV_SRC].offset % 4 || l.src_table % 4)
		return NPNM_ST_BAD_PARAM;
	if (p->flags & NPNM_KV_F_SCATTER) {
		const uint32_t *idx = (const uint32_t *)nfw_ptr(mem, desc, NPNM_KV_SRC, l.src_index);

		for (uint32_t i = 0; i < p->nr_tokens; i++)
			if (idx[i] >= p->max_tokens)
				return NPNM_ST_BAD_PARAM;
	} else if ((uint64_t)p->first_token + p->nr_tokens > p->max_tokens) {
		return NPNM_ST_BAD_PARAM;
	}
	if ((uint64_t)p->first_cluster + p->nr_clusters > p->max_clusters)
		return NPNM_ST_BAD_PARAM;
	table = (const struct npnm_cluster *)nfw_ptr(mem, desc, NPNM_KV_SRC, l.src_table);
	for (uint32_t i = 0; i < p->nr_clusters; i++)
		if (table[i].first > p->max_tokens || table[i].count > p->max_tokens - table[i].first)
			return NPNM_ST_BAD_CLUSTER;
	return NPNM_ST_OK;
}

void nfw_exec_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_kv_write_params *p = &desc->p.kv_write;
	const uint8_t *src = nfw_ptr(mem, desc, NPNM_KV_SRC, 0);
	uint8_t *k = nfw_ptr(mem, desc, NPNM_KV_DST, p->k_off);
	uint8_t *v = nfw_ptr(mem, desc, NPNM_KV_DST, p->v_off);
	struct kv_layout l;

	layout(p, &l);
	if (p->flags & NPNM_KV_F_SCATTER) {
		const uint32_t *idx = (const uint32_t *)(src + l.src_index);

		for (uint32_t i = 0; i < p->nr_tokens; i++) {
			/*
			 * Read once and re-checked: the host may rewrite the
			 * source after validation, and must only ever get
			 * garbage for it, never a write outside the store.
			 */
			uint64_t to = __atomic_load_n(&idx[i], __ATOMIC_RELAXED);

			if (to >= p->max_tokens)
				continue;
			memcpy(k + to * l.row, src + l.src_k + i * l.row, l.row);
			memcpy(v + to * l.row, src + l.src_v + i * l.row, l.row);
		}
	} else {
		/* Where first_token starts: a tile boundary for a tiled type. */
		uint64_t at = npnm_kv_bytes(p->kv_dtype, p->head_dim, p->first_token);

		memmove(k + at, src + l.src_k, l.rows);
		memmove(v + at, src + l.src_v, l.rows);
	}
	memmove(nfw_ptr(mem, desc, NPNM_KV_DST, p->table_off) +
		(uint64_t)p->first_cluster * sizeof(struct npnm_cluster),
		src + l.src_table, (uint64_t)p->nr_clusters * sizeof(struct npnm_cluster));
}
