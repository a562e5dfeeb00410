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
 *
 * A session of layout NELSSA_KV_ADJACENT (struct nelssa_shape) keeps each
 * block of NELSSA_KV_QTILE tokens' K rows (or K tile) and V rows (or V
 * tile) side by side: K block b at 2 * b blocks from the store's start, V
 * block b right after it, the table after the last V block.  The devices
 * read that with kv_stride = 2 blocks (DESIGN §3.8, "KV blocks and
 * kv_stride" in userspace-api/nelssa_pnm.rst): a selected cluster's K and
 * V are one run a block instead of two.  Blocks are written whole there (as tiles
 * are), K block then V block, so one write of blocks [b0, b1) is one run;
 * only the rows of a block up to its end, where an append starts inside
 * it, go as K rows and V rows apart (nelssa_kv_fmt_head()).
 */
#ifndef NELSSA_KV_STORE_H
#define NELSSA_KV_STORE_H

#include <stdint.h>

#include <nelssa/attention.h>
#include <nelssa/shape.h>

#define NELSSA_KV_STORE_ALIGN	64u
#define NELSSA_KV_ENTRY_BYTES	8u	/* one table entry: first, count (u32 LE) */

/* A session's KV format: what every size and offset of its arrays follows from. */
struct nelssa_kv_fmt {
	enum nelssa_kv_dtype dtype;
	uint32_t head_dim;
	enum nelssa_kv_layout layout;
};

/* Bytes of tokens [0, @tokens) of one packed K or V array (whole tiles for an 8-bit type). */
static inline uint64_t nelssa_kv_fmt_bytes(const struct nelssa_kv_fmt *f, uint64_t tokens)
{
	return nelssa_kv_bytes(f->dtype, f->head_dim, tokens);
}

/* Bytes of one block: NELSSA_KV_QTILE rows, or one tile. */
static inline uint64_t nelssa_kv_fmt_block(const struct nelssa_kv_fmt *f)
{
	return nelssa_kv_fmt_bytes(f, NELSSA_KV_QTILE);
}

/* Blocks that hold tokens [0, @tokens). */
static inline uint64_t nelssa_kv_blocks(uint64_t tokens)
{
	return (tokens + NELSSA_KV_QTILE - 1) / NELSSA_KV_QTILE;
}

/* The devices' kv_stride for the session's arrays: 0 for packed. */
static inline uint32_t nelssa_kv_fmt_stride(const struct nelssa_kv_fmt *f)
{
	return f->layout == NELSSA_KV_ADJACENT ? (uint32_t)(2 * nelssa_kv_fmt_block(f)) : 0;
}

/*
 * Where token @t's row (an 8-bit type: its tile, @t on a tile boundary)
 * starts, from the start of its K or V array.
 */
static inline uint64_t nelssa_kv_fmt_row_off(const struct nelssa_kv_fmt *f, uint64_t t)
{
	if (f->layout != NELSSA_KV_ADJACENT)
		return nelssa_kv_fmt_bytes(f, t);
	return t / NELSSA_KV_QTILE * nelssa_kv_fmt_stride(f) +
	       nelssa_kv_fmt_bytes(f, t % NELSSA_KV_QTILE);
}

/*
 * Bytes of the run that whole blocks [@first / 16, ...) holding tokens
 * [@first, +@tokens) of an adjacent store take, K and V: what one write
 * of them (NELSSA_KV_PART_KV) carries.  @first is a block boundary.
 */
static inline uint64_t nelssa_kv_fmt_kv_bytes(const struct nelssa_kv_fmt *f, uint64_t tokens)
{
	return nelssa_kv_blocks(tokens) * 2 * nelssa_kv_fmt_block(f);
}

/*
 * Tokens a write of an array may start at: any for a row type; a tile
 * boundary for an 8-bit type, whose writes are whole tiles.  (A write of
 * whole blocks of an adjacent store, NELSSA_KV_PART_KV, starts on a block
 * boundary whatever the type.)
 */
static inline int nelssa_kv_fmt_first_ok(const struct nelssa_kv_fmt *f, uint64_t first)
{
	return !nelssa_kv_is_tiled(f->dtype) || first % NELSSA_KV_QTILE == 0;
}

/*
 * Whether K or V rows [@first, +@n) are one run of their array: always in
 * a packed store; in an adjacent one, rows of one block (of a row type:
 * an 8-bit type's blocks are tiles, written whole).
 */
static inline int nelssa_kv_fmt_one_run(const struct nelssa_kv_fmt *f, uint64_t first, uint64_t n)
{
	return f->layout != NELSSA_KV_ADJACENT ||
	       (n && !nelssa_kv_is_tiled(f->dtype) &&
		first / NELSSA_KV_QTILE == (first + n - 1) / NELSSA_KV_QTILE);
}

/*
 * Tokens of a write of K and V rows from @first that an adjacent store of
 * a row type takes as K and V rows apart before its whole blocks: those
 * up to the block boundary after @first (0 on a boundary, for a packed
 * store, or for an 8-bit type, whose writes start on tiles).
 */
static inline uint64_t nelssa_kv_fmt_head(const struct nelssa_kv_fmt *f, uint64_t first,
					  uint64_t n)
{
	uint64_t head = (NELSSA_KV_QTILE - first % NELSSA_KV_QTILE) % NELSSA_KV_QTILE;

	if (f->layout != NELSSA_KV_ADJACENT || nelssa_kv_is_tiled(f->dtype))
		return 0;
	return head < n ? head : n;
}

/*
 * Bytes one write of K and V rows [@first, +@n) puts into a store: the
 * rows of a packed one; in an adjacent one the rows up to the next block
 * boundary, then whole blocks.
 */
static inline uint64_t nelssa_kv_fmt_write_bytes(const struct nelssa_kv_fmt *f, uint64_t first,
						 uint64_t n)
{
	const uint64_t head = nelssa_kv_fmt_head(f, first, n);

	if (f->layout != NELSSA_KV_ADJACENT)
		return 2 * nelssa_kv_fmt_bytes(f, n);
	return 2 * nelssa_kv_fmt_bytes(f, head) + nelssa_kv_fmt_kv_bytes(f, n - head);
}

/* Bytes of the K and V arrays of a store of @tokens tokens. */
static inline uint64_t nelssa_kv_fmt_arrays(const struct nelssa_kv_fmt *f, uint64_t tokens)
{
	return f->layout == NELSSA_KV_ADJACENT ? nelssa_kv_fmt_kv_bytes(f, tokens) :
						 2 * nelssa_kv_fmt_bytes(f, tokens);
}

/* Bytes of one store of @tokens tokens and @clusters entries. */
static inline uint64_t nelssa_kv_store_bytes(const struct nelssa_kv_fmt *f, uint32_t tokens,
					     uint32_t clusters)
{
	const uint64_t b = nelssa_kv_fmt_arrays(f, tokens) +
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
	*v = base + (f->layout == NELSSA_KV_ADJACENT ? nelssa_kv_fmt_block(f) :
						       nelssa_kv_fmt_bytes(f, tokens));
	*table = base + nelssa_kv_fmt_arrays(f, tokens);
}

#endif /* NELSSA_KV_STORE_H */
