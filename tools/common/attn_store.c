// SPDX-License-Identifier: MIT
/* The SPARSE_ATTN benchmarks' synthetic KV stores (attn_store.h). */
#include <linux/nelssa_pnm.h>

#include "npnm_rules.h"

#include "attn_store.h"
#include "tool_util.h"

void tl_attn_store_plan(struct tl_attn_store *s, uint8_t kv_dtype, uint32_t head_dim,
			uint32_t context, uint32_t cluster)
{
	s->context = context;
	s->cluster = cluster;
	s->nclusters = (context + cluster - 1) / cluster;
	s->row = (uint64_t)head_dim * npnm_kv_elem_bytes(kv_dtype);
	s->v_off = s->row * context;
	s->table_off = 2 * s->row * context;
	s->bytes = (s->table_off + (uint64_t)s->nclusters * sizeof(struct npnm_cluster) + 4095) &
		   ~4095ull;
}

void tl_attn_store_fill(const struct tl_attn_store *s, uint8_t *store, uint64_t *rng)
{
	uint64_t *w = (uint64_t *)store;
	struct npnm_cluster *t = (struct npnm_cluster *)(store + s->table_off);

	for (uint64_t i = 0; i < s->table_off / 8; i++)
		w[i] = (tl_next(rng) & 0x807f807f807f807full) | 0x3f003f003f003f00ull;
	for (uint32_t c = 0; c < s->nclusters; c++) {
		uint32_t first = c * s->cluster;

		t[c] = (struct npnm_cluster){ first, first + s->cluster > s->context ?
						     s->context - first : s->cluster };
	}
}

void tl_attn_select(const struct tl_attn_store *s, uint32_t *sel, uint32_t n, uint32_t *perm,
		    uint64_t *rng)
{
	for (uint32_t c = 0; c < s->nclusters; c++)
		perm[c] = c;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i + (uint32_t)(tl_next(rng) % (s->nclusters - i)), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
		sel[i] = perm[i];
	}
}
