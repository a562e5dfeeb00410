/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/**
 * DOC: KV_WRITE's copy
 *
 * The bytes a KV_WRITE moves once npnm_kv_write_geom() has passed its
 * parameters: its K and V rows into their stores (in order from
 * @first_token, or each to its own token with NPNM_KV_F_SCATTER) and its
 * table entries from @first_cluster.  The firmware (on the card, in
 * nelssa-devemu and inside the sim backend) and the in-kernel mock run
 * this one text, so the two devices lay a store out alike byte for byte.
 *
 * The host owns the source and may rewrite it while the command runs: a
 * scatter index is read once and checked against @max_tokens again (a bad
 * one is skipped: the host gets garbage for it, never a write outside the
 * store), and the operands may overlap, so every copy is a memmove().
 */
#ifndef _NPNM_KV_APPLY_H
#define _NPNM_KV_APPLY_H

#ifdef __KERNEL__
#include <linux/compiler.h>
#include <linux/string.h>
#define npnm_kv_load_index(p) READ_ONCE(*(p))
#else
#include <string.h>
#define npnm_kv_load_index(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#endif

#include "npnm_rules.h"

/*
 * @n rows from @src into the store @arr from token @t.  A block holds 16
 * tokens and blocks lie a stride apart, so the rows go a block's piece at
 * a time; a tiled type starts on a tile boundary, so its pieces are whole
 * tiles.
 */
static inline void npnm_kv_put_rows(const struct npnm_kv_write_params *p, __u8 *arr,
				    const __u8 *src, __u64 t, __u64 n)
{
	while (n) {
		__u64 take = NPNM_KV_QTILE - t % NPNM_KV_QTILE;
		__u64 bytes;

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

/**
 * npnm_kv_write_apply() - move a checked KV_WRITE's bytes
 * @p: Its parameters.
 * @g: Its source's layout, from npnm_kv_write_geom().
 * @src: The source operand.
 * @k: The K store (destination + @k_off).
 * @v: The V store (destination + @v_off).
 * @table: The cluster table (destination + @table_off).
 */
static inline void npnm_kv_write_apply(const struct npnm_kv_write_params *p,
				       const struct npnm_kv_write_geom *g, const __u8 *src,
				       __u8 *k, __u8 *v, __u8 *table)
{
	if (p->flags & NPNM_KV_F_SCATTER) {
		const __u32 *idx = (const __u32 *)(src + g->src_index);
		const __u64 row = (__u64)p->head_dim * npnm_kv_elem_bytes(p->kv_dtype);
		__u32 i;

		for (i = 0; i < p->nr_tokens; i++) {
			__u64 to = npnm_kv_load_index(&idx[i]), at;

			if (to >= p->max_tokens)
				continue;
			at = npnm_kv_row_offset(p->kv_dtype, p->head_dim, p->kv_stride, to);
			memmove(k + at, src + i * row, row);
			memmove(v + at, src + g->rows + i * row, row);
		}
	} else {
		npnm_kv_put_rows(p, k, src, p->first_token, p->nr_tokens);
		npnm_kv_put_rows(p, v, src + g->rows, p->first_token, p->nr_tokens);
	}
	memmove(table + (__u64)p->first_cluster * sizeof(struct npnm_cluster), src + g->src_table,
		(__u64)p->nr_clusters * sizeof(struct npnm_cluster));
}

#endif /* _NPNM_KV_APPLY_H */
