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

/* Same values as NPNM_DTYPE_* in <linux/nelssa_pnm.h>; 0 is invalid. */
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
 */
struct nelssa_cluster {
	uint32_t first;
	uint32_t count;
};

/**
 * struct nelssa_attn_run - streaming softmax state of one work item.
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

/* 0 when @geom is usable, -EINVAL otherwise. */
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

/* Bytes of one K or V row: head_dim elements of the geometry's type. */
size_t nelssa_attn_row_bytes(const struct nelssa_attn_geom *geom);

/*
 * Streaming interface: begin(), feed() any number of contiguous token
 * blocks, end().  @q is fp32 [group][head_dim]; @o receives fp32
 * [group][head_dim] and @lse fp32 [group].  Returns 0 or -EINVAL.
 */
int nelssa_attn_begin(struct nelssa_attn_run *run, const struct nelssa_attn_geom *geom,
		      const float *q, float *o);
void nelssa_attn_feed(struct nelssa_attn_run *run, const void *k, const void *v, size_t n_tokens);
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

/* Widen @n K/V elements of type @dtype to fp32. */
void nelssa_kv_widen(float *dst, const void *src, size_t n, enum nelssa_kv_dtype dtype);

/* Dense attention of one query group over @n_tokens K/V rows. */
int nelssa_attn_dense(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		      const void *v, size_t n_tokens, float *o, float *lse);

/*
 * Attention over the union of the selected clusters of a cluster-contiguous
 * KV store (@k and @v hold @n_tokens rows; @table has @n_clusters entries).
 * Every selected id must be below @n_clusters and appear once, and every
 * table entry it names must lie inside the @n_tokens rows; otherwise
 * -EINVAL is returned and @o and @lse are left untouched.  -ENOMEM if the
 * duplicate check cannot allocate.
 */
int nelssa_attn_clusters(const struct nelssa_attn_geom *geom, const float *q, const void *k,
			 const void *v, uint32_t n_tokens, const struct nelssa_cluster *table,
			 uint32_t n_clusters, const uint32_t *sel, uint32_t n_sel, float *o,
			 float *lse);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_ATTENTION_H */
