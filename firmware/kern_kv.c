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
#include "fw_internal.h"
#include "npnm_kv_apply.h"
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

/* The copy is the mock's too (npnm_kv_apply.h). */
void nfw_exec_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_kv_write_params *p = &desc->p.kv_write;
	struct npnm_kv_write_geom g;

	if (npnm_kv_write_geom(desc, NFW_MAX_HEAD_DIM, &g))
		return;		/* unreachable: validated on the firmware's own copy */
	npnm_kv_write_apply(p, &g, nfw_ptr(mem, desc, NPNM_KV_SRC, 0),
			    nfw_ptr(mem, desc, NPNM_KV_DST, p->k_off),
			    nfw_ptr(mem, desc, NPNM_KV_DST, p->v_off),
			    nfw_ptr(mem, desc, NPNM_KV_DST, p->table_off));
}
