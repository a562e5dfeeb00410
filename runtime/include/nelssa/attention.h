/* SPDX-License-Identifier: MIT */
/*
 * Reference attention kernels with log-sum-exp (LSE) outputs.
 *
 * For every query row q of a GQA group, over a set of tokens T:
 *
 *	o   = sum_t softmax_t(scale * q.k_t) v_t
 *	lse = log sum_t exp(scale * q.k_t)          (natural log, scale folded in)
 *
 * K and V rows are bf16 or fp16 -- or fp8 E4M3 / int8 in tiles with scales
 * (NELSSA_KV_FP8_E4M3, NELSSA_KV_INT8) -- queries and outputs fp32, and everything is
 * accumulated in fp32 with an online (streaming) softmax, so a KV block of
 * any length is read once.  An empty token set gives o = 0, lse = -inf.
 * Documentation/numeric-conventions.rst states the conventions; these are
 * the kernels the firmware's fast paths are tested against.
 */
#ifndef NELSSA_ATTENTION_H
#define NELSSA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * enum nelssa_kv_dtype - element type of K and V rows.
 * @NELSSA_KV_BF16: bfloat16.
 * @NELSSA_KV_FP16: IEEE binary16.
 * @NELSSA_KV_FP8_E4M3: OCP FP8 E4M3 codes with binary32 scales, in tiles.
 * @NELSSA_KV_INT8: int8 codes with binary32 scales, in tiles.
 *
 * Same values as NPNM_DTYPE_* in <linux/nelssa_pnm.h>; 0 is invalid.  The
 * 16-bit types are arrays of rows; the 8-bit types are arrays of tiles of
 * NELSSA_KV_QTILE tokens, each tile NELSSA_KV_QTILE rows of head_dim codes,
 * a binary32 scale per NELSSA_KV_QGROUP channels, zero padding to a
 * multiple of NELSSA_KV_QALIGN bytes (enum npnm_kv_dtype: the device's
 * layout).  An element is the binary32 product scale * code.  Arrays of
 * either kind are called KV stores below; nelssa_kv_bytes() sizes them.
 */
enum nelssa_kv_dtype {
	NELSSA_KV_BF16 = 1,
	NELSSA_KV_FP16 = 2,
	NELSSA_KV_FP8_E4M3 = 3,
	NELSSA_KV_INT8 = 4,
};

/* Tile geometry of the 8-bit types: NPNM_KV_QTILE, _QGROUP, _QALIGN. */
#define NELSSA_KV_QTILE 16u
#define NELSSA_KV_QGROUP 32u
#define NELSSA_KV_QALIGN 64u

/* Limits of the reference kernels (state lives on the stack). */
#define NELSSA_ATTN_MAX_HEAD_DIM 1024u
#define NELSSA_ATTN_MAX_GROUP 64u

/**
 * struct nelssa_attn_geom - shape of one attention work item.
 * @head_dim: elements per query, K, V and output row (1..1024).
 * @group: query rows sharing the KV head (GQA group size, 1..64).
 * @kv_dtype: element type of the K and V rows.
 * @scale: softmax scale, positive and finite (usually 1/sqrt(head_dim)).
 * @flags: NELSSA_ATTN_* bits; 0 for binary32 dot products.
 */
struct nelssa_attn_geom {
	uint32_t head_dim;
	uint32_t group;
	enum nelssa_kv_dtype kv_dtype;
	float scale;
	uint32_t flags;
};

/*
 * The GPU kernels' numerics: the query and the softmax weights are rounded
 * to bfloat16 (RNE) before they multiply K and V; products, sums and the
 * weights' sum stay binary32 (NPNM_ATTN_F_BF16_DOTS, same value;
 * Documentation/numeric-conventions.rst).
 */
#define NELSSA_ATTN_BF16_DOTS 1u
/* Every NELSSA_ATTN_* bit this library knows; others are -EINVAL. */
#define NELSSA_ATTN_FLAGS NELSSA_ATTN_BF16_DOTS

