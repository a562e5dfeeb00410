/* SPDX-License-Identifier: MIT */
/*
 * Reference attention kernels with log-sum-exp (LSE) outputs.
 *
 * For every query row q of a GQA group, over a set of tokens T:
 *
 *	o   = sum_t softmax_t(scale * q.k_t) v_t
 *	lse = log sum_t exp(scale * q.k_t)          (natural log, scale folded in)
 *
 * K and V rows are bf16 or fp16, queries and outputs fp32, and everything is
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
 *
 * Same values as NPNM_DTYPE_* in <linux/nelssa_pnm.h>; 0 is invalid.
 */
enum nelssa_kv_dtype {
	NELSSA_KV_BF16 = 1,
	NELSSA_KV_FP16 = 2,
};

/* Limits of the reference kernels (state lives on the stack). */
#define NELSSA_ATTN_MAX_HEAD_DIM 1024u
#define NELSSA_ATTN_MAX_GROUP 64u

/**
 * struct nelssa_attn_geom - shape of one attention work item.
 * @head_dim: elements per query, K, V and output row (1..1024).
 * @group: query rows sharing the KV head (GQA group size, 1..64).
 * @kv_dtype: element type of the K and V rows.
 * @scale: softmax scale, positive and finite (usually 1/sqrt(head_dim)).
 */
struct nelssa_attn_geom {
	uint32_t head_dim;
	uint32_t group;
	enum nelssa_kv_dtype kv_dtype;
	float scale;
};

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
 * group 1..NELSSA_ATTN_MAX_GROUP, kv_dtype NELSSA_KV_BF16 or
 * NELSSA_KV_FP16, and scale positive and finite.
 *
 * Return: 0 when @geom is usable, -EINVAL otherwise.
 */
int nelssa_attn_geom_check(const struct nelssa_attn_geom *geom);

/*
 * Bytes of one K or V element of @dtype; 0 for an unknown type.  The one
 * place a row's width comes from in userspace (the uapi's twin is
 * npnm_kv_elem_bytes()): a narrower type changes this switch.
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

/**
 * nelssa_attn_row_bytes() - bytes of one K or V row.
 * @geom: the geometry (not NULL).
 *
 * Return: head_dim elements of the geometry's KV type, in bytes
 * (head_dim * nelssa_kv_elem_bytes(kv_dtype)); 0 for an unknown type.
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
 * @k: K rows [@n_tokens][head_dim] of the geometry's KV type.
 * @v: V rows, likewise.
 * @n_tokens: number of tokens in the block; 0 does nothing.
 *
 * Each K and V row is read once; the running maximum and sum of every
 * query row are updated with an online softmax in fp32.
 */
void nelssa_attn_feed(struct nelssa_attn_run *run, const void *k, const void *v, size_t n_tokens);

/**
 * nelssa_attn_end() - finish a work item: normalise its outputs.
 * @run: a state started with nelssa_attn_begin().
 * @lse: receives the LSE of each query row, fp32 [group].
 *
 * Divides each output row by its sum and writes lse = max + log(sum).  A
 * row that saw no tokens gives the empty state: o = 0, lse = -inf.
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
 * @k: K rows [@n_tokens][head_dim] of a cluster-contiguous KV store, of
 *	the geometry's KV type.
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
