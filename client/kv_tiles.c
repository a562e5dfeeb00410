// SPDX-License-Identifier: MIT
/*
 * Offloading into a session whose devices hold 8-bit KV (fp8 E4M3 or
 * int8 in 16-token tiles with scales, enum nelssa_kv_dtype): the rows
 * the caller gives (bf16, as GPU engines keep them) are gathered into
 * cluster order and quantised here, on the GPU node, a chunk of whole
 * tiles at a time.  Tiles are written whole, so an offload starts at the
 * tile its first new token falls in and quantises that tile's earlier
 * tokens again with it: any split into offloads leaves the store exactly
 * as one offload of everything would.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <nelssa/attention.h>
#include <nelssa/half.h>

#include "remote_internal.h"

uint32_t nc_index_tokens(const struct nelssa_cluster_index *ix)
{
	return ix->n_tokens;
}

uint32_t nc_tile_start(const struct nelssa_cluster_index *ix, uint32_t from)
{
	return ix->table[from].first / NELSSA_KV_QTILE * NELSSA_KV_QTILE;
}

uint32_t nc_write_start(const struct nelssa_cluster_index *ix, uint32_t from,
			enum nelssa_kv_dtype dtype)
{
	if (from == ix->n_clusters)
		return ix->n_tokens;
	return nelssa_kv_is_tiled(dtype) ? nc_tile_start(ix, from) : ix->table[from].first;
}

uint32_t nc_tile_chunk(const struct nelssa_kv_fmt *f)
{
	/* K and V tiles of a chunk in about CHUNK_BYTES; one tile at least. */
	uint64_t tiles = CHUNK_BYTES / (2 * nelssa_kv_fmt_bytes(f, NELSSA_KV_QTILE));

	return (uint32_t)(tiles ? tiles : 1) * NELSSA_KV_QTILE;
}

enum nelssa_kv_dtype nc_offload_dtype(const struct nelssa_shape *sh)
{
	(void)sh;
	return NELSSA_KV_BF16;	/* what GPU engines keep; <nelssa/client.h> says so */
}

int nc_rows_finite(struct nelssa_client *c, const struct nelssa_kv_fmt *f,
		   enum nelssa_kv_dtype src, const struct nelssa_cluster_index *ix, uint32_t first,
		   uint32_t n, const void *rows, uint32_t base)
{
	const size_t d = f->head_dim, row = d * nelssa_kv_elem_bytes(src);
	float x[NELSSA_ATTN_MAX_HEAD_DIM];

	for (uint32_t i = 0; i < n; i++) {
		nelssa_kv_widen(x, (const uint8_t *)rows + (size_t)(ix->perm[first + i] - base) * row,
				d, src);
		for (size_t j = 0; j < d; j++)
			if (!isfinite(x[j]))
				return nc_fail(c, -EINVAL, "KV row %u (position %u) holds a value "
					       "that is not finite: nothing written",
					       ix->perm[first + i], first + i);
	}
	return 0;
}

int nc_quantise_tiles(struct nelssa_client *c, const struct nelssa_kv_fmt *f,
		      enum nelssa_kv_dtype src, const struct nelssa_cluster_index *ix,
		      uint32_t first, uint32_t n, const void *rows, uint32_t base, uint8_t *out)
{
	const size_t d = f->head_dim, row = d * nelssa_kv_elem_bytes(src);
	float *x = malloc(sizeof(*x) * d * n);
	int ret;

	if (!x)
		return nc_fail(c, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		nelssa_kv_widen(x + i * d,
				(const uint8_t *)rows + (size_t)(ix->perm[first + i] - base) * row, d,
				src);
	ret = nelssa_kv_quantize(f->dtype, f->head_dim, x, n, out);
	free(x);
	return ret ? nc_fail(c, ret, "quantising KV rows %u..%u: a value is not finite", first,
			     first + n - 1) : 0;
}