/**
 * struct nelssa_cluster - one cluster of a cluster-contiguous KV layout:
 * tokens [first, first + count).  Same layout as struct npnm_cluster.
 * @first: row of the cluster's first token.
 * @count: number of tokens (rows) in the cluster.
 */
struct nelssa_cluster {
	uint32_t first;
	uint32_t count;
};

/**
 * struct nelssa_attn_run - streaming softmax state of one work item.
 * @geom: copy of the geometry given to nelssa_attn_begin().
 * @q: the caller's queries, fp32 [group][head_dim].
 * @o: the caller's output buffer, fp32 [group][head_dim].
 * @max: running maximum logit per query row.
 * @sum: running sum of exp(logit - max) per query row.
 *
 * Between nelssa_attn_begin() and nelssa_attn_end() the caller's output
 * buffer holds the unnormalised accumulator; @max and @sum are the running
 * maximum logit and the sum of exp(logit - max) per query row.
 */
struct nelssa_attn_run {
	struct nelssa_attn_geom geom;
	const float *q;
	float *o;
	float max[NELSSA_ATTN_MAX_GROUP];
	float sum[NELSSA_ATTN_MAX_GROUP];
};

/**
 * nelssa_attn_geom_check() - check that a geometry is usable.
 * @geom: the geometry; may be NULL.
 *
 * Usable means: @geom not NULL, head_dim 1..NELSSA_ATTN_MAX_HEAD_DIM,
 * group 1..NELSSA_ATTN_MAX_GROUP, kv_dtype one of enum nelssa_kv_dtype,
 * and scale positive and finite.
 *
 * Return: 0 when @geom is usable, -EINVAL otherwise.
 */
int nelssa_attn_geom_check(const struct nelssa_attn_geom *geom);

/*
 * Bytes of one K or V element of a row-addressed @dtype (the 16-bit ones);
 * 0 for a tiled type and an unknown one.  The uapi's twin is
 * npnm_kv_elem_bytes(); sizes of stores of any type come from
 * nelssa_kv_bytes().
 */
static inline size_t nelssa_kv_elem_bytes(enum nelssa_kv_dtype dtype)
{
	switch (dtype) {
	case NELSSA_KV_BF16:
	case NELSSA_KV_FP16:
		return 2;
	default:
		return 0;
	}
}

/* 1 for the 8-bit types, stored in tiles with their scales. */
static inline int nelssa_kv_is_tiled(enum nelssa_kv_dtype dtype)
{
	return dtype == NELSSA_KV_FP8_E4M3 || dtype == NELSSA_KV_INT8;
}

/* Bytes of one tile of a tiled type (npnm_kv_tile_bytes()). */
static inline uint64_t nelssa_kv_tile_bytes(uint32_t head_dim)
{
	uint64_t groups = (head_dim + NELSSA_KV_QGROUP - 1) / NELSSA_KV_QGROUP;
	uint64_t b = (uint64_t)NELSSA_KV_QTILE * head_dim + 4 * groups;

	return (b + NELSSA_KV_QALIGN - 1) / NELSSA_KV_QALIGN * NELSSA_KV_QALIGN;
}

/*
 * Bytes of a KV store holding tokens [0, @tokens) of @dtype rows of
 * @head_dim elements (npnm_kv_bytes()); a tiled type rounds up to whole
 * tiles.  0 for an unknown type.
 */
static inline uint64_t nelssa_kv_bytes(enum nelssa_kv_dtype dtype, uint32_t head_dim,
				       uint64_t tokens)
{
	if (nelssa_kv_is_tiled(dtype))
		return (tokens + NELSSA_KV_QTILE - 1) / NELSSA_KV_QTILE *
		       nelssa_kv_tile_bytes(head_dim);
	return tokens * head_dim * nelssa_kv_elem_bytes(dtype);
}

/**
 * nelssa_attn_row_bytes() - bytes of one K or V row.
 * @geom: the geometry (not NULL).
 *
 * Return: head_dim elements of the geometry's KV type, in bytes
 * (head_dim * nelssa_kv_elem_bytes(kv_dtype)); 0 for a tiled type, whose
 * rows are not evenly spaced, and for an unknown type.
 */
