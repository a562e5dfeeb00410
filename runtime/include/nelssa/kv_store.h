/* SPDX-License-Identifier: MIT */
/*
 * Where a request's KV lies in a session's device memory: the one rule the
 * daemon's KV Partitioner stores by and a client writing rows by RMA
 * computes by (Documentation/daemon.rst, "Zero-copy ingest").  Not an API:
 * the header is not installed; both sides are built from this tree and
 * the wire protocol's version pins the rule.
 *
 * A request owns a block of its session's memory on each device (REQ_OK
 * gives its offset there).  The block holds one store per (layer, local
 * head), in that order; a store is the K array of @tokens tokens, the V
 * array, then @clusters table entries (struct npnm_cluster, 8 bytes),
 * rounded up to NELSSA_KV_STORE_ALIGN.  An array is rows of the session's
 * KV type, or for an 8-bit type whole tiles with their scales
 * (nelssa_kv_bytes()).  Head-wise placement puts KV head h on device
 * h mod N as local head h / N.
 */
#ifndef NELSSA_KV_STORE_H
#define NELSSA_KV_STORE_H

#include <stdint.h>

#include <nelssa/attention.h>

#define NELSSA_KV_STORE_ALIGN	64u
#define NELSSA_KV_ENTRY_BYTES	8u	/* one table entry: first, count (u32 LE) */

/* A session's KV format: what every size and offset of its arrays follows from. */
struct nelssa_kv_fmt {
	enum nelssa_kv_dtype dtype;
	uint32_t head_dim;
};

/* Bytes of tokens [0, @tokens) of one K or V array (whole tiles for an 8-bit type). */
static inline uint64_t nelssa_kv_fmt_bytes(const struct nelssa_kv_fmt *f, uint64_t tokens)
{
	return nelssa_kv_bytes(f->dtype, f->head_dim, tokens);
}

/*
 * Tokens a write of an array may start at: any for a row type; a tile
 * boundary for an 8-bit type, whose writes are whole tiles.
 */
static inline int nelssa_kv_fmt_first_ok(const struct nelssa_kv_fmt *f, uint64_t first)
{
	return !nelssa_kv_is_tiled(f->dtype) || first % NELSSA_KV_QTILE == 0;
}

/* Bytes of one store of @tokens tokens and @clusters entries. */
static inline uint64_t nelssa_kv_store_bytes(const struct nelssa_kv_fmt *f, uint32_t tokens,
					     uint32_t clusters)
{
	const uint64_t b = 2 * nelssa_kv_fmt_bytes(f, tokens) +
			   (uint64_t)NELSSA_KV_ENTRY_BYTES * clusters;

	return (b + NELSSA_KV_STORE_ALIGN - 1) & ~(uint64_t)(NELSSA_KV_STORE_ALIGN - 1);
}

/*
 * Offsets, from the start of a request's block, of the K array, V array
 * and table of (@layer, @local_head) in a session whose devices each
 * serve @local_heads heads.
 */
static inline void nelssa_kv_store_offsets(const struct nelssa_kv_fmt *f, uint32_t tokens,
					   uint32_t clusters, uint32_t local_heads,
					   uint32_t layer, uint32_t local_head, uint64_t *k,
					   uint64_t *v, uint64_t *table)
{
	const uint64_t base = ((uint64_t)layer * local_heads + local_head) *
			      nelssa_kv_store_bytes(f, tokens, clusters);

	*k = base;
	*v = base + nelssa_kv_fmt_bytes(f, tokens);
	*table = base + 2 * nelssa_kv_fmt_bytes(f, tokens);
}

#endif /* NELSSA_KV_STORE_H */
