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
 * head), in that order; a store is @tokens K rows, @tokens V rows, then
 * @clusters table entries (struct npnm_cluster, 8 bytes), rounded up to
 * NELSSA_KV_STORE_ALIGN.  Head-wise placement puts KV head h on device
 * h mod N as local head h / N.
 */
#ifndef NELSSA_KV_STORE_H
#define NELSSA_KV_STORE_H

#include <stdint.h>

#define NELSSA_KV_STORE_ALIGN	64u
#define NELSSA_KV_ENTRY_BYTES	8u	/* one table entry: first, count (u32 LE) */

/* Bytes of one store of @tokens rows of @row bytes and @clusters entries. */
static inline uint64_t nelssa_kv_store_bytes(uint64_t row, uint32_t tokens, uint32_t clusters)
{
	const uint64_t b = 2 * row * tokens + (uint64_t)NELSSA_KV_ENTRY_BYTES * clusters;

	return (b + NELSSA_KV_STORE_ALIGN - 1) & ~(uint64_t)(NELSSA_KV_STORE_ALIGN - 1);
}

/*
 * Offsets, from the start of a request's block, of the K rows, V rows and
 * table of (@layer, @local_head) in a session whose devices each serve
 * @local_heads heads.
 */
static inline void nelssa_kv_store_offsets(uint64_t row, uint32_t tokens, uint32_t clusters,
					   uint32_t local_heads, uint32_t layer,
					   uint32_t local_head, uint64_t *k, uint64_t *v,
					   uint64_t *table)
{
	const uint64_t base = ((uint64_t)layer * local_heads + local_head) *
			      nelssa_kv_store_bytes(row, tokens, clusters);

	*k = base;
	*v = base + row * tokens;
	*table = base + 2 * row * tokens;
}

#endif /* NELSSA_KV_STORE_H */
