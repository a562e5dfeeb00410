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
 * order).  Blocks of NPNM_KV_QTILE tokens sit kv_stride apart (enum
 * npnm_kv_dtype); the checks are the shared ones of npnm_rules.h.
 */
#include <string.h>

#include "fw_internal.h"
#include "npnm_rules.h"

uint32_t nfw_validate_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_kv_write_params *p = &desc->p.kv_write;
	const struct npnm_cluster *table;
	struct npnm_kv_write_geom g;
	uint32_t st = npnm_kv_write_geom(desc, NFW_MAX_HEAD_DIM, &g);

	if (st)
		return st;
	if (p->flags & NPNM_KV_F_SCATTER) {
		const uint32_t *idx = (const uint32_t *)nfw_ptr(mem, desc, NPNM_KV_SRC, g.src_index);

		for (uint32_t i = 0; i < p->nr_tokens; i++)
			if (idx[i] >= p->max_tokens)
				return NPNM_ST_BAD_PARAM;
	}
	table = (const struct npnm_cluster *)nfw_ptr(mem, desc, NPNM_KV_SRC, g.src_table);
	for (uint32_t i = 0; i < p->nr_clusters; i++)
		if (table[i].first > p->max_tokens || table[i].count > p->max_tokens - table[i].first)
			return NPNM_ST_BAD_CLUSTER;
	return NPNM_ST_OK;
}

/*
 * @n rows (whole tiles of a tiled type) from @src to tokens @t on of the
 * array @arr, one piece per block: a block's rows are contiguous whatever
 * the stride.
 */
static void put_rows(const struct npnm_kv_write_params *p, uint8_t *arr, const uint8_t *src,
		     uint64_t t, uint64_t n)
{
	while (n) {
		uint64_t take = NPNM_KV_QTILE - t % NPNM_KV_QTILE;
		uint64_t bytes;

		if (take > n)
			take = n;
		bytes = npnm_kv_bytes(p->kv_dtype, p->head_dim, take);
		memmove(arr + npnm_kv_row_offset(p->kv_dtype, p->head_dim, p->kv_stride, t), src,
			bytes);
		src += bytes;
		t += take;
		n -= take;
	}
}

void nfw_exec_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_kv_write_params *p = &desc->p.kv_write;
	const uint8_t *src = nfw_ptr(mem, desc, NPNM_KV_SRC, 0);
	uint8_t *k = nfw_ptr(mem, desc, NPNM_KV_DST, p->k_off);
	uint8_t *v = nfw_ptr(mem, desc, NPNM_KV_DST, p->v_off);
	struct npnm_kv_write_geom g;

	if (npnm_kv_write_geom(desc, NFW_MAX_HEAD_DIM, &g))
		return;		/* unreachable: validated on the firmware's own copy */
	if (p->flags & NPNM_KV_F_SCATTER) {
		const uint32_t *idx = (const uint32_t *)(src + g.src_index);
		const uint64_t row = (uint64_t)p->head_dim * npnm_kv_elem_bytes(p->kv_dtype);

		for (uint32_t i = 0; i < p->nr_tokens; i++) {
			/*
			 * Read once and re-checked: the host may rewrite the
			 * source after validation, and must only ever get
			 * garbage for it, never a write outside the store.
			 */
			uint64_t to = __atomic_load_n(&idx[i], __ATOMIC_RELAXED);
			uint64_t at;

			if (to >= p->max_tokens)
				continue;
			/* The operands may overlap (the host's choice): memmove. */
			at = npnm_kv_row_offset(p->kv_dtype, p->head_dim, p->kv_stride, to);
			memmove(k + at, src + i * row, row);
			memmove(v + at, src + g.rows + i * row, row);
		}
	} else {
		/* A tiled type starts on a tile boundary: its pieces are whole tiles. */
		put_rows(p, k, src, p->first_token, p->nr_tokens);
		put_rows(p, v, src + g.rows, p->first_token, p->nr_tokens);
	}
	memmove(nfw_ptr(mem, desc, NPNM_KV_DST, p->table_off) +
		(uint64_t)p->first_cluster * sizeof(struct npnm_cluster),
		src + g.src_table, (uint64_t)p->nr_clusters * sizeof(struct npnm_cluster));
}