size_t nelssa_attn_row_bytes(const struct nelssa_attn_geom *geom);

/**
 * nelssa_attn_begin() - start a streaming attention work item.
 * @run: the state to initialise.
 * @geom: the geometry; checked with nelssa_attn_geom_check() and copied.
 * @q: queries, fp32 [group][head_dim]; must stay valid until
 *	nelssa_attn_end().
 * @o: output buffer, fp32 [group][head_dim]; zeroed here, it holds the
 *	unnormalised accumulator until nelssa_attn_end().
 *
 * Streaming interface: nelssa_attn_begin(), nelssa_attn_feed() any number
 * of contiguous token blocks, nelssa_attn_end().
 *
 * Return: 0, or -EINVAL for an unusable @geom (@run and @o untouched).
 */
int nelssa_attn_begin(struct nelssa_attn_run *run, const struct nelssa_attn_geom *geom,
		      const float *q, float *o);

/**
 * nelssa_attn_feed() - fold a contiguous block of tokens into a work item.
 * @run: a state started with nelssa_attn_begin().
 * @k: K rows [@n_tokens][head_dim] of the geometry's KV type; for a tiled
 *	type, a KV store whose tokens [0, @n_tokens) are the block.
 * @v: V rows, likewise.
 * @n_tokens: number of tokens in the block; 0 does nothing.
 *
 * Each K and V row is read once; the running maximum and sum of every
 * query row are updated with an online softmax in fp32.
 */
void nelssa_attn_feed(struct nelssa_attn_run *run, const void *k, const void *v, size_t n_tokens);

/**
 * nelssa_attn_feed_at() - fold tokens [@first, @first + @n) of a KV store.
 * @run: a state started with nelssa_attn_begin().
 * @k: the K store (token 0 at @k) of the geometry's KV type.
 * @v: the V store, likewise.
 * @first: the block's first token; any token, tile boundary or not.
 * @n: tokens in the block; 0 does nothing.
 *
 * nelssa_attn_feed() of a block that starts anywhere in a store of any
 * type.  Tokens are folded NELSSA_ATTN_FEED_TILE at a time from @first
 * (each tile one rescale of the running maximum), so feeding a block in
 * pieces of whole feed tiles gives the bits one call gives.
 */
void nelssa_attn_feed_at(struct nelssa_attn_run *run, const void *k, const void *v, size_t first,
			 size_t n);

/* Tokens nelssa_attn_feed_at() folds at a time (see there). */
#define NELSSA_ATTN_FEED_TILE 8u

/**
 * nelssa_attn_end() - finish a work item: normalise its outputs.
 * @run: a state started with nelssa_attn_begin().
 * @lse: receives the LSE of each query row, fp32 [group].
 *
 * Divides each output row by its sum and writes lse = max + log(sum).  A
 * row that saw no tokens gives the empty state: o = 0, lse = -inf; a row
 * whose sum is NaN (a NaN logit: NaN in q or K, or an infinite logit)
 * gives o = NaN, lse = NaN, never the empty state, which a merge drops.
 */
void nelssa_attn_end(struct nelssa_attn_run *run, float *lse);

/*
 * fp32 dot product summed in index order: every fp32 kernel and reference
 * uses this one order, so their results are comparable bit for bit.
 */
static inline float nelssa_dot_f32(const float *a, const float *b, uint32_t n)
{
	float acc = 0.0f;

	for (uint32_t i = 0; i < n; i++)
		acc += a[i] * b[i];
	return acc;
}

/**
 * nelssa_kv_widen() - widen K/V elements to fp32.
 * @dst: receives @n floats.
 * @src: @n elements of type @dtype.
 * @n: number of elements.
 * @dtype: NELSSA_KV_BF16 or NELSSA_KV_FP16 (any other value is read as
 *	fp16).
 *
 * Exact: nelssa_bf16_to_f32_n() or nelssa_fp16_to_f32_n().
 */
void nelssa_kv_widen(float *dst, const void *src, size_t n, enum nelssa_kv_dtype dtype);

/**
 * nelssa_kv_widen_at() - widen rows of a KV store of any type to fp32.
 * @dst: receives @n rows of @head_dim floats.
 * @store: the store (token 0 at @store).
 * @first: first token.
 * @n: tokens.
 * @head_dim: elements per row.
 * @dtype: one of enum nelssa_kv_dtype.
 *
 * Exact for the 16-bit types; for the tiled ones each element is
 * scale * code rounded once to binary32, the value the format defines.
 */
void nelssa_kv_widen_at(float *dst, const void *store, size_t first, size_t n, uint32_t head_dim,
			enum nelssa_kv_dtype dtype);

/**
 * nelssa_kv_quantize() - quantise fp32 K or V rows into a tiled KV store.
 * @dtype: NELSSA_KV_FP8_E4M3 or NELSSA_KV_INT8.
 * @head_dim: elements per row, 1..NELSSA_ATTN_MAX_HEAD_DIM.
 * @src: rows, fp32 [@n_tokens][@head_dim].
 * @n_tokens: tokens; they become tokens [0, @n_tokens) of @dst.
 * @dst: nelssa_kv_bytes(@dtype, @head_dim, @n_tokens) bytes.
 *
 * Per tile and per NELSSA_KV_QGROUP channels: scale = amax / 448 (E4M3's
 * largest finite) or amax / 127, the codes round @src / scale to nearest
 * (ties to even), saturating; an all-zero group gets scale 0.  Rows of a
 * last, partial tile and the tile padding are zero.  A decoded value is
 * within half a code step (times the scale) of its source value, plus the
 * rounding of scale * code and of the scale itself.
 *
 * Return: 0; -EINVAL for another type, a bad @head_dim or a non-finite
 * value in @src (@dst is then unspecified).
 */
int nelssa_kv_quantize(enum nelssa_kv_dtype dtype, uint32_t head_dim, const float *src,
		       size_t n_tokens, void *dst);

/**
 * nelssa_attn_dense() - dense attention of one query group over K/V rows.
 * @geom: the geometry.
 * @q: queries, fp32 [group][head_dim].
 * @k: K rows [@n_tokens][head_dim] of the geometry's KV type.
 * @v: V rows, likewise.
 * @n_tokens: number of tokens; 0 gives the empty state.
 * @o: receives the outputs, fp32 [group][head_dim].
 * @lse: receives the LSEs, fp32 [group].
 *
 * nelssa_attn_begin(), one nelssa_attn_feed() of all the rows, and
 * nelssa_attn_end().
 *
 * Return: 0, or -EINVAL for an unusable @geom (@o and @lse untouched).
 */
int nelssa_attn_dense(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		      const void *v, size_t n_tokens, float *o, float *lse);

/**
 * nelssa_attn_clusters() - attention over the union of selected clusters.
 * @geom: the geometry.
 * @q: queries, fp32 [group][head_dim].
 * @k: K store of @n_tokens tokens, cluster-contiguous, of the geometry's
 *	KV type.
 * @v: V rows, likewise.
 * @n_tokens: rows in @k and @v.
 * @table: the clusters, @n_clusters entries.
 * @n_clusters: number of entries in @table.
 * @sel: ids of the selected clusters, @n_sel of them.
 * @n_sel: number of selected clusters; 0 gives the empty state.
 * @o: receives the outputs, fp32 [group][head_dim].
 * @lse: receives the LSEs, fp32 [group].
 *
 * Every selected id must be below @n_clusters and appear once, and every
 * table entry it names must lie inside the @n_tokens rows.  Everything is
 * validated before the first output is written; each selected cluster is
 * then streamed as one contiguous block into the same softmax state.
 *
 * Return: 0; -EINVAL for an unusable @geom or a bad selection (@o and
 * @lse are left untouched); -ENOMEM if the duplicate check cannot
 * allocate.
 */
int nelssa_attn_clusters(const struct nelssa_attn_geom *geom, const float *q, const void *k,
			 const void *v, uint32_t n_tokens, const struct nelssa_cluster *table,
			 uint32_t n_clusters, const uint32_t *sel, uint32_t n_sel, float *o,
			 float *lse);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_ATTENTION_H */
